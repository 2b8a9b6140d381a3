"""The attention competition of the awake / salience / dream stream model (design step 3).

Turns that arrive close together compete for the same slot of attention, as in a brain that
can only encode so much at once: inside each user's intervention window the most salient turns
win. Winners that are salient enough are tagged for consolidation (salience stream); weak losers
leave the awake stream; the rest stay. Pure: no Redis, no SQL; the raw turn stays in L2 anyway.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from app.config import Settings


@dataclass(frozen=True)
class Candidate:
    """A scored turn waiting for attention; `salience` is its composite score in [0, 1]."""

    turn_id: str
    tenant_id: str
    user_id: str
    at: datetime
    salience: float

    def __post_init__(self) -> None:
        if not isinstance(self.salience, int | float) or not 0.0 <= self.salience <= 1.0:
            raise ValueError(f"Candidate.salience must be in [0, 1], got {self.salience!r}")
        if not isinstance(self.at, datetime):
            raise ValueError(f"Candidate.at must be a datetime, got {type(self.at).__name__}")

    @property
    def user(self) -> tuple[str, str]:
        """Who competes with whom: the same user id in two tenants is two users."""
        return (self.tenant_id, self.user_id)

    @property
    def at_utc(self) -> datetime:
        """`at` as an aware UTC time; a naive time is taken as UTC (as events are)."""
        if self.at.tzinfo is None:
            return self.at.replace(tzinfo=UTC)
        return self.at.astimezone(UTC)


@dataclass(frozen=True)
class AttentionOutcome:
    """A partition of the candidates: each one is in exactly one of the three tuples.

    * consolidate — winners with salience >= the consolidation threshold (to the salience stream);
    * forget — losers with salience < the forget threshold (leave the awake stream);
    * keep — everything else (weak winners, middling losers).

    Each tuple is ordered by (tenant, user, time, turn id).
    """

    consolidate: tuple[Candidate, ...] = ()
    keep: tuple[Candidate, ...] = ()
    forget: tuple[Candidate, ...] = ()


def _time_order(c: Candidate) -> tuple[str, str, datetime, str]:
    return (c.tenant_id, c.user_id, c.at_utc, c.turn_id)


def _rank(c: Candidate) -> tuple[float, datetime, str]:
    """Winner order: higher salience, then earlier time, then smaller turn id."""
    return (-c.salience, c.at_utc, c.turn_id)


def windows(candidates: Iterable[Candidate], window_s: float) -> list[list[Candidate]]:
    """Split candidates into intervention windows, per user, in time order.

    A window is anchored at its first candidate t0 and covers [t0, t0 + window_s); the first
    candidate at or after t0 + window_s anchors the next window. Anchored at candidates, not at
    clock multiples, so a turn is never split from the turns right after it by an arbitrary
    clock boundary, and a window never spans more than window_s. Users never share a window.
    Windows are formed from the candidates given: pass a user's unsettled turns together.
    """
    if not math.isfinite(window_s) or window_s <= 0:
        raise ValueError(f"window_s must be a positive number of seconds, got {window_s!r}")
    out: list[list[Candidate]] = []
    current: list[Candidate] = []
    anchor: Candidate | None = None
    for c in sorted(candidates, key=_time_order):
        if (
            anchor is None
            or anchor.user != c.user
            or (c.at_utc - anchor.at_utc).total_seconds() >= window_s
        ):
            if current:
                out.append(current)
            current, anchor = [], c
        current.append(c)
    if current:
        out.append(current)
    return out


def compete(
    candidates: Sequence[Candidate],
    *,
    window_s: float,
    consolidate_threshold: float,
    forget_threshold: float,
    winners_per_window: int = 1,
) -> AttentionOutcome:
    """Run the competition and route every candidate to consolidate, keep or forget.

    In each window (see `windows`) the `winners_per_window` best by `_rank` win. Then
        winner and salience >= consolidate_threshold  -> consolidate
        loser  and salience <  forget_threshold       -> forget
        otherwise                                     -> keep
    so a loser is never consolidated and a winner is never forgotten. A (tenant, user, turn id)
    may appear only once: duplicates are a caller bug (dedupe redeliveries first).
    """
    for name, value in (
        ("consolidate_threshold", consolidate_threshold),
        ("forget_threshold", forget_threshold),
    ):
        if not 0.0 <= value <= 1.0:  # also refuses NaN
            raise ValueError(f"{name} must be in [0, 1], got {value!r}")
    if winners_per_window < 1:
        raise ValueError(f"winners_per_window must be >= 1, got {winners_per_window!r}")
    seen: set[tuple[str, str, str]] = set()
    for c in candidates:
        key = (c.tenant_id, c.user_id, c.turn_id)
        if key in seen:
            raise ValueError(f"duplicate candidate turn_id {c.turn_id!r} for user {c.user_id!r}")
        seen.add(key)

    consolidate: list[Candidate] = []
    keep: list[Candidate] = []
    forget: list[Candidate] = []
    for window in windows(candidates, window_s):
        ranked = sorted(window, key=_rank)
        for c in ranked[:winners_per_window]:
            (consolidate if c.salience >= consolidate_threshold else keep).append(c)
        for c in ranked[winners_per_window:]:
            (forget if c.salience < forget_threshold else keep).append(c)
    return AttentionOutcome(
        consolidate=tuple(sorted(consolidate, key=_time_order)),
        keep=tuple(sorted(keep, key=_time_order)),
        forget=tuple(sorted(forget, key=_time_order)),
    )


def compete_with_settings(candidates: Sequence[Candidate], settings: Settings) -> AttentionOutcome:
    """`compete` with the `attention_*` settings."""
    return compete(
        candidates,
        window_s=settings.attention_window_s,
        consolidate_threshold=settings.attention_consolidate_threshold,
        forget_threshold=settings.attention_forget_threshold,
        winners_per_window=settings.attention_winners_per_window,
    )
