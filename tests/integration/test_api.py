"""The /v1 REST API end to end: real Postgres, real Redis, the local embedding model.

One app, one client and two tenants serve the whole module (each test uses its own user ids),
so the model is loaded once and the file stays fast.
"""

from __future__ import annotations

import asyncio
import base64
import gc
import gzip
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient
from httpx import Response

from app.api import auth, event_routes
from app.api.app import create_app
from app.api.routes import router
from app.config import Settings
from app.keys import RedisKeys
from app.layers.working.store import WorkingMemoryStore, WorkingTurn
from app.services.prefetch import prefetch
from app.services.tenants import mint_key, revoke_key
from app.text.tokens import count_tokens
from tests.integration.api_server import prefixed
from tests.integration.helpers import turn

MAX_BODY = 64 * 1024

# Topics far apart, so explicit memories are never folded into one another by deduplication.
TOPICS = [
    "The quarterly budget review is scheduled with the finance team on Thursday.",
    "My daughter plays the violin in the school orchestra.",
    "The production database runs on a three node cluster in Frankfurt.",
    "I am allergic to peanuts and shellfish.",
    "Our cat Miso likes to sleep on the radiator in winter.",
    "The marathon training plan peaks at thirty five kilometres per week.",
    "The garden needs tomatoes planted before the end of May.",
    "My favourite novel is a long Russian book about a family of brothers.",
    "The office wifi password changes on the first Monday of every month.",
    "We are renovating the kitchen with oak cabinets and a granite counter.",
    "The dentist appointment was moved to next Tuesday at nine.",
    "I prefer green tea over coffee in the afternoon.",
    "The team decided to migrate the frontend from Angular to React.",
    "Grandmother's birthday party is in Lisbon this summer.",
    "The car needs new winter tyres before November.",
    "I learnt to play chess from my uncle when I was seven.",
    "The mortgage rate is fixed for ten years at two percent.",
    "Our hiking trip goes through the Dolomites in September.",
    "The server logs are shipped to an Elasticsearch cluster nightly.",
    "I volunteer at the animal shelter every other Saturday.",
    "The sourdough starter must be fed flour and water daily.",
    "My passport expires in March and must be renewed.",
    "The board meeting approved hiring two more data engineers.",
    "I am learning Japanese with a tutor on Wednesday evenings.",
    "The electricity bill doubled after the heat pump was installed.",
    "Our wedding anniversary dinner is booked at an Italian restaurant.",
    "The invoice for the cloud provider is paid by credit card.",
    "My knee hurts after running downhill for a long time.",
    "The children's school starts at eight fifteen in the morning.",
    "I keep backups of family photos on an external hard drive.",
    "The support ticket queue is triaged every morning at ten.",
    "We adopted a rescue dog named Pepper last spring.",
    "The podcast about ancient Rome releases episodes on Fridays.",
    "My brother lives in Vancouver and works as an architect.",
    "The bicycle chain squeaks and needs oil.",
    "Quarterly taxes are due on the fifteenth of the month.",
    "The new laptop has thirty two gigabytes of memory.",
    "I meditate for ten minutes before going to sleep.",
    "The apartment lease ends in August and rent will rise.",
    "The recipe for lentil soup uses cumin and smoked paprika.",
]


@dataclass(frozen=True)
class Caller:
    tenant: str
    key: str
    key_id: uuid.UUID

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


def new_caller() -> Caller:
    tenant = f"t-api-{uuid.uuid4().hex[:10]}"
    minted = mint_key(tenant, name="api tests")
    return Caller(tenant=tenant, key=minted.key, key_id=minted.id)


def uid(label: str) -> str:
    return f"{label}-{uuid.uuid4().hex[:8]}"


def fields(response: Response) -> list[str]:
    return list(response.json()["detail"]["fields"])


