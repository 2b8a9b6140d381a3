"""A question naming a speaker ("What hobbies does Nicolas have?") over real Postgres, Redis
and the real local model: the query is embedded without the speakers' names, so the turn
that answers it ranks above the speaker's short messages, whose vectors are mostly the name
that leads them (app/text/speaker_names.py)."""

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
