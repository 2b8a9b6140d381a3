"""Spreading activation over shared entities (app/scoring/spreading.py)."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from app.scoring.spreading import first_hop, spread


@dataclass(frozen=True)
class L:
    memory_id: str
    entity_id: str
    named: bool = False
    cosine: float = 1.0


def test_first_hop_sums_weighted_reciprocal_ranks() -> None:
    found = first_hop([({"a": 0.9, "b": 0.5}, 1.0), ({"b": 0.7}, 2.0)], k=60)
    assert found["a"] == 1 / 61
    assert found["b"] == 1 / 62 + 2 / 61


def test_the_second_hop_reaches_the_fact_sharing_an_entity() -> None:
    links = [L("sister-in-lisbon", "maya"), L("maya-adopted", "maya", cosine=0.25)]
    received = spread({"sister-in-lisbon": 0.04}, links, limit=10)
    assert received == {"maya-adopted": 0.04 * 0.5}


def test_a_named_entity_activates_as_strongly_as_the_best_seed() -> None:
    links = [L("fact", "lisbon", named=True, cosine=1.0)]
    assert spread({"seed": 0.03, "other": 0.01}, links, limit=10) == {"fact": 0.03}
    assert spread({}, links, limit=10) == {}


def test_the_limit_keeps_the_strongest() -> None:
    links = [L("seed", "e")] + [L(f"m{n}", "e", cosine=n / 10) for n in range(1, 10)]
    received = spread({"seed": 1.0}, links, limit=3)
    assert list(received) == ["m9", "m8", "m7"]


@given(
    st.lists(
        st.tuples(st.sampled_from("abcdef"), st.sampled_from("xyz"), st.floats(-1, 1)),
        max_size=30,
    ),
    st.dictionaries(st.sampled_from("abcdef"), st.floats(0.001, 1), max_size=6),
)
def test_a_memory_never_activates_itself(
    raw: list[tuple[str, str, float]], activation: dict[str, float]
) -> None:
    links = [L(m, e, cosine=c) for m, e, c in raw]
    received = spread(activation, links, limit=100)
    for memory, value in received.items():
        others = {
            activation[link.memory_id]
            for link in links
            if link.memory_id in activation
            and link.memory_id != memory
            and any(o.memory_id == memory and o.entity_id == link.entity_id for o in links)
        }
        assert others and value <= max(others) + 1e-12
