"""The forgetting curve: known values, and what slows it down."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.scoring.decay import decayed, half_life_days


def test_an_unused_plain_memory_halves_every_base_half_life() -> None:
    h = half_life_days(30, access_count=0, emotional_intensity=0, consolidation=0)
    assert h == 30
    assert decayed(0.8, idle_days=30, half_life=h) == pytest.approx(0.4)
    assert decayed(0.8, idle_days=90, half_life=h) == pytest.approx(0.1)
    assert decayed(0.8, idle_days=0, half_life=h) == 0.8


def test_use_feeling_and_consolidation_stretch_the_half_life() -> None:
    assert half_life_days(30, access_count=1, emotional_intensity=0, consolidation=0) == (
        pytest.approx(30 * (1 + math.log(2)))
    )
    assert half_life_days(30, access_count=0, emotional_intensity=1, consolidation=0) == 60
    assert half_life_days(30, access_count=0, emotional_intensity=0, consolidation=1) == 90
    assert half_life_days(30, access_count=0, emotional_intensity=0.5, consolidation=0.5) == 90


def test_future_access_does_not_grow_importance() -> None:
    assert decayed(0.5, idle_days=-3, half_life=30) == 0.5


@given(
    st.floats(0, 1),
    st.floats(0, 3650),
    st.floats(0, 3650),
    st.floats(1, 1000),
)
def test_two_steps_equal_one_step_of_their_sum(w: float, a: float, b: float, h: float) -> None:
    once = decayed(w, idle_days=a + b, half_life=h)
    twice = decayed(decayed(w, idle_days=a, half_life=h), idle_days=b, half_life=h)
    assert twice == pytest.approx(once, abs=1e-12)
    assert 0 <= once <= w
