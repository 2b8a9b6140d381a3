"""Hybrid search over real Postgres + pgvector, real Redis and the real local embedding model:
paraphrases find the planted memory among a thousand others, filters and tenancy hold,
superseded memories stay out unless asked for, raw turns are findable before extraction and
fold into the memory made from them, total recall returns the source turns in context, and
access records are applied exactly once. These are the memories unit's tests (weighted
fusion, as it was tuned on memories); the turns unit, the default, is tested in
test_turn_retrieval.py."""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from sqlalchemy import text

from app.config import Settings
from app.db.session import unit_of_work
from app.embedding.base import Embedder, EmbeddingError, Owner
from app.embedding.factory import get_embedder
from app.extraction.base import Gem
from app.keys import RedisKeys
from app.layers.semantic.service import store_gems
from app.services.access import apply_pending, remove_applied
from app.services.ingest import IngestService
from app.services.memories import MemoryIn, RememberRequest, get_memory, remember
from app.services.search import SearchHit, SearchRequest, SearchResult, search
from app.streams.consumer import StreamConsumer
from app.streams.producer import EventProducer

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
MEMORIES_UNIT = {"search_unit": "memories", "search_fusion": "weighted"}

# -- the planted memories and a thousand distractors ---------------------------------------

PLANTED = [
    (
        "Alice's daughter is allergic to peanuts.",
        "does anyone in Alice's family have a nut allergy?",
    ),
    (
        "Marcus hides the spare key to the beach house under the blue flowerpot by the back door.",
        "where is the extra key for the holiday cottage kept?",
    ),
    (
        "The team agreed to migrate the billing service from MySQL to PostgreSQL before the"
        " spring release.",
        "which database are we moving the payments system onto?",
    ),
    (
        "Priya's flight to Tokyo departs at 7:15 on Tuesday morning from gate 42.",
        "when does Priya's plane leave for Japan?",
    ),
    (
        "Tom is training for the Berlin marathon and runs sixty kilometres a week.",
        "what race is Tom preparing for?",
    ),
]

