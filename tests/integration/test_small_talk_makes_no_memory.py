"""Small talk makes no memory through the real pipeline (ingest → score → claim → extract →
embed → store, real Postgres and Redis), and a repeated line never becomes one memory that
cites dozens of turns (app/layers/semantic/service.py)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from app.config import Settings
from app.db.session import unit_of_work
from app.embedding.factory import get_embedder
from app.extraction.base import Gem
from app.extraction.factory import get_extractor
from app.layers.semantic.service import MAX_SOURCE_TURNS, store_gems
from app.services import extraction
from app.services.attention import score_users
from app.services.dream import run_dream
from app.streams.producer import EventProducer
from tests.integration.helpers import ingest_consumer

T0 = datetime(2026, 5, 4, 9, 0, tzinfo=UTC)


def say(tenant: str, user: str, n: int, content: str, role: str = "user") -> dict[str, Any]:
    return {
        "type": "turn",
        "tenant_id": tenant,
        "user_id": user,
        "role": role,
        "speaker": "Sam" if role == "user" else "Melanie",
        "content": content,
        "external_id": f"{user}-{n}",
        "channel": "chat",
        "timestamp": (T0 + timedelta(minutes=n)).isoformat(),
    }


@pytest.fixture
def pipeline(settings: Settings, redis_client):  # type: ignore[no-untyped-def]
    consumer = ingest_consumer(redis_client, settings, name="test")
    embedder = get_embedder(settings, redis_client)
    extractor = get_extractor(settings)

    class Pipeline:
        embed = embedder

        def ingest_and_store(
            self, tenant: str, user: str, events: list[dict[str, Any]], batch_turns: int = 200
        ) -> None:
            """Ingest, score, then claim and run batches of `batch_turns` until none is left."""
            claims = settings.model_copy(
                update={"extract_max_batch_turns": batch_turns, "extract_after_turns": 1}
            )
            EventProducer(redis_client, settings).send_many(events)
            while consumer.step(block_ms=10):
                pass
            score_users(
                settings=settings,
                client=redis_client,
                embedder=embedder,
                tenant_id=tenant,
                user_ids=[user],
            )
            while refs := extraction.claim(claims, tenant, {user: "idle"}):
                extraction.extract(settings, extractor, refs)
                extraction.embed(settings, embedder, refs)
                assert extraction.store(settings, embedder, refs).failed == 0

    return Pipeline()


def _memories(tenant: str) -> list[Any]:
    with unit_of_work(tenant) as session:
        return list(
            session.execute(
                text(
                    "SELECT id, content, source_turn_ids FROM semantic.memories"
                    " ORDER BY occurred_at"
                )
            )
        )


def _turn_ids(tenant: str) -> dict[str, str]:
    with unit_of_work(tenant) as session:
        return {
            r[0]: str(r[1])
            for r in session.execute(text("SELECT external_id, id FROM episodic.turns"))
        }


def test_a_batch_of_small_talk_stores_only_its_content_turn(
    settings: Settings, pipeline, tenant: str
) -> None:
    lines = [
        ("Long time no talk, Melanie! 😊", "user"),
        ("Hey Sam!! How are you?", "assistant"),
        ("Thanks so much for asking, haha", "user"),
        ("Wow, fantastic, Sam!", "assistant"),
        ("Thanks! I finally adopted a dog named Biscuit.", "user"),
    ]
    events = [say(tenant, "sam", n, line, role) for n, (line, role) in enumerate(lines)]
    pipeline.ingest_and_store(tenant, "sam", events)

    memories = _memories(tenant)
    ids = _turn_ids(tenant)
    assert [m.content for m in memories] == ["Sam finally adopted a dog named Biscuit."]
    assert [str(t) for t in memories[0].source_turn_ids] == [ids["sam-4"]]


def test_repeated_thanks_never_become_one_memory_citing_many_turns(
    settings: Settings, pipeline, tenant: str
) -> None:
    thanks = ["Thanks!", "Thanks, Melanie!", "thank you!!", "Thanks Melanie 🙏", "ty!"]
    events = [say(tenant, "sam", n, thanks[n % len(thanks)]) for n in range(30)]
    # The same fact, said again and again across batches: one memory, a bounded source list.
    events += [say(tenant, "sam", 30 + n, "The cabin sits on a lake in Maine.") for n in range(12)]
    pipeline.ingest_and_store(tenant, "sam", events, batch_turns=5)  # like a long chat

    memories = _memories(tenant)
    assert not any("thank" in m.content.lower() for m in memories)
    assert [m.content for m in memories] == ["The cabin sits on a lake in Maine."]
    ids = _turn_ids(tenant)
    cited = [str(t) for t in memories[0].source_turn_ids]
    assert len(cited) == MAX_SOURCE_TURNS
    assert set(cited) <= {ids[f"sam-{30 + n}"] for n in range(12)}


def test_the_store_never_merges_small_talk_into_a_memory(
    settings: Settings, pipeline, tenant: str
) -> None:
    """Gems from any extractor (or the remember API): a small-talk line neither folds into a
    near-twin in its batch nor reinforces a stored memory; a content line still does."""

    def gem(content: str) -> Gem:
        return Gem(
            kind="fact",
            content=content,
            summary=content,
            topics=[],
            importance=0.5,
            source_turn_ids=[str(uuid.uuid4())],
            occurred_at=T0,
        )

    def store(contents: list[str]) -> None:
        vector = pipeline.embed.embed([contents[0]])[0]  # all alike: near-duplicates by cosine
        with unit_of_work(tenant) as session:
            store_gems(
                session=session,
                settings=settings,
                tenant_id=tenant,
                user_id="sam",
                batch_id=uuid.uuid4(),
                extractor="offline",
                gems=[gem(c) for c in contents],
                vectors=[vector] * len(contents),
                turn_scores={},
                session_of_turn={},
            )

    store(["Thanks, Melanie!", "Thanks Melanie!!", "thanks, melanie"])
    store(["Thanks, Melanie!!!"])
    chat = [m for m in _memories(tenant) if "thank" in m.content.lower()]
    assert len(chat) == 4 and all(len(m.source_turn_ids) == 1 for m in chat)

    store(["Bruno is vegetarian.", "Bruno is a vegetarian."])
    store(["Bruno is vegetarian!"])
    facts = [m for m in _memories(tenant) if "Bruno" in m.content]
    assert len(facts) == 1 and len(facts[0].source_turn_ids) == 3


def test_the_dream_cycle_never_consolidates_small_talk(
    settings: Settings, redis_client: Any, tenant: str
) -> None:
    """Two tight clusters of recent memories: the content one is merged, the chat one is not
    (app/services/dream_consolidation.py asks app/extraction/smalltalk.says_nothing)."""
    now = datetime(2026, 3, 2, 12, 10, tzinfo=UTC)
    spec = {
        "Wow, Caroline!": {0: 1.0, 10: 0.1},
        "Wow, fantastic, Caroline!": {0: 1.0, 11: 0.1},
        "Wow Caroline!! 😍": {0: 1.0, 12: 0.1},
        "The Atlas launch moved to March": {1: 1.0, 10: 0.1},
        "We decided the Atlas launch is in March": {1: 1.0, 11: 0.1},
        "Atlas ships in March after the review": {1: 1.0, 12: 0.1},
    }
    ids = {content: uuid.uuid4() for content in spec}

    def vector(parts: dict[int, float]) -> str:
        v = [0.0] * settings.embedding_dim
        for axis, x in parts.items():
            v[axis] = x
        norm = sum(x * x for x in v) ** 0.5
        return "[" + ",".join(f"{x / norm:.8f}" for x in v) + "]"

    with unit_of_work(tenant) as db:
        db.execute(
            text(
                "INSERT INTO semantic.memories (id, tenant_id, user_id, kind, content, summary,"
                " content_hash, importance, emotional_intensity, salience, occurred_at,"
                " valid_from, source_turn_ids, embedding, tags)"
                " VALUES (:id, :tenant, 'sam', 'fact', :content, :content, :hash, 0.5, 0.5,"
                " 0.5, :at, :at, :turns, CAST(:embedding AS vector), ARRAY['fact'])"
            ),
            [
                {
                    "id": ids[content],
                    "tenant": tenant,
                    "content": content,
                    "hash": uuid.uuid4().hex,
                    "at": now - timedelta(minutes=20),
                    "turns": [uuid.uuid4()],
                    "embedding": vector(parts),
                }
                for content, parts in spec.items()
            ],
        )
    report = run_dream(settings, tenant_id=tenant, user_id="sam", now=now)
    assert report.failed == []
    with unit_of_work(tenant) as db:
        merged = db.execute(
            text("SELECT member_ids FROM semantic.memories WHERE kind = 'consolidated'")
        ).all()
    assert [sorted(m.member_ids) for m in merged] == [sorted(ids[c] for c in spec if "Atlas" in c)]
