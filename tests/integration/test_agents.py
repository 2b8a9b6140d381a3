"""Several agents over one user: the raw archive is shared, each agent's map is private.

An agent's private memories (and the edges it formed) are never returned to another agent
nor to a caller that names no agent — through search, context, listing, get, the entity
graph, or raw SQL on the application's engine — while user-level and shared rows are seen by
all; turns any agent recorded are found by every agent; extraction of an agent's turns forms
that agent's private memories; forgetting the user reaches every agent's rows.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from app.api.app import create_app
from app.config import Settings
from app.db.session import unit_of_work
from app.embedding.factory import get_embedder
from app.services import extraction
from app.services.forget import forget_user
from app.services.search import SearchRequest, search
from app.services.tenants import mint_key
from tests.integration.test_extraction_pipeline import pipeline, say

__all__ = ["pipeline"]  # the in-process ingest → extract → store fixture

PRIVATE = "The launch code word for agent alpha is periwinkle."
SHARED = "The team offsite happens in Porto during the first week of June."
USER_LEVEL = "Jonas is allergic to hazelnuts and walnuts."


@pytest.fixture(scope="module")
def client(base_settings: Settings) -> Iterator[TestClient]:
    settings = base_settings.model_copy(
        update={"redis_prefix": f"test-agents-{uuid.uuid4().hex[:10]}"}
    )
    with TestClient(create_app(settings)) as test_client:
        yield test_client


@pytest.fixture
def caller() -> tuple[str, dict[str, str]]:
    tenant = f"t-ag-{uuid.uuid4().hex[:10]}"
    return tenant, {"Authorization": f"Bearer {mint_key(tenant, name='agents').key}"}


def _remember(
    client: TestClient, headers: dict[str, str], user: str, content: str, **scope: Any
) -> str:
    response = client.post(
        "/v1/memories",
        json={"user_id": user, "memories": [{"content": content}], **scope},
        headers=headers,
    )
    assert response.status_code == 201, response.text
    return str(response.json()["memories"][0]["id"])


def _found(client: TestClient, headers: dict[str, str], user: str, **extra: Any) -> set[str]:
    response = client.post(
        "/v1/search",
        json={
            "user_id": user,
            "query": "launch code offsite allergic",
            "unit": "memories",
            "limit": 50,
            **extra,
        },
        headers=headers,
    )
    assert response.status_code == 200, response.text
    return {h["id"] for h in response.json()["hits"]}


def _listed(client: TestClient, headers: dict[str, str], user: str, **params: str) -> set[str]:
    response = client.get("/v1/memories", params={"user_id": user, **params}, headers=headers)
    assert response.status_code == 200, response.text
    return {m["id"] for m in response.json()["memories"]}


def test_an_agents_private_memory_is_seen_by_that_agent_only(
    client: TestClient, caller: tuple[str, dict[str, str]]
) -> None:
    tenant, headers = caller
    user = "jonas"
    private = _remember(client, headers, user, PRIVATE, agent_id="alpha")
    shared = _remember(client, headers, user, SHARED, agent_id="alpha", shared=True)
    common = _remember(client, headers, user, USER_LEVEL)

    assert _found(client, headers, user, agent_id="alpha") == {private, shared, common}
    assert _found(client, headers, user, agent_id="beta") == {shared, common}
    assert _found(client, headers, user) == {shared, common}
    assert _listed(client, headers, user, agent_id="alpha") == {private, shared, common}
    assert _listed(client, headers, user, agent_id="beta") == {shared, common}
    assert _listed(client, headers, user) == {shared, common}

    mine = client.get(f"/v1/memories/{private}", params={"agent_id": "alpha"}, headers=headers)
    assert mine.status_code == 200 and mine.json()["agent_id"] == "alpha"
    assert not mine.json()["shared"]
    for params in ({"agent_id": "beta"}, {}):
        response = client.get(f"/v1/memories/{private}", params=params, headers=headers)
        assert response.status_code == 404
    assert client.get(f"/v1/memories/{shared}", headers=headers).json()["shared"] is True

    for agent in ("beta", None):
        body = {"user_id": user, "query": "what is the launch code word?", "token_budget": 2000}
        context = client.post(
            "/v1/context", json={**body, **({"agent_id": agent} if agent else {})}, headers=headers
        )
        assert context.status_code == 200, context.text
        assert "periwinkle" not in context.json()["text"]
    context = client.post(
        "/v1/context",
        json={"user_id": user, "query": "what is the launch code word?", "agent_id": "alpha"},
        headers=headers,
    )
    assert "periwinkle" in context.json()["text"]

    # The database itself refuses: the application's role, scoped to beta, reads 0 rows.
    for scope in ({"agent_id": "beta"}, {}):
        with unit_of_work(tenant, **scope) as session:
            rows = session.scalar(
                text("SELECT count(*) FROM semantic.memories WHERE id = :id"), {"id": private}
            )
            assert rows == 0
    with unit_of_work(tenant, agent_id="alpha") as session:
        assert (
            session.scalar(
                text("SELECT count(*) FROM semantic.memories WHERE id = :id"), {"id": private}
            )
            == 1
        )


def test_another_agents_row_cannot_be_written_or_forged(
    caller: tuple[str, dict[str, str]],
) -> None:
    tenant, _ = caller
    with (
        pytest.raises(Exception, match="row-level security"),
        unit_of_work(tenant, agent_id="beta") as session,
    ):
        session.execute(
            text(
                "INSERT INTO semantic.memories (id, tenant_id, user_id, agent_id, kind, content,"
                " content_hash, occurred_at, valid_from) VALUES (gen_random_uuid(), :t, 'jonas',"
                " 'alpha', 'fact', 'forged', 'forged', now(), now())"
            ),
            {"t": tenant},
        )


def test_the_same_words_in_two_agents_maps_are_two_memories(
    client: TestClient, caller: tuple[str, dict[str, str]]
) -> None:
    _, headers = caller
    alpha = _remember(client, headers, "mira", PRIVATE, agent_id="alpha")
    beta = _remember(client, headers, "mira", PRIVATE, agent_id="beta")
    level = _remember(client, headers, "mira", PRIVATE)
    assert len({alpha, beta, level}) == 3
    assert _remember(client, headers, "mira", PRIVATE, agent_id="alpha") == alpha


def test_the_entity_graph_shows_an_agent_only_its_own_edges(
    client: TestClient, caller: tuple[str, dict[str, str]]
) -> None:
    _, headers = caller
    memory = _remember(
        client, headers, "ines", "Alice uses Postgres for billing.", agent_id="alpha"
    )
    params = {"user_id": "ines", "agent_id": "alpha"}
    mine = client.get("/v1/entities/Alice/graph", params=params, headers=headers)
    assert mine.status_code == 200, mine.text
    assert memory in {e["memory_id"] for e in mine.json()["edges"]}
    for params in ({"user_id": "ines", "agent_id": "beta"}, {"user_id": "ines"}):
        other = client.get("/v1/entities/Alice/graph", params=params, headers=headers)
        if other.status_code == 200:
            assert memory not in {e["memory_id"] for e in other.json()["edges"]}
            assert other.json()["edges"] == []
        else:
            assert other.status_code == 404


@pytest.mark.parametrize(
    ("method", "path", "payload", "field"),
    [
        ("post", "/v1/search", {"user_id": "u", "query": "q", "agent_id": "bad id!"}, "agent_id"),
        ("post", "/v1/context", {"user_id": "u", "query": "q", "agent_id": "-x"}, "agent_id"),
        (
            "post",
            "/v1/memories",
            {"user_id": "u", "memories": [{"content": "c"}], "agent_id": "a|b"},
            "agent_id",
        ),
        ("get", "/v1/memories", {"user_id": "u", "agent_id": "a b"}, "agent_id"),
    ],
)
def test_a_malformed_agent_id_is_refused_by_name(
    client: TestClient,
    caller: tuple[str, dict[str, str]],
    method: str,
    path: str,
    payload: dict[str, Any],
    field: str,
) -> None:
    _, headers = caller
    if method == "get":
        response = client.get(path, params=payload, headers=headers)
    else:
        response = client.post(path, json=payload, headers=headers)
    assert response.status_code == 422
    assert field in response.json()["detail"]["fields"]


def test_a_turn_event_with_a_malformed_agent_id_is_refused_by_name(
    client: TestClient, caller: tuple[str, dict[str, str]]
) -> None:
    _, headers = caller
    event = {
        "type": "turn",
        "user_id": "u",
        "role": "user",
        "content": "hi",
        "external_id": "m-1",
        "agent_id": "no spaces",
    }
    response = client.post("/v1/events", json={"events": [event]}, headers=headers)
    assert response.status_code == 422
    assert response.json()["detail"]["fields"] == ["events[0].agent_id"]


def _memories(tenant: str, **scope: Any) -> list[Any]:
    with unit_of_work(tenant, **scope) as session:
        return list(
            session.execute(text("SELECT id, agent_id, shared, content FROM semantic.memories"))
        )


def test_an_agents_turns_are_shared_and_its_memories_private(
    settings: Settings, pipeline, redis_client, tenant: str
) -> None:
    lines = [
        "We decided to move the weekly review to Thursdays.",
        "Remind me to renew the TLS certificate by Friday.",
        "I prefer aisle seats on long flights.",
        "The staging cluster runs on four nodes.",
        "My sister Ottilie lives in Ghent.",
    ]
    events = [{**say(tenant, "ana", n, line), "agent_id": "alpha"} for n, line in enumerate(lines)]
    pipeline.ingest(events)
    with unit_of_work(tenant) as session:
        agents = session.scalars(text("SELECT DISTINCT agent_id FROM episodic.turns")).all()
    assert agents == ["alpha"]

    # The archive is shared: beta and an agent-less caller find alpha's turns.
    embedder = get_embedder(settings, redis_client)
    for agent in ("beta", None):
        request = SearchRequest(user_id="ana", query="aisle seats", unit="turns", agent_id=agent)
        hits = search(tenant, request, settings=settings, embedder=embedder, record=False).hits
        assert any("aisle seats" in h.content for h in hits)

    refs = extraction.claim(settings, tenant, {"ana": "turns"})
    assert len(refs) == 1
    pipeline.run(refs)
    formed = _memories(tenant, all_agents=True)
    assert formed and {m.agent_id for m in formed} == {"alpha"}
    assert not any(m.shared for m in formed)
    assert len(_memories(tenant, agent_id="alpha")) == len(formed)
    assert _memories(tenant, agent_id="beta") == []
    assert _memories(tenant) == []
    for agent in ("beta", None):
        request = SearchRequest(user_id="ana", query="aisle seats", agent_id=agent)
        hits = search(tenant, request, settings=settings, embedder=embedder, record=False).hits
        assert all(not h.memories for h in hits)  # the turns, without alpha's memories
    request = SearchRequest(user_id="ana", query="aisle seats", agent_id="alpha")
    hits = search(tenant, request, settings=settings, embedder=embedder, record=False).hits
    assert any(h.memories for h in hits)


def test_forgetting_the_user_reaches_every_agents_rows(
    client: TestClient, caller: tuple[str, dict[str, str]], settings: Settings, redis_client
) -> None:
    tenant, headers = caller
    for agent in ("alpha", "beta", None):
        scope = {"agent_id": agent} if agent else {}
        _remember(client, headers, "lea", f"{PRIVATE} ({agent})", **scope)
    _remember(client, headers, "kim", USER_LEVEL, agent_id="alpha")
    assert len(_memories(tenant, all_agents=True)) == 4
    report = forget_user(tenant_id=tenant, user_id="lea", settings=settings, client=redis_client)
    assert report.rows["semantic.memories"] == 3
    with unit_of_work(tenant, all_agents=True) as session:
        left = session.execute(text("SELECT user_id, agent_id FROM semantic.memories")).all()
    assert [tuple(r) for r in left] == [("kim", "alpha")]