# The planted people appear among the distractors too, so a name alone finds nothing.
NAMES = [
    "Alice", "Marcus", "Priya", "Tom", "Bob", "Carol", "Dmitri", "Elena", "Farid", "Grace",
    "Hiro", "Ingrid", "Jamal", "Keiko", "Liam", "Mei", "Nadia", "Oscar", "Paula", "Quentin",
    "Rosa", "Sven", "Tariq", "Uma", "Victor", "Wendy", "Xavier", "Yara", "Zoltan", "Beatriz",
]  # fmt: skip
SLOTS = {
    "city": [
        "Lisbon", "Denver", "Nairobi", "Oslo", "Montreal", "Seoul", "Lyon", "Austin", "Krakow",
        "Melbourne", "Porto", "Edinburgh", "Valencia", "Helsinki", "Cape Town", "Dublin",
        "Leipzig", "Kyoto", "Santiago", "Vancouver",
    ],
    "hobby": [
        "bouldering", "pottery", "birdwatching", "salsa dancing", "woodworking", "sailing",
        "chess", "beekeeping", "watercolour painting", "trail cycling", "fly fishing",
        "knitting", "astronomy", "rowing", "calligraphy", "gardening", "photography", "archery",
    ],
    "instrument": [
        "cello", "banjo", "saxophone", "harp", "ukulele", "drums", "violin", "accordion",
        "clarinet", "mandolin", "trumpet", "oboe",
    ],
    "job": [
        "nurse", "carpenter", "data analyst", "architect", "pharmacist", "electrician",
        "translator", "veterinarian", "librarian", "civil engineer", "pilot", "chef",
        "accountant", "physiotherapist", "journalist", "geologist",
    ],
    "project": [
        "onboarding wizard", "search indexer", "invoice exporter", "mobile checkout",
        "audit log", "notification service", "reporting dashboard", "SSO integration",
        "image resizer", "rate limiter", "feature flag service", "CSV importer",
        "analytics pipeline", "help center", "password reset flow",
    ],
    "artifact": [
        "design doc", "pull request", "load test results", "API contract", "threat model",
        "migration plan", "release notes", "test plan", "cost estimate", "runbook",
    ],
    "day": ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"],
    "month": [
        "January", "February", "March", "April", "May", "June", "July", "August",
        "September", "October", "November", "December",
    ],
    "food": [
        "ramen", "tapas", "dim sum", "pierogi", "tacos", "curry", "sushi", "falafel",
        "risotto", "pho", "barbecue", "crepes",
    ],
    "book": [
        "a history of lighthouses", "urban beekeeping", "the physics of bridges",
        "medieval trade routes", "volcano geology", "jazz improvisation", "desert ecology",
        "typography basics", "the economics of shipping", "deep sea creatures",
        "Roman aqueducts", "arctic exploration",
    ],
    "pet": [
        "a grey parrot", "two rescue greyhounds", "a tortoise", "a ginger cat",
        "three goldfish", "a bearded dragon", "a border collie", "a pair of rabbits",
    ],
    "vehicle": [
        "an electric scooter", "a vintage Vespa", "a cargo bike", "a used camper van",
        "a hybrid hatchback", "a folding bicycle",
    ],
    "date": [str(d) for d in range(1, 29)],
}  # fmt: skip
TEMPLATES = [
    "{n} is learning to play the {instrument} with a teacher in {city}.",
    "{n} took up {hobby} in {month} and practises every {day}.",
    "{n} moved to {city} last {month} to work as a {job}.",
    "The {project} ticket is blocked until {n} reviews the {artifact}.",
    "{n} will present the {artifact} for the {project} on {day}.",
    "{n} recommended a book about {book}.",
    "{n} ordered {food} for the team lunch on {day}.",
    "{n} adopted {pet} while living in {city}.",
    "{n} bought {vehicle} to commute around {city}.",
    "{n} spent a week in {city} in {month} and loved the {food} there.",
    "{n} asked for the {artifact} of the {project} to be ready by {month} {date}.",
    "{n} volunteers at the {city} library teaching {hobby} on {day}s.",
    "{n}'s old friend from {city} is now a {job}.",
    "{n} prefers {food} over pizza and dislikes {hobby}.",
    "The {city} office hosts a {hobby} club organised by {n}.",
    "{n} is reading about {book} on the train to {city}.",
]
DISTRACTORS = 1000
REMEMBER_BATCH = 100


