"""Session windows never overflow: any timestamp datetime can hold, any idle timeout.

The door keeps event times inside 1970..2200, but the arithmetic does not rely on it: a turn
at datetime's own limits, or an idle timeout of centuries, still gets a session.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from app.layers.episodic.sessions import SessionSpan, TurnRef, assign_sessions, session_window

EARLIEST = datetime.min.replace(tzinfo=UTC)
LATEST = datetime.max.replace(tzinfo=UTC)
TIMES = st.datetimes(timezones=st.just(UTC))
IDLES = st.one_of(
    st.timedeltas(min_value=timedelta(seconds=1), max_value=timedelta(days=1)),
    st.timedeltas(min_value=timedelta(seconds=1)),
)


def ref(at: datetime, user: str = "alice") -> TurnRef:
    return TurnRef(uuid.uuid5(uuid.NAMESPACE_URL, f"{user}/{at.isoformat()}"), user, at, "web")


def test_window_at_the_limits_of_datetime_saturates() -> None:
    idle = timedelta(minutes=30)
    assert session_window([EARLIEST, LATEST], idle) == (EARLIEST, LATEST)
    near = EARLIEST + timedelta(minutes=10)
    assert session_window([near], idle) == (EARLIEST, near + idle)


def test_turns_at_the_limits_get_sessions() -> None:
    idle = timedelta(days=365_000)
    turns = [ref(EARLIEST), ref(EARLIEST + timedelta(minutes=1)), ref(LATEST)]
    assignment = assign_sessions(turns, [], idle)
    assert set(assignment.mapping) == {t.id for t in turns}


@given(times=st.lists(TIMES, min_size=1, max_size=6), idle=IDLES)
def test_window_holds_every_time_and_never_raises(times: list[datetime], idle: timedelta) -> None:
    lo, hi = session_window(times, idle)
    assert lo <= min(times) and max(times) <= hi
    assert lo == EARLIEST or min(times) - lo == idle
    assert hi == LATEST or hi - max(times) == idle


@given(
    times=st.lists(TIMES, min_size=1, max_size=6),
    stored=st.lists(st.tuples(TIMES, TIMES), max_size=3),
    idle=IDLES,
)
def test_assignment_never_overflows(
    times: list[datetime], stored: list[tuple[datetime, datetime]], idle: timedelta
) -> None:
    spans = [
        SessionSpan(id=uuid.uuid4(), user_id="alice", started_at=min(a, b), last_turn_at=max(a, b))
        for a, b in stored
    ]
    turns = [ref(at) for at in times]
    assignment = assign_sessions(turns, spans, idle)
    assert set(assignment.mapping) == {t.id for t in turns}
