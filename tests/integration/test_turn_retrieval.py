"""The turns unit over real Postgres + pgvector, real Redis and the real local model: a turn is
found by a paraphrase that shares no word with it, a date in the question picks that day's
turn among look-alikes, a strong lexical match survives a dense leg that disagrees, a turn's
memories vote for it and come back attached, and context packs the ranked turns."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from app.config import Settings
from app.db.session import owner_engine, unit_of_work
from app.embedding.factory import get_embedder
from app.layers.episodic.search import turn_window
from app.services.attention import score_users
from app.services.context import ContextRequest, assemble_context
from app.services.memories import MemoryIn, RememberRequest, remember
from tests.integration.test_hybrid_search import find, ingest, memory_from_turns, say

T0 = datetime(2024, 1, 8, 9, 0, tzinfo=UTC)


@pytest.fixture
def embedder(settings: Settings, redis_client: Any) -> Any:
    return get_embedder(settings, redis_client)


def converse(
    settings: Settings,
    client: Any,
    embedder: Any,
    tenant: str,
    user: str,
    lines: list[tuple[datetime, str]],
    speakers: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Ingest the turns and score them (which gives each its vector); no extraction. With
    `speakers`, the lines are said by them in turn (else by the user and the assistant)."""
    events = [say(tenant, user, n, text, at=at) for n, (at, text) in enumerate(lines)]
    for n, event in enumerate(events if speakers else []):
        event.update(role="user", speaker=speakers[n % len(speakers)])
    rows = ingest(settings, client, events)
    score_users(
        settings=settings, client=client, embedder=embedder, tenant_id=tenant, user_ids=[user]
    )
    return rows


def ranked_turns(result: Any) -> list[str]:
    return [t for h in result.hits for t in h.source_turn_ids]


def test_paraphrase_with_no_shared_word_finds_the_turn(
    settings: Settings, redis_client: Any, embedder: Any, tenant: str
) -> None:
    # Alice says the even lines (each of her turns is keyed with her name).
    lines = [
        (T0, "I always prefer aisle seats on long flights."),
        (T0 + timedelta(minutes=1), "Good morning! The weather is lovely today."),
        (T0 + timedelta(minutes=2), "My cousin is visiting from Lisbon next month."),
        (T0 + timedelta(minutes=3), "The quarterly report is due on Friday afternoon."),
        (T0 + timedelta(minutes=4), "I walk to the office when it is not raining."),
    ]
    converse(settings, redis_client, embedder, tenant, "alice", lines)
    result = find(tenant, settings, embedder, user_id="alice", query="where does she like to sit?")
    assert result.unit == "turns"
    assert ranked_turns(result)[0] == "alice-0", [(h.content, h.parts) for h in result.hits]
    assert result.hits[0].layer == "turn" and "turn_dense" in result.hits[0].parts


def test_remembered_memory_without_turns_is_found_by_paraphrase(
    settings: Settings, redis_client: Any, embedder: Any, tenant: str
) -> None:
    remember(
        tenant,
        RememberRequest(user_id="alice", memories=[MemoryIn(content="I prefer aisle seats")]),
        settings=settings,
        embedder=embedder,
    )
    hits = find(tenant, settings, embedder, user_id="alice", query="where does Alice like to sit?")
    assert hits.hits and hits.hits[0].layer == "memory"
    assert hits.hits[0].content == "I prefer aisle seats"


def test_a_date_in_the_question_picks_that_days_turn(
    settings: Settings, redis_client: Any, embedder: Any, tenant: str
) -> None:
    days = [T0 + timedelta(days=7 * n) for n in range(4)]
    lines = [
        (at, f"Tonight I cooked a vegetable curry for dinner, dish number {n}.")
        for n, at in enumerate(days)
    ]
    converse(settings, redis_client, embedder, tenant, "paola", lines)
    day = days[2]
    query = f"What did Paola cook on {day.day} {day:%B %Y}?"
    result = find(tenant, settings, embedder, user_id="paola", query=query)
    assert result.time_window is not None
    assert ranked_turns(result)[0] == "paola-2", [(h.content, h.parts) for h in result.hits]
    dotted = find(tenant, settings, embedder, user_id="paola", query=f"dinner on {day:%d.%m.%Y}")
    assert ranked_turns(dotted)[0] == "paola-2"


