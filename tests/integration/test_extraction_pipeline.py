"""Turns become memories: triggers extract exactly once, gems keep their exact sources,
duplicates reinforce, contradictions supersede, entity variants resolve to one entity."""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from app.config import Settings
from app.db.session import unit_of_work
from app.embedding.factory import get_embedder
from app.extraction.factory import get_extractor
from app.layers.episodic import attention as episodic_attention
from app.layers.semantic import batches as semantic
from app.layers.working.store import WorkingMemoryStore
from app.services import extraction
from app.services.attention import score_users
from app.services.ingest import IngestService
from app.streams.consumer import StreamConsumer
from app.streams.producer import EventProducer
from tests.integration.helpers import ingest_consumer

T0 = datetime(2026, 5, 4, 9, 0, tzinfo=UTC)


def say(tenant: str, user: str, n: int, content: str, role: str = "user") -> dict[str, Any]:
    return {
        "type": "turn",
        "tenant_id": tenant,
        "user_id": user,
        "role": role,
        "speaker": user.title() if role == "user" else "Assistant",
        "content": content,
        "external_id": f"{user}-{n}",
        "channel": "web",
        "timestamp": (T0 + timedelta(minutes=n)).isoformat(),
    }


@pytest.fixture
def pipeline(settings: Settings, redis_client):  # type: ignore[no-untyped-def]
    """Ingest events in process and return helpers to score, trigger and run batches."""
    consumer = ingest_consumer(redis_client, settings, name="test")
    embedder = get_embedder(settings, redis_client)
    extractor = get_extractor(settings)

    class Pipeline:
        cached = embedder  # the CachedEmbedder every step shares: its misses are model calls

        def ingest(self, events: list[dict[str, Any]], *, score: bool = True) -> None:
            """Ingest and (as the consumer's dispatch does) score the events' users."""
            EventProducer(redis_client, settings).send_many(events)
            while consumer.step(block_ms=10):
                pass
            if score:
                for tenant_id in {e["tenant_id"] for e in events}:
                    users = sorted({e["user_id"] for e in events if e["tenant_id"] == tenant_id})
                    self.score(tenant_id, users)

        def score(self, tenant: str, users: list[str]) -> None:
            score_users(
                settings=settings,
                client=redis_client,
                embedder=embedder,
                tenant_id=tenant,
                user_ids=users,
            )

        def due(self, tenant: str, users: list[str]) -> dict[str, str]:
            store = WorkingMemoryStore(redis_client, settings)
            return extraction.due_triggers(settings, store, tenant, users)

        def run(self, refs: list[extraction.BatchRef]) -> None:
            extraction.extract(settings, extractor, refs)
            extraction.embed(settings, embedder, refs)
            report = extraction.store(settings, embedder, refs)
            assert report.failed == 0

    return Pipeline()


def _memories(tenant: str) -> list[Any]:
    with unit_of_work(tenant) as session:
        return list(
            session.execute(
                text(
                    "SELECT id, kind, content, source_turn_ids, valid_to, superseded_by,"
                    " importance, subject, value FROM semantic.memories ORDER BY occurred_at"
                )
            )
        )


def _turn_ids(tenant: str) -> dict[str, str]:
    with unit_of_work(tenant) as session:
        rows = session.execute(text("SELECT external_id, id FROM episodic.turns"))
        return {r[0]: str(r[1]) for r in rows}


