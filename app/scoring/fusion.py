"""Turn-level rank fusion: every leg votes for source turns, memories through the turns they
cite.

A leg is a ranking of turns (their words, their vectors, the same restricted to a time the
query names) or of memories (their words, their vectors). Reciprocal-rank fusion sums
weight / (k + rank) over the legs a turn appears in, so no leg's score scale can swamp
another's, and a first-ranked match of one leg keeps weight / (k + 1) whatever the others say.
Each vote is scaled by (score / the leg's best score) ** `power`: pure ranks let a leg whose
matches are all weak (one common name in every row) count as much as one with a strong match,
while the ratio to the leg's own best stays scale-free. The power is 1.0, chosen on the two
development sets: from 0.5 to 1.0 REALTALK's conversations 1-7 held (recall@10 0.686 -> 0.685,
MRR 0.596 -> 0.601) and MADial rose (recall@10 0.755 -> 0.772, NDCG@10 0.645 -> 0.651); past
1.3 both fell; the held-out conversations 8-10 confirmed it (recall@10 0.636 -> 0.640,
recall@20 0.693 -> 0.710; bench/conversations.py, bench/quality.py).

A memory lends its rank to the turns it was extracted from (its best `turns_per_memory`,
those the turn legs liked most first), so a turn's gems act as extra keys for it. Within one
leg a turn counts once, at its best rank: twenty memories of one chatty turn are not twenty
votes. A memory citing no turn (said through the API, not in a conversation) stands for
itself.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

# Turn and memory ids: hashable, and ordered among themselves (uuids, text), for ties.
T = TypeVar("T", bound=Hashable)
M = TypeVar("M", bound=Hashable)


@dataclass(frozen=True)
class Leg(Generic[T]):
    """A ranking: item → score (higher is better) and the leg's weight."""

    name: str
    scores: Mapping[T, float]
    weight: float = 1.0


@dataclass
class Fused(Generic[T, M]):
    """Fused relevance per turn and per memory that cites no turn, with what voted for each."""

    turns: dict[T, float] = field(default_factory=dict)
    memories: dict[M, float] = field(default_factory=dict)
    parts: dict[T | M, dict[str, float]] = field(default_factory=dict)
    via: dict[T, list[M]] = field(default_factory=dict)  # memories that lent their rank


def ranked(scores: Mapping[T, float]) -> list[T]:
    """Best first; ties broken by the item so the order is reproducible (a uuid orders as
    its text does, without formatting one per comparison key)."""
    return sorted(scores, key=lambda item: (-scores[item], item))  # type: ignore[no-any-return]


def fuse_turns(
    turn_legs: Sequence[Leg[T]],
    memory_legs: Sequence[Leg[M]],
    sources: Mapping[M, Sequence[T]],
    *,
    k: int,
    turns_per_memory: int,
    power: float = 1.0,
) -> Fused[T, M]:
    """Σ weight / (k + rank) * (score / best) ** power per turn over every leg; see the
    module docstring. (Every search fuses a few hundred votes: the loops keep their lookups
    local.)"""
    fused: Fused[T, M] = Fused()
    turns, memories, parts, via = fused.turns, fused.memories, fused.parts, fused.via
    direct: dict[T, float] = {}
    for leg in turn_legs:
        name = leg.name
        for turn, vote, score in _votes(leg, k, power):
            turns[turn] = turns.get(turn, 0.0) + vote
            direct[turn] = direct.get(turn, 0.0) + vote
            parts.setdefault(turn, {})[name] = round(score, 6)
    for leg in memory_legs:
        name = leg.name
        voted: set[T] = set()
        for memory, vote, score in _votes(leg, k, power):
            cited = sources.get(memory, ())
            if not cited:
                memories[memory] = memories.get(memory, 0.0) + vote
                parts.setdefault(memory, {})[name] = round(score, 6)
                continue
            if len(cited) > 1:
                cited = list(dict.fromkeys(cited))
                preferred = sorted(range(len(cited)), key=lambda i: (-direct.get(cited[i], 0.0), i))
                cited = [cited[i] for i in preferred[:turns_per_memory]]
            else:
                cited = cited[:turns_per_memory]
            shown = round(score, 6)
            for turn in cited:
                lent = via.setdefault(turn, [])
                if memory not in lent:
                    lent.append(memory)
                if turn in voted:
                    continue
                voted.add(turn)
                turns[turn] = turns.get(turn, 0.0) + vote
                parts.setdefault(turn, {})[name] = shown
    return fused


def _votes(leg: Leg[T], k: int, power: float) -> list[tuple[T, float, float]]:
    """(item, its vote, its score) in the leg's rank order."""
    scores = leg.scores
    best = max(scores.values(), default=0.0)
    weight = leg.weight
    order = ranked(scores)
    if best <= 0 or power == 0:
        return [(item, weight / (k + rank), scores[item]) for rank, item in enumerate(order, 1)]
    votes = []
    for rank, item in enumerate(order, 1):
        score = scores[item]
        strength = max(score, 0.0) / best
        if power != 1.0:  # x ** 1.0 is x: the default power skips the call
            strength **= power
        votes.append((item, weight / (k + rank) * strength, score))
    return votes
