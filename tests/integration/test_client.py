"""The Python SDK (engram_memory_client) against the real API: a uvicorn server in this
process, real Postgres and Redis, real keys for two tenants, and an in-process ingest consumer
for events. tests/integration/test_sdk_installs_alone.py runs it from a venv of its own.

What the client does with answers a healthy server does not give on demand (503s, dropped
connections) is in tests/unit/test_sdk_retry_policy.py."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from engram_memory_client import (
    AsyncEngramClient,
    AuthenticationError,
    Context,
    EngramClient,
    EventsAccepted,
    Memory,
    NotFoundError,
    PayloadTooLargeError,
    SearchHit,
    SearchResults,
    ValidationError,
)

from app.config import Settings
from app.redis_client import get_redis
from app.services.ingest import IngestService
from app.services.tenants import mint_key
from app.streams.consumer import StreamConsumer
from tests.integration.api_server import prefixed, serve

MAX_BODY = 256 * 1024


@dataclass(frozen=True)
class Server:
    url: str
    key_a: str
    key_b: str
    tenant_a: str
    tenant_b: str


@pytest.fixture(scope="module")
def sdk_settings(base_settings: Settings) -> Iterator[Settings]:
    """Module-wide settings (one server for every test here), with their own Redis prefix."""
    with prefixed(
        base_settings,
        "sdk",
        consumer_block_ms=50,
        claim_min_idle_ms=200,
        api_max_body_bytes=MAX_BODY,
    ) as settings:
        yield settings


@pytest.fixture(scope="module")
def server(database: None, sdk_settings: Settings) -> Iterator[Server]:
    """The real app under uvicorn on a free localhost port, with a key for each of two tenants."""
    suffix = uuid.uuid4().hex[:8]
    tenant_a, tenant_b = f"t-sdk-a-{suffix}", f"t-sdk-b-{suffix}"
    with serve(sdk_settings) as url:
        yield Server(
            url=url,
            key_a=mint_key(tenant_a).key,
            key_b=mint_key(tenant_b).key,
            tenant_a=tenant_a,
            tenant_b=tenant_b,
        )


@pytest.fixture(scope="module")
def ingest(sdk_settings: Settings) -> Iterator[StreamConsumer]:
    """A stream consumer running the real ingest service, as a worker's consumer thread does."""
    client = get_redis(sdk_settings)
    consumer = StreamConsumer(
        client=client,
        settings=sdk_settings,
        handler=IngestService(client=client, settings=sdk_settings),
        name=f"sdk-{uuid.uuid4().hex[:6]}",
    )
    stop = threading.Event()
    thread = threading.Thread(target=consumer.run, args=(stop,), daemon=True)
    thread.start()
    try:
        yield consumer
    finally:
        stop.set()
        thread.join(timeout=30)


@pytest.fixture
def engram(server: Server) -> Iterator[EngramClient]:
    with EngramClient(server.url, server.key_a, backoff=0.05) as client:
        yield client


@pytest.fixture
def other(server: Server) -> Iterator[EngramClient]:
    with EngramClient(server.url, server.key_b, backoff=0.05) as client:
        yield client


@pytest.fixture
def user() -> str:
    return f"u-{uuid.uuid4().hex[:8]}"


def test_health(engram: EngramClient) -> None:
    health = engram.health()
    assert health.ok
    assert health.checks == {"database": "ok", "schema": "ok", "redis": "ok"}


def test_remember_search_and_get_memory(
    engram: EngramClient, other: EngramClient, user: str
) -> None:
    stored = engram.remember(
        user,
        [
            {"content": "Alice's favourite database is PostgreSQL", "tags": ["prefs"]},
            "Alice lives in Lisbon, near the river",
        ],
    )
    assert [s.status for s in stored] == ["created", "created"]
    assert all(isinstance(s.id, uuid.UUID) for s in stored)

    results = engram.search(user, "Which database does Alice like?")
    assert isinstance(results, SearchResults)
    top = results.hits[0]
    assert isinstance(top, SearchHit)
    assert top.id == stored[0].id
    assert top.layer == "memory"
    assert top.content == "Alice's favourite database is PostgreSQL"
    assert "prefs" in top.tags
    assert isinstance(top.occurred_at, datetime)
    assert {"fused", "prior", "memory_dense"} <= set(top.parts)
    assert all(isinstance(v, float) for v in top.parts.values())
    assert engram.search(user, "Which database?", tags=["nope"]).hits == []

    memory = engram.get_memory(stored[1].id)
    assert isinstance(memory, Memory)
    assert memory.content == "Alice lives in Lisbon, near the river"
    assert memory.user_id == user
    assert memory.recall is None
    assert engram.get_memory(str(stored[1].id), recall=2).recall == []

    with pytest.raises(NotFoundError) as unknown:
        engram.get_memory(uuid.uuid4())
    assert unknown.value.status == 404
    with pytest.raises(NotFoundError):  # another tenant's memory does not exist for this key
        other.get_memory(stored[0].id)
    assert other.search(user, "Which database does Alice like?").hits == []


