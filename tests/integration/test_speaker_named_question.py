"""A question naming a speaker ("What hobbies does Nicolas have?") over real Postgres, Redis
and the real local model: the query is embedded without the speakers' names, so the turn
that answers it ranks above the speaker's short messages, whose vectors are mostly the name
that leads them (app/text/speaker_names.py). Turns in which the speaker speaks of themselves
rank higher (search_first_person_boost): "what pets does Nebraas have?" is answered by "my
puppy", not by talk about pets in general."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from app.config import Settings
from app.embedding.factory import get_embedder
from tests.integration.chats import chat
from tests.integration.test_hybrid_search import find

T0 = datetime(2024, 2, 5, 20, 0, tzinfo=UTC)
LINES = [
    ("Vanessa", "How was your weekend? I went to the farmers market with my sister."),
    ("Nicolas", "Yeah hes super cool"),
    ("Vanessa", "Did you finish that book you were reading last week?"),
    ("Nicolas", "Cause hes one of the two"),
    ("Vanessa", "My cousin started a new job at the bank downtown."),
    ("Nicolas", "I like to rollerskate at the nearby rink"),
    ("Vanessa", "The traffic this morning was terrible, took me an hour."),
    ("Nicolas", "What kind of bad boy do you think he is"),
]


@pytest.fixture
def embedder(settings: Settings, redis_client: Any) -> Any:
    return get_embedder(settings, redis_client)


def test_the_answering_turn_outranks_the_named_speakers_short_messages(
    settings: Settings, redis_client: Any, embedder: Any, tenant: str
) -> None:
    chat(settings, redis_client, embedder, tenant, "chat", LINES, start=T0)
    result = find(
        tenant, settings, embedder, user_id="chat", query="What hobbies does Nicolas have?"
    )
    ranked = [t for hit in result.hits for t in hit.source_turn_ids]
    assert ranked[0] == "m5", [(h.content, h.parts) for h in result.hits]
    assert result.hits[0].parts.get("speaker_named") == 1.0


PETS_AT = datetime(2024, 3, 9, 18, 0, tzinfo=UTC)
PETS = [
    ("Nebraas", "Pet stores sell puppies and kittens all year round."),
    ("Vanessa", "The shelter downtown has lots of dogs and cats."),
    ("Nebraas", "I'm taking my puppy Steve to the vet tomorrow."),
    ("Vanessa", "Adopting pets from a shelter saves lives."),
    ("Nebraas", "Myself, I'd rather adopt than buy."),
    ("Vanessa", "Mike likes the grey kitten at the store."),
]


def _found(settings: Settings, embedder: Any, tenant: str, boost: float) -> list[Any]:
    tuned = settings.model_copy(update={"search_first_person_boost": boost})
    return find(
        tenant, tuned, embedder, user_id="pets", query="What pets does Nebraas have?", limit=6
    ).hits


def test_a_turn_in_the_first_person_is_marked_and_ranks_higher(
    settings: Settings, redis_client: Any, embedder: Any, tenant: str
) -> None:
    chat(settings, redis_client, embedder, tenant, "pets", PETS, start=PETS_AT)
    plain = _found(settings, embedder, tenant, 0.0)
    boosted = _found(settings, embedder, tenant, 1.0)
    marked = {t for hit in boosted if hit.parts.get("first_person") for t in hit.source_turn_ids}
    assert marked == {"m2", "m4"}, [(h.content, h.parts) for h in boosted]
    assert not any("first_person" in hit.parts for hit in plain)

    def place(hits: list[Any], turn: str) -> int:
        return [t for hit in hits for t in hit.source_turn_ids].index(turn)

    assert place(boosted, "m2") == 0, [(h.content, h.parts) for h in boosted]
    assert place(boosted, "m2") <= place(plain, "m2")
