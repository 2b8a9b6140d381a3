"""The neighbour boost: found turns near the best ones rank higher, weak ones stay weak."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from app.scoring.proximity import boost_neighbours


def test_the_turn_after_the_best_match_overtakes_an_equal_turn_elsewhere() -> None:
    scores = {"question": 1.0, "answer": 0.3, "elsewhere": 0.3}
    nearness = boost_neighbours(
        scores, [("question", "answer", 1), ("question", "other", 2)], boost=0.5, decay=4.0
    )
    assert scores["answer"] > scores["elsewhere"] == 0.3
    assert nearness == {"answer": math.exp(-1 / 4)}
    assert "other" not in scores  # a neighbour no leg found is not invented


def test_the_strongest_neighbour_counts_not_their_sum() -> None:
    alone = {"best": 1.0, "t": 0.2}
    crowd = {"best": 1.0, "t": 0.2, "a": 0.5, "b": 0.5, "c": 0.5}
    boost_neighbours(alone, [("best", "t", 1)], boost=0.5, decay=4.0)
    boost_neighbours(
        crowd,
        [("best", "t", 1), ("a", "t", 1), ("b", "t", 1), ("c", "t", 1)],
        boost=0.5,
        decay=4.0,
    )
    assert crowd["t"] == alone["t"]


def test_nearness_falls_with_distance_and_with_the_neighbours_score() -> None:
    scores = {"best": 1.0, "half": 0.5, "near": 0.1, "far": 0.1, "by_half": 0.1}
    nearness = boost_neighbours(
        scores,
        [("best", "near", 1), ("best", "far", 6), ("half", "by_half", 1)],
        boost=0.5,
        decay=4.0,
    )
    assert nearness["near"] > nearness["by_half"] > 0
    assert nearness["near"] > nearness["far"] > 0
    assert scores["near"] > scores["by_half"] and scores["near"] > scores["far"]


def test_order_of_the_pairs_does_not_matter() -> None:
    pairs = [("a", "b", 1), ("b", "c", 1), ("c", "a", 2)]
    first, second = {"a": 1.0, "b": 0.6, "c": 0.3}, {"a": 1.0, "b": 0.6, "c": 0.3}
    boost_neighbours(first, pairs, boost=0.5, decay=4.0)
    boost_neighbours(second, list(reversed(pairs)), boost=0.5, decay=4.0)
    assert first == second


def test_no_boost_changes_nothing() -> None:
    scores = {"a": 1.0, "b": 0.5}
    assert boost_neighbours(scores, [("a", "b", 1)], boost=0.0, decay=4.0) == {}
    assert scores == {"a": 1.0, "b": 0.5}


@given(
    st.dictionaries(st.integers(0, 30), st.floats(0, 10, allow_nan=False), min_size=1),
    st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30), st.integers(-50, 50))),
    st.floats(0, 4, allow_nan=False),
    st.floats(0.1, 100, allow_nan=False),
)
def test_scores_only_rise_and_by_at_most_the_boost(
    scores: dict[int, float],
    pairs: list[tuple[int, int, int]],
    boost: float,
    decay: float,
) -> None:
    before = dict(scores)
    nearness = boost_neighbours(scores, pairs, boost=boost, decay=decay)
    assert set(scores) == set(before)
    for turn, score in scores.items():
        assert before[turn] <= score <= before[turn] * (1 + boost) + 1e-9
    assert all(0 <= value <= 1 for value in nearness.values())
    assert set(nearness) <= set(before)