def test_wrong_key_is_an_authentication_error(server: Server) -> None:
    with (
        EngramClient(server.url, "egk_00000000_not-a-real-key") as client,
        pytest.raises(AuthenticationError) as refused,
    ):
        client.stats()
    assert refused.value.status == 401
    assert "invalid" in refused.value.message


def test_validation_errors_name_the_fields(engram: EngramClient, user: str) -> None:
    with pytest.raises(ValidationError) as empty:
        engram.search(user, "")
    assert empty.value.status == 422
    assert empty.value.fields == ["query"]

    with pytest.raises(ValidationError) as bad_user:
        engram.list_memories("no spaces allowed")
    assert bad_user.value.fields == ["user_id"]

    with pytest.raises(ValidationError) as foreign:
        engram.send_events(
            [{"type": "turn", "tenant_id": "someone-else", "user_id": user, "content": "x"}]
        )
    assert foreign.value.fields == ["events[0].tenant_id"]


def test_too_large_a_body(engram: EngramClient, user: str) -> None:
    with pytest.raises(PayloadTooLargeError) as refused:
        engram.add_turn(user, "x" * (MAX_BODY + 1), external_id="big")
    assert refused.value.status == 413


def test_list_memories_pages_and_iterates(engram: EngramClient, user: str) -> None:
    facts = [
        "Dana's sister is called Maria and lives in Porto",
        "Dana runs the Berlin marathon every September",
        "Dana is allergic to peanuts",
        "Dana's laptop is a ThinkPad X1 Carbon",
        "Dana plays the cello in a community orchestra",
        "Dana's favourite film is Spirited Away",
        "Dana drives a blue 2015 Volvo estate",
    ]
    start = datetime(2025, 6, 1, tzinfo=UTC)
    stored = engram.remember(
        user,
        [{"content": f, "occurred_at": start + timedelta(days=i)} for i, f in enumerate(facts)],
    )
    assert [s.status for s in stored] == ["created"] * len(facts)
    newest_first = list(reversed(facts))

    first = engram.list_memories(user, limit=3)
    assert [m.content for m in first.memories] == newest_first[:3]
    assert first.next_cursor is not None
    second = engram.list_memories(user, limit=3, cursor=first.next_cursor)
    assert [m.content for m in second.memories] == newest_first[3:6]
    assert second.next_cursor is not None
    third = engram.list_memories(user, limit=3, cursor=second.next_cursor)
    assert [m.content for m in third.memories] == newest_first[6:]
    assert third.next_cursor is None

    assert [m.content for m in engram.iter_memories(user, page_size=3)] == newest_first
    assert [m.id for m in engram.iter_memories(user, page_size=3)] == [
        s.id for s in reversed(stored)
    ]
    with pytest.raises(ValidationError) as bad:
        engram.list_memories(user, cursor="not-a-cursor")
    assert bad.value.fields == ["cursor"]


def test_sent_turns_become_searchable_once_ingested(
    engram: EngramClient, ingest: StreamConsumer, user: str
) -> None:
    receipt = engram.add_turn(
        user,
        "The staging database password rotates every Tuesday at noon",
        external_id="m-1",
        speaker="Bob",
    )
    assert isinstance(receipt, EventsAccepted)
    assert receipt.accepted == 1
    batch = engram.send_events(
        [
            {
                "type": "turn",
                "user_id": user,
                "role": "assistant",
                "content": "Noted: I will remind you about the rotation on Tuesdays",
                "external_id": "m-2",
            },
            {"type": "typing_start", "user_id": user},
        ]
    )
    assert batch.accepted == 2
    again = engram.add_turn(
        user,
        "The staging database password rotates every Tuesday at noon",
        external_id="m-1",
        speaker="Bob",
    )
    assert again.ids == receipt.ids  # the id derives from external_id: a re-send is harmless

    found = engram.wait_until_indexed(user, external_ids=["m-1", "m-2"], timeout=60)
    assert {e for h in found for e in h.source_turn_ids} >= {"m-1", "m-2"}

    hits = engram.search(user, "when does the staging password rotate?").hits
    turn = next(h for h in hits if "m-1" in h.source_turn_ids)
    assert turn.layer == "turn"
    assert turn.kind == "turn"
    assert turn.id == receipt.ids[0]
    assert turn.role == "user"
    assert turn.speaker == "Bob"
    assert turn.channel == "default"
    assert "turn_lexical" in turn.parts

    with pytest.raises(TimeoutError, match="never-sent"):
        engram.wait_until_indexed(
            user, query="staging password", external_ids=["never-sent"], timeout=0.5
        )
    with pytest.raises(ValueError, match="did not send"):
        engram.wait_until_indexed(user, external_ids=["unknown"], timeout=0.5)