def test_first_lexical_match_stays_in_the_top_ten_when_dense_disagrees(
    settings: Settings, redis_client: Any, embedder: Any, tenant: str
) -> None:
    # Thirty turns about travel are the dense leg's favourites for a travel question; the one
    # turn naming the rare word "Zanzibar" is the lexical leg's first match.
    lines = [
        (T0 + timedelta(minutes=n), f"We travelled by train across the country, trip {n}.")
        for n in range(30)
    ]
    lines.append((T0 + timedelta(hours=2), "Zanzibar: the spice market smelled of cloves."))
    converse(settings, redis_client, embedder, tenant, "kevin", lines)
    query = "which journeys and travels did we take by train, including Zanzibar?"
    result = find(tenant, settings, embedder, user_id="kevin", query=query, limit=10)
    assert "kevin-30" in ranked_turns(result)[:10], [(h.content, h.parts) for h in result.hits]


def test_memories_vote_for_their_turn_and_come_back_attached(
    settings: Settings, redis_client: Any, embedder: Any, tenant: str
) -> None:
    lines = [
        (T0, "Yes, finally! She is called Luna and she is a golden retriever."),
        (T0 + timedelta(minutes=1), "We walked along the river this afternoon."),
    ]
    rows = converse(settings, redis_client, embedder, tenant, "emi", lines)
    memory_id = memory_from_turns(
        tenant, "emi", "Emi adopted a dog named Luna.", [rows["emi-0"]], settings, embedder
    )
    result = find(tenant, settings, embedder, user_id="emi", query="What is the name of Emi's pet?")
    top = result.hits[0]
    assert top.layer == "turn" and top.source_turn_ids == ["emi-0"]
    assert [m.id for m in top.memories] == [memory_id]
    assert {"memory_dense", "fused", "prior"} <= set(top.parts)
    memories = find(
        tenant,
        settings,
        embedder,
        user_id="emi",
        query="What is the name of Emi's pet?",
        unit="memories",
    )
    assert memories.unit == "memories" and memories.hits[0].id == memory_id


def test_context_packs_the_ranked_turns_with_date_and_speaker(
    settings: Settings, redis_client: Any, embedder: Any, tenant: str
) -> None:
    lines = [(T0, "I bought a red kayak at the harbour shop.")]
    lines += [
        (T0 + timedelta(days=n), f"Note {n}: nothing much happened today.") for n in range(1, 12)
    ]
    converse(settings, redis_client, embedder, tenant, "nico", lines)
    result = assemble_context(
        tenant,
        ContextRequest(user_id="nico", query="what boat did Nico buy?", token_budget=300),
        settings=settings,
        embedder=embedder,
        client=redis_client,
    )
    memories = result.text.split("## Relevant memories")[1]
    assert "### 2024-01-08\n- Nico: I bought a red kayak at the harbour shop." in memories
    days = [line for line in memories.splitlines() if line.startswith("### ")]
    assert days == sorted(days) and len(days) == len(set(days))  # a timeline, a day once


def test_a_long_turn_shows_its_head_in_the_context_and_keeps_its_text_in_the_parts(
    settings: Settings, redis_client: Any, embedder: Any, tenant: str
) -> None:
    long = "I bought a red kayak at the harbour shop. " + " ".join(
        f"Then I paddled past buoy number {n} and waved at the ferry." for n in range(40)
    )
    lines = [
        (T0, long),
        (T0 + timedelta(minutes=1), "The kayak shop also sold me a blue paddle."),
    ]
    converse(settings, redis_client, embedder, tenant, "ona", lines)
    # Asked on another Redis prefix: no live conversation (L1) repeats the turns.
    asking = settings.model_copy(update={"redis_prefix": f"{settings.redis_prefix}-ask"})
    result = assemble_context(
        tenant,
        ContextRequest(user_id="ona", query="what kayak did Ona buy?", token_budget=2000),
        settings=asking,
        embedder=embedder,
        client=redis_client,
    )
    shown = result.text.split("## Relevant memories")[1]
    lines = shown.splitlines()
    at = next(n for n, line in enumerate(lines) if "red kayak" in line)
    head = lines[at]
    assert lines[at - 1] == "### 2024-01-08" and head.startswith("- Ona: I bought a red kayak")
    assert head.endswith(" …") and "buoy number 39" not in head
    assert "blue paddle" in shown  # the long turn left room for the next one
    whole = next(p for p in result.parts["memories"] if "red kayak" in p["content"])
    assert "buoy number 39" in whole["content"]