def candidate_sentences(count: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    seen: set[str] = set()
    out: list[str] = []
    while len(out) < count:
        template = TEMPLATES[len(out) % len(TEMPLATES)]
        values = {slot: rng.choice(choices) for slot, choices in SLOTS.items()}
        sentence = template.format(n=rng.choice(NAMES), **values)
        if sentence not in seen:
            seen.add(sentence)
            out.append(sentence)
    return out


def distinct_sentences(embedder: Embedder, count: int, max_cosine: float) -> list[str]:
    """`count` template sentences, none closer than `max_cosine` to an earlier one (so that
    none is deduplicated into another on the way in)."""
    candidates = candidate_sentences(int(count * 1.3))
    vectors = np.asarray(embedder.embed(candidates))
    kept: list[int] = []
    for index in range(len(candidates)):
        if kept and float(np.max(vectors[kept] @ vectors[index])) >= max_cosine:
            continue
        kept.append(index)
        if len(kept) == count:
            break
    assert len(kept) == count, "not enough distinct distractor sentences"
    return [candidates[i] for i in kept]


# -- helpers -------------------------------------------------------------------------------


def remember_all(
    tenant: str,
    user: str,
    items: Sequence[MemoryIn],
    settings: Settings,
    embedder: Embedder,
) -> list[uuid.UUID]:
    ids: list[uuid.UUID] = []
    for start in range(0, len(items), REMEMBER_BATCH):
        chunk = list(items[start : start + REMEMBER_BATCH])
        done = remember(
            tenant,
            RememberRequest(user_id=user, memories=chunk),
            settings=settings,
            embedder=embedder,
        )
        assert [r.status for r in done] == ["created"] * len(chunk)
        ids.extend(r.id for r in done)
    return ids


def find(
    tenant: str, settings: Settings, embedder: Embedder, *, client: Any = None, **request: Any
) -> SearchResult:
    request.setdefault("limit", 10)
    return search(
        tenant, SearchRequest(**request), settings=settings, embedder=embedder, client=client
    )


def memory_ids(hits: Sequence[SearchHit]) -> set[uuid.UUID]:
    return {h.id for h in hits if h.layer == "memory"}


def turn_ids(hits: Sequence[SearchHit]) -> set[uuid.UUID]:
    return {h.id for h in hits if h.layer == "turn"}


def say(
    tenant: str, user: str, n: int, content: str, *, at: datetime, channel: str = "web"
) -> dict[str, Any]:
    return {
        "type": "turn",
        "tenant_id": tenant,
        "user_id": user,
        "role": "user" if n % 2 == 0 else "assistant",
        "speaker": user.title() if n % 2 == 0 else "Assistant",
        "content": content,
        "external_id": f"{user}-{n}",
        "channel": channel,
        "timestamp": at.isoformat(),
    }


def ingest(settings: Settings, client: Any, events: list[dict[str, Any]]) -> dict[str, Any]:
    """Push the events and let the real ingest service persist them (L2 and L1); no
    extraction runs. Returns external id → turn row."""
    consumer = StreamConsumer(
        client=client,
        settings=settings,
        handler=IngestService(client=client, settings=settings),
        name="search-test",
    )
    consumer.ensure_groups()
    EventProducer(client, settings).send_many(events)
    while consumer.step(block_ms=10):
        pass
    tenant, user = events[0]["tenant_id"], events[0]["user_id"]
    with unit_of_work(tenant) as session:
        rows = session.execute(
            text(
                "SELECT id, external_id, session_id, occurred_at, channel FROM episodic.turns"
                " WHERE user_id = :user"
            ),
            {"user": user},
        ).all()
    by_external = {row.external_id: row for row in rows}
    assert {e["external_id"] for e in events if e["user_id"] == user} <= set(by_external)
    return by_external


def memory_from_turns(
    tenant: str,
    user: str,
    content: str,
    turns: Sequence[Any],
    settings: Settings,
    embedder: Embedder,
) -> uuid.UUID:
    """Store a gem extracted from these L2 turns, the way the extraction pipeline does."""
    gem = Gem(
        kind="fact",
        content=content,
        summary=content,
        topics=[],
        importance=0.5,
        source_turn_ids=[str(t.id) for t in turns],
        occurred_at=min(t.occurred_at for t in turns),
    )
    with unit_of_work(tenant) as session:
        stored = store_gems(
            session=session,
            settings=settings,
            tenant_id=tenant,
            user_id=user,
            batch_id=uuid.uuid4(),
            extractor="offline",
            gems=[gem],
            vectors=embedder.embed([content]),
            turn_scores={},
            session_of_turn={str(t.id): t.session_id for t in turns},
            channel_of_turn={str(t.id): t.channel for t in turns},
        )
    assert len(stored.created) == 1
    return stored.created[0][0]


# -- a thousand distractors, loaded once ---------------------------------------------------


class Corpus:
    def __init__(self, tenant: str, user: str, embedder: Embedder, planted: list[uuid.UUID]):
        self.tenant = tenant
        self.user = user
        self.embedder = embedder
        self.planted = planted


@pytest.fixture(scope="module")
def corpus_settings(base_settings: Settings) -> Settings:
    return base_settings.model_copy(
        update={"redis_prefix": f"test-{uuid.uuid4().hex[:10]}", **MEMORIES_UNIT}
    )


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update=MEMORIES_UNIT)


@pytest.fixture(scope="module")
def corpus(corpus_settings: Settings) -> Iterator[Corpus]:
    from app.redis_client import get_redis

    client = get_redis(corpus_settings)
    embedder = get_embedder(corpus_settings, client)
    tenant, user = f"t-{uuid.uuid4().hex[:10]}", "dana"
    sentences = distinct_sentences(
        embedder, DISTRACTORS, max_cosine=corpus_settings.dedup_cosine - 0.02
    )
    rng = random.Random(11)
    distractors = [
        MemoryIn(
            content=sentence,
            kind=rng.choice(["fact", "event", "preference", "todo"]),
            importance=round(rng.uniform(0.2, 0.8), 2),
            occurred_at=T0 - timedelta(days=rng.randint(0, 120)),
            channel=rng.choice(["web", "slack", "email"]),
        )
        for sentence in sentences
    ]
    stored = remember_all(tenant, user, distractors, corpus_settings, embedder)
    assert len(set(stored)) == DISTRACTORS
    planted_items = [
        MemoryIn(content=content, importance=0.5, occurred_at=T0 - timedelta(days=30 + i))
        for i, (content, _) in enumerate(PLANTED)
    ]
    planted = remember_all(tenant, user, planted_items, corpus_settings, embedder)
    yield Corpus(tenant, user, embedder, planted)
    keys = list(client.scan_iter(match=f"{corpus_settings.redis_prefix}:*", count=1000))
    if keys:
        client.delete(*keys)


