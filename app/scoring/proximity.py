"""Neighbour boost: a turn found near one of the best matches of a question ranks higher.

Evidence clusters in conversation: the answer sits a few messages after the question that
names the topic ("How did the vet visit go?" … "She needs a new diet"), and a story is told
over several messages of which one carries the words the question uses. A turn that some leg
found, within `window` messages of one of the best fused turns in the same session, has its
score multiplied by 1 + boost * (that turn's score / the best score) * exp(-distance /
decay), taking its strongest neighbour, not the sum of them.

Multiplying, not adding, keeps a weak match weak: a session of many poor matches next to one
strong fact must not overtake a good match told in another session (adding a share of the
neighbour's score measured the same recall but pushed such distractors up). Only turns some
leg already found are boosted: the boost reorders candidates, it does not invent them
(boosting unfound neighbours measured the same and costs a read of each). On
bench/conversations.py, boost 0.5 and decay 4 lifted recall@10 on the development split and
held on the held-out one.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, MutableMapping
from typing import TypeVar

T = TypeVar("T", bound=Hashable)


def boost_neighbours(
    scores: MutableMapping[T, float],
    neighbours: Iterable[tuple[T, T, int]],
    *,
    boost: float,
    decay: float,
) -> dict[T, float]:
    """Multiply, in place, the score of each scored neighbour of a scored turn, from
    (turn, neighbour, distance) triples; returns each boosted turn's nearness (0..1).

    Nearness comes from the scores as they were before any boost, so the order the
    triples arrive in does not matter."""
    if boost <= 0 or decay <= 0 or not scores:
        return {}
    before = dict(scores)
    best = max(before.values())
    if best <= 0:
        return {}
    nearness: dict[T, float] = {}
    for turn, neighbour, distance in neighbours:
        if neighbour == turn or neighbour not in before or turn not in before:
            continue
        near = max(before[turn], 0.0) / best * math.exp(-abs(distance) / decay)
        nearness[neighbour] = max(nearness.get(neighbour, 0.0), near)
    for neighbour, near in nearness.items():
        scores[neighbour] = before[neighbour] * (1 + boost * near)
    return nearness
