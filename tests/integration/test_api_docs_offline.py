"""The API documents itself without the internet, and documents what it really answers.

A real server (uvicorn, real Postgres and Redis): /docs and /redoc reference only this server's
own assets, which it serves; openapi.json gives the main routes typed answers; and real
answers — 200s, and 422s from both the validator and the routes' own checks — validate
against the schemas openapi.json declares for them.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from html.parser import HTMLParser
from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator

from app.config import Settings
from app.services.tenants import mint_key
from tests.integration.api_server import prefixed, serve

MAIN_ROUTES = [
    ("post", "/v1/events", "202"),
    ("post", "/v1/search", "200"),
    ("post", "/v1/context", "200"),
    ("post", "/v1/memories", "201"),
    ("get", "/v1/memories", "200"),
    ("get", "/v1/memories/{memory_id}", "200"),
    ("get", "/v1/entities/{name}/graph", "200"),
    ("post", "/v1/procedures", "201"),
    ("get", "/v1/procedures/suggest", "200"),
    ("delete", "/v1/users/{user_id}", "200"),
    ("get", "/v1/users/{user_id}/extraction", "200"),
    ("get", "/v1/stats", "200"),
    ("get", "/healthz", "200"),
]


class _Links(HTMLParser):
    """Every URL a page asks the browser to load or follow."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [value for name, value in attrs if name in ("src", "href") and value]


@pytest.fixture(scope="module")
def docs_settings(base_settings: Settings) -> Iterator[Settings]:
    with prefixed(base_settings, "docs") as settings:
        yield settings


@pytest.fixture(scope="module")
def base_url(database: None, docs_settings: Settings) -> Iterator[str]:
    with serve(docs_settings) as url:
        yield url


@pytest.fixture(scope="module")
def spec(base_url: str) -> dict[str, Any]:
    response = httpx.get(f"{base_url}/openapi.json", timeout=30)
    assert response.status_code == 200
    return dict(response.json())


@pytest.fixture(scope="module")
def headers() -> dict[str, str]:
    return {"Authorization": f"Bearer {mint_key(f't-docs-{uuid.uuid4().hex[:8]}').key}"}


def _declared(spec: dict[str, Any], method: str, path: str, status: str) -> dict[str, Any]:
    response = spec["paths"][path][method]["responses"][status]
    return dict(response["content"]["application/json"]["schema"])


def _check(spec: dict[str, Any], method: str, path: str, answer: httpx.Response) -> None:
    """The answer's body validates against what openapi.json declares for its status."""
    schema = {**_declared(spec, method, path, str(answer.status_code))}
    schema["components"] = spec["components"]
    errors = sorted(Draft202012Validator(schema).iter_errors(answer.json()), key=str)
    assert not errors, (path, answer.status_code, [e.message for e in errors[:5]], answer.text)


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_docs_pages_load_nothing_from_outside(base_url: str, page: str) -> None:
    response = httpx.get(f"{base_url}{page}", timeout=30)
    assert response.status_code == 200
    assert not re.findall(r"https?://", response.text), "the page names an outside URL"
    links = _Links()
    links.feed(response.text)
    assets = [url for url in links.urls if url.endswith((".js", ".css", ".png"))]
    assert any(url.endswith(".js") for url in assets), links.urls
    for url in assets:
        assert url.startswith("/"), url
        asset = httpx.get(f"{base_url}{url}", timeout=30)
        assert asset.status_code == 200, url
        assert len(asset.content) > 1000, url
        if url.endswith(".css"):  # a stylesheet that pulls fonts or images from a CDN
            assert not re.findall(r"url\(\s*['\"]?(https?:)?//", asset.text), url


def test_swagger_ui_does_not_ask_the_online_validator(base_url: str) -> None:
    page = httpx.get(f"{base_url}/docs", timeout=30).text
    assert '"validatorUrl": null' in page