def _first_hits(corpus: Corpus, settings: Settings) -> list[tuple[str, SearchHit, uuid.UUID]]:
    out = []
    for (_, query), planted_id in zip(PLANTED, corpus.planted, strict=True):
        result = find(corpus.tenant, settings, corpus.embedder, user_id=corpus.user, query=query)
        assert result.hits and not result.warnings
        out.append((query, result.hits[0], planted_id))
    return out


def test_corpus_holds_every_distractor_and_the_planted_memories(corpus: Corpus) -> None:
    with unit_of_work(corpus.tenant) as session:
        count = session.execute(
            text("SELECT count(*) FROM semantic.memories WHERE user_id = :user"),
            {"user": corpus.user},
        ).scalar_one()
    assert count == DISTRACTORS + len(PLANTED)


@pytest.mark.parametrize("index", range(len(PLANTED)), ids=[q for _, q in PLANTED])
def test_paraphrased_query_finds_the_planted_memory_first(
    corpus: Corpus, corpus_settings: Settings, index: int
) -> None:
    settings = corpus_settings  # the default fusion (weighted)
    planted, query = PLANTED[index]
    result = find(
        corpus.tenant, settings, corpus.embedder, user_id=corpus.user, query=query, limit=100
    )
    assert not result.warnings
    top = result.hits[0]
    rank = next((n for n, h in enumerate(result.hits, 1) if h.id == corpus.planted[index]), None)
    assert top.id == corpus.planted[index], (
        f"{top.content!r} {top.parts} ranks first; the planted {planted!r} is at rank {rank}"
        f" {result.hits[rank - 1].parts if rank else ''}"
    )


def test_reciprocal_rank_fusion_finds_the_planted_memory_near_the_top(
    corpus: Corpus, corpus_settings: Settings
) -> None:
    """RRF sees ranks only, so a memory that merely shares a name with the query and sits
    anywhere in both rankings can outrank a far better dense match; it is selectable, not
    the default, and this pins how far behind it falls here."""
    settings = corpus_settings.model_copy(update={"search_fusion": "rrf"})
    firsts = _first_hits(corpus, settings)
    found = [query for query, hit, planted_id in firsts if hit.id == planted_id]
    assert len(found) >= 2, [(q, h.content) for q, h, _ in firsts]


def test_hits_carry_their_score_parts(corpus: Corpus, corpus_settings: Settings) -> None:
    result = find(
        corpus.tenant,
        corpus_settings,
        corpus.embedder,
        user_id=corpus.user,
        query="Priya flight to Tokyo",
    )
    top = result.hits[0]
    assert top.id == corpus.planted[3] and top.layer == "memory"
    assert {"dense", "lexical", "fused", "prior"} <= set(top.parts)
    assert top.parts["dense"] > 0.5 and top.parts["lexical"] > 0
    assert top.score == pytest.approx(top.parts["fused"] * top.parts["prior"], rel=1e-4)
    assert top.source_turn_ids == []  # an explicit memory has no source turns
    scores = [h.score for h in result.hits]
    assert scores == sorted(scores, reverse=True)
    assert len(result.hits) == 10 and len({h.id for h in result.hits}) == 10


# -- filters -------------------------------------------------------------------------------