def test_a_question_about_one_speaker_favours_that_speakers_turns(
    settings: Settings, redis_client: Any, embedder: Any, tenant: str
) -> None:
    # The same words from both sides of the conversation; the question names Mia.
    lines = [
        (T0, "Honestly I could spend every weekend hiking up in the mountains."),
        (T0 + timedelta(minutes=1), "Honestly I could spend every weekend hiking up in the hills."),
    ]
    converse(settings, redis_client, embedder, tenant, "mia", lines)
    query = "Where would Mia spend every weekend hiking?"
    result = find(tenant, settings, embedder, user_id="mia", query=query)
    assert ranked_turns(result)[0] == "mia-0", [(h.content, h.parts) for h in result.hits]
    assert result.hits[0].parts.get("speaker_named") == 1.0
    assert "speaker_named" not in result.hits[1].parts
    plain = find(
        tenant,
        settings.model_copy(update={"search_speaker_boost": 0.0}),
        embedder,
        user_id="mia",
        query=query,
    )
    ratio = result.hits[0].score / result.hits[1].score
    assert ratio > plain.hits[0].score / plain.hits[1].score


def test_a_question_about_one_speaker_and_another_favours_the_first_named(
    settings: Settings, redis_client: Any, embedder: Any, tenant: str
) -> None:
    # Mia and Noor say the same words; the question is about Noor and only mentions Mia.
    lines = [
        (T0, "Honestly I could spend every weekend hiking up in the mountains."),
        (T0, "Honestly I could spend every weekend hiking up in the hills."),
    ]
    converse(settings, redis_client, embedder, tenant, "duo", lines, speakers=("Mia", "Noor"))
    about_noor = find(
        tenant, settings, embedder, user_id="duo", query="Where would Noor hike, as Mia heard?"
    )
    assert ranked_turns(about_noor)[0] == "duo-1"
    assert about_noor.hits[0].parts.get("speaker_named") == 1.0
    together = find(
        tenant, settings, embedder, user_id="duo", query="Where would Mia and Noor hike?"
    )
    assert all("speaker_named" not in h.parts for h in together.hits)


def passages_of(settings: Settings, tenant: str, user: str) -> dict[str, list[int]]:
    """external id → the ordinals of the turn's stored passages, read as the owner."""
    with owner_engine(settings).connect() as conn:
        rows = conn.execute(
            text(
                "SELECT t.external_id, p.ordinal FROM episodic.turn_passages AS p"
                " JOIN episodic.turns AS t ON t.id = p.turn_id AND t.user_id = p.user_id"
                " WHERE p.tenant_id = :tenant AND p.user_id = :user ORDER BY 1, 2"
            ),
            {"tenant": tenant, "user": user},
        )
        found: dict[str, list[int]] = {}
        for external_id, ordinal in rows:
            found.setdefault(external_id, []).append(ordinal)
        return found


def test_one_sentence_of_a_long_message_is_found_by_its_own_passage(
    settings: Settings, redis_client: Any, embedder: Any, tenant: str
) -> None:
    story = (
        "Work ran late again and the printer jammed twice before lunch. My manager wants the"
        " quarterly slides finished by Monday morning. Oh, and we finally adopted a tiny"
        " kitten called Miso!"
    )
    lines = [
        (T0, story),
        (T0 + timedelta(minutes=1), "The office coffee machine broke down again this week."),
        (T0 + timedelta(minutes=2), "Our team meeting moved to Thursday afternoon at three."),
    ]
    converse(settings, redis_client, embedder, tenant, "rosa", lines)
    stored = passages_of(settings, tenant, "rosa")
    assert stored == {"rosa-0": [0, 1, 2], "rosa-1": [0], "rosa-2": [0]}
    whole = find(tenant, settings, embedder, user_id="rosa", query="Does she have a new pet?")
    assert ranked_turns(whole)[0] == "rosa-0", [(h.content, h.parts) for h in whole.hits]
    [[cosine]] = [[h.parts["turn_dense"]] for h in whole.hits if h.source_turn_ids == ["rosa-0"]]
    # The kitten sentence alone is nearer the question than the whole message is.
    question, message = embedder.embed(["Does she have a new pet?", f"Rosa: {story}"])
    assert cosine > sum(a * b for a, b in zip(question, message, strict=True)) + 0.05