def remember(
    client: TestClient, caller: Caller, user: str, items: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    response = client.post(
        "/v1/memories", json={"user_id": user, "memories": items}, headers=caller.headers
    )
    assert response.status_code == 201, response.text
    return list(response.json()["memories"])


def search(client: TestClient, caller: Caller, user: str, query: str, **extra: Any) -> Response:
    return client.post(
        "/v1/search", json={"user_id": user, "query": query, **extra}, headers=caller.headers
    )


# -- module fixtures ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def api_settings(base_settings: Settings) -> Iterator[Settings]:
    with prefixed(base_settings, "api", api_max_body_bytes=MAX_BODY) as settings:
        yield settings


@pytest.fixture(scope="module")
def client(api_settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(api_settings)) as test_client:
        yield test_client


@pytest.fixture(scope="module")
def state(client: TestClient) -> Any:
    return client.app.state.engram  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def rds(state: Any) -> redis.Redis:
    return state.redis  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def alice(client: TestClient) -> Caller:
    return new_caller()


@pytest.fixture(scope="module")
def bob(client: TestClient) -> Caller:
    return new_caller()


# -- operations ---------------------------------------------------------------------------


def test_healthz_needs_no_key(client: TestClient) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok"
    assert body["checks"] == {"database": "ok", "schema": "ok", "redis": "ok"}
    assert body["schema_revision"] == body["schema_head"] is not None


def test_start_up_freezes_what_was_loaded(client: TestClient) -> None:
    """The app and its libraries are frozen at start-up: the collector's full passes (~90 ms
    over them) would otherwise stall the requests in flight."""
    assert gc.get_freeze_count() > 100_000


def test_openapi_lists_every_v1_path(client: TestClient) -> None:
    response = client.get("/openapi.json")
    assert response.status_code == 200
    paths = response.json()["paths"]
    # A name may hold "/" (e.g. "ci/cd"), so the route takes it as a path parameter.
    routes = [*event_routes.router.routes, *router.routes]
    served = {getattr(route, "path", "").replace(":path}", "}") for route in routes}
    expected = {
        "/v1/events",
        "/v1/search",
        "/v1/context",
        "/v1/memories",
        "/v1/memories/{memory_id}",
        "/v1/memories/{memory_id}/restore",
        "/v1/entities/{name}/graph",
        "/v1/procedures",
        "/v1/procedures/suggest",
        "/v1/users/{user_id}",
        "/v1/users/{user_id}/extraction",
        "/v1/users/{user_id}/extraction/flush",
        "/v1/stats",
    }
    assert served == expected
    assert expected <= set(paths)
    assert set(paths["/v1/memories"]) == {"get", "post"}
    assert set(paths["/v1/users/{user_id}"]) == {"delete"}


# -- authentication -----------------------------------------------------------------------

ROUTES: list[tuple[str, str]] = [
    ("post", "/v1/events"),
    ("post", "/v1/search"),
    ("post", "/v1/context"),
    ("post", "/v1/memories"),
    ("get", "/v1/memories?user_id=u1"),
    ("get", "/v1/memories/6f0c8f7e-5d1b-4c1e-9a57-0b3f7c2d9e11"),
    ("get", "/v1/entities/alice/graph?user_id=u1"),
    ("post", "/v1/procedures"),
    ("get", "/v1/procedures/suggest?user_id=u1&query=hello"),
    ("delete", "/v1/users/u1"),
    ("get", "/v1/stats"),
]


def _call(client: TestClient, method: str, path: str, headers: dict[str, str]) -> Response:
    if method == "post":
        return client.post(path, json={}, headers=headers)
    return client.request(method.upper(), path, headers=headers)


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_every_route_refuses_a_missing_key(client: TestClient, method: str, path: str) -> None:
    response = _call(client, method, path, {})
    assert response.status_code == 401, response.text
    assert response.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize(
    "headers",
    [
        {"Authorization": "Bearer garbage"},
        {"Authorization": "Bearer egk_00000000_notarealsecretatallnotreal"},
        {"X-API-Key": "egk_deadbeef_somethingsomething"},
        {"X-API-Key": "egk_" + "x" * 300},
        {"Authorization": "Basic dXNlcjpwYXNz"},
    ],
)
def test_garbage_keys_are_refused(client: TestClient, headers: dict[str, str]) -> None:
    for method, path in (("get", "/v1/stats"), ("post", "/v1/search")):
        response = _call(client, method, path, headers)
        assert response.status_code == 401, response.text


def test_both_key_headers_work(client: TestClient, alice: Caller) -> None:
    assert client.get("/v1/stats", headers=alice.headers).status_code == 200
    assert client.get("/v1/stats", headers={"X-API-Key": alice.key}).status_code == 200


def test_a_key_revoked_before_use_is_refused(client: TestClient) -> None:
    caller = new_caller()
    assert revoke_key(caller.key_id)
    response = client.get("/v1/stats", headers=caller.headers)
    assert response.status_code == 401


def test_a_revoked_key_stops_working_once_the_cache_expires(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(auth, "CACHE_TTL_S", 0.3)
    caller = new_caller()
    assert client.get("/v1/stats", headers=caller.headers).status_code == 200
    assert revoke_key(caller.key_id)
    time.sleep(0.4)
    assert client.get("/v1/stats", headers=caller.headers).status_code == 401
    assert client.get("/v1/stats", headers={"X-API-Key": caller.key}).status_code == 401


def test_tenants_never_see_each_others_memories(
    client: TestClient, alice: Caller, bob: Caller
) -> None:
    user = uid("shared")  # the same user id under both tenants
    text = "The secret launch code for project Nightingale is ultraviolet seven."
    mine = remember(client, alice, user, [{"content": text, "tags": ["secret"]}])[0]
    theirs = remember(client, bob, user, [{"content": text, "tags": ["secret"]}])[0]
    assert mine["id"] != theirs["id"]

    for caller, own, other in ((alice, mine["id"], theirs["id"]), (bob, theirs["id"], mine["id"])):
        hits = search(client, caller, user, "secret launch code Nightingale").json()["hits"]
        ids = {h["id"] for h in hits}
        assert own in ids
        assert other not in ids
        found = client.get(f"/v1/memories/{other}", headers=caller.headers)
        assert found.status_code == 404  # not 403: another tenant's id does not exist here
        found = client.get(f"/v1/memories/{other}?recall=2", headers=caller.headers)
        assert found.status_code == 404
        listed = client.get(f"/v1/memories?user_id={user}", headers=caller.headers).json()
        assert [m["id"] for m in listed["memories"]] == [own]
        context = client.post(
            "/v1/context",
            json={"user_id": user, "query": "what is the launch code?"},
            headers=caller.headers,
        ).json()
        assert [str(m["id"]) for m in context["parts"]["memories"]] == [own]

    # Forgetting the user under one tenant leaves the other tenant's user whole.
    gone = client.delete(f"/v1/users/{user}", headers=alice.headers).json()
    assert gone["rows"]["semantic.memories"] == 1
    assert client.get(f"/v1/memories/{theirs['id']}", headers=bob.headers).status_code == 200
    assert client.get(f"/v1/memories/{mine['id']}", headers=alice.headers).status_code == 404


def test_graph_of_another_tenant_is_not_found(
    client: TestClient, alice: Caller, bob: Caller
) -> None:
    user = uid("g-iso")
    remember(client, bob, user, [{"content": "Zoltan uses Kubernetes for deployments."}])
    path = f"/v1/entities/Zoltan/graph?user_id={user}"
    assert client.get(path, headers=bob.headers).status_code == 200
    assert client.get(path, headers=alice.headers).status_code == 404


# -- POST /v1/events ----------------------------------------------------------------------


def test_events_are_accepted_with_stable_ids(
    client: TestClient, alice: Caller, rds: redis.Redis, api_settings: Settings
) -> None:
    user = uid("ev")
    events = [turn(alice.tenant, user, n) for n in range(3)]
    events.append({"type": "typing_start", "user_id": user, "timestamp": "2026-01-01T00:00:09Z"})
    events.append(
        {"type": "sensor.reading", "user_id": user, "payload": {"celsius": 21.5}, "timestamp": 1}
    )
    keys = RedisKeys.from_settings(api_settings)
    partitions = keys.partitions(api_settings.stream_partitions)

    def stream_length() -> int:
        return sum(int(rds.xlen(p)) for p in partitions if rds.exists(p))

    before = stream_length()
    first = client.post("/v1/events", json={"events": events}, headers=alice.headers)
    assert first.status_code == 202, first.text
    body = first.json()
    assert body["accepted"] == len(events)
    assert len(body["ids"]) == len(set(body["ids"])) == len(events)
    assert all(uuid.UUID(i) for i in body["ids"])
    assert stream_length() == before + len(events)

    again = client.post("/v1/events", json={"events": events}, headers=alice.headers)
    assert again.status_code == 202
    assert again.json()["ids"] == body["ids"]

    # The tenant may be omitted (it is the key's), and the ids are the same.
    bare = [{k: v for k, v in e.items() if k != "tenant_id"} for e in events]
    omitted = client.post("/v1/events", json={"events": bare}, headers=alice.headers)
    assert omitted.json()["ids"] == body["ids"]

    # A receipt's id may be echoed back.
    echoed = [{**events[0], "event_id": body["ids"][0]}]
    assert client.post("/v1/events", json={"events": echoed}, headers=alice.headers).json()[
        "ids"
    ] == [body["ids"][0]]


def test_the_same_event_from_another_tenant_has_another_id(
    client: TestClient, alice: Caller, bob: Caller
) -> None:
    user = uid("ev")
    event = {k: v for k, v in turn("x", user, 1).items() if k != "tenant_id"}
    a = client.post("/v1/events", json={"events": [event]}, headers=alice.headers).json()
    b = client.post("/v1/events", json={"events": [event]}, headers=bob.headers).json()
    assert a["ids"] != b["ids"]


def test_an_event_naming_another_tenant_is_refused(
    client: TestClient, alice: Caller, bob: Caller
) -> None:
    user = uid("ev")
    response = client.post(
        "/v1/events", json={"events": [turn(bob.tenant, user, 1)]}, headers=alice.headers
    )
    assert response.status_code == 422
    assert fields(response) == ["events[0].tenant_id"]
    mixed = [turn(alice.tenant, user, 1), turn(bob.tenant, user, 2)]
    response = client.post("/v1/events", json={"events": mixed}, headers=alice.headers)
    assert response.status_code == 422
    assert fields(response) == ["events[1].tenant_id"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"external_id": None}, "events[0].external_id"),
        ({"user_id": None}, "events[0].user_id"),
        ({"user_id": "bad user!"}, "events[0].user_id"),
        ({"content": 123}, "events[0].content"),
        ({"content": ""}, "events[0].content"),
        ({"role": "robot"}, "events[0].role"),
        ({"timestamp": "yesterday"}, "events[0].timestamp"),
        ({"metadata": "not an object"}, "events[0].metadata"),
        ({"event_id": str(uuid.uuid4())}, "events[0].event_id"),
        ({"surprise": 1}, "events[0].surprise"),
        ({"type": None}, "events[0].type"),
    ],
)
def test_a_bad_event_names_its_field(
    client: TestClient, alice: Caller, change: dict[str, Any], field: str
) -> None:
    event = {**turn(alice.tenant, uid("ev"), 1), **change}
    event = {k: v for k, v in event.items() if v is not None}
    response = client.post(
        "/v1/events", json={"events": [turn(alice.tenant, "ok", 0), event]}, headers=alice.headers
    )
    assert response.status_code == 422, response.text
    assert field.replace("[0]", "[1]") in fields(response)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"events": []}, "events"),
        ({"events": [{}] * 1001}, "events"),
        ({"events": "a turn"}, "events"),
        ({"events": [1]}, "events[0]"),
        ({}, "events"),
        ({"events": [{"type": "typing_start", "user_id": "u"}], "extra": 1}, "extra"),
    ],
)
def test_a_bad_batch_is_refused(
    client: TestClient, alice: Caller, body: dict[str, Any], field: str
) -> None:
    response = client.post("/v1/events", json=body, headers=alice.headers)
    assert response.status_code == 422, response.text
    assert field in fields(response)