def test_filters_exclude_what_they_should(settings: Settings, redis_client, tenant: str) -> None:
    embedder = get_embedder(settings, redis_client)
    user = "ravi"
    items = {
        "garden": MemoryIn(
            content="The garden club budget covers new tulip bulbs for the spring beds.",
            kind="fact",
            tags=["club"],
            channel="web",
            occurred_at=datetime(2026, 1, 10, tzinfo=UTC),
            importance=0.2,
        ),
        "finance": MemoryIn(
            content="Finance approved the marketing budget increase for next quarter.",
            kind="decision",
            tags=["finance", "work"],
            channel="slack",
            occurred_at=datetime(2026, 3, 10, tzinfo=UTC),
            importance=0.9,
        ),
        "travel": MemoryIn(
            content="Send the travel budget spreadsheet to Maria before the offsite.",
            kind="todo",
            tags=["work"],
            channel="email",
            occurred_at=datetime(2026, 5, 10, tzinfo=UTC),
            importance=0.6,
        ),
        "holiday": MemoryIn(
            content="Ravi prefers to keep the family holiday budget under two thousand euros.",
            kind="preference",
            channel="web",
            occurred_at=datetime(2026, 7, 10, tzinfo=UTC),
            importance=0.4,
        ),
    }
    stored = dict(
        zip(
            items, remember_all(tenant, user, list(items.values()), settings, embedder), strict=True
        )
    )
    turns = ingest(
        settings,
        redis_client,
        [
            say(
                tenant,
                user,
                0,
                "How big is the budget for the garden party?",
                at=datetime(2026, 2, 1, tzinfo=UTC),
            )
        ],
    )
    turn = turns[f"{user}-0"].id

    def ids(**filters: Any) -> set[Any]:
        hits = find(tenant, settings, embedder, user_id=user, query="budget", limit=50, **filters)
        names = {v: k for k, v in stored.items()}
        return {names.get(h.id, "turn" if h.id == turn else h.id) for h in hits.hits}

    assert ids() == {"garden", "finance", "travel", "holiday", "turn"}
    assert ids(tags=["work"]) == {"finance", "travel"}
    assert ids(tags=["club", "finance"]) == {"garden", "finance"}
    assert ids(kinds=["todo", "preference"]) == {"travel", "holiday"}
    assert ids(channel="web") == {"garden", "holiday", "turn"}
    assert ids(channel="slack") == {"finance"}
    assert ids(since=datetime(2026, 3, 10, tzinfo=UTC)) == {"finance", "travel", "holiday"}
    assert ids(until=datetime(2026, 3, 10, tzinfo=UTC)) == {"garden", "turn"}
    assert ids(
        since=datetime(2026, 3, 10, tzinfo=UTC), until=datetime(2026, 7, 10, tzinfo=UTC)
    ) == {"finance", "travel"}
    assert ids(min_importance=0.6) == {"finance", "travel"}
    assert ids(min_importance=0.6, kinds=["decision"], tags=["work"]) == {"finance"}
    assert ids(include_turns=False) == {"garden", "finance", "travel", "holiday"}


# -- superseded memories -------------------------------------------------------------------


def test_superseded_memory_only_with_include_superseded(
    settings: Settings, redis_client, tenant: str
) -> None:
    embedder = get_embedder(settings, redis_client)
    user = "alice"
    first, second = T0 - timedelta(days=40), T0 - timedelta(days=10)
    [old] = remember_all(
        tenant,
        user,
        [
            MemoryIn(
                content="Alice prefers a window seat on long flights.",
                kind="preference",
                subject="alice|prefers|seat",
                value="window",
                occurred_at=first,
            )
        ],
        settings,
        embedder,
    )
    [new] = remember_all(
        tenant,
        user,
        [
            MemoryIn(
                content="Alice prefers an aisle seat on long flights.",
                kind="preference",
                subject="alice|prefers|seat",
                value="aisle",
                occurred_at=second,
            )
        ],
        settings,
        embedder,
    )
    assert old != new
    query = "which seat does Alice like on a plane?"
    current = find(tenant, settings, embedder, user_id=user, query=query).hits
    assert [h.id for h in current] == [new]
    assert current[0].valid_to is None and current[0].superseded_by is None

    both = find(tenant, settings, embedder, user_id=user, query=query, include_superseded=True)
    by_id = {h.id: h for h in both.hits}
    assert set(by_id) == {old, new}
    assert by_id[old].valid_to == second
    assert by_id[old].superseded_by == new
    assert by_id[new].valid_to is None

    view = get_memory(tenant, old)
    assert view is not None and view["superseded_by"] == new and view["valid_to"] == second


