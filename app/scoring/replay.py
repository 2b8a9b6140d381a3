"""Replay priority and the pure parts of consolidation (clusters, their summary and key).

Replay priority of a memory at time `now`:

    priority = arousal * recency * goal_relevance

    arousal        = FLOOR + (1 - FLOOR) · e        e = emotional intensity in [0, 1], FLOOR = 0.1
    recency        = 0.5 ^ (age_days / 7)            age from the memory's own (producer) time
    goal_relevance = 1 + [kind or a tag ∈ {goal, decision, todo}]      (1 or 2)

The floor keeps calm memories (explicit facts carry no emotion) ordered by recency and goal
relevance instead of all tying at zero; an emotional memory of today about a goal scores 2,
a calm week-old fact 0.05. Everything here is deterministic: ties break on the memory id.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

T = TypeVar("T", bound=Hashable)

AROUSAL_FLOOR = 0.1
RECENCY_HALF_LIFE_DAYS = 7.0
GOAL_KINDS = frozenset({"goal", "decision", "todo"})

# A consolidated memory's text: its members' contents, most central first, each cut to
# MEMBER_CHARS and all of it to CONTENT_CHARS; its summary is the central member's gist.
MEMBER_CHARS = 240
CONTENT_CHARS = 2000
SUMMARY_CHARS = 160
SEPARATOR = " | "


def _unit(x: float) -> float:
    return 0.0 if math.isnan(x) else min(1.0, max(0.0, x))


def recency(age_days: float) -> float:
    """0.5^(age/7): 1 for now (and for the future), halving every week."""
    return float(0.5 ** (max(0.0, age_days) / RECENCY_HALF_LIFE_DAYS))


def goal_relevance(kind: str, tags: Iterable[str] = ()) -> float:
    """2 for what the user is after (a goal, a decision, a todo — by kind or tag), else 1."""
    return 2.0 if kind in GOAL_KINDS or any(t in GOAL_KINDS for t in tags) else 1.0


def arousal(emotional_intensity: float) -> float:
    return AROUSAL_FLOOR + (1.0 - AROUSAL_FLOOR) * _unit(emotional_intensity)


def replay_priority(
    emotional_intensity: float, age_days: float, kind: str, tags: Iterable[str] = ()
) -> float:
    """arousal * recency * goal relevance (see the module docstring)."""
    return arousal(emotional_intensity) * recency(age_days) * goal_relevance(kind, tags)


@dataclass(frozen=True)
class ReplayCandidate:
    """A memory that may be replayed: from a consolidation-tagged turn, or explicit."""

    memory_id: object
    kind: str
    emotional_intensity: float
    occurred_at: datetime
    tags: tuple[str, ...] = ()
    source: str = "salience"  # salience | explicit


@dataclass(frozen=True)
class RankedReplay:
    candidate: ReplayCandidate
    priority: float


def age_days(occurred_at: datetime, now: datetime) -> float:
    return (now - occurred_at).total_seconds() / 86_400.0


def order_replays(
    candidates: Iterable[ReplayCandidate], now: datetime, limit: int
) -> list[RankedReplay]:
    """The `limit` candidates of highest priority, best first (ties: lower id first).

    A memory listed twice (a salience entry and the explicit path) counts once, with the
    higher emotional intensity and as `salience` if either listing was."""
    merged: dict[object, ReplayCandidate] = {}
    for c in candidates:
        seen = merged.get(c.memory_id)
        if seen is None:
            merged[c.memory_id] = c
            continue
        merged[c.memory_id] = ReplayCandidate(
            memory_id=c.memory_id,
            kind=seen.kind,
            emotional_intensity=max(seen.emotional_intensity, c.emotional_intensity),
            occurred_at=seen.occurred_at,
            tags=seen.tags,
            source="salience" if "salience" in (seen.source, c.source) else seen.source,
        )
    ranked = [
        RankedReplay(
            c,
            replay_priority(c.emotional_intensity, age_days(c.occurred_at, now), c.kind, c.tags),
        )
        for c in merged.values()
    ]
    ranked.sort(key=lambda r: (-r.priority, str(r.candidate.memory_id)))
    return ranked[: max(0, limit)]


# -- clusters -----------------------------------------------------------------------------


def connected_components(
    nodes: Iterable[T], edges: Iterable[tuple[T, T]], min_size: int
) -> list[list[T]]:
    """Connected components with at least `min_size` nodes, each sorted, in order of their
    first (smallest) node. Edges naming a node outside `nodes` are ignored."""
    parent: dict[T, T] = {n: n for n in nodes}

    def find(x: T) -> T:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in edges:
        if a not in parent or b not in parent or a == b:
            continue
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb, key=str)] = min(ra, rb, key=str)
    groups: dict[T, list[T]] = {}
    for n in parent:
        groups.setdefault(find(n), []).append(n)
    found = [sorted(g, key=str) for g in groups.values() if len(g) >= min_size]
    found.sort(key=lambda g: str(g[0]))
    return found


def central_member(members: Sequence[T], similarity: Mapping[tuple[T, T], float]) -> T:
    """The member most similar to the others (sum of cosines; pairs keyed either way round);
    ties go to the lowest id."""

    def score(m: T) -> float:
        return sum(similarity.get((m, o), similarity.get((o, m), 0.0)) for o in members if o != m)

    return min(members, key=lambda m: (-score(m), str(m)))


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


@dataclass(frozen=True)
class ClusterText:
    content: str
    summary: str


def cluster_text(ordered_contents: Sequence[str]) -> ClusterText:
    """A consolidated memory's text from its members' contents, most central first.

    content: the members' contents joined (each cut to MEMBER_CHARS, all to CONTENT_CHARS);
    summary: the central member's content cut to SUMMARY_CHARS, plus "(+N related)"."""
    if not ordered_contents:
        raise ValueError("a cluster needs members")
    content = _cut(SEPARATOR.join(_cut(c, MEMBER_CHARS) for c in ordered_contents), CONTENT_CHARS)
    extra = len(ordered_contents) - 1
    summary = _cut(ordered_contents[0], SUMMARY_CHARS) + (f" (+{extra} related)" if extra else "")
    return ClusterText(content=content, summary=summary)