def test_a_batch_of_exactly_a_thousand_is_accepted(client: TestClient, alice: Caller) -> None:
    user = uid("ev")
    events = [{"type": "typing_start", "user_id": user, "timestamp": i} for i in range(1000)]
    response = client.post("/v1/events", json={"events": events}, headers=alice.headers)
    assert response.status_code == 202, response.text[:500]
    assert response.json()["accepted"] == 1000


def test_malformed_json_is_a_422(client: TestClient, alice: Caller) -> None:
    response = client.post(
        "/v1/events",
        content=b'{"events": [',
        headers={**alice.headers, "Content-Type": "application/json"},
    )
    assert response.status_code == 422


def _big_body(user: str) -> bytes:
    event = {"type": "turn", "user_id": user, "role": "user", "external_id": "big"}
    event["content"] = "x" * (MAX_BODY + 10)
    return json.dumps({"events": [event]}).encode()


def test_a_declared_body_over_the_limit_is_413(client: TestClient, alice: Caller) -> None:
    body = _big_body(uid("ev"))
    response = client.post(
        "/v1/events", content=body, headers={**alice.headers, "Content-Type": "application/json"}
    )
    assert response.status_code == 413, response.text[:300]
    assert str(MAX_BODY) in response.json()["detail"]["message"]
    # Refused on the declared length, whoever sends it.
    response = client.post("/v1/search", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 413


def test_a_body_under_the_limit_is_not_refused(client: TestClient, alice: Caller) -> None:
    user = uid("ev")
    event = turn(alice.tenant, user, 1, content="y" * (MAX_BODY // 2))
    response = client.post("/v1/events", json={"events": [event]}, headers=alice.headers)
    assert response.status_code == 202


@pytest.mark.parametrize("encoding", ["gzip", "br", "deflate, gzip"])
def test_a_compressed_body_is_a_415_naming_the_encoding(
    client: TestClient, alice: Caller, encoding: str
) -> None:
    """Found: a gzip body was answered 422 "utf-8 codec can't decode byte 0x8b", which
    names neither the header nor the fix; nothing is queued."""
    body = gzip.compress(json.dumps({"user_id": "u", "query": "tea"}).encode())
    response = client.post(
        "/v1/search",
        content=body,
        headers={**alice.headers, "Content-Type": "application/json", "Content-Encoding": encoding},
    )
    assert response.status_code == 415, response.text[:300]
    assert encoding in response.json()["detail"]["message"]
    assert "uncompressed" in response.json()["detail"]["message"]
    plain = client.post(
        "/v1/search",
        json={"user_id": "u", "query": "tea"},
        headers={**alice.headers, "Content-Encoding": "identity"},
    )
    assert plain.status_code == 200, plain.text[:300]


def test_a_streamed_body_over_the_limit_is_413(client: TestClient, alice: Caller) -> None:
    body = _big_body(uid("ev"))

    def chunks() -> Iterator[bytes]:
        for start in range(0, len(body), 8192):
            yield body[start : start + 8192]

    response = client.post(
        "/v1/events",
        content=chunks(),
        headers={**alice.headers, "Content-Type": "application/json"},
    )
    assert "content-length" not in {k.lower() for k in response.request.headers}
    assert response.status_code == 413, response.text[:300]


def test_a_body_streamed_in_many_chunks_over_the_limit_is_413(
    client: TestClient, alice: Caller
) -> None:
    """Drive the ASGI app directly so the body really arrives in pieces, with no length."""
    body = _big_body(uid("ev"))
    pieces = [body[i : i + 4096] for i in range(0, len(body), 4096)]
    status, payload = asyncio.run(
        _asgi_post(
            client.app,
            "/v1/events",
            pieces,
            [
                (b"authorization", f"Bearer {alice.key}".encode()),
                (b"content-type", b"application/json"),
            ],
        )
    )
    assert status == 413, payload[:300]


async def _asgi_post(
    app: Any, path: str, pieces: list[bytes], headers: list[tuple[bytes, bytes]]
) -> tuple[int, bytes]:
    queue = list(pieces)
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if queue:
            chunk = queue.pop(0)
            return {"type": "http.request", "body": chunk, "more_body": bool(queue)}
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"testserver"), *headers],
        "client": ("127.0.0.1", 1234),
        "server": ("testserver", 80),
        "state": {},
    }
    await asyncio.wait_for(app(scope, receive, send), timeout=30)
    start = next(m for m in sent if m["type"] == "http.response.start")
    payload = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return int(start["status"]), payload