# -- tenancy -------------------------------------------------------------------------------


def test_other_users_and_tenants_never_come_back(
    settings: Settings, redis_client, tenant: str
) -> None:
    embedder = get_embedder(settings, redis_client)
    other_tenant = f"t-{uuid.uuid4().hex[:10]}"
    words = "The spare office key is kept in the red drawer under the printer."
    item = [MemoryIn(content=words)]
    [mine] = remember_all(tenant, "alice", item, settings, embedder)
    [bobs] = remember_all(tenant, "bob", item, settings, embedder)
    [theirs] = remember_all(other_tenant, "alice", item, settings, embedder)
    assert len({mine, bobs, theirs}) == 3
    bob_turns = ingest(settings, redis_client, [say(tenant, "bob", 0, words, at=T0)])
    their_turns = ingest(settings, redis_client, [say(other_tenant, "alice", 0, words, at=T0)])

    query = "where is the spare office key kept?"
    for include_superseded in (False, True):
        hits = find(
            tenant,
            settings,
            embedder,
            user_id="alice",
            query=query,
            include_superseded=include_superseded,
            limit=50,
        ).hits
        assert [(h.layer, h.id) for h in hits] == [("memory", mine)]
    for fusion in ("rrf", "weighted"):
        tuned = settings.model_copy(update={"search_fusion": fusion, "search_turns": "always"})
        hits = find(other_tenant, tuned, embedder, user_id="alice", query=query).hits
        assert {h.id for h in hits} == {theirs, their_turns["alice-0"].id}
        hits = find(tenant, tuned, embedder, user_id="bob", query=query).hits
        assert {h.id for h in hits} == {bobs, bob_turns["bob-0"].id}
    # Reading back by id is tenant-scoped too.
    assert get_memory(tenant, theirs) is None
    assert get_memory(other_tenant, mine) is None
    assert get_memory(tenant, bobs) is not None  # any user of the tenant


# -- raw turns, total recall ---------------------------------------------------------------

SESSION_LINES = [
    "Good morning, I want to plan the kitchen renovation.",
    "Sure. What would you like to change first?",
    "The old cabinets are falling apart, so those go first.",
    "Do you have a budget in mind?",
    "Around fifteen thousand, including the new countertop.",
    "Marble or quartz for the countertop?",
    "Quartz, it is easier to clean.",
    "Got it. Any appliances?",
    "A quieter dishwasher would be great.",
    "I will note the dishwasher too.",
    "The contractor Henrik can only start after the school holidays.",
    "Understood, I will keep that in mind.",
]


def test_total_recall_returns_source_turns_in_context(
    settings: Settings, redis_client, tenant: str
) -> None:
    embedder = get_embedder(settings, redis_client)
    user = "ana"
    events = [
        say(tenant, user, n, line, at=T0 + timedelta(minutes=n))
        for n, line in enumerate(SESSION_LINES)
    ]
    later = T0 + timedelta(seconds=settings.session_idle_timeout_s * 3)
    events += [
        say(tenant, user, 12 + n, line, at=later + timedelta(minutes=n))
        for n, line in enumerate(["Hi again.", "Welcome back.", "The countertop arrived."])
    ]
    turns = ingest(settings, redis_client, events)
    session_a = turns[f"{user}-0"].session_id
    assert {turns[f"{user}-{n}"].session_id for n in range(12)} == {session_a}
    assert turns[f"{user}-12"].session_id != session_a

    sources = [turns[f"{user}-10"], turns[f"{user}-2"]]  # not in time order on purpose
    memory_id = memory_from_turns(
        tenant,
        user,
        "Ana's kitchen renovation replaces the cabinets; contractor Henrik starts after the"
        " school holidays.",
        sources,
        settings,
        embedder,
    )

    view = get_memory(tenant, memory_id, recall=2)
    assert view is not None
    assert view["id"] == memory_id and view["session_id"] == session_a
    assert view["source_turn_ids"] == [f"{user}-10", f"{user}-2"]
    recall = view["recall"]
    expected = [0, 1, 2, 3, 4, 8, 9, 10, 11]
    assert [t["external_id"] for t in recall] == [f"{user}-{n}" for n in expected]
    assert [t["is_source"] for t in recall] == [n in (2, 10) for n in expected]
    assert [t["content"] for t in recall] == [SESSION_LINES[n] for n in expected]
    assert {t["session_id"] for t in recall} == {session_a}
    times = [t["occurred_at"] for t in recall]
    assert times == sorted(times)

    just = get_memory(tenant, memory_id, recall=0)
    assert just is not None
    assert [(t["external_id"], t["is_source"]) for t in just["recall"]] == [
        (f"{user}-2", True),
        (f"{user}-10", True),
    ]
    assert "recall" not in (get_memory(tenant, memory_id) or {"recall": None})

    # The search hit names its producers' message ids.
    hits = find(tenant, settings, embedder, user_id=user, query="when can Henrik start?").hits
    hit = next(h for h in hits if h.layer == "memory")
    assert hit.id == memory_id
    assert sorted(hit.source_turn_ids) == sorted([f"{user}-2", f"{user}-10"])
    assert hit.source_turn_ids[0] == f"{user}-10"  # the source matching the query best first
    assert {"dense", "lexical", "fused", "prior"} <= set(hit.parts)

    assert get_memory(tenant, uuid.uuid4(), recall=2) is None
    assert get_memory(f"t-{uuid.uuid4().hex[:10]}", memory_id, recall=2) is None