def test_main_routes_declare_typed_answers(spec: dict[str, Any]) -> None:
    schemas = spec["components"]["schemas"]
    for method, path, status in MAIN_ROUTES:
        declared = _declared(spec, method, path, status)
        assert "$ref" in declared, (path, declared)
        model = schemas[declared["$ref"].rsplit("/", 1)[-1]]
        assert model.get("properties"), (path, model)
        assert model.get("required"), (path, model)
        untyped = [
            name
            for name, prop in model["properties"].items()
            if not ({"type", "$ref", "anyOf", "allOf", "oneOf", "const", "enum"} & prop.keys())
        ]
        assert not untyped, (path, untyped)


def test_declared_422_is_the_custom_body(spec: dict[str, Any]) -> None:
    assert "HTTPValidationError" not in spec["components"]["schemas"]
    for method, path, _ in MAIN_ROUTES:
        if path != "/healthz":
            assert _declared(spec, method, path, "422")["$ref"].endswith("/ValidationErrorBody")


def test_real_422s_validate_against_the_declared_schema(
    base_url: str, spec: dict[str, Any], headers: dict[str, str]
) -> None:
    # From the request validator: a missing field and a wrong type.
    bad_search = httpx.post(
        f"{base_url}/v1/search", json={"query": 5, "limit": "x"}, headers=headers, timeout=30
    )
    assert bad_search.status_code == 422
    assert {"user_id", "query", "limit"} <= set(bad_search.json()["detail"]["fields"])
    _check(spec, "post", "/v1/search", bad_search)
    # From a route's own check (no `errors` list there).
    bad_user = httpx.delete(f"{base_url}/v1/users/%20bad%20id", headers=headers, timeout=30)
    assert bad_user.status_code == 422
    _check(spec, "delete", "/v1/users/{user_id}", bad_user)
    bad_event = httpx.post(
        f"{base_url}/v1/events", json={"events": [{"type": "turn"}]}, headers=headers, timeout=30
    )
    assert bad_event.status_code == 422
    _check(spec, "post", "/v1/events", bad_event)


def test_real_answers_validate_against_the_declared_schemas(
    base_url: str, spec: dict[str, Any], headers: dict[str, str]
) -> None:
    user = f"docs-{uuid.uuid4().hex[:6]}"

    def call(method: str, path: str, route: str | None = None, **kwargs: Any) -> httpx.Response:
        answer = httpx.request(method, f"{base_url}{path}", headers=headers, timeout=60, **kwargs)
        assert answer.status_code < 300, (path, answer.text)
        _check(spec, method.lower(), route or path.split("?")[0], answer)
        return answer

    turn = {"type": "turn", "user_id": user, "role": "user", "content": "I use Postgres daily."}
    call("POST", "/v1/events", json={"events": [{**turn, "external_id": "d-1"}]})
    memory = {"content": "Alice runs the billing service on Postgres.", "kind": "fact"}
    created = call("POST", "/v1/memories", json={"user_id": user, "memories": [memory]})
    memory_id = created.json()["memories"][0]["id"]
    call("POST", "/v1/search", json={"user_id": user, "query": "which database?"})
    call("POST", "/v1/context", json={"user_id": user, "query": "which database?"})
    call("GET", f"/v1/memories?user_id={user}")
    call("GET", f"/v1/memories/{memory_id}?recall=2", "/v1/memories/{memory_id}")
    graph = call("GET", f"/v1/entities/Postgres/graph?user_id={user}", "/v1/entities/{name}/graph")
    assert graph.json()["entity"]["name"]
    procedure = {
        "user_id": user,
        "query": "deploy to staging",
        "tool_sequence": ["build", "ship"],
        "success": 1.0,
        "duration_ms": 1200,
    }
    call("POST", "/v1/procedures", json=procedure)
    call("GET", f"/v1/procedures/suggest?user_id={user}&query=deploy+to+staging")
    call("GET", f"/v1/users/{user}/extraction", "/v1/users/{user_id}/extraction")
    call("GET", "/v1/stats")
    call("GET", "/healthz")
    call("DELETE", f"/v1/users/{user}", "/v1/users/{user_id}")