def cluster_key(member_ids: Iterable[object]) -> str:
    """Content hash of a consolidated memory: from its sorted member ids only, so the same
    members can never be consolidated twice (the hash is unique per user)."""
    joined = ",".join(sorted(str(m) for m in member_ids))
    return hashlib.sha256(f"consolidated:{joined}".encode()).hexdigest()


@dataclass(frozen=True)
class ClusterPlan:
    """One tight cluster to merge: members sorted, `ordered` most central first."""

    members: tuple[object, ...]
    ordered: tuple[object, ...]
    key: str
    text: ClusterText


def plan_clusters(
    contents: Mapping[object, str],
    pairs: Iterable[tuple[object, object, float]],
    *,
    min_cosine: float,
    min_size: int,
) -> list[ClusterPlan]:
    """Connected components of cosine ≥ `min_cosine` among the memories of `contents`
    (id → content), of at least `min_size` members, each with its text and key.

    Members are ordered most central first (sum of cosines to the others), then by their
    cosine to the central one, then by id."""
    close = [(a, b, c) for a, b, c in pairs if c >= min_cosine and a in contents and b in contents]
    similarity = {(a, b): c for a, b, c in close}
    plans: list[ClusterPlan] = []
    for members in connected_components(contents, ((a, b) for a, b, _ in close), min_size):
        centre = central_member(members, similarity)
        rest = sorted(
            (m for m in members if m != centre),
            key=lambda m: (
                -similarity.get((centre, m), similarity.get((m, centre), 0.0)),
                str(m),
            ),
        )
        ordered = (centre, *rest)
        plans.append(
            ClusterPlan(
                members=tuple(members),
                ordered=ordered,
                key=cluster_key(members),
                text=cluster_text([contents[m] for m in ordered]),
            )
        )
    return plans


# -- consolidation strength ----------------------------------------------------------------

CONSOLIDATION_GAIN = 0.1


def consolidate(strength: float, gain: float = CONSOLIDATION_GAIN) -> float:
    """One replay: s ← s + gain·(1 - s) — bounded by 1, never lower than before."""
    s = _unit(strength)
    return min(1.0, max(s, s + gain * (1.0 - s)))
