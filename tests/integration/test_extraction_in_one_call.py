"""A step given many batches does in one call what it did one batch at a time: the same
memories, sources, reinforcements, contradictions, agent scopes and entities; a user's two
batches still see each other; a bad batch fails alone."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import text

from app.config import Settings
from app.db.session import unit_of_work
from app.embedding.factory import get_embedder
from app.extraction.factory import get_extractor
from app.layers.semantic import batches as semantic
from app.services import extraction
from app.services.attention import score_users
from tests.integration.helpers import ingest_consumer

T0 = datetime(2026, 6, 1, 9, 0, tzinfo=UTC)
LINES = [
    "I prefer aisle seats on long flights.",
    "We decided to move the weekly review to Thursdays.",
    "Remind me to renew the TLS certificate by Friday.",
    "Bruno works at the Lisbon office and uses Postgres.",
    "ok thanks",
]
LATER = [
    "I now prefer window seats on long flights.",
    "We decided to move the weekly review to Thursdays.",  # the first batch's, again
    "Chiara manages the Kafka cluster in Porto.",
    "Remind me to renew the TLS certificate by Friday.",
    "My goal is to cut the Grafana bill by 20 percent this year.",
]


def _events(tenant: str) -> list[dict[str, Any]]:
    events = []
    for user in ("ana", "bo", "cy"):
        for n, line in enumerate(LINES + LATER):
            events.append(
                {
                    "type": "turn",
                    "tenant_id": tenant,
                    "user_id": user,
                    "role": "user",
                    "speaker": user.title(),
                    "content": line,
                    "external_id": f"{user}-{n}",
                    "channel": "web",
                    "timestamp": (T0 + timedelta(minutes=n)).isoformat(),
                    # cy's later turns are heard by an agent: its own scope
                    **({"agent_id": "helpdesk"} if user == "cy" and n >= len(LINES) else {}),
                }
            )
    return events


def _ingest(settings: Settings, redis_client: Any, tenant: str) -> None:
    from app.streams.producer import EventProducer

    consumer = ingest_consumer(redis_client, settings, name=f"c-{tenant}")
    EventProducer(redis_client, settings).send_many(_events(tenant))
    while consumer.step(block_ms=10):
        pass
    score_users(
        settings=settings,
        client=redis_client,
        embedder=get_embedder(settings, redis_client),
        tenant_id=tenant,
        user_ids=["ana", "bo", "cy"],
    )


def _claim_two_each(settings: Settings, tenant: str) -> list[extraction.BatchRef]:
    """Two batches per user (the first five turns, then the rest)."""
    small = settings.model_copy(update={"extract_max_batch_turns": 5, "extract_after_turns": 1})
    users = {"ana": "idle", "bo": "idle", "cy": "idle"}
    return extraction.claim(small, tenant, users) + extraction.claim(small, tenant, users)


def _state(tenant: str) -> dict[str, Any]:
    with unit_of_work(tenant, all_agents=True) as session:
        external = dict(
            session.execute(text("SELECT id::text, external_id FROM episodic.turns")).all()
        )
        memories = sorted(
            (
                r.user_id,
                r.agent_id or "",
                r.kind,
                r.content,
                tuple(sorted(external[str(t)] for t in r.source_turn_ids)),
                round(float(r.importance), 6),
                r.access_count,
                r.valid_to is not None,
                r.subject or "",
            )
            for r in session.execute(
                text(
                    "SELECT user_id, agent_id, kind, content, source_turn_ids, importance,"
                    " access_count, valid_to, subject FROM semantic.memories"
                )
            )
        )
        entities = sorted(
            tuple(r)
            for r in session.execute(
                text("SELECT user_id, canonical_name, kind, mention_count FROM conceptual.entities")
            )
        )
        mentions = session.execute(text("SELECT count(*) FROM conceptual.mentions")).scalar()
        relations = sorted(
            tuple(r)
            for r in session.execute(
                text(
                    "SELECT s.canonical_name, r.relation_type, t.canonical_name, r.mention_count"
                    " FROM conceptual.relations AS r"
                    " JOIN conceptual.entities AS s ON s.id = r.source_entity_id"
                    " JOIN conceptual.entities AS t ON t.id = r.target_entity_id"
                )
            )
        )
    return {"memories": memories, "entities": entities, "mentions": mentions, "rel": relations}


def test_many_batches_in_one_call_store_what_one_at_a_time_stores(
    settings: Settings, redis_client: Any
) -> None:
    embedder = get_embedder(settings, redis_client)
    extractor = get_extractor(settings)
    alone, together = f"t-{uuid.uuid4().hex[:10]}", f"t-{uuid.uuid4().hex[:10]}"
    for tenant in (alone, together):
        _ingest(settings, redis_client, tenant)

    for ref in _claim_two_each(settings, alone):
        extraction.extract(settings, extractor, [ref])
        extraction.embed(settings, embedder, [ref])
        assert extraction.store(settings, embedder, [ref]).done == 1

    refs = _claim_two_each(settings, together)
    assert len(refs) == 6
    assert extraction.extract(settings, extractor, refs).done == 6
    assert extraction.embed(settings, embedder, refs).done == 6
    report = extraction.store(settings, embedder, refs)
    assert (report.done, report.failed) == (6, 0)
    assert extraction.store(settings, embedder, refs).skipped == 6  # a redelivery: no-op

    expected = _state(alone)
    assert _state(together) == expected
    memories = expected["memories"]
    # The second batch's repeat reinforced the first's memory (both turns cited), the
    # changed preference closed the old one, and the agent's turns made their own memories.
    review = [m for m in memories if m[0] == "ana" and "weekly review" in m[3]]
    assert len(review) == 1 and review[0][4] == ("ana-1", "ana-6")
    assert sum(1 for m in memories if m[0] == "ana" and m[2] == "preference" and m[7]) == 1
    assert any(m[0] == "cy" and m[1] == "helpdesk" for m in memories)


def test_a_bad_batch_fails_alone(settings: Settings, redis_client: Any, tenant: str) -> None:
    embedder = get_embedder(settings, redis_client)
    _ingest(settings, redis_client, tenant)
    refs = extraction.claim(settings, tenant, {"ana": "idle", "bo": "idle", "cy": "idle"})
    extraction.extract(settings, get_extractor(settings), refs)
    extraction.embed(settings, embedder, refs)
    bad = uuid.UUID(refs[1][1])
    with unit_of_work(tenant) as session:  # gems that read, embed, then cannot be stored
        session.execute(
            text(
                "UPDATE semantic.extraction_batches SET gems = CAST(:gems AS jsonb) WHERE id = :id"
            ),
            {"id": bad, "gems": '[{"kind": "fact", "content": "Half a gem."}]'},
        )

    report = extraction.store(settings, embedder, refs)

    assert (report.done, report.failed) == (2, 1)
    with unit_of_work(tenant) as session:
        for _, batch_id in refs:
            row = semantic.get_batch(session=session, batch_id=uuid.UUID(batch_id))
            if row.id == bad:
                assert (row.state, row.attempts) == ("embedded", 1)
                assert row.error
            else:
                assert (row.state, row.attempts) == ("stored", 0)


def test_a_failure_charged_to_a_stored_batch_leaves_it_stored(
    settings: Settings, redis_client: Any, tenant: str
) -> None:
    """A redelivered call holds batches stored already; a failed read of the whole call
    must not park them as failed (their memories exist)."""
    embedder = get_embedder(settings, redis_client)
    _ingest(settings, redis_client, tenant)
    refs = extraction.claim(settings, tenant, {"ana": "idle", "bo": "idle", "cy": "idle"})
    extraction.extract(settings, get_extractor(settings), refs)
    extraction.embed(settings, embedder, refs)
    extraction.store(settings, embedder, refs)
    stored = uuid.UUID(refs[0][1])
    with unit_of_work(tenant) as session:
        for _ in range(3):
            semantic.record_failure(
                session=session, batch_id=stored, error="read failed", max_attempts=1
            )
    with unit_of_work(tenant) as session:
        row = semantic.get_batch(session=session, batch_id=stored)
    assert (row.state, row.attempts) == ("stored", 0)


def test_a_round_holds_one_batch_per_user_and_at_most_round_size() -> None:
    from types import SimpleNamespace

    from app.services.extraction_store import _rounds

    batches = [SimpleNamespace(user_id=f"u{n % 40}", n=n) for n in range(100)]
    rounds = _rounds(batches, size=32)
    assert sorted(b.n for r in rounds for b in r) == list(range(100))
    for r in rounds:
        assert len(r) <= 32
        assert len({b.user_id for b in r}) == len(r)
    order = {b.n: i for i, r in enumerate(rounds) for b in r}
    for n in range(60):  # a user's later batch is in a later round
        assert order[n] < order[n + 40]
