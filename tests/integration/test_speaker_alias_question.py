"""A question that calls a speaker by another name than their display name, over real
Postgres, Redis and the real local model: the chat shows "Emi", the other speaker calls her
Kate ("Hey Kate!"), and the question asks about Kate; or the question misspells a speaker
("Muhammad" for Muhhamed). Either way the speaker's own turn answers, not the turns that
merely say the name (app/text/speaker_names.py, app/layers/episodic/names.py)."""

from __future__ import annotations

from typing import Any

import pytest
from engram_memory_client.models import SearchResults
from fastapi.testclient import TestClient

from app.api.app import create_app
from app.config import Settings
from app.embedding.factory import get_embedder
from app.services.tenants import mint_key
from tests.integration.chats import chat
from tests.integration.test_hybrid_search import find

CALLED = [
    ("elise", "Hey Kate! How was your weekend?"),
    ("Emi", "Busy! I cooked a big pot of ramen for my friends on Saturday."),
    ("elise", "That looks delicious Kate! Did you cook it all by yourself?"),
    ("elise", "I only cook pasta, I read a novel about a chef instead."),
    ("Emi", "Nice, what was it about?"),
    ("elise", "A chef who opens a tiny restaurant. What about you Kate?"),
    ("Emi", "I've been busy at work lately."),
    ("elise", "Talk tomorrow Kate, good night!"),
]
MISSPELLED = [
    ("Akib", "Did you end up going anywhere last week?"),
    ("Muhhamed", "Yes, I drove to the coast and went fishing with my uncle."),
    ("Akib", "Fishing sounds relaxing, I went to the coast too but only to swim."),
    ("Muhhamed", "We caught two big fish."),
]


@pytest.fixture
def embedder(settings: Settings, redis_client: Any) -> Any:
    return get_embedder(settings, redis_client)


def test_a_name_the_other_speaker_calls_her_finds_her_own_turn(
    settings: Settings, redis_client: Any, embedder: Any, tenant: str
) -> None:
    chat(settings, redis_client, embedder, tenant, "called", CALLED)
    result = find(tenant, settings, embedder, user_id="called", query="What did Kate cook?")
    ranked = [t for hit in result.hits for t in hit.source_turn_ids]
    assert ranked[0] == "m1", [(h.content, h.parts) for h in result.hits]
    assert result.hits[0].parts.get("speaker_named") == 1.0
    assert result.names == {"Kate": "Emi"}
    # Another user's chat does not lend its names: there, Kate is nobody.
    chat(settings, redis_client, embedder, tenant, "other", MISSPELLED)
    other = find(tenant, settings, embedder, user_id="other", query="What did Kate cook?")
    assert all(h.parts.get("speaker_named") is None for h in other.hits)
    assert other.names == {}


def test_the_api_says_which_words_it_read_as_a_speaker(
    settings: Settings, redis_client: Any, embedder: Any, tenant: str
) -> None:
    chat(settings, redis_client, embedder, tenant, "called", CALLED)
    key = mint_key(tenant, name="alias tests").key
    with TestClient(create_app(settings)) as client:
        answer = client.post(
            "/v1/search",
            json={"user_id": "called", "query": "What did Kate cook?"},
            headers={"Authorization": f"Bearer {key}"},
        )
    assert answer.status_code == 200, answer.text
    assert answer.json()["names"] == {"Kate": "Emi"}
    assert SearchResults.model_validate(answer.json()).names == {"Kate": "Emi"}


def test_a_misspelled_speaker_is_read_as_them(
    settings: Settings, redis_client: Any, embedder: Any, tenant: str
) -> None:
    chat(settings, redis_client, embedder, tenant, "misspelled", MISSPELLED)
    result = find(
        tenant, settings, embedder, user_id="misspelled", query="Where did Muhammad go fishing?"
    )
    assert result.hits[0].source_turn_ids == ["m1"], [(h.content, h.parts) for h in result.hits]
    assert result.hits[0].parts.get("speaker_named") == 1.0
    assert result.names == {"Muhammad": "Muhhamed"}


def test_any_capitalised_words_are_looked_up_safely(
    settings: Settings, redis_client: Any, embedder: Any, tenant: str
) -> None:
    """Words that tsquery would parse (they are letters only when looked up), non-ASCII names
    and a query of hundreds of capitalised words: answered, never an error."""
    chat(settings, redis_client, embedder, tenant, "odd", MISSPELLED)
    for query in [
        "Did Zoë's Ünïcode Ñame call Akib?",
        "What did Akib:* & Muh!hamed | Fish'n'Chips say?",
        " ".join(f"Name{chr(65 + n % 26)}x" for n in range(400)) + " Akib?",
    ]:
        result = find(tenant, settings, embedder, user_id="odd", query=query)
        assert result.hits, query