def test_turns_are_found_before_extraction_and_fold_into_their_memory(
    settings: Settings, redis_client, tenant: str
) -> None:
    embedder = get_embedder(settings, redis_client)
    user = "zed"
    lines = [
        "My locker combination at the climbing gym is 4815.",
        "Noted.",
        "I also need to book a dentist appointment next week.",
    ]
    turns = ingest(
        settings,
        redis_client,
        [say(tenant, user, n, line, at=T0 + timedelta(minutes=n)) for n, line in enumerate(lines)],
    )
    locker = turns[f"{user}-0"]
    query = "climbing gym locker combination"
    uncovered = settings.model_copy(update={"search_turns": "uncovered"})

    before = find(tenant, uncovered, embedder, user_id=user, query=query).hits
    assert [(h.layer, h.id) for h in before] == [("turn", locker.id)]
    assert before[0].content == lines[0] and before[0].kind == "turn"
    assert before[0].source_turn_ids == [f"{user}-0"]
    assert before[0].session_id == locker.session_id and before[0].role == "user"
    assert {"turn", "fused", "prior"} <= set(before[0].parts)

    memory_id = memory_from_turns(
        tenant,
        user,
        "Zed's locker combination at the climbing gym is 4815.",
        [locker],
        settings,
        embedder,
    )
    after = find(tenant, uncovered, embedder, user_id=user, query=query).hits
    assert [(h.layer, h.id) for h in after] == [("memory", memory_id)]
    assert "turn" in after[0].parts  # the turn's match adds to its memory
    assert after[0].source_turn_ids == [f"{user}-0"]

    always = settings.model_copy(update={"search_turns": "always"})
    listed = find(tenant, always, embedder, user_id=user, query=query).hits
    assert {(h.layer, h.id) for h in listed} == {("memory", memory_id), ("turn", locker.id)}

    never = settings.model_copy(update={"search_turns": "never"})
    assert turn_ids(find(tenant, never, embedder, user_id=user, query=query).hits) == set()
    forced = find(
        tenant, never, embedder, user_id=user, query="dentist appointment", include_turns=True
    )
    assert turn_ids(forced.hits) == {turns[f"{user}-2"].id}


# -- access recording ----------------------------------------------------------------------


def _access_state(tenant: str, ids: Sequence[uuid.UUID]) -> tuple[list[Any], dict[Any, int]]:
    with unit_of_work(tenant) as session:
        patterns = session.execute(
            text("SELECT id, user_id, query, hit_ids, channel FROM meta.access_patterns")
        ).all()
        counts = dict(
            session.execute(
                text(
                    "SELECT id, access_count FROM semantic.memories"
                    " WHERE id = ANY(CAST(:ids AS uuid[]))"
                ),
                {"ids": list(ids)},
            ).all()
        )
    return patterns, counts