# -- POST /v1/memories, GET /v1/memories[/{id}] -------------------------------------------


def test_remember_creates_then_reinforces(client: TestClient, alice: Caller) -> None:
    user = uid("mem")
    items = [
        {"content": TOPICS[0], "kind": "event", "importance": 0.9, "tags": ["work"]},
        {"content": TOPICS[1], "kind": "fact", "topics": ["family"]},
    ]
    first = remember(client, alice, user, items)
    assert [m["status"] for m in first] == ["created", "created"]
    again = remember(client, alice, user, items)
    assert [m["status"] for m in again] == ["reinforced", "reinforced"]
    assert [m["id"] for m in again] == [m["id"] for m in first]

    got = client.get(f"/v1/memories/{first[0]['id']}", headers=alice.headers)
    assert got.status_code == 200
    view = got.json()
    assert view["id"] == first[0]["id"]
    assert view["user_id"] == user
    assert view["content"] == TOPICS[0]
    assert view["kind"] == "event"
    assert "work" in view["tags"]
    assert view["importance"] >= 0.9  # reinforcing may raise it
    assert "recall" not in view

    recalled = client.get(f"/v1/memories/{first[0]['id']}?recall=0", headers=alice.headers)
    assert recalled.status_code == 200
    assert recalled.json()["recall"] == []  # an explicit memory has no source turns


def _one(**item: Any) -> dict[str, Any]:
    return {"user_id": "u", "memories": [{"content": "x", **item}]}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"memories": [{"content": "x"}]}, "user_id"),
        ({"user_id": "u", "memories": []}, "memories"),
        ({"user_id": "u", "memories": [{"content": "x"}] * 501}, "memories"),
        (_one(kind="rumour"), "memories[0].kind"),
        (_one(importance=2), "memories[0].importance"),
        (_one(importance="hi"), "memories[0].importance"),
        (_one(content=""), "memories[0].content"),
        (_one(what=1), "memories[0].what"),
        (_one(occurred_at="soon"), "memories[0].occurred_at"),
        (_one(tags=[""]), "memories[0].tags[0]"),
        ({"user_id": "bad user!", "memories": [{"content": "x"}]}, "user_id"),
    ],
)
def test_bad_memories_are_refused(
    client: TestClient, alice: Caller, body: dict[str, Any], field: str
) -> None:
    response = client.post("/v1/memories", json=body, headers=alice.headers)
    assert response.status_code == 422, response.text[:500]
    assert field in fields(response)


def test_a_repeat_inside_one_request_is_folded(client: TestClient, alice: Caller) -> None:
    user = uid("mem")
    items = [{"content": TOPICS[13]}, {"content": TOPICS[14]}, {"content": TOPICS[13]}]
    stored = remember(client, alice, user, items)
    assert [m["status"] for m in stored] == ["created", "created", "reinforced"]
    assert stored[2]["id"] == stored[0]["id"]
    listed = client.get(f"/v1/memories?user_id={user}", headers=alice.headers).json()
    assert len(listed["memories"]) == 2


def test_a_new_value_supersedes_the_old_one(client: TestClient, alice: Caller) -> None:
    user = uid("mem")
    subject = {"subject": "favourite colour", "kind": "preference"}
    old = remember(
        client,
        alice,
        user,
        [{"content": "My favourite colour is blue.", "value": "blue", **subject}],
    )[0]
    new = remember(
        client,
        alice,
        user,
        [{"content": "My favourite colour is green.", "value": "green", **subject}],
    )[0]
    assert new["status"] == "created"
    assert new["id"] != old["id"]
    current = client.get(f"/v1/memories?user_id={user}", headers=alice.headers).json()
    assert [m["id"] for m in current["memories"]] == [new["id"]]
    everything = client.get(
        f"/v1/memories?user_id={user}&include_superseded=true", headers=alice.headers
    ).json()
    assert {m["id"] for m in everything["memories"]} == {old["id"], new["id"]}
    replaced = client.get(f"/v1/memories/{old['id']}", headers=alice.headers).json()
    assert replaced["superseded_by"] == new["id"]
    assert replaced["valid_to"] is not None

    hits = search(client, alice, user, "favourite colour").json()["hits"]
    assert [h["id"] for h in hits] == [new["id"]]
    hits = search(client, alice, user, "favourite colour", include_superseded=True).json()["hits"]
    assert {h["id"] for h in hits} == {old["id"], new["id"]}


