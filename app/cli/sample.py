"""A short sample history for the demo: two users, two channels, three sessions, a few events.

Timestamps are fixed in the past, as in a backfill: each turn keeps its own time, so sessions
are cut where the conversation really paused. Re-running the demo re-sends the same events with
the same ids, and nothing is stored twice.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

TENANT = "demo"
_DAY1 = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)
_DAY2 = datetime(2026, 11, 21, 18, 30, tzinfo=UTC)

_CONVERSATION: list[tuple[str, datetime, str, str, str]] = [
    # user, time, channel, role, content
    ("alice", _DAY1, "web", "user", "Morning! I'm planning the Lisbon offsite for the data team."),
    (
        "alice",
        _DAY1 + timedelta(minutes=1),
        "web",
        "assistant",
        "Happy to help. How many people, and which dates are you considering?",
    ),
    (
        "alice",
        _DAY1 + timedelta(minutes=2),
        "web",
        "user",
        "Twelve people, the week of March 9. I prefer hotels within walking distance of Alfama.",
    ),
    (
        "alice",
        _DAY1 + timedelta(minutes=3),
        "web",
        "assistant",
        "Noted: 12 people, week of March 9, walking distance to Alfama.",
    ),
    (
        "alice",
        _DAY1 + timedelta(minutes=5),
        "slack",
        "user",
        "Switching to Slack. We decided the budget is 1,800 euros per person, flights included.",
    ),
    (
        "alice",
        _DAY1 + timedelta(minutes=6),
        "slack",
        "assistant",
        "Got it, 1,800 EUR per person including flights.",
    ),
    (
        "alice",
        _DAY2,
        "slack",
        "user",
        "Back again. Bruno is vegetarian, so the team dinner needs a good veggie menu.",
    ),
    (
        "alice",
        _DAY2 + timedelta(minutes=1),
        "slack",
        "assistant",
        "I'll only shortlist restaurants with strong vegetarian options.",
    ),
    (
        "alice",
        _DAY2 + timedelta(minutes=3),
        "web",
        "user",
        "Todo for me: send the shortlist to finance by Friday.",
    ),
    (
        "bob",
        _DAY1 + timedelta(hours=2),
        "web",
        "user",
        "Our Postgres replica lags by 40 seconds during the nightly batch.",
    ),
    (
        "bob",
        _DAY1 + timedelta(hours=2, minutes=1),
        "web",
        "assistant",
        "Is the batch one large transaction, or many small ones?",
    ),
    (
        "bob",
        _DAY1 + timedelta(hours=2, minutes=2),
        "web",
        "user",
        "One big transaction. We use pgvector for search on the same cluster.",
    ),
    (
        "bob",
        _DAY2 + timedelta(hours=1),
        "web",
        "user",
        "We split the batch into chunks of 10k rows and the lag dropped to 2 seconds!",
    ),
]


def sample_events() -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for index, (user, at, channel, role, content) in enumerate(_CONVERSATION):
        if role == "user":
            events.append(
                {
                    "type": "typing_start",
                    "tenant_id": TENANT,
                    "user_id": user,
                    "channel": channel,
                    "timestamp": (at - timedelta(seconds=5)).isoformat(),
                }
            )
        events.append(
            {
                "type": "turn",
                "tenant_id": TENANT,
                "user_id": user,
                "role": role,
                "speaker": user.title() if role == "user" else "Engram assistant",
                "content": content,
                "channel": channel,
                "external_id": f"sample-{index:03d}",
                "timestamp": at.isoformat(),
            }
        )
    events.append(
        {
            "type": "channel_switch",
            "tenant_id": TENANT,
            "user_id": "alice",
            "from_channel": "web",
            "channel": "slack",
            "timestamp": (_DAY1 + timedelta(minutes=4)).isoformat(),
        }
    )
    events.append(
        {
            "type": "tool_run",
            "tenant_id": TENANT,
            "user_id": "bob",
            "tool": "explain_analyze",
            "arguments": {"query": "nightly batch"},
            "success": True,
            "duration_ms": 840.0,
            "timestamp": (_DAY2 + timedelta(hours=1, minutes=1)).isoformat(),
        }
    )
    return events


def sample_turn_count() -> int:
    return len(_CONVERSATION)
