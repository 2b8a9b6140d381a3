"""A multi-hop question joins two facts about one entity through L4, over the real pipeline
(ingest → score → extract → store with entities) and real Postgres + pgvector."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from app.config import Settings
from app.services.search import SearchRequest, search
from tests.integration.test_small_talk_makes_no_memory import T0, pipeline, say  # noqa: F401

# Other people's pets, told the way the answer is, so only "Maya" tells the answer apart.
DISTRACTORS = [
    f"Guess what, {name} finally adopted a {animal} from the shelter: {pet}!"
    for name, animal, pet in [
        ("Tom", "beagle", "Biscuit"),
        ("Priya", "cat", "Mango"),
        ("Jonas", "parrot", "Kiwi"),
        ("Aiko", "rabbit", "Mochi"),
        ("Bruno", "labrador", "Rocket"),
        ("Chiara", "hamster", "Pepe"),
        ("Dmitri", "husky", "Storm"),
        ("Elena", "tortoise", "Sage"),
        ("Farid", "goldfish", "Bubbles"),
        ("Greta", "poodle", "Coco"),
        ("Hugo", "ferret", "Bandit"),
        ("Ines", "terrier", "Scout"),
    ]
]


def test_a_multi_hop_question_joins_two_facts_about_one_entity(
    settings: Settings,
    tenant: str,
    pipeline: Any,  # noqa: F811
) -> None:
    lines = ["My sister Maya moved to Lisbon last spring for her new job."]
    lines += DISTRACTORS
    lines.append("Guess what, Maya finally adopted a greyhound from the shelter: Pixel!")
    events = [say(tenant, "sam", n, text) for n, text in enumerate(lines)]
    # A day apart: the facts sit in different sessions, as they would in a real archive.
    events[-1]["timestamp"] = (T0 + timedelta(days=3)).isoformat()
    pipeline.ingest_and_store(tenant, "sam", events)

    question = "What kind of pet does my sister in Lisbon have?"
    result = search(
        tenant,
        SearchRequest(user_id="sam", query=question, limit=10),
        settings=settings,
        embedder=pipeline.embed,
    )
    answer = f"sam-{len(lines) - 1}"
    ranked = [t for hit in result.hits for t in hit.source_turn_ids]
    assert ranked[0] == "sam-0", [(h.content, h.parts) for h in result.hits]
    assert answer in ranked[:3], "\n".join(
        f"{h.source_turn_ids} {h.content[:40]} {h.parts}" for h in result.hits
    )
    hit = next(h for h in result.hits if answer in h.source_turn_ids)
    assert "memory_entity" in hit.parts, hit.parts

    without = search(
        tenant,
        SearchRequest(user_id="sam", query=question, limit=10),
        settings=settings.model_copy(update={"search_weight_entity": 0.0}),
        embedder=pipeline.embed,
    )
    ranked_without = [t for hit in without.hits for t in hit.source_turn_ids]
    assert ranked.index(answer) < (
        ranked_without.index(answer) if answer in ranked_without else len(ranked_without)
    )