def test_search_access_is_recorded_and_applied_once(
    settings: Settings, redis_client, tenant: str
) -> None:
    embedder = get_embedder(settings, redis_client)
    user = "omar"
    ids = remember_all(
        tenant,
        user,
        [
            MemoryIn(
                content="Omar's sister lives in Rotterdam and works at the harbour.", channel="web"
            ),
            MemoryIn(content="Omar waters the office ferns every Friday afternoon.", channel="web"),
            MemoryIn(content="The quarterly tax filing is due on the fifteenth.", channel="web"),
        ],
        settings,
        embedder,
    )
    keys = RedisKeys.from_settings(settings)
    buffer = keys.access_buffer(tenant, user)
    result = find(
        tenant,
        settings,
        embedder,
        client=redis_client,
        user_id=user,
        query="where does Omar's sister live?",
        channel="web",
        limit=2,
    )
    returned = [h.id for h in result.hits if h.layer == "memory"]
    assert returned and returned[0] == ids[0]
    assert redis_client.llen(buffer) == 1
    record = json.loads(redis_client.lindex(buffer, 0))
    assert record["hit_ids"] == [str(i) for i in returned]
    assert record["query"] == "where does Omar's sister live?" and record["channel"] == "web"

    # Without a client (or with record=False) nothing is buffered.
    find(tenant, settings, embedder, user_id=user, query="ferns")
    assert redis_client.llen(buffer) == 1

    assert apply_pending(settings, redis_client) == 1
    patterns, counts = _access_state(tenant, ids)
    assert len(patterns) == 1
    assert str(patterns[0].id) == record["id"] and patterns[0].user_id == user
    assert list(patterns[0].hit_ids) == returned
    assert counts == {i: (1 if i in returned else 0) for i in ids}
    assert redis_client.llen(buffer) == 0
    assert not redis_client.sismember(keys.access_pending(), f"{tenant}|{user}")

    # Applying again changes nothing; nor does a replay of the same record (a crash between
    # the commit and the trim).
    assert apply_pending(settings, redis_client) == 0
    redis_client.rpush(buffer, json.dumps(record))
    redis_client.sadd(keys.access_pending(), f"{tenant}|{user}")
    assert apply_pending(settings, redis_client) == 0
    assert _access_state(tenant, ids) == (patterns, counts)
    assert redis_client.llen(buffer) == 0


# -- embedding backend down ----------------------------------------------------------------


class DownEmbedder:
    name = "down"
    dim = 384

    def embed(
        self, texts: Sequence[str], owners: Sequence[Owner] | None = None
    ) -> list[list[float]]:
        raise EmbeddingError("connection refused")


def test_embedding_backend_down_gives_lexical_results_with_a_warning(
    settings: Settings, redis_client, tenant: str
) -> None:
    embedder = get_embedder(settings, redis_client)
    user = "lena"
    ids = remember_all(
        tenant,
        user,
        [
            MemoryIn(content="Lena's passport expires in October and needs renewing."),
            MemoryIn(content="Lena likes oat milk in her coffee."),
        ],
        settings,
        embedder,
    )
    result = find(tenant, settings, DownEmbedder(), user_id=user, query="passport renewal")
    assert len(result.warnings) == 1 and "lexical" in result.warnings[0]
    assert [h.id for h in result.hits] == [ids[0]]
    assert "dense" not in result.hits[0].parts and result.hits[0].parts["lexical"] > 0
    # Nothing lexical in common: no hits, still no exception.
    assert find(tenant, settings, DownEmbedder(), user_id=user, query="zebra").hits == []


def test_overlapping_applies_never_drop_a_newer_access_record(
    redis_client: Any, prefix: str
) -> None:
    # Two runs read the same two records and each removes what it applied; a record that
    # arrived in between stays for the next run (trimming by count would drop it).
    buffer = f"{prefix}:access:overlap"
    old = [json.dumps({"id": str(uuid.uuid4())}) for _ in range(2)]
    redis_client.rpush(buffer, *old)
    read_by_both = redis_client.lrange(buffer, 0, -1)
    newer = json.dumps({"id": str(uuid.uuid4())})
    redis_client.rpush(buffer, newer)
    remove_applied(redis_client, buffer, read_by_both)
    remove_applied(redis_client, buffer, read_by_both)
    assert redis_client.lrange(buffer, 0, -1) in ([newer], [newer.encode()])