@pytest.mark.parametrize("apart", [timedelta(minutes=1), timedelta(0)], ids=["timed", "alike"])
def test_the_answer_told_right_after_the_best_match_outranks_the_same_words_elsewhere(
    settings: Settings, redis_client: Any, embedder: Any, tenant: str, apart: timedelta
) -> None:
    # The same reply twice: right after the message naming the vet visit, and two months
    # later in another session (recent, so the recency prior alone ranks it first).
    # Stamped alike (an import with one time per session), the messages keep the order
    # they were sent in, with chatter before them that must not count as their neighbour.
    reply = "She says he needs a lighter diet and longer walks."
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(days=60)
    chatter = [f"Random chatter number {n} about the weather." for n in range(12)]
    lines = [(start, line) for line in chatter] + [
        (start + apart, "Biscuit had his check-up at the vet this morning."),
        (start + 2 * apart, reply),
        (start + timedelta(days=59), "The bakery on our street finally reopened."),
        (start + timedelta(days=59, minutes=1), reply),
    ]
    rows = converse(settings, redis_client, embedder, tenant, "nora", lines)
    with unit_of_work(tenant) as session:
        window = turn_window(session, tenant, "nora", [rows["nora-13"].id], around=2)
    assert [t.external_id for t in window] == ["nora-11", "nora-12", "nora-13"]
    query = "What did the vet say about Biscuit's check-up?"

    def order(boost: float) -> list[str]:
        tuned = settings.model_copy(update={"search_neighbour_boost": boost})
        found = find(tenant, tuned, embedder, user_id="nora", query=query)
        return ranked_turns(found)

    boosted, plain = order(0.5), order(0.0)
    assert boosted[0] == "nora-12"
    assert boosted.index("nora-13") < boosted.index("nora-15"), boosted
    assert plain.index("nora-15") < plain.index("nora-13"), plain
    hit = next(
        h
        for h in find(tenant, settings, embedder, user_id="nora", query=query).hits
        if h.source_turn_ids == ["nora-13"]
    )
    assert hit.parts["neighbours"] == pytest.approx(math.exp(-1 / 4), rel=0.01)


def test_memories_about_the_one_a_question_names_are_found_by_its_named_wording(
    settings: Settings, redis_client: Any, embedder: Any, tenant: str
) -> None:
    # Both speakers adopted a pet; only the memories say who ("Noor adopted a puppy").
    lines = [
        (T0, "I finally adopted a grey kitten, she sleeps all day."),
        (T0 + timedelta(minutes=1), "I finally adopted a little puppy, he chews everything."),
    ]
    rows = converse(
        settings, redis_client, embedder, tenant, "pets", lines, speakers=("Mia", "Noor")
    )
    for turn, said in (
        ("pets-0", "Mia adopted a grey kitten."),
        ("pets-1", "Noor adopted a puppy."),
    ):
        memory_from_turns(tenant, "pets", said, [rows[turn]], settings, embedder)

    def named_leg(query: str, weight: float = 1.0) -> dict[str, float]:
        tuned = settings.model_copy(update={"search_weight_dense_named": weight})
        result = find(tenant, tuned, embedder, user_id="pets", query=query)
        return {
            t: h.parts["memory_dense_named"]
            for h in result.hits
            for t in h.source_turn_ids
            if "memory_dense_named" in h.parts
        }

    asked = named_leg("Which pet did Noor adopt?")
    assert asked.get("pets-1", 0) > asked.get("pets-0", 0), asked
    assert named_leg("Which pet was adopted?") == {}  # no name: no second wording
    assert named_leg("Which pet did Noor adopt?", weight=0.0) == {}
