"""Turns a producer stamped with one time (a whole imported session, or messages sent within
one second) keep the order they were sent in: in working memory, in what extraction reads
as a batch and as the context before it, on the real Redis and Postgres. Their ids are
derived from content, so ordering by time and then id shuffled them."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

from app.config import Settings
from app.db.session import unit_of_work
from app.layers.working.store import WorkingMemoryStore
from tests.integration.test_small_talk_makes_no_memory import T0, pipeline

__all__ = ["pipeline"]  # the real ingest → score → claim → extract → embed → store

# (speaker's role, what was said): four questions, each answered by the other person.
TALK = [
    ("user", "Where is your sister flying next month?"),
    ("assistant", "Lisbon, for a conference."),
    ("assistant", "Which team are you cheering for tonight?"),
    ("user", "The Celtics, obviously."),
    ("user", "How many guests are coming to your party?"),
    ("assistant", "Twelve people."),
    ("assistant", "How long is the drive to the cabin?"),
    ("user", "About three hours without traffic."),
]


def _event(tenant: str, n: int, role: str, content: str) -> dict[str, Any]:
    return {
        "type": "turn",
        "tenant_id": tenant,
        "user_id": "sam",
        "role": role,
        "speaker": "Sam" if role == "user" else "Melanie",
        "content": content,
        "external_id": f"sam-{n}",
        "channel": "chat",
        "timestamp": T0.isoformat(),  # one time for the whole session
    }


def test_a_session_stamped_with_one_time_keeps_the_order_it_was_sent_in(
    settings: Settings, redis_client: Any, pipeline: Any, tenant: str
) -> None:
    events = [_event(tenant, n, role, said) for n, (role, said) in enumerate(TALK)]
    # One turn a batch: each answer's question is only in the context read before it.
    pipeline.ingest_and_store(tenant, "sam", events, batch_turns=1)

    window = WorkingMemoryStore(redis_client, settings).read(tenant, "sam")
    assert window is not None
    assert [t.content for t in window.turns] == [said for _, said in TALK]

    with unit_of_work(tenant) as session:
        memories = {
            r.content: sorted(map(str, r.source_turn_ids))
            for r in session.execute(text("SELECT content, source_turn_ids FROM semantic.memories"))
        }
        ids = dict(session.execute(text("SELECT external_id, id::text FROM episodic.turns")).all())
    # Each answer joined the question asked just before it, whoever asked.
    answered = {
        "Where is Melanie's sister flying in 2026-06? Melanie: Lisbon, for a conference.": "sam-1",
        "Which team is Sam cheering for the night of 2026-05-04? Sam: The Celtics, obviously.": (
            "sam-3"
        ),
        "How many guests are coming to Melanie's party? Melanie: Twelve people.": "sam-5",
        "How long is the drive to the cabin? Sam: About three hours without traffic.": "sam-7",
    }
    for content, answer in answered.items():
        assert memories.get(content) == [ids[answer]], (content, sorted(memories))
