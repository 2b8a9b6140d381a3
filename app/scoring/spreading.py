"""Spreading activation over shared entities: the second hop of a multi-hop question.

The first hop's best memories activate the entities they mention, each as strongly as the
memory ranked (an entity the question names, as strongly as the best of them); a memory
mentioning an active entity receives that activation, scaled by sqrt(its cosine to the
question) so the hop stays on topic. A memory never activates itself: a distractor that
names an entity nobody else mentions gains nothing, while the fact that shares "Maya" with
the first hop's answer does.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Protocol, TypeVar

# Memory ids, ordered among themselves for ties (a uuid orders as its text does, without
# formatting one per sort key).
M = TypeVar("M", bound=Hashable)


class LinkLike(Protocol):
    @property
    def memory_id(self) -> Hashable: ...
    @property
    def entity_id(self) -> Hashable: ...
    @property
    def named(self) -> bool: ...
    @property
    def cosine(self) -> float: ...


def first_hop(legs: Iterable[tuple[Mapping[M, float], float]], *, k: int) -> dict[M, float]:
    """Σ weight / (k + rank) per memory over (scores, weight) rankings: how strongly the
    first hop found each memory, on the fusion's own scale."""
    found: dict[M, float] = {}
    for scores, weight in legs:
        order = sorted(scores, key=lambda m: (-scores[m], m))  # type: ignore[operator]
        for rank, memory in enumerate(order, start=1):
            found[memory] = found.get(memory, 0.0) + weight / (k + rank)
    return found


def spread(
    activation: Mapping[M, float], links: Sequence[LinkLike], *, limit: int
) -> dict[M, float]:
    """memory → activation it receives through the entities it shares with an activated
    memory (not itself) or the question; the best `limit`."""
    best = max(activation.values(), default=0.0)
    sources: dict[Hashable, list[tuple[float, Hashable | None]]] = {}
    for link in links:
        if link.memory_id in activation:
            sources.setdefault(link.entity_id, []).append(
                (activation[link.memory_id], link.memory_id)
            )
        if link.named and best > 0:
            sources.setdefault(link.entity_id, []).append((best, None))
    received: dict[M, float] = {}
    for link in links:
        strength = max(
            (a for a, source in sources.get(link.entity_id, ()) if source != link.memory_id),
            default=0.0,
        )
        if strength <= 0:
            continue
        value = strength * math.sqrt(max(link.cosine, 0.0))
        memory: M = link.memory_id  # type: ignore[assignment]
        if value > received.get(memory, 0.0):
            received[memory] = value
    ranked = sorted(received.items(), key=lambda kv: (-kv[1], kv[0]))  # type: ignore[operator]
    return dict(ranked[:limit])