def test_n_turns_trigger_extracts_once_with_exact_sources(
    settings: Settings, pipeline, tenant: str
) -> None:
    lines = [
        "Morning!",
        "We decided to move the weekly review to Thursdays.",
        "ok thanks",
        "Remind me to renew the TLS certificate by Friday.",
        "I prefer aisle seats on long flights.",
    ]
    pipeline.ingest([say(tenant, "ana", n, line) for n, line in enumerate(lines)])
    pipeline.score(tenant, ["ana"])
    assert pipeline.due(tenant, ["ana"]) == {"ana": "turns"}
    refs = extraction.claim(settings, tenant, {"ana": "turns"})
    assert len(refs) == 1
    pipeline.run(refs)
    pipeline.run(refs)  # a redelivered chain changes nothing

    ids = _turn_ids(tenant)
    memories = _memories(tenant)
    by_kind = {m.kind: m for m in memories}
    assert {"decision", "todo", "preference"} <= set(by_kind)
    assert [str(t) for t in by_kind["decision"].source_turn_ids] == [ids["ana-1"]]
    assert [str(t) for t in by_kind["todo"].source_turn_ids] == [ids["ana-3"]]
    assert [str(t) for t in by_kind["preference"].source_turn_ids] == [ids["ana-4"]]
    assert len(memories) == len({m.content for m in memories})
    # Nothing is left to claim: a second trigger finds no turns.
    assert extraction.claim(settings, tenant, {"ana": "idle"}) == []
    assert pipeline.due(tenant, ["ana"]) == {}


