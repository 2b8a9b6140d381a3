"""Clearing a session removes its turns, the memories only it supports and its turns in
working memory; a memory another session supports too stays, citing only that session.

Real Postgres, real Redis, the local embedding model, the API through its test client. The
trace is built the way ingestion and extraction build it (L2 rows, L1 pushes, gems stored
through the semantic layer with their entities), without waiting for workers.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy import text

from app.api.app import create_app
from app.config import Settings
from app.db.session import owner_engine, unit_of_work
from app.embedding.base import Embedder
from app.extraction.base import Gem
from app.layers.conceptual.service import record_entities
from app.layers.episodic.models import Session, Turn
from app.layers.semantic.service import store_gems
from app.layers.working.store import WorkingMemoryStore, WorkingTurn
from app.services.tenants import mint_key
from tests.integration.api_server import prefixed

AT = datetime(2026, 3, 1, 9, tzinfo=UTC)


@dataclass
class Trace:
    tenant: str
    user: str
    headers: dict[str, str]
    sessions: dict[str, uuid.UUID]
    turns: dict[str, uuid.UUID]  # label -> turn id
    memories: dict[str, uuid.UUID]  # label -> memory id


@pytest.fixture(scope="module")
def api_settings(base_settings: Settings) -> Iterator[Settings]:
    with prefixed(base_settings, "clear") as settings:
        yield settings


@pytest.fixture(scope="module")
def client(api_settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(api_settings)) as test_client:
        yield test_client


@pytest.fixture(scope="module")
def rds(client: TestClient) -> redis.Redis:
    return client.app.state.engram.redis  # type: ignore[attr-defined,no-any-return]


def build_trace(
    rds: redis.Redis,
    embedder: Embedder,
    settings: Settings,
    agent_of: dict[str, str] | None = None,
) -> Trace:
    """Two sessions of one user: `a` (turns a0, a1) and `b` (turn b0); memories `only_a`
    (cites a0), `both` (cites a1 and b0), `only_b` (cites b0); all turns in L1. `agent_of`
    puts memories (by label) in an agent's private map instead of the user's."""
    tenant = f"t-clear-{uuid.uuid4().hex[:10]}"
    user = f"u-{uuid.uuid4().hex[:8]}"
    headers = {"Authorization": f"Bearer {mint_key(tenant, name='clear tests').key}"}
    said = {
        "a0": (0, "a", "Frank moved to Oslo last spring."),
        "a1": (60, "a", "Frank's sister Greta lives in Bergen."),
        "b0": (7200, "b", "Greta visits Frank every winter."),
    }
    sessions: dict[str, uuid.UUID] = {}
    turns: dict[str, uuid.UUID] = {}
    with unit_of_work(tenant) as db:
        for label, start in (("a", 0), ("b", 7200)):
            row = Session(
                tenant_id=tenant,
                user_id=user,
                started_at=AT + timedelta(seconds=start),
                last_turn_at=AT + timedelta(seconds=start + 60),
                turn_count=sum(1 for _, s, _ in said.values() if s == label),
            )
            db.add(row)
            db.flush()
            sessions[label] = row.id
        for label, (offset, in_session, content) in said.items():
            turns[label] = uuid.uuid4()
            db.add(
                Turn(
                    id=turns[label],
                    tenant_id=tenant,
                    user_id=user,
                    session_id=sessions[in_session],
                    external_id=f"msg-{label}",
                    role="user",
                    content=content,
                    channel="web",
                    occurred_at=AT + timedelta(seconds=offset),
                    token_count=8,
                )
            )
    WorkingMemoryStore(rds, settings).push(
        {
            (tenant, user): [
                WorkingTurn(
                    id=str(turns[label]),
                    role="user",
                    speaker="Frank",
                    channel="web",
                    content=content,
                    tokens=8,
                    at=AT + timedelta(seconds=offset),
                )
                for label, (offset, _, content) in said.items()
            ]
        }
    )
    planned = {
        "only_a": ("Frank moved to Oslo.", ["a0"]),
        "both": ("Frank's sister Greta lives in Bergen.", ["a1", "b0"]),
        "only_b": ("Greta visits Frank in Bergen every winter.", ["b0"]),
    }
    scopes: dict[str | None, list[Gem]] = {}
    for label, (content, cited) in planned.items():
        scopes.setdefault((agent_of or {}).get(label), []).append(
            Gem(
                kind="fact",
                content=content,
                summary=content,
                topics=[],
                importance=0.5,
                source_turn_ids=[str(turns[t]) for t in cited],
                occurred_at=AT,
            )
        )
    by_content: dict[str, uuid.UUID] = {}
    for agent, gems in scopes.items():  # one scope per call, as extraction stores them
        with unit_of_work(tenant, all_agents=True) as db:
            stored = store_gems(
                session=db,
                settings=settings,
                tenant_id=tenant,
                user_id=user,
                batch_id=uuid.uuid4(),
                extractor="test",
                gems=gems,
                vectors=embedder.embed([g.content for g in gems]),
                turn_scores={},
                session_of_turn={str(turns[k]): sessions[v[1]] for k, v in said.items()},
                agent_id=agent,
            )
            record_entities(session=db, tenant_id=tenant, user_id=user, memories=stored.created)
        by_content.update({gem.content: memory_id for memory_id, gem in stored.created})
    memories = {label: by_content[content] for label, (content, _) in planned.items()}
    assert len(memories) == 3
    return Trace(tenant, user, headers, sessions, turns, memories)


def _services(client: TestClient) -> tuple[redis.Redis, Embedder]:
    state = client.app.state.engram  # type: ignore[attr-defined]
    return state.redis, state.embedder


def owner_rows(sql: str, **params: Any) -> list[Any]:
    with owner_engine().connect() as connection:
        return list(connection.execute(text(sql), params))


def test_session_ids_reach_clients(client: TestClient, api_settings: Settings) -> None:
    trace = build_trace(*_services(client), api_settings)
    memory = client.get(
        f"/v1/memories/{trace.memories['only_a']}", params={"recall": 1}, headers=trace.headers
    ).json()
    assert memory["session_id"] == str(trace.sessions["a"])
    assert {t["session_id"] for t in memory["recall"]} == {str(trace.sessions["a"])}


def test_clearing_a_session_keeps_what_another_session_supports(
    client: TestClient, api_settings: Settings, rds: redis.Redis
) -> None:
    trace = build_trace(*_services(client), api_settings)
    path = f"/v1/users/{trace.user}/sessions/{trace.sessions['a']}"
    response = client.delete(path, headers=trace.headers)
    assert response.status_code == 200, response.text
    report = response.json()
    assert report["rows"]["turns"] == 2 and report["rows"]["sessions"] == 1
    assert report["rows"]["memories"] == 1
    assert report["deleted_memory_ids"] == [str(trace.memories["only_a"])]
    assert report["kept_memory_ids"] == [str(trace.memories["both"])]
    assert report["working_turns"] == 2

    assert not owner_rows(
        "SELECT 1 FROM episodic.turns WHERE session_id = :s", s=trace.sessions["a"]
    )
    assert not owner_rows("SELECT 1 FROM episodic.sessions WHERE id = :s", s=trace.sessions["a"])
    assert not owner_rows(
        "SELECT 1 FROM semantic.memories WHERE id = :m", m=trace.memories["only_a"]
    )
    assert not owner_rows(
        "SELECT 1 FROM conceptual.mentions WHERE memory_id = :m", m=trace.memories["only_a"]
    )
    # Oslo was named only by the deleted memory; Frank and Greta are still named.
    names = {
        r.canonical_name
        for r in owner_rows(
            "SELECT canonical_name FROM conceptual.entities WHERE user_id = :u", u=trace.user
        )
    }
    assert "oslo" not in names and {"frank", "greta"} <= names
    (kept,) = owner_rows(
        "SELECT source_turn_ids, session_id FROM semantic.memories WHERE id = :m",
        m=trace.memories["both"],
    )
    assert kept.source_turn_ids == [trace.turns["b0"]]
    assert kept.session_id == trace.sessions["b"]
    assert owner_rows("SELECT 1 FROM semantic.memories WHERE id = :m", m=trace.memories["only_b"])

    window = client.app.state.engram  # type: ignore[attr-defined]
    memory = WorkingMemoryStore(rds, window.settings).read(trace.tenant, trace.user)
    assert memory is not None
    assert [t.id for t in memory.turns] == [str(trace.turns["b0"])]
    assert memory.token_count == 8

    # Search no longer finds what only the cleared session said.
    hits = client.post(
        "/v1/search",
        json={"user_id": trace.user, "query": "Frank moved to Oslo", "unit": "memories"},
        headers=trace.headers,
    ).json()["hits"]
    assert str(trace.memories["only_a"]) not in [h["id"] for h in hits]

    # Clearing it again: the session is gone.
    assert client.delete(path, headers=trace.headers).status_code == 404


def test_clearing_refuses_unknown_foreign_and_bad_ids(
    client: TestClient, api_settings: Settings
) -> None:
    trace = build_trace(*_services(client), api_settings)
    session_a = trace.sessions["a"]
    stranger = {"Authorization": f"Bearer {mint_key('t-stranger-' + uuid.uuid4().hex[:8]).key}"}
    cases = [
        (f"/v1/users/{trace.user}/sessions/{uuid.uuid4()}", trace.headers, 404),
        (f"/v1/users/{trace.user}/sessions/{session_a}", stranger, 404),
        (f"/v1/users/someone-else/sessions/{session_a}", trace.headers, 404),
        (f"/v1/users/{trace.user}/sessions/not-a-uuid", trace.headers, 422),
        (f"/v1/users/bad%20user/sessions/{session_a}", trace.headers, 422),
    ]
    for path, headers, expected in cases:
        assert client.delete(path, headers=headers).status_code == expected, path
    assert owner_rows("SELECT 1 FROM episodic.sessions WHERE id = :s", s=session_a)


def test_deleting_a_memory_with_its_trace(client: TestClient, api_settings: Settings) -> None:
    trace = build_trace(*_services(client), api_settings)
    # `both` cites a1 (only it) and b0 (also cited by `only_b`): only a1 goes.
    response = client.delete(
        f"/v1/memories/{trace.memories['both']}",
        params={"with_trace": "true", "user_id": trace.user},
        headers=trace.headers,
    )
    assert response.status_code == 200, response.text
    assert response.json()["rows"]["turns"] == 1
    left = {
        r.id for r in owner_rows("SELECT id FROM episodic.turns WHERE user_id = :u", u=trace.user)
    }
    assert left == {trace.turns["a0"], trace.turns["b0"]}
    (count,) = owner_rows(
        "SELECT turn_count FROM episodic.sessions WHERE id = :s", s=trace.sessions["a"]
    )
    assert count.turn_count == 1
    # Without the flag the trace stays whole.
    kept = client.delete(f"/v1/memories/{trace.memories['only_a']}", headers=trace.headers)
    assert kept.json()["rows"]["turns"] == 0
    assert owner_rows("SELECT 1 FROM episodic.turns WHERE id = :t", t=trace.turns["a0"])


def test_clearing_a_session_reaches_every_agents_memories(
    client: TestClient, api_settings: Settings
) -> None:
    """Clearing is the user's: a caller naming no agent still removes an agent's private
    memory the session alone supports, and trims another agent's that cites it."""
    trace = build_trace(
        *_services(client), api_settings, agent_of={"only_a": "alpha", "both": "beta"}
    )
    scopes = {
        r.id: r.agent_id
        for r in owner_rows(
            "SELECT id, agent_id FROM semantic.memories WHERE user_id = :u", u=trace.user
        )
    }
    assert scopes == {
        trace.memories["only_a"]: "alpha",
        trace.memories["both"]: "beta",
        trace.memories["only_b"]: None,
    }
    # A caller without an agent does not see those private memories...
    hidden = client.get(f"/v1/memories/{trace.memories['only_a']}", headers=trace.headers)
    assert hidden.status_code == 404
    # ...yet clearing the session reaches them.
    response = client.delete(
        f"/v1/users/{trace.user}/sessions/{trace.sessions['a']}", headers=trace.headers
    )
    assert response.status_code == 200, response.text
    report = response.json()
    assert report["deleted_memory_ids"] == [str(trace.memories["only_a"])]
    assert report["kept_memory_ids"] == [str(trace.memories["both"])]
    assert report["rows"]["memories"] == 1
    assert not owner_rows(
        "SELECT 1 FROM semantic.memories WHERE id = :m", m=trace.memories["only_a"]
    )
    assert not owner_rows(
        "SELECT 1 FROM conceptual.mentions WHERE memory_id = :m", m=trace.memories["only_a"]
    )
    (kept,) = owner_rows(
        "SELECT source_turn_ids, session_id, agent_id FROM semantic.memories WHERE id = :m",
        m=trace.memories["both"],
    )
    assert kept.source_turn_ids == [trace.turns["b0"]]
    assert kept.session_id == trace.sessions["b"] and kept.agent_id == "beta"
    assert not owner_rows(
        "SELECT 1 FROM episodic.turns WHERE session_id = :s", s=trace.sessions["a"]
    )
