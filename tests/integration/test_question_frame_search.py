"""A question framed by talk ("What drinks did Nicolas mention?") over real Postgres, Redis
and the real local model: it asks for drinks, so the messages about mentioning things do not
outrank the one that names a drink (app/text/question_frame.py)."""

from __future__ import annotations

from typing import Any

import pytest

from app.config import Settings
from app.embedding.factory import get_embedder
from tests.integration.chats import chat
from tests.integration.test_hybrid_search import find


@pytest.fixture
def embedder(settings: Settings, redis_client: Any) -> Any:
    return get_embedder(settings, redis_client)


FRAMED = [
    ("Nebraas", "What did you have for lunch today?"),
    ("Nicolas", "I order an iced matcha latte with oat milk every morning."),
    ("Nebraas", "Oh nice, you mentioned that before I think"),
    ("Nicolas", "Ahh yeah I forgot I mentioned it back then"),
    ("Nebraas", "We talked about it last week, you mentioned it twice lol"),
    ("Nicolas", "Haha I always mention it"),
]


def test_a_question_framed_by_talk_finds_what_it_asks_for(
    settings: Settings, redis_client: Any, embedder: Any, tenant: str
) -> None:
    chat(settings, redis_client, embedder, tenant, "framed", FRAMED)
    result = find(
        tenant, settings, embedder, user_id="framed", query="What drinks did Nicolas mention?"
    )
    assert result.hits[0].source_turn_ids == ["m1"], [(h.content, h.parts) for h in result.hits]
