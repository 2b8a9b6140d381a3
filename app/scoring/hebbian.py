"""Hebbian learning on memory↔memory edges: bounded strengthening, proportional weakening.

Memories that are retrieved together strengthen their edge by w ← w + η(1 - w): each
co-activation closes a share η of the gap to 1, so a weight approaches 1 and never passes
it, however often the pair fires. n co-activations at once are the closed form
1 - (1 - w)(1 - η)ⁿ, which is what the database computes when it applies a batch.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, TypeVar

T = TypeVar("T", bound=Hashable)


def strengthen(w: float, eta: float, times: int = 1) -> float:
    """`w` after `times` co-activations at rate `eta`: 1 - (1 - w)(1 - η)^times.

    Never lower than `w` (a rounding of the closed form could otherwise take a hair off a
    weight when η is tiny) and never above 1."""
    if times <= 0:
        return w
    return min(1.0, max(w, 1.0 - (1.0 - w) * (1.0 - eta) ** times))


def weaken(w: float, factor: float) -> float:
    """`w` after one pass without co-activation: it loses the share `factor` of itself."""
    return min(1.0, max(0.0, w * (1.0 - factor)))


def pairs(ids: Sequence[T], max_pairs: int) -> list[tuple[T, T]]:
    """Unique unordered pairs of `ids` (ranked best first), each as (min, max), at most
    `max_pairs` of them.

    Pairs come in order of their lower-ranked member — (1st, 2nd), (1st, 3rd), (2nd, 3rd),
    (1st, 4th), … — so a cap keeps exactly the pairs among the top hits. Repeated ids count
    once, at their best rank."""
    unique: list[T] = list(dict.fromkeys(ids))
    out: list[tuple[T, T]] = []
    if max_pairs <= 0:
        return out
    for j in range(1, len(unique)):
        for i in range(j):
            a, b = unique[i], unique[j]
            out.append((a, b) if _lt(a, b) else (b, a))
            if len(out) >= max_pairs:
                return out
    return out


def _lt(a: Any, b: Any) -> bool:
    return bool(a < b)