def test_racing_triggers_claim_each_turn_once(settings: Settings, pipeline, tenant: str) -> None:
    pipeline.ingest(
        [say(tenant, "ben", n, f"Fact number {n} about the data lake.") for n in range(60)]
    )
    small = settings.model_copy(update={"extract_max_batch_turns": 7})
    refs: list[extraction.BatchRef] = []
    lock = threading.Lock()

    def fire(trigger: str) -> None:
        while True:
            got = extraction.claim(small, tenant, {"ben": trigger})
            if not got:
                return
            with lock:
                refs.extend(got)

    threads = [threading.Thread(target=fire, args=(t,)) for t in ("turns", "idle", "context")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    with unit_of_work(tenant) as session:
        claims = session.execute(
            text("SELECT extraction_batch_id, count(*) FROM episodic.turns GROUP BY 1")
        ).all()
        sizes = dict(
            session.execute(text("SELECT id, turn_count FROM semantic.extraction_batches")).all()
        )
    assert all(batch is not None for batch, _ in claims)
    assert sum(n for _, n in claims) == 60
    assert {str(b) for b, _ in claims} == {b for _, b in refs}
    assert sorted(sizes.values()) == sorted(n for _, n in claims)


def test_context_usage_trigger_fires_before_n_turns(
    settings: Settings, redis_client, tenant: str
) -> None:
    tight = settings.model_copy(update={"context_window_tokens": 100})
    consumer = StreamConsumer(
        client=redis_client,
        settings=tight,
        handler=IngestService(client=redis_client, settings=tight),
        name="t",
    )
    consumer.ensure_groups()
    long_turn = "We reviewed the incident report and the rollback plan in detail. " * 6
    EventProducer(redis_client, tight).send(say(tenant, "cy", 0, long_turn))
    while consumer.step(block_ms=10):
        pass
    embedder = get_embedder(tight, redis_client)
    score_users(
        settings=tight, client=redis_client, embedder=embedder, tenant_id=tenant, user_ids=["cy"]
    )
    store = WorkingMemoryStore(redis_client, tight)
    assert extraction.due_triggers(tight, store, tenant, ["cy"]) == {"cy": "context"}


def test_idle_trigger_claims_leftovers(settings: Settings, pipeline, tenant: str) -> None:
    pipeline.ingest([say(tenant, "dee", 0, "We agreed to ship the beta on 2026-06-01.")])
    assert pipeline.due(tenant, ["dee"]) == {}
    assert extraction.idle_batches(settings) == [] or all(
        t != tenant for t, _ in extraction.idle_batches(settings)
    )
    later = datetime.now(UTC) + timedelta(seconds=settings.extract_idle_s + 1)
    refs = [ref for ref in extraction.idle_batches(settings, now=later) if ref[0] == tenant]
    assert len(refs) == 1
    pipeline.run(refs)
    assert any("beta" in m.content for m in _memories(tenant))


def test_repeated_statement_reinforces_instead_of_duplicating(
    settings: Settings, pipeline, tenant: str
) -> None:
    pipeline.ingest(
        [say(tenant, "eve", 0, "We decided to use Terraform for all new infrastructure.")]
    )
    pipeline.run(extraction.claim(settings, tenant, {"eve": "idle"}))
    first = [m for m in _memories(tenant) if m.kind == "decision"]
    assert len(first) == 1

    pipeline.ingest(
        [say(tenant, "eve", 9, "We decided to use Terraform for all new infrastructure!")]
    )
    pipeline.run(extraction.claim(settings, tenant, {"eve": "idle"}))
    again = [m for m in _memories(tenant) if m.kind == "decision"]
    assert len(again) == 1
    assert again[0].importance > first[0].importance
    assert len(again[0].source_turn_ids) == 2


def test_a_one_sentence_turn_costs_one_model_call_for_novelty_and_memory(
    settings: Settings, pipeline, tenant: str
) -> None:
    said = f"I prefer aisle seats on the {tenant} charter flights."
    pipeline.cached.reset_stats()
    pipeline.ingest([say(tenant, "fay", 0, said)])
    assert pipeline.cached.misses == 1  # novelty embedded the turn
    pipeline.run(extraction.claim(settings, tenant, {"fay": "idle"}))
    assert pipeline.cached.misses == 1  # the memory reused that vector

    with unit_of_work(tenant) as session:
        content, original, stored = session.execute(
            text("SELECT content, original, embedding::text FROM semantic.memories")
        ).one()
    assert content.startswith("Fay prefers aisle seats") and original == said
    vector = [float(x) for x in stored.strip("[]").split(",")]
    expected = pipeline.cached.embed([f"Fay: {said}"])[0]  # the turn's key: speaker, sentence
    assert sum(a * b for a, b in zip(vector, expected, strict=True)) > 0.9999


def test_a_joined_run_of_sentences_costs_no_model_call_beyond_the_turns_passages(
    settings: Settings, pipeline, tenant: str
) -> None:
    sentences = [
        f"The {tenant} office moved to a brick building near the harbour.",
        "The new kitchen there has a huge espresso machine.",
        "Parking behind the building costs twelve euros a day.",
    ]
    pipeline.cached.reset_stats()
    pipeline.ingest([say(tenant, "gus", 0, " ".join(sentences))])
    assert pipeline.cached.misses == 3  # novelty embedded the turn's passages, one a sentence
    pipeline.run(extraction.claim(settings, tenant, {"gus": "idle"}))
    assert pipeline.cached.misses == 3  # the joined memory's vector is made of those

    with unit_of_work(tenant) as session:
        content, stored = session.execute(
            text("SELECT content, embedding::text FROM semantic.memories")
        ).one()
    assert "espresso" in content and "Parking" in content  # one memory for the run
    vector = [float(x) for x in stored.strip("[]").split(",")]
    parts = pipeline.cached.embed([f"Gus: {s}" for s in sentences])
    mean = [sum(values) for values in zip(*parts, strict=True)]
    norm = sum(x * x for x in mean) ** 0.5
    assert sum(a * b / norm for a, b in zip(vector, mean, strict=True)) > 0.9999


def test_batches_of_one_user_stored_together_neither_deadlock_nor_duplicate(
    settings: Settings, pipeline, tenant: str
) -> None:
    facts = [
        f"The {name} service runs on {tenant} cluster {n}."
        for n, name in enumerate(
            ["billing", "search", "ingest", "auth", "email", "maps", "chat", "media"]
        )
    ]
    # Four batches with the same eight sentences, each in another order: stored at once,
    # their inserts of the same texts cross, which deadlocked before stores took the user lock.
    turns = [facts[(n + shift) % 8] for shift in (0, 3, 5, 6) for n in range(8)]
    pipeline.ingest([say(tenant, "gus", n, line) for n, line in enumerate(turns)])
    small = settings.model_copy(update={"extract_max_batch_turns": 8})
    refs = extraction.claim(small, tenant, {"gus": "turns"})
    while more := extraction.claim(small, tenant, {"gus": "turns"}):
        refs += more
    assert len(refs) == 4
    extraction.extract(settings, get_extractor(settings), refs)
    extraction.embed(settings, pipeline.cached, refs)

    reports: list[extraction.StepReport] = []
    start = threading.Barrier(len(refs))

    def store(ref: extraction.BatchRef) -> None:
        start.wait()
        reports.append(extraction.store(settings, pipeline.cached, [ref]))

    threads = [threading.Thread(target=store, args=(ref,)) for ref in refs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sum(r.failed for r in reports) == 0 and sum(r.done for r in reports) == 4
    memories = _memories(tenant)
    assert sorted(m.content for m in memories) == sorted(facts)
    assert all(len(m.source_turn_ids) == 4 for m in memories)


def test_statements_that_differ_in_a_number_stay_two_memories(
    settings: Settings, pipeline, tenant: str
) -> None:
    said = "Remind me to send Bruno the offsite budget of {} euros by Friday."
    for n, amount in enumerate(("4372", "20092")):
        pipeline.ingest([say(tenant, "hal", n, said.format(amount))])
        pipeline.run(extraction.claim(settings, tenant, {"hal": "idle"}))
    todos = sorted(m.content for m in _memories(tenant) if m.kind == "todo")
    assert len(todos) == 2
    assert "20092 euros" in todos[0] and "4372 euros" in todos[1]


def test_a_late_duplicate_embed_step_never_moves_a_stored_batch_back(
    settings: Settings, pipeline, tenant: str
) -> None:
    pipeline.ingest([say(tenant, "ivy", 0, "We decided to archive the 2019 invoices.")])
    refs = extraction.claim(settings, tenant, {"ivy": "idle"})
    pipeline.run(refs)
    batch_id = uuid.UUID(refs[0][1])
    # What a redelivered embed step that read the batch before the store does next:
    with unit_of_work(tenant) as session:
        semantic.advance_batch(
            session=session, batch_id=batch_id, state="embedded", only_from=("extracted",)
        )
    with unit_of_work(tenant) as session:
        assert semantic.get_batch(session=session, batch_id=batch_id).state == "stored"
    pipeline.run(refs)  # and a redelivered chain still changes nothing
    assert len(_memories(tenant)) == 1


def test_changed_preference_supersedes_the_old_one(
    settings: Settings, pipeline, tenant: str
) -> None:
    pipeline.ingest([say(tenant, "fay", 0, "I prefer aisle seats on long flights.")])
    pipeline.run(extraction.claim(settings, tenant, {"fay": "idle"}))
    pipeline.ingest([say(tenant, "fay", 60, "I now prefer window seats on long flights.")])
    pipeline.run(extraction.claim(settings, tenant, {"fay": "idle"}))

    prefs = [m for m in _memories(tenant) if m.kind == "preference"]
    assert len(prefs) == 2
    old, new = prefs
    assert old.subject == new.subject and old.value != new.value
    assert old.valid_to is not None and old.superseded_by == new.id
    assert new.valid_to is None


def test_entity_variants_resolve_to_one_entity(settings: Settings, pipeline, tenant: str) -> None:
    pipeline.ingest(
        [
            say(tenant, "gus", 0, "We use Postgres for the billing data."),
            say(tenant, "gus", 1, "The PostgreSQL cluster lags during the nightly batch."),
            say(tenant, "gus", 2, "Our postgresql replicas are in Frankfurt."),
        ]
    )
    pipeline.run(extraction.claim(settings, tenant, {"gus": "idle"}))
    with unit_of_work(tenant) as session:
        rows = session.execute(
            text("SELECT canonical_name, mention_count FROM conceptual.entities")
        ).all()
        mentions = session.execute(
            text(
                "SELECT count(*) FROM conceptual.mentions AS m JOIN conceptual.entities AS e"
                " ON e.id = m.entity_id WHERE e.canonical_name = 'postgresql'"
                " AND m.turn_id IS NOT NULL AND m.memory_id IS NOT NULL"
            )
        ).scalar_one()
    counts = dict(rows)
    assert "postgresql" in counts
    assert not {"postgres", "postgre sql"} & set(counts)
    assert counts["postgresql"] == mentions >= 2


def test_emotional_goal_turn_outscores_small_talk(
    settings: Settings, pipeline, tenant: str
) -> None:
    pipeline.ingest(
        [
            say(tenant, "hal", 0, "ok, sounds good"),
            say(tenant, "hal", 5, "I'm really worried I'll miss the deadline for my promotion!"),
        ],
        score=False,
    )
    pipeline.score(tenant, ["hal"])
    with unit_of_work(tenant) as session:
        scores = dict(
            session.execute(text("SELECT external_id, salience FROM episodic.turns")).all()
        )
        again = episodic_attention.lock_unscored(
            session=session, tenant_id=tenant, user_ids=["hal"], limit=10
        )
    assert scores["hal-5"] > scores["hal-0"]
    assert again == []  # scored turns are not scored twice


def test_tenants_and_users_never_share_memories(settings: Settings, pipeline, tenant: str) -> None:
    other = f"t-{uuid.uuid4().hex[:10]}"
    pipeline.ingest([say(tenant, "ivy", 0, "I prefer green tea in the morning.")])
    pipeline.ingest([say(other, "ivy", 0, "I prefer green tea in the morning.")])
    pipeline.run(extraction.claim(settings, tenant, {"ivy": "idle"}))
    pipeline.run(extraction.claim(settings, other, {"ivy": "idle"}))
    assert len(_memories(tenant)) == 1
    assert len(_memories(other)) == 1
    assert _memories(tenant)[0].id != _memories(other)[0].id


def test_a_failing_batch_records_its_error_and_does_not_block_others(
    settings: Settings, pipeline, tenant: str
) -> None:
    """A backend that is down fails one user's batch; beat's retry finishes it later."""
    pipeline.ingest(
        [
            say(tenant, "jo", 0, "We decided to rotate the on-call every Monday."),
            say(tenant, "kim", 0, "We decided to freeze deploys during the audit."),
        ]
    )
    refs = extraction.claim(settings, tenant, {"jo": "idle", "kim": "idle"})
    offline = get_extractor(settings)

    class DownForJo:
        name = "flaky"

        def extract(self, *, batch, context):  # type: ignore[no-untyped-def]
            if batch and batch[0].external_id.startswith("jo-"):
                raise ConnectionError("extraction backend unreachable")
            return offline.extract(batch=batch, context=context)

    report = extraction.extract(settings, DownForJo(), refs)
    assert (report.done, report.failed) == (1, 1)
    with unit_of_work(tenant) as session:
        states = dict(
            session.execute(
                text(
                    "SELECT user_id, state || ':' || attempts || ':' || coalesce(error, '')"
                    " FROM semantic.extraction_batches"
                )
            ).all()
        )
    assert states["kim"].startswith("extracted:0")
    # An outage is recorded but counts no attempt: it never parks the batch for an operator.
    assert states["jo"].startswith("claimed:0:ConnectionError: extraction backend unreachable")

    later = datetime.now(UTC) + timedelta(seconds=settings.extract_retry_after_s + 1)
    retry = [r for r in extraction.stale_batches(settings, now=later) if r[0] == tenant]
    assert len(retry) == 2  # jo's failed batch, and kim's, which has not been stored yet
    pipeline.run(retry)
    with unit_of_work(tenant) as session:
        stored = session.execute(
            text("SELECT count(*) FROM semantic.extraction_batches WHERE state = 'stored'")
        ).scalar_one()
    assert stored == 2
    assert {m.kind for m in _memories(tenant)} == {"decision"}


def test_turns_whose_scoring_was_lost_are_found_by_the_sweep(
    settings: Settings, pipeline, tenant: str
) -> None:
    pipeline.ingest(
        [say(tenant, "lou", 0, "We agreed to archive the old dashboards.")], score=False
    )
    assert extraction.claim(settings, tenant, {"lou": "idle"}) == []  # unscored: not claimed
    later = datetime.now(UTC) + timedelta(minutes=5)
    assert extraction.unscored_users(tenant, now=later) == ["lou"]
    pipeline.score(tenant, ["lou"])
    assert extraction.unscored_users(tenant, now=later) == []
