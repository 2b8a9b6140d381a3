"""Hebbian weights: the closed form is n steps of w ← w + η(1 - w), stays in [0, 1], rises
monotonically towards 1; weakening is proportional; pairs are ordered, unique and capped."""

from __future__ import annotations

import math
import uuid

from hypothesis import given
from hypothesis import strategies as st

from app.scoring.hebbian import pairs, strengthen, weaken

unit = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
rate = st.floats(min_value=1e-9, max_value=1.0, allow_nan=False, exclude_min=False)


def _iterate(w: float, eta: float, times: int) -> float:
    for _ in range(times):
        w = w + eta * (1 - w)
    return w


def test_one_step_is_the_rule() -> None:
    assert math.isclose(strengthen(0.0, 0.1), 0.1)
    assert math.isclose(strengthen(0.5, 0.1), 0.55)
    assert strengthen(1.0, 0.3) == 1.0
    assert strengthen(0.4, 1.0) == 1.0


def test_closed_form_equals_iterating() -> None:
    for w in (0.0, 0.02, 0.3, 0.9, 0.999):
        for eta in (0.01, 0.1, 0.5, 1.0):
            for times in (0, 1, 2, 7, 50, 300):
                assert math.isclose(
                    strengthen(w, eta, times), _iterate(w, eta, times), rel_tol=1e-12, abs_tol=1e-12
                )


def test_zero_times_changes_nothing() -> None:
    assert strengthen(0.1, 0.5, 0) == 0.1
    assert strengthen(0.1, 0.5, -3) == 0.1


def test_converges_to_one_monotonically_and_never_passes_it() -> None:
    w, previous = 0.0, -1.0
    for _ in range(2000):
        w = strengthen(w, 0.1)
        assert previous <= w <= 1.0
        previous = w
    assert w == 1.0 or 1.0 - w < 1e-12
    assert [strengthen(0.2, 0.05, n) for n in range(100)] == sorted(
        strengthen(0.2, 0.05, n) for n in range(100)
    )


@given(w=unit, eta=rate, times=st.integers(min_value=0, max_value=100_000))
def test_bounded_and_never_weaker(w: float, eta: float, times: int) -> None:
    out = strengthen(w, eta, times)
    assert 0.0 <= out <= 1.0
    assert out >= w
    assert strengthen(w, eta, times + 1) >= out


@given(w=unit, eta=rate, n=st.integers(min_value=0, max_value=60), m=st.integers(0, 60))
def test_batches_compose(w: float, eta: float, n: int, m: int) -> None:
    """Applying n then m co-activations is applying n + m (what batching relies on)."""
    assert math.isclose(
        strengthen(strengthen(w, eta, n), eta, m),
        strengthen(w, eta, n + m),
        rel_tol=1e-9,
        abs_tol=1e-12,
    )


@given(w=unit, factor=st.floats(min_value=0.0, max_value=0.999, allow_nan=False))
def test_weaken_is_proportional_and_bounded(w: float, factor: float) -> None:
    out = weaken(w, factor)
    assert 0.0 <= out <= w
    assert math.isclose(out, w * (1 - factor), abs_tol=1e-15)


def test_pairs_are_ordered_unique_and_drawn_from_the_top() -> None:
    ids = [uuid.uuid4() for _ in range(12)]
    found = pairs(ids, 1000)
    assert len(found) == 12 * 11 // 2
    assert len(set(found)) == len(found)
    assert all(a < b for a, b in found)

    capped = pairs(ids, 45)
    assert len(capped) == 45
    top10 = set(ids[:10])
    assert all(a in top10 and b in top10 for a, b in capped)  # 45 = every pair of the top 10
    assert pairs(ids, 3) == [tuple(sorted(p)) for p in [(ids[0], ids[1]), (ids[0], ids[2]),
                                                        (ids[1], ids[2])]]  # fmt: skip


def test_pairs_of_too_few_or_repeated_ids() -> None:
    a, b = uuid.uuid4(), uuid.uuid4()
    assert pairs([], 10) == []
    assert pairs([a], 10) == []
    assert pairs([a, a, a], 10) == []
    assert pairs([a, b, a, b], 10) == [(min(a, b), max(a, b))]
    assert pairs([a, b], 0) == []


@given(
    ids=st.lists(st.integers(min_value=0, max_value=30), max_size=40),
    cap=st.integers(min_value=0, max_value=500),
)
def test_pairs_property(ids: list[int], cap: int) -> None:
    found = pairs(ids, cap)
    distinct = len(set(ids))
    assert len(found) == min(cap, distinct * (distinct - 1) // 2)
    assert len(set(found)) == len(found)
    assert all(a < b for a, b in found)