def test_forget_user_removes_everything(
    engram: EngramClient, ingest: StreamConsumer, user: str
) -> None:
    engram.remember(user, ["Carol keeps her passport in the blue drawer"])
    engram.add_turn(user, "My passport expires in March next year", external_id="c-1")
    engram.wait_until_indexed(user, external_ids=["c-1"], timeout=60)
    assert engram.search(user, "passport").hits

    report = engram.forget_user(user)
    assert report.rows["semantic.memories"] == 1
    assert report.rows["episodic.turns"] == 1
    assert report.redis_keys > 0
    assert report.total == sum(report.rows.values()) + report.redis_keys
    assert engram.search(user, "passport").hits == []
    assert list(engram.iter_memories(user)) == []


def test_procedures_graph_and_stats(engram: EngramClient, user: str) -> None:
    steps = [{"tool": "git.pull", "args": {"branch": "main"}}, "kubectl.apply"]
    first = engram.record_procedure(user, "deploy the web app to staging", steps, 1.0, 1200)
    assert first.created
    assert first.executions == 1
    second = engram.record_procedure(user, "deploy the web app to staging", steps, 1.0, 800)
    assert not second.created
    assert second.id == first.id
    assert second.executions == 2
    suggestion = engram.suggest_procedure(user, "deploy the web app to staging")
    assert suggestion is not None
    assert suggestion.procedure_id == first.id
    assert suggestion.tool_sequence == [steps[0], {"tool": "kubectl.apply"}]
    assert suggestion.score > 0.7
    assert engram.suggest_procedure(f"{user}-x", "deploy the web app to staging") is None

    with pytest.raises(NotFoundError):
        engram.entity_graph(user, "Nobody Known")

    engram.remember(user, ["Erin works at Acme Corp", "Erin uses PostgreSQL at Acme Corp"])
    graph = engram.entity_graph(user, "erin")
    assert graph.entity.name == "Erin"
    assert {e.fact for e in graph.edges} == {"Erin —uses→ PostgreSQL", "Erin —works at→ Acme Corp"}
    near = engram.entity_graph(user, "Acme Corp", depth=1)
    assert [(e.source, e.relation, e.target, e.depth) for e in near.edges] == [
        ("Erin", "works_at", "Acme Corp", 1)
    ]
    stats = engram.stats()
    assert stats.current_memories >= 2
    assert stats.rows["semantic.memories"] >= 2
    assert stats.users >= 1


def test_entity_names_with_a_slash(engram: EngramClient, user: str) -> None:
    engram.remember(user, ["Erin uses CI/CD at Acme"])
    assert "Erin —uses→ ci/cd" in {e.fact for e in engram.entity_graph(user, "Erin").edges}
    assert engram.entity_graph(user, "ci/cd").entity.name == "ci/cd"


def test_async_client_remembers_searches_and_builds_context(server: Server, user: str) -> None:
    async def scenario() -> tuple[list[uuid.UUID], SearchResults, Context, int]:
        async with AsyncEngramClient(server.url, server.key_a, backoff=0.05) as engram:
            stored = await engram.remember(
                user, ["Frank is training for a triathlon in Nice", "Frank hates cilantro"]
            )
            results = await engram.search(user, "what sport is Frank training for?")
            context = await engram.context(
                user, "what sport is Frank training for?", token_budget=400
            )
            listed = [m async for m in engram.iter_memories(user, page_size=1)]
            return [s.id for s in stored], results, context, len(listed)

    ids, results, context, listed = asyncio.run(scenario())
    assert results.hits[0].id == ids[0]
    assert results.hits[0].layer == "memory"
    assert isinstance(context, Context)
    assert "Frank is training for a triathlon in Nice" in context.text
    assert 0 < context.tokens <= context.token_budget == 400
    assert listed == 2
