"""A working-memory member is the turn's JSON, written out by hand: it must stay the JSON."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from app.layers.episodic.message_order import arrival_key
from app.layers.working.store import WorkingTurn

TIMES = st.datetimes(
    min_value=datetime(1970, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
) | st.just(datetime(2026, 1, 1, 12, tzinfo=timezone(timedelta(hours=5, minutes=30))))


@given(st.text(), st.text(), st.text(), st.text(), st.integers(0, 10**9), TIMES, st.text())
def test_a_member_is_the_sorted_compact_json(
    speaker: str, channel: str, content: str, role: str, tokens: int, at: datetime, arrival: str
) -> None:
    turn = WorkingTurn(
        id="6f1c2d4e-8a9b-4c3d-9e2f-0a1b2c3d4e5f",
        role=role,
        speaker=speaker,
        channel=channel,
        content=content,
        tokens=tokens,
        at=at,
        arrival=arrival,
    )
    expected = json.dumps(
        {
            "id": turn.id,
            "role": role,
            "speaker": speaker,
            "channel": channel,
            "content": content,
            "tokens": tokens,
            "at": at.isoformat(),
            "arrival": arrival,
        },
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
    )
    assert turn.member() == expected
    assert WorkingTurn.from_member(turn.member()) == turn


def test_members_of_one_time_sort_in_arrival_order() -> None:
    """Turns of one score sort by member bytes: `arrival` leads, so they keep sending order
    (the entry "…-10" after "…-9", which plain text would put first)."""
    at = datetime(2026, 1, 1, 12, tzinfo=UTC)
    sent = [
        ("1700000000000-9", "zebra"),
        ("1700000000000-10", "apple"),
        ("1700000000001-0", "kiwi"),
    ]
    turns = [
        WorkingTurn(
            id=f"t{n}",
            role="user",
            speaker="Sam",
            channel="c",
            content=said,
            tokens=1,
            at=at,
            arrival=arrival_key(entry),
        )
        for n, (entry, said) in enumerate(sent)
    ]
    assert sorted(turns, key=lambda t: t.member().encode()) == turns
    assert sorted(reversed(turns), key=WorkingTurn.order) == turns