def test_get_memory_bad_inputs(client: TestClient, alice: Caller) -> None:
    missing = client.get(f"/v1/memories/{uuid.uuid4()}", headers=alice.headers)
    assert missing.status_code == 404
    malformed = client.get("/v1/memories/not-a-uuid", headers=alice.headers)
    assert malformed.status_code == 422
    assert fields(malformed) == ["memory_id"]
    memory = remember(client, alice, uid("mem"), [{"content": TOPICS[2]}])[0]
    for recall in ("-1", "101", "x"):
        response = client.get(f"/v1/memories/{memory['id']}?recall={recall}", headers=alice.headers)
        assert response.status_code == 422, recall
        assert fields(response) == ["recall"]


def test_listing_pages_cover_every_memory_once(client: TestClient, alice: Caller) -> None:
    user = uid("page")
    base = datetime(2026, 3, 1, tzinfo=UTC)
    items = [
        {"content": TOPICS[10 + i], "occurred_at": (base + timedelta(hours=i)).isoformat()}
        for i in range(7)
    ]
    # Two memories at the same instant: the keyset must still separate them.
    items[6]["occurred_at"] = items[5]["occurred_at"]
    created = remember(client, alice, user, items)
    assert {m["status"] for m in created} == {"created"}
    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        params: dict[str, Any] = {"user_id": user, "limit": 3}
        if cursor:
            params["cursor"] = cursor
        response = client.get("/v1/memories", params=params, headers=alice.headers)
        assert response.status_code == 200, response.text
        body = response.json()
        assert len(body["memories"]) <= 3
        seen += [m["id"] for m in body["memories"]]
        pages += 1
        cursor = body["next_cursor"]
        if cursor is None:
            break
        assert pages < 10
    assert pages == 3
    assert sorted(seen) == sorted(m["id"] for m in created)
    assert len(seen) == len(set(seen)) == 7
    listed = client.get(f"/v1/memories?user_id={user}", headers=alice.headers).json()
    stamps = [m["occurred_at"] for m in listed["memories"]]
    assert stamps == sorted(stamps, reverse=True)
    assert listed["next_cursor"] is None


def _b64(value: str) -> str:
    return base64.urlsafe_b64encode(value.encode()).decode()


@pytest.mark.parametrize(
    "cursor",
    [
        "garbage!!",
        "%%%",
        _b64("null"),
        _b64("[1, 2]"),
        _b64('["2026-01-01T00:00:00+00:00", "not-a-uuid"]'),
        _b64('["yesterday", "00000000-0000-0000-0000-000000000000"]'),
        _b64('{"a": 1, "b": 2}'),
        _b64("[1, 2, 3]"),
        base64.urlsafe_b64encode(b"\xff\xfe").decode(),
        "1_" + "0" * 31,
        "1" * 17 + "_" + "0" * 32,
        "1_" + "A" * 32,
    ],
)
def test_a_bad_cursor_is_a_422(client: TestClient, alice: Caller, cursor: str) -> None:
    response = client.get(
        "/v1/memories", params={"user_id": "u", "cursor": cursor}, headers=alice.headers
    )
    assert response.status_code == 422, response.text
    assert fields(response) == ["cursor"]


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("", "user_id"),
        ("user_id=bad%20user!", "user_id"),
        ("user_id=u&limit=0", "limit"),
        ("user_id=u&limit=501", "limit"),
        ("user_id=u&limit=x", "limit"),
    ],
)
def test_bad_listing_parameters(client: TestClient, alice: Caller, query: str, field: str) -> None:
    response = client.get(f"/v1/memories?{query}", headers=alice.headers)
    assert response.status_code == 422
    assert fields(response) == [field]


# -- POST /v1/search ----------------------------------------------------------------------


def test_search_finds_memories_with_score_parts(
    client: TestClient, alice: Caller, api_settings: Settings
) -> None:
    user = uid("s")
    remember(
        client,
        alice,
        user,
        [
            {"content": TOPICS[3], "kind": "fact", "importance": 0.9, "tags": ["health"]},
            {"content": TOPICS[11], "kind": "preference", "importance": 0.4, "channel": "sms"},
            {"content": TOPICS[4], "kind": "fact", "importance": 0.2, "tags": ["pets"]},
        ],
    )
    response = search(client, alice, user, "which foods am I allergic to?")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["fusion"] == api_settings.search_fusion
    top = body["hits"][0]
    assert top["content"] == TOPICS[3]
    assert top["layer"] == "memory"
    assert {"memory_dense", "memory_lexical", "fused", "prior", "recency", "importance"} <= set(
        top["parts"]
    )
    assert top["score"] == pytest.approx(top["parts"]["fused"] * top["parts"]["prior"], rel=1e-3)

    # Filters reach the query.
    kinds = search(client, alice, user, "tea allergic cat", kinds=["preference"]).json()["hits"]
    assert [h["content"] for h in kinds] == [TOPICS[11]]
    tags = search(client, alice, user, "tea allergic cat", tags=["pets"]).json()["hits"]
    assert [h["content"] for h in tags] == [TOPICS[4]]
    channel = search(client, alice, user, "tea allergic cat", channel="sms").json()["hits"]
    assert [h["content"] for h in channel] == [TOPICS[11]]
    important = search(client, alice, user, "tea allergic cat", min_importance=0.8).json()["hits"]
    assert [h["content"] for h in important] == [TOPICS[3]]
    later = search(client, alice, user, "tea allergic cat", since="2100-01-01T00:00:00Z")
    assert later.json()["hits"] == []
    one = search(client, alice, user, "tea allergic cat", limit=1).json()["hits"]
    assert len(one) == 1
    nobody = search(client, alice, uid("nobody"), "which foods am I allergic to?")
    assert nobody.status_code == 200
    assert nobody.json()["hits"] == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"query": "hello"}, "user_id"),
        ({"user_id": "u"}, "query"),
        ({"user_id": "u", "query": ""}, "query"),
        ({"user_id": "u", "query": "q", "limit": 0}, "limit"),
        ({"user_id": "u", "query": "q", "limit": 101}, "limit"),
        ({"user_id": "u", "query": "q", "limit": "x"}, "limit"),
        ({"user_id": "u", "query": "q", "bogus": True}, "bogus"),
        ({"user_id": "u", "query": "q", "kinds": ["rumour"]}, "kinds[0]"),
        ({"user_id": "u", "query": "q", "tags": [""]}, "tags[0]"),
        ({"user_id": "u", "query": "q", "since": "last week"}, "since"),
        ({"user_id": "u", "query": "q", "min_importance": 1.5}, "min_importance"),
        ({"user_id": "bad user!", "query": "q"}, "user_id"),
        ({"user_id": "u", "query": "q", "channel": ""}, "channel"),
    ],
)
def test_bad_searches_name_the_field(
    client: TestClient, alice: Caller, body: dict[str, Any], field: str
) -> None:
    response = client.post("/v1/search", json=body, headers=alice.headers)
    assert response.status_code == 422, response.text
    assert field in fields(response)


