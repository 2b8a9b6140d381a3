"""Editing, deleting, the history and the related memories of an agent's private memory: the
agent that owns it reaches it with `agent_id`; another agent, or a caller naming no agent,
gets 404 on every route, exactly as for an unknown id. An edit keeps the memory in its agent's
private map; a shared memory stays shared.

Real Postgres, real Redis, the local embedding model, the API through its test client.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from tests.integration.test_memory_editing import (
    Caller,
    api_settings,
    client,
    owner_rows,
    uid,
)

__all__ = ["api_settings", "client"]  # the module's API (its own Redis prefix)


@pytest.fixture(scope="module")
def caller(client: TestClient) -> Caller:
    return Caller()


@pytest.fixture
def scoped(client: TestClient, caller: Caller) -> Iterator[Any]:
    """Requests of the caller: `remember(user, content, agent=…, shared=…)`."""

    def remember(user: str, content: str, agent: str | None = None, shared: bool = False) -> str:
        body: dict[str, Any] = {"user_id": user, "memories": [{"content": content}]}
        if agent is not None:
            body.update(agent_id=agent, shared=shared)
        response = client.post("/v1/memories", json=body, headers=caller.headers)
        assert response.status_code == 201, response.text
        return str(response.json()["memories"][0]["id"])

    yield remember


def _as(agent: str | None) -> dict[str, str]:
    return {"agent_id": agent} if agent else {}


def _search(client: TestClient, caller: Caller, user: str, query: str, agent: str | None) -> Any:
    response = client.post(
        "/v1/search",
        json={"user_id": user, "query": query, "unit": "memories", "limit": 20, **_as(agent)},
        headers=caller.headers,
    )
    assert response.status_code == 200, response.text
    return [h["id"] for h in response.json()["hits"]]


def test_an_agent_edits_its_private_memory_and_it_stays_private(
    client: TestClient, caller: Caller, scoped: Any, base_settings: Settings
) -> None:
    user = uid("agent-edit")
    old = scoped(user, "The deploy window for agent alpha is Tuesday noon.", agent="alpha")
    h = caller.headers

    # Another agent, or no agent: the memory does not exist.
    for other in ("beta", None):
        edit = {"content": "stolen", **_as(other)}
        assert client.patch(f"/v1/memories/{old}", json=edit, headers=h).status_code == 404

    response = client.patch(
        f"/v1/memories/{old}",
        json={
            "content": "The deploy window for agent alpha is Thursday noon.",
            "agent_id": "alpha",
        },
        headers=h,
    )
    assert response.status_code == 200, response.text
    body = response.json()
    new = body["memory"]["id"]
    assert body["status"] == "updated" and body["previous_id"] == old
    assert body["memory"]["agent_id"] == "alpha" and body["memory"]["shared"] is False
    (row,) = owner_rows("SELECT agent_id, shared FROM semantic.memories WHERE id = :id", id=new)
    assert (row.agent_id, row.shared) == ("alpha", False)

    # The same edit again is a no-op for the owning agent.
    again = client.patch(
        f"/v1/memories/{old}",
        json={
            "content": "The deploy window for agent alpha is Thursday noon.",
            "agent_id": "alpha",
        },
        headers=h,
    )
    assert again.status_code == 200 and again.json()["status"] == "unchanged"

    assert new in _search(client, caller, user, "deploy window Thursday", "alpha")
    for other in ("beta", None):
        assert new not in _search(client, caller, user, "deploy window Thursday", other)
        assert client.get(f"/v1/memories/{new}", params=_as(other), headers=h).status_code == 404

    # History and related: the owning agent only.
    for suffix in ("history", "related"):
        path = f"/v1/memories/{new}/{suffix}"
        assert client.get(path, params={"agent_id": "alpha"}, headers=h).status_code == 200
        for other in ("beta", None):
            assert client.get(path, params=_as(other), headers=h).status_code == 404, suffix
    history = client.get(
        f"/v1/memories/{old}/history", params={"agent_id": "alpha"}, headers=h
    ).json()
    assert [v["id"] for v in history["versions"]] == [old, new]
    assert {v["agent_id"] for v in history["versions"]} == {"alpha"}

    # Delete: refused to the others, nothing removed; done by the owner, every version goes.
    for other in ("beta", None):
        response = client.delete(f"/v1/memories/{new}", params=_as(other), headers=h)
        assert response.status_code == 404
    assert len(owner_rows("SELECT 1 FROM semantic.memories WHERE user_id = :u", u=user)) == 2
    deleted = client.delete(f"/v1/memories/{new}", params={"agent_id": "alpha"}, headers=h)
    assert deleted.status_code == 200, deleted.text
    assert sorted(deleted.json()["ids"]) == sorted([old, new])
    assert not owner_rows("SELECT 1 FROM semantic.memories WHERE user_id = :u", u=user)


def test_related_memories_of_an_agent_leave_out_another_agents_private_ones(
    client: TestClient, caller: Caller, scoped: Any
) -> None:
    user = uid("agent-related")
    seed = scoped(user, "Dana works at Acme.", agent="alpha")
    own = scoped(user, "Dana prefers morning meetings.", agent="alpha")
    common = scoped(user, "Dana lives in Lisbon.")
    foreign = scoped(user, "Dana drinks green tea.", agent="beta")
    response = client.get(
        f"/v1/memories/{seed}/related", params={"agent_id": "alpha"}, headers=caller.headers
    )
    assert response.status_code == 200, response.text
    ids = {r["id"] for r in response.json()["related"]}
    assert {own, common} <= ids
    assert foreign not in ids and seed not in ids


def test_an_agents_shared_memory_is_edited_by_any_agent_and_stays_shared(
    client: TestClient, caller: Caller, scoped: Any
) -> None:
    user = uid("agent-shared")
    memory = scoped(user, "The team offsite is in Porto.", agent="alpha", shared=True)
    secret = scoped(user, "The offsite budget is twelve thousand euros.", agent="alpha")
    h = caller.headers
    response = client.patch(
        f"/v1/memories/{memory}",
        json={"content": "The team offsite is in Braga.", "agent_id": "beta"},
        headers=h,
    )
    assert response.status_code == 200, response.text
    new = response.json()["memory"]
    assert (new["agent_id"], new["shared"]) == ("alpha", True)
    for agent in ("alpha", "beta", None):
        found = client.get(f"/v1/memories/{new['id']}", params=_as(agent), headers=h)
        assert found.status_code == 200, agent

    # Editing it to the words of alpha's private memory collides with a row beta cannot see:
    # a conflict on the content, never a server error, and nothing written.
    clash = client.patch(
        f"/v1/memories/{new['id']}",
        json={"content": "The offsite budget is twelve thousand euros.", "agent_id": "beta"},
        headers=h,
    )
    assert clash.status_code == 409, clash.text
    assert clash.json()["detail"]["fields"] == ["content"]
    assert clash.json()["detail"]["duplicate_of"] is None
    rows = owner_rows("SELECT id FROM semantic.memories WHERE user_id = :u", u=user)
    assert len(rows) == 3  # the two versions and the secret
    assert secret in {str(r.id) for r in rows}


def test_a_malformed_agent_id_is_refused_by_name(
    client: TestClient, caller: Caller, scoped: Any
) -> None:
    memory = scoped(uid("agent-bad"), "The printer is on the second floor.")
    h = caller.headers
    bad = {"agent_id": "no spaces"}
    answers = [
        client.patch(f"/v1/memories/{memory}", json={"content": "x", **bad}, headers=h),
        client.delete(f"/v1/memories/{memory}", params=bad, headers=h),
        client.get(f"/v1/memories/{memory}/history", params=bad, headers=h),
        client.get(f"/v1/memories/{memory}/related", params=bad, headers=h),
    ]
    for answer in answers:
        assert answer.status_code == 422, answer.text
        assert any("agent_id" in f for f in answer.json()["detail"]["fields"]), answer.json()
    assert client.get(f"/v1/memories/{memory}", headers=h).status_code == 200
    assert client.get(f"/v1/memories/{uuid.uuid4()}", headers=h).status_code == 404
