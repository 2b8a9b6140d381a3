"""Procedural confidence, running means and the keys of a procedure (pure functions)."""

from __future__ import annotations

import math
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.scoring.procedural import (
    ProcedureStats,
    confidence,
    normalise_pattern,
    pattern_hash,
    running_mean,
    sequence_hash,
)

unit = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
runs = st.integers(min_value=0, max_value=10_000)

# -- confidence ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("avg_success", "executions", "expected"),
    [
        (0.0, 0, 0.0),
        (0.0, 1000, 0.0),
        (0.5, 0, 0.5),
        (0.5, 1, 0.55),
        (0.5, 4, 0.7),
        (0.5, 5, 0.75),
        (0.5, 10, 1.0),
        (0.5, 30, 1.0),  # clamped
        (0.6, 1, 0.66),
        (0.8, 3, 1.0),  # 0.8 * 1.3 = 1.04, clamped
        (1.0, 1, 1.0),
        (0.25, 20, 0.75),
    ],
)
def test_formula_values(avg_success: float, executions: int, expected: float) -> None:
    assert confidence(avg_success, executions) == pytest.approx(expected, abs=1e-12)


def test_out_of_range_inputs_are_clamped() -> None:
    assert confidence(1.5, 0) == 1.0
    assert confidence(-0.3, 50) == 0.0
    assert confidence(0.5, -7) == 0.5  # negative executions count as none
    assert confidence(math.nan, 10) == 0.0  # never "certain" from a bad number
    assert confidence(math.inf, 0) == 1.0
    assert confidence(1e-300, 10**400) == pytest.approx(1e-300 * (1 + (2**31 - 1) / 10))


def test_the_threshold_is_reached_by_repetition() -> None:
    """A sequence that works half the time becomes suggestable (0.7) at its 4th execution."""
    assert confidence(0.5, 3) < 0.7
    assert confidence(0.5, 4) >= 0.7 - 1e-12


@given(unit, runs)
def test_confidence_is_in_the_unit_interval(avg_success: float, executions: int) -> None:
    assert 0.0 <= confidence(avg_success, executions) <= 1.0


@given(st.floats(allow_nan=True, allow_infinity=True), st.integers())
def test_confidence_is_bounded_for_any_input(avg_success: float, executions: int) -> None:
    assert 0.0 <= confidence(avg_success, executions) <= 1.0


@given(unit, runs, st.integers(min_value=0, max_value=1000))
def test_confidence_is_monotone_in_executions(avg_success: float, n: int, more: int) -> None:
    assert confidence(avg_success, n) <= confidence(avg_success, n + more)


@given(unit, unit, runs)
def test_confidence_is_monotone_in_success(a: float, b: float, executions: int) -> None:
    low, high = sorted((a, b))
    assert confidence(low, executions) <= confidence(high, executions)


# -- running means ---------------------------------------------------------------------------


@given(st.lists(unit, min_size=1, max_size=200))
def test_running_mean_is_the_mean(values: list[float]) -> None:
    mean = 0.0
    for count, value in enumerate(values):
        mean = running_mean(mean, count, value)
    assert mean == pytest.approx(statistics.fmean(values), abs=1e-9)
    assert min(values) - 1e-12 <= mean <= max(values) + 1e-12


def test_stats_after_outcomes() -> None:
    stats = ProcedureStats()
    for success, duration in [(1.0, 100.0), (0.5, 200.0), (0.75, 300.0)]:
        stats = stats.after(success, duration)
    assert stats.executions == 3
    assert stats.avg_success == pytest.approx(0.75)
    assert stats.avg_duration_ms == pytest.approx(200.0)
    assert stats.confidence == pytest.approx(min(0.75 * 1.3, 1.0))


# -- pattern and sequence keys ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("Deploy the web app to staging", "deploy the web app to staging"),
        ("  Deploy   the web\tapp\nto staging!!  ", "deploy the web app to staging"),
        ("¿Deploy the web app to staging?", "deploy the web app to staging"),
        ('"open report.pdf"', "open report.pdf"),  # inner punctuation is kept
        ("Upgrade to v1.2.", "upgrade to v1.2"),
        ("\uff24\uff25\uff30\uff2c\uff2f\uff39", "deploy"),  # full-width forms
        ("?!...", ""),
        ("", ""),
    ],
)
def test_normalise_pattern(query: str, expected: str) -> None:
    assert normalise_pattern(query) == expected


@given(st.text(max_size=80))
def test_normalise_is_idempotent(query: str) -> None:
    once = normalise_pattern(query)
    assert normalise_pattern(once) == once
    assert pattern_hash(query) == pattern_hash(once)


def test_pattern_hash_ignores_case_spacing_and_end_punctuation() -> None:
    assert pattern_hash("Deploy the web app to staging!") == pattern_hash(
        "deploy  the web app to staging"
    )
    assert pattern_hash("deploy the web app to staging") != pattern_hash("deploy the web app")
    assert len(pattern_hash("x")) == 64


def test_sequence_hash_is_canonical() -> None:
    a = [{"tool": "git.push", "args": {"branch": "main", "force": False}}, "deploy"]
    b = [{"args": {"force": False, "branch": "main"}, "tool": "git.push"}, {"tool": " deploy "}]
    assert sequence_hash(a) == sequence_hash(b)  # key order, bare names, padding
    assert sequence_hash(a) != sequence_hash(list(reversed(a)))  # step order matters
    assert sequence_hash(["search"]) != sequence_hash([{"tool": "search", "args": {"q": 1}}])
    assert len(sequence_hash(a)) == 64


def test_sequence_hash_refuses_what_json_cannot_hold() -> None:
    with pytest.raises(ValueError):
        sequence_hash([{"tool": "x", "threshold": math.nan}])
    with pytest.raises(TypeError):
        sequence_hash([{"tool": "x", "when": object()}])