def test_a_body_that_is_not_an_object_is_a_422(client: TestClient, alice: Caller) -> None:
    for body in ([], "text", 3, None):
        response = client.post("/v1/search", json=body, headers=alice.headers)
        assert response.status_code == 422, body


# -- POST /v1/context ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def context_user(client: TestClient, alice: Caller, state: Any) -> str:
    """A user with many memories, a live conversation in working memory and its summary."""
    user = uid("ctx")
    remember(
        client,
        alice,
        user,
        [{"content": t, "importance": 0.3 + (i % 5) / 10} for i, t in enumerate(TOPICS)]
        + [{"content": "Alice uses Postgres for billing and Redis for caching."}],
    )
    at = datetime.now(UTC) - timedelta(minutes=30)
    turns = [
        WorkingTurn(
            id=f"w-{n}",
            role="user" if n % 2 == 0 else "assistant",
            speaker="",
            channel="web",
            content=f"Turn {n}: let us talk about the renovation budget and the kitchen plan.",
            tokens=15,
            at=at + timedelta(seconds=n),
        )
        for n in range(state.settings.working_turns + 20)
    ]
    store = WorkingMemoryStore(state.redis, state.settings)
    store.push({(alice.tenant, user): turns})
    store.fold_evicted(alice.tenant, user)  # the oldest turns become the rolling summary
    working = store.read(alice.tenant, user)
    assert working is not None
    assert working.summary
    return user


@pytest.mark.parametrize("budget", [50, 100, 400, 1500])
def test_context_stays_within_the_budget(
    client: TestClient, alice: Caller, context_user: str, budget: int
) -> None:
    response = client.post(
        "/v1/context",
        json={
            "user_id": context_user,
            "query": "what do we know about the kitchen renovation and the database?",
            "token_budget": budget,
        },
        headers=alice.headers,
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["token_budget"] == budget
    assert body["prefetch"] == "miss"
    assert count_tokens(body["text"]) <= budget
    assert body["tokens"] == count_tokens(body["text"])
    assert body["text"]
    if budget >= 400:
        assert body["parts"]["memories"]
        assert body["parts"]["turns"]
    if budget >= 1500:
        assert body["parts"]["summary"]


def test_context_uses_the_default_budget(
    client: TestClient, alice: Caller, context_user: str, api_settings: Settings
) -> None:
    body = client.post(
        "/v1/context",
        json={"user_id": context_user, "query": "the kitchen renovation"},
        headers=alice.headers,
    ).json()
    assert body["token_budget"] == api_settings.context_token_budget
    assert count_tokens(body["text"]) <= api_settings.context_token_budget


def test_context_reports_a_prefetch_hit(
    client: TestClient, alice: Caller, context_user: str, state: Any
) -> None:
    query = {"user_id": context_user, "query": "the kitchen cabinets", "token_budget": 300}
    assert (
        client.post("/v1/context", json=query, headers=alice.headers).json()["prefetch"] == "miss"
    )
    found = prefetch(
        alice.tenant,
        context_user,
        None,
        settings=state.settings,
        embedder=state.embedder,
        client=state.redis,
    )
    assert found > 0
    response = client.post("/v1/context", json=query, headers=alice.headers)
    assert response.status_code == 200
    body = response.json()
    assert body["prefetch"] == "hit"
    assert count_tokens(body["text"]) <= 300
    assert any("oak cabinets" in m["content"] for m in body["parts"]["memories"])
    # Another channel has no prefetched entry.
    other = client.post(
        "/v1/context", json={**query, "channel": "sms"}, headers=alice.headers
    ).json()
    assert other["prefetch"] == "miss"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"user_id": "u", "query": "q", "token_budget": 49}, "token_budget"),
        ({"user_id": "u", "query": "q", "token_budget": 0}, "token_budget"),
        ({"user_id": "u", "query": "q", "token_budget": 200_001}, "token_budget"),
        ({"user_id": "u", "query": "q", "token_budget": "lots"}, "token_budget"),
        ({"user_id": "u", "query": ""}, "query"),
        ({"query": "q"}, "user_id"),
        ({"user_id": "u", "query": "q", "limit": 3}, "limit"),
    ],
)
def test_bad_context_requests(
    client: TestClient, alice: Caller, body: dict[str, Any], field: str
) -> None:
    response = client.post("/v1/context", json=body, headers=alice.headers)
    assert response.status_code == 422, response.text
    assert fields(response) == [field]


# -- GET /v1/entities/{name}/graph --------------------------------------------------------


def test_entity_graph(client: TestClient, alice: Caller) -> None:
    user = uid("graph")
    remember(client, alice, user, [{"content": "Alice uses Postgres for billing."}])
    for name in ("Alice", "alice", " ALICE "):
        response = client.get(
            f"/v1/entities/{name}/graph", params={"user_id": user}, headers=alice.headers
        )
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["entity"]["name"].lower() == "alice"
        # "Postgres" is canonicalised (to "postgresql"); the fact reads alice —uses→ postgres…
        uses = [e for e in body["edges"] if e["fact"].lower().startswith("alice —uses→ postgres")]
        assert uses, [e["fact"] for e in body["edges"]]
        edge = uses[0]
        assert edge["relation"] == "uses"
        assert edge["depth"] == 1
    # From the other end as well.
    other = client.get(
        "/v1/entities/postgres/graph", params={"user_id": user}, headers=alice.headers
    )
    assert other.status_code == 200
    assert any(e["source"].lower() == "alice" for e in other.json()["edges"])

    unknown = client.get(
        "/v1/entities/Nobody/graph", params={"user_id": user}, headers=alice.headers
    )
    assert unknown.status_code == 404
    elsewhere = client.get(
        "/v1/entities/Alice/graph", params={"user_id": uid("other")}, headers=alice.headers
    )
    assert elsewhere.status_code == 404


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("user_id=u&depth=9", "depth"),
        ("user_id=u&depth=0", "depth"),
        ("user_id=u&depth=x", "depth"),
        ("user_id=u&limit=0", "limit"),
        ("", "user_id"),
        ("user_id=bad%20user!", "user_id"),
    ],
)
def test_bad_graph_requests(client: TestClient, alice: Caller, query: str, field: str) -> None:
    response = client.get(f"/v1/entities/Alice/graph?{query}", headers=alice.headers)
    assert response.status_code == 422, response.text
    assert fields(response) == [field]


