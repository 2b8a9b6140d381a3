"""Which session a turn belongs to: pure logic, so it can be tested without a database.

A session is a run of one user's turns (across channels) with no gap longer than the idle
timeout. Turns carry their producer's timestamp, so backfilled history lands in the session of
its own time, not in today's. A backfilled turn that bridges two sessions (within the idle
timeout of both) merges them into the earlier one. A new session's id derives from its first
turn's id, so a replayed batch recreates the same session rather than a twin.

Windows are compared as differences of times (`at - last <= idle`), never as shifted times
(`last + idle`), and `session_window` saturates: no timestamp, however near datetime's own
limits, and no idle timeout, however long, can make the arithmetic overflow.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

SESSION_NAMESPACE = uuid.UUID("0b8f3c1e-5d2a-4e7b-9c6f-1a2b3c4d5e6f")
_EARLIEST = datetime.min.replace(tzinfo=UTC)
_LATEST = datetime.max.replace(tzinfo=UTC)


def _shift(at: datetime, delta: timedelta) -> datetime:
    """`at + delta`, held at datetime's own range instead of raising OverflowError."""
    try:
        return at + delta
    except OverflowError:
        return _LATEST if delta > timedelta(0) else _EARLIEST


def session_window(times: Iterable[datetime], idle: timedelta) -> tuple[datetime, datetime]:
    """[earliest - idle, latest + idle]: where stored sessions a batch may touch can lie."""
    seen = list(times)
    return _shift(min(seen), -idle), _shift(max(seen), idle)


def _within(earlier: datetime, later: datetime, idle: timedelta) -> bool:
    """`later - earlier <= idle`: a difference of times cannot overflow, a shifted time can."""
    return later - earlier <= idle


@dataclass
class SessionSpan:
    id: uuid.UUID
    user_id: str
    started_at: datetime
    last_turn_at: datetime
    channels: set[str] = field(default_factory=set)
    is_new: bool = False
    touched: bool = False

    def covers(self, at: datetime, idle: timedelta) -> bool:
        return _within(at, self.started_at, idle) and _within(self.last_turn_at, at, idle)

    def extend(self, at: datetime, channel: str) -> None:
        self.started_at = min(self.started_at, at)
        self.last_turn_at = max(self.last_turn_at, at)
        self.channels.add(channel)
        self.touched = True


@dataclass(frozen=True)
class TurnRef:
    id: uuid.UUID
    user_id: str
    occurred_at: datetime
    channel: str


@dataclass
class Assignment:
    mapping: dict[uuid.UUID, uuid.UUID]  # turn id → session id
    touched: list[SessionSpan]  # sessions to create or widen
    merged: dict[uuid.UUID, uuid.UUID]  # stored session id → the session it was merged into


def _merge_bridged(
    span: SessionSpan, spans: list[SessionSpan], idle: timedelta
) -> tuple[SessionSpan, list[SessionSpan]]:
    """Fold every span now within idle of `span` into the earliest of them."""
    group = [
        s
        for s in spans
        if s is span
        or (
            _within(span.last_turn_at, s.started_at, idle)
            and _within(s.last_turn_at, span.started_at, idle)
        )
    ]
    if len(group) == 1:
        return span, []
    keeper = min(group, key=lambda s: (s.started_at, str(s.id)))
    losers = [s for s in group if s is not keeper]
    for loser in losers:
        keeper.started_at = min(keeper.started_at, loser.started_at)
        keeper.last_turn_at = max(keeper.last_turn_at, loser.last_turn_at)
        keeper.channels |= loser.channels
        keeper.touched = True
        spans.remove(loser)
    return keeper, losers


def assign_sessions(
    turns: Iterable[TurnRef], existing: Iterable[SessionSpan], idle: timedelta
) -> Assignment:
    """Map each turn to a session, widening, creating and merging sessions as needed."""
    by_user: dict[str, list[SessionSpan]] = {}
    for span in existing:
        by_user.setdefault(span.user_id, []).append(span)
    mapping: dict[uuid.UUID, uuid.UUID] = {}
    redirect: dict[uuid.UUID, uuid.UUID] = {}
    merged: dict[uuid.UUID, uuid.UUID] = {}
    # A UUID's integer orders as its text does (fixed-width hex), without formatting it.
    for turn in sorted(turns, key=lambda t: (t.user_id, t.occurred_at, t.id.int)):
        spans = by_user.setdefault(turn.user_id, [])
        candidates = [s for s in spans if s.covers(turn.occurred_at, idle)]
        if candidates:
            span = max(candidates, key=lambda s: s.last_turn_at)
        else:
            span = SessionSpan(
                id=uuid.uuid5(SESSION_NAMESPACE, str(turn.id)),
                user_id=turn.user_id,
                started_at=turn.occurred_at,
                last_turn_at=turn.occurred_at,
                is_new=True,
            )
            spans.append(span)
        span.extend(turn.occurred_at, turn.channel)
        mapping[turn.id] = span.id
        keeper, losers = _merge_bridged(span, spans, idle)
        for loser in losers:
            redirect[loser.id] = keeper.id
            if not loser.is_new:
                merged[loser.id] = keeper.id

    def final(session_id: uuid.UUID) -> uuid.UUID:
        while session_id in redirect:
            session_id = redirect[session_id]
        return session_id

    touched = [s for spans in by_user.values() for s in spans if s.touched]
    return Assignment(
        mapping={turn_id: final(sid) for turn_id, sid in mapping.items()},
        touched=touched,
        merged={old: final(new) for old, new in merged.items()},
    )
