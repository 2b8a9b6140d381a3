"""Tenant-wide knowledge: facts of no user, searched by any user of the tenant who asks.

Knowledge appears in any user's search and context with `include_knowledge`, marked
`scope: knowledge`, and in none without it; another tenant never sees it; forgetting a user
leaves it alone, and deleting knowledge never touches a user's memory.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.api.app import create_app
from app.config import Settings
from app.services.tenants import mint_key

POLICY = "Refunds are granted within thirty days of purchase with the original receipt."
QUERY = "how many days do I have to get a refund?"


@pytest.fixture(scope="module")
def client(base_settings: Settings) -> Iterator[TestClient]:
    settings = base_settings.model_copy(
        update={"redis_prefix": f"test-knowledge-{uuid.uuid4().hex[:10]}"}
    )
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def _headers() -> dict[str, str]:
    tenant = f"t-kn-{uuid.uuid4().hex[:10]}"
    return {"Authorization": f"Bearer {mint_key(tenant, name='knowledge').key}"}


@pytest.fixture
def headers() -> dict[str, str]:
    return _headers()


def _add(client: TestClient, headers: dict[str, str], content: str) -> str:
    response = client.post(
        "/v1/knowledge", json={"memories": [{"content": content}]}, headers=headers
    )
    assert response.status_code == 201, response.text
    return str(response.json()["memories"][0]["id"])


def _search(client: TestClient, headers: dict[str, str], user: str, **extra: Any) -> list[Any]:
    response = client.post(
        "/v1/search", json={"user_id": user, "query": QUERY, **extra}, headers=headers
    )
    assert response.status_code == 200, response.text
    return list(response.json()["hits"])


def test_knowledge_is_searched_by_any_user_who_asks_and_by_no_one_else(
    client: TestClient, headers: dict[str, str]
) -> None:
    fact = _add(client, headers, POLICY)
    for user in ("ana", "ben"):
        for unit in ("turns", "memories"):
            hits = _search(client, headers, user, include_knowledge=True, unit=unit)
            found = [h for h in hits if h["id"] == fact]
            assert found and found[0]["scope"] == "knowledge"
            assert found[0]["content"] == POLICY
            assert all(h["id"] != fact for h in _search(client, headers, user, unit=unit))
    hits = _search(client, headers, "ana", include_knowledge=True, agent_id="alpha")
    assert fact in {h["id"] for h in hits}
    assert all(h["id"] != fact for h in _search(client, _headers(), "ana", include_knowledge=True))

    context = client.post(
        "/v1/context",
        json={"user_id": "ana", "query": QUERY, "include_knowledge": True},
        headers=headers,
    )
    assert context.status_code == 200, context.text
    assert "thirty days" in context.json()["text"]
    plain = client.post("/v1/context", json={"user_id": "ana", "query": QUERY}, headers=headers)
    assert "thirty days" not in plain.json()["text"]


def test_knowledge_is_listed_and_deleted_apart_from_users(
    client: TestClient, headers: dict[str, str]
) -> None:
    fact = _add(client, headers, POLICY)
    assert _add(client, headers, POLICY) == fact  # the same fact twice is one
    mine = client.post(
        "/v1/memories",
        json={"user_id": "ana", "memories": [{"content": POLICY}]},
        headers=headers,
    ).json()["memories"][0]["id"]
    assert mine != fact

    listed = client.get("/v1/knowledge", headers=headers).json()["memories"]
    assert [m["id"] for m in listed] == [fact]
    assert listed[0]["scope"] == "knowledge"
    assert client.get("/v1/knowledge", headers=_headers()).json()["memories"] == []
    users = client.get("/v1/memories", params={"user_id": "ana"}, headers=headers).json()
    assert [m["id"] for m in users["memories"]] == [mine]

    assert client.delete(f"/v1/knowledge/{mine}", headers=headers).status_code == 404
    assert client.delete(f"/v1/knowledge/{fact}", headers=_headers()).status_code == 404
    assert client.get(f"/v1/memories/{mine}", headers=headers).status_code == 200

    forgot = client.delete("/v1/users/ana", headers=headers)
    assert forgot.status_code == 200, forgot.text
    assert [m["id"] for m in client.get("/v1/knowledge", headers=headers).json()["memories"]] == [
        fact
    ]
    deleted = client.delete(f"/v1/knowledge/{fact}", headers=headers)
    assert deleted.status_code == 200 and deleted.json() == {"id": fact, "deleted": True}
    assert client.get("/v1/knowledge", headers=headers).json()["memories"] == []
    assert client.delete(f"/v1/knowledge/{fact}", headers=headers).status_code == 404


def test_knowledge_requests_are_checked_by_field(
    client: TestClient, headers: dict[str, str]
) -> None:
    response = client.post("/v1/knowledge", json={"memories": []}, headers=headers)
    assert response.status_code == 422
    assert "memories" in response.json()["detail"]["fields"]
    response = client.post(
        "/v1/knowledge", json={"memories": [{"content": "x"}], "user_id": "u"}, headers=headers
    )
    assert response.status_code == 422
    assert client.get("/v1/knowledge", params={"cursor": "zz"}, headers=headers).status_code == 422
    assert client.delete("/v1/knowledge/not-a-uuid", headers=headers).status_code == 422