def test_bad_entity_names(client: TestClient, alice: Caller) -> None:
    for name in ("%20%20", "a" * 257):
        response = client.get(f"/v1/entities/{name}/graph?user_id=u", headers=alice.headers)
        assert response.status_code == 422, name
        assert fields(response) == ["name"]


# -- procedures ---------------------------------------------------------------------------

STEPS: list[Any] = [
    {"tool": "git.pull", "args": {"branch": "main"}},
    "docker.build",
    "kubectl.apply",
]


def test_procedures_are_recorded_and_suggested(client: TestClient, alice: Caller) -> None:
    user = uid("proc")
    run = {
        "user_id": user,
        "query": "deploy the web app to staging",
        "tool_sequence": STEPS,
        "success": 1.0,
        "duration_ms": 1200,
    }
    views = []
    for _ in range(3):
        response = client.post("/v1/procedures", json=run, headers=alice.headers)
        assert response.status_code == 201, response.text
        views.append(response.json())
    assert [v["executions"] for v in views] == [1, 2, 3]
    assert [v["created"] for v in views] == [True, False, False]
    assert len({v["id"] for v in views}) == 1
    assert views[-1]["confidence"] >= 0.7

    response = client.get(
        "/v1/procedures/suggest",
        params={"user_id": user, "query": "push the webapp to the staging environment"},
        headers=alice.headers,
    )
    assert response.status_code == 200
    suggestion = response.json()["suggestion"]
    assert suggestion is not None
    assert suggestion["procedure_id"] == views[0]["id"]
    assert suggestion["tool_sequence"] == views[0]["tool_sequence"]
    assert suggestion["executions"] == 3

    unrelated = client.get(
        "/v1/procedures/suggest",
        params={"user_id": user, "query": "what is the weather in Paris tomorrow"},
        headers=alice.headers,
    )
    assert unrelated.status_code == 200
    assert unrelated.json() == {"suggestion": None}
    strict = client.get(
        "/v1/procedures/suggest",
        params={"user_id": user, "query": run["query"], "min_confidence": 1.0},
        headers=alice.headers,
    )
    assert strict.status_code == 200
    # Another user of the same tenant does not get it.
    stranger = client.get(
        "/v1/procedures/suggest",
        params={"user_id": uid("proc"), "query": run["query"]},
        headers=alice.headers,
    )
    assert stranger.json() == {"suggestion": None}


GOOD_RUN: dict[str, Any] = {
    "user_id": "u",
    "query": "deploy",
    "tool_sequence": ["a"],
    "success": 1,
    "duration_ms": 1,
}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"success": 1.5}, "success"),
        ({"success": -0.1}, "success"),
        ({"success": "yes"}, "success"),
        ({"duration_ms": -1}, "duration_ms"),
        ({"tool_sequence": []}, "tool_sequence"),
        ({"tool_sequence": "a"}, "tool_sequence"),
        ({"tool_sequence": ["a"] * 101}, "tool_sequence"),
        ({"tool_sequence": [1]}, "tool_sequence[0]"),
        ({"tool_sequence": ["  "]}, "tool_sequence[0]"),
        ({"tool_sequence": [{"tool": ""}]}, "tool_sequence[0]"),
        ({"tool_sequence": [{"args": {}}]}, "tool_sequence[0]"),
        ({"query": ""}, "query"),
        ({"query": "?!..."}, "query"),
        ({"user_id": "bad user!"}, "user_id"),
        ({"user_id": None}, "user_id"),
        ({"extra": 1}, "extra"),
    ],
)
def test_bad_procedure_runs(
    client: TestClient, alice: Caller, change: dict[str, Any], field: str
) -> None:
    body = {k: v for k, v in {**GOOD_RUN, **change}.items() if v is not None}
    response = client.post("/v1/procedures", json=body, headers=alice.headers)
    assert response.status_code == 422, response.text
    assert any(f.startswith(field) for f in fields(response)), fields(response)


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("query=deploy", "user_id"),
        ("user_id=u", "query"),
        ("user_id=u&query=", "query"),
        ("user_id=u&query=deploy&min_confidence=2", "min_confidence"),
    ],
)
def test_bad_suggest_requests(client: TestClient, alice: Caller, query: str, field: str) -> None:
    response = client.get(f"/v1/procedures/suggest?{query}", headers=alice.headers)
    assert response.status_code == 422, response.text
    assert fields(response) == [field]


def test_suggest_for_a_query_of_punctuation_only_is_a_422(
    client: TestClient, alice: Caller
) -> None:
    response = client.get(
        "/v1/procedures/suggest", params={"user_id": "u", "query": "?!"}, headers=alice.headers
    )
    assert response.status_code == 422, response.text
    assert fields(response) == ["query"]


# -- text Postgres cannot store -------------------------------------------------------------

NUL = "a\u0000b"


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/memories", {"user_id": "u", "memories": [{"content": NUL}]}, "memories[0].content"),
        (
            "/v1/memories",
            {"user_id": "u", "memories": [{"content": "nul tag", "tags": [NUL]}]},
            "memories[0].tags",
        ),
        (
            "/v1/memories",
            {"user_id": "u", "memories": [{"content": "nul meta", "metadata": {"k": NUL}}]},
            "memories[0].metadata",
        ),
        ("/v1/search", {"user_id": "u", "query": NUL}, "query"),
        ("/v1/search", {"user_id": "u", "query": "q", "tags": [NUL]}, "tags"),
        ("/v1/context", {"user_id": "u", "query": NUL}, "query"),
        ("/v1/procedures", {**GOOD_RUN, "query": f"deploy {NUL}"}, "query"),
        ("/v1/procedures", {**GOOD_RUN, "tool_sequence": [NUL]}, "tool_sequence"),
    ],
    ids=[
        "memory-content",
        "memory-tag",
        "memory-metadata",
        "search-query",
        "search-tag",
        "context-query",
        "procedure-query",
        "procedure-tool",
    ],
)
def test_nul_characters_are_a_422_not_a_server_error(
    client: TestClient, alice: Caller, path: str, body: dict[str, Any], field: str
) -> None:
    """Postgres text and jsonb cannot hold NUL; like events, every other body must refuse it."""
    response = client.post(path, json=body, headers=alice.headers)
    assert response.status_code == 422, response.text[:300]
    assert any(f.startswith(field) for f in fields(response)), fields(response)


def test_memory_metadata_that_is_not_json_is_a_422(client: TestClient, alice: Caller) -> None:
    """NaN parses (Python's json accepts it) but jsonb cannot store it."""
    raw = '{"user_id": "u", "memories": [{"content": "nan meta", "metadata": {"score": NaN}}]}'
    response = client.post(
        "/v1/memories",
        content=raw.encode(),
        headers={**alice.headers, "Content-Type": "application/json"},
    )
    assert response.status_code == 422, response.text[:300]
    assert any(f.startswith("memories[0].metadata") for f in fields(response))


def test_non_finite_numbers_are_refused(client: TestClient, alice: Caller) -> None:
    headers = {**alice.headers, "Content-Type": "application/json"}
    for path, raw, field in [
        ("/v1/procedures", '{**, "duration_ms": Infinity}', "duration_ms"),
        ("/v1/procedures", '{**, "success": NaN}', "success"),
        ("/v1/procedures", '{**, "tool_sequence": [{"tool": "a", "x": NaN}]}', "tool_sequence"),
    ]:
        good = json.dumps({k: v for k, v in GOOD_RUN.items() if k not in raw})[1:-1]
        response = client.post(path, content=raw.replace("**", good).encode(), headers=headers)
        assert response.status_code == 422, (raw, response.text[:300])
        assert any(f.startswith(field) for f in fields(response))
    for raw in ('{"user_id": "u", "query": "q", "min_importance": NaN}',):
        response = client.post("/v1/search", content=raw.encode(), headers=headers)
        assert response.status_code == 422
        assert fields(response) == ["min_importance"]


# -- DELETE /v1/users/{user} --------------------------------------------------------------


def test_forgetting_a_user(
    client: TestClient, alice: Caller, state: Any, api_settings: Settings
) -> None:
    gone, kept = uid("del"), uid("keep")
    keys = RedisKeys.from_settings(api_settings)
    at = datetime.now(UTC)
    store = WorkingMemoryStore(state.redis, state.settings)
    for user in (gone, kept):
        remember(client, alice, user, [{"content": TOPICS[5]}, {"content": TOPICS[6]}])
        store.push(
            {
                (alice.tenant, user): [
                    WorkingTurn("w1", "user", "", "web", "Planning my marathon.", 4, at)
                ]
            }
        )
        assert search(client, alice, user, "marathon training plan").json()["hits"]
        prefetch(
            alice.tenant,
            user,
            None,
            settings=state.settings,
            embedder=state.embedder,
            client=state.redis,
        )
    assert list(state.redis.scan_iter(match=keys.user_pattern(alice.tenant, gone)))

    response = client.delete(f"/v1/users/{gone}", headers=alice.headers)
    assert response.status_code == 200, response.text
    report = response.json()
    assert report["rows"]["semantic.memories"] == 2
    assert report["redis_keys"] >= 3  # working memory, prefetch, access buffer
    assert report["total"] == sum(report["rows"].values()) + report["redis_keys"]
    assert list(state.redis.scan_iter(match=keys.user_pattern(alice.tenant, gone))) == []

    assert search(client, alice, gone, "marathon training plan").json()["hits"] == []
    assert client.get(f"/v1/memories?user_id={gone}", headers=alice.headers).json() == {
        "memories": [],
        "next_cursor": None,
    }
    # The other user is untouched.
    assert len(search(client, alice, kept, "marathon training plan").json()["hits"]) == 2
    assert list(state.redis.scan_iter(match=keys.user_pattern(alice.tenant, kept)))
    assert store.read(alice.tenant, kept) is not None

    again = client.delete(f"/v1/users/{gone}", headers=alice.headers).json()
    assert sum(again["rows"].values()) == 0


@pytest.mark.parametrize("user", ["bad%20id!", "-leading-dash", "a" * 129, "semi;colon"])
def test_forgetting_a_bad_user_id_is_a_422(client: TestClient, alice: Caller, user: str) -> None:
    response = client.delete(f"/v1/users/{user}", headers=alice.headers)
    assert response.status_code == 422, response.text
    assert fields(response) == ["user_id"]


# -- GET /v1/stats ------------------------------------------------------------------------


def test_stats_count_only_the_callers_rows(client: TestClient) -> None:
    one, two = new_caller(), new_caller()
    empty = client.get("/v1/stats", headers=one.headers)
    assert empty.status_code == 200
    assert empty.json()["tenant_id"] == one.tenant
    assert empty.json()["users"] == 0
    assert empty.json()["current_memories"] == 0

    remember(client, one, uid("st"), [{"content": TOPICS[7]}, {"content": TOPICS[8]}])
    before = client.get("/v1/stats", headers=one.headers).json()
    assert before["current_memories"] == 2
    assert before["users"] == 1
    assert before["rows"]["semantic.memories"] == 2

    remember(client, two, uid("st"), [{"content": TOPICS[9]}])
    remember(client, two, uid("st"), [{"content": TOPICS[12]}])
    after_other = client.get("/v1/stats", headers=one.headers).json()
    assert after_other == before
    theirs = client.get("/v1/stats", headers=two.headers).json()
    assert theirs["tenant_id"] == two.tenant
    assert theirs["users"] == 2
    assert theirs["current_memories"] == 2
