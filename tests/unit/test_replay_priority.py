"""Replay priority (emotion x recency x goal relevance) and the pure cluster helpers."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.scoring.replay import (
    ReplayCandidate,
    cluster_key,
    cluster_text,
    connected_components,
    consolidate,
    goal_relevance,
    order_replays,
    plan_clusters,
    recency,
    replay_priority,
)

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def candidate(
    n: int, kind: str = "fact", emotion: float = 0.0, days: float = 0.0, source: str = "salience"
) -> ReplayCandidate:
    return ReplayCandidate(
        memory_id=uuid.UUID(int=n),
        kind=kind,
        emotional_intensity=emotion,
        occurred_at=NOW - timedelta(days=days),
        source=source,
    )


def test_formula_parts() -> None:
    assert recency(0) == 1.0
    assert recency(7) == pytest.approx(0.5)
    assert recency(14) == pytest.approx(0.25)
    assert recency(-3) == 1.0  # a future date is not fresher than now
    assert goal_relevance("goal") == goal_relevance("decision") == goal_relevance("todo") == 2.0
    assert goal_relevance("fact") == 1.0
    assert goal_relevance("fact", ("todo",)) == 2.0
    assert replay_priority(1.0, 0, "goal") == pytest.approx(2.0)
    assert replay_priority(0.0, 7, "fact") == pytest.approx(0.05)


def test_crafted_ordering() -> None:
    ranked = order_replays(
        [
            candidate(1, "fact", emotion=0.2, days=0),  # calm, today
            candidate(2, "fact", emotion=0.9, days=0),  # intense, today
            candidate(3, "goal", emotion=0.9, days=0),  # intense goal, today
            candidate(4, "fact", emotion=0.9, days=21),  # intense, three weeks old
            candidate(5, "decision", emotion=0.2, days=0),  # calm decision, today
            candidate(6, "fact", emotion=0.0, days=60),  # calm and old
        ],
        NOW,
        limit=10,
    )
    order = [r.candidate.memory_id.int for r in ranked]
    assert order == [3, 2, 5, 1, 4, 6]
    assert all(a.priority >= b.priority for a, b in pairwise(ranked))


def test_limit_ties_and_duplicates() -> None:
    same = [candidate(n, emotion=0.5) for n in (9, 3, 7)]
    ranked = order_replays(same, NOW, limit=2)
    assert [r.candidate.memory_id.int for r in ranked] == [3, 7]  # ties: lower id first
    # One memory from a salience entry and from the explicit path: once, most intense, salience.
    twice = order_replays(
        [
            candidate(1, emotion=0.1, source="explicit"),
            candidate(1, emotion=0.8, source="salience"),
        ],
        NOW,
        limit=5,
    )
    assert len(twice) == 1
    assert twice[0].candidate.source == "salience"
    assert twice[0].priority == pytest.approx(replay_priority(0.8, 0, "fact"))


@given(
    e1=st.floats(0, 1),
    e2=st.floats(0, 1),
    d=st.floats(0, 365),
    kind=st.sampled_from(["fact", "goal", "event", "todo"]),
)
def test_monotone(e1: float, e2: float, d: float, kind: str) -> None:
    low, high = sorted((e1, e2))
    assert replay_priority(low, d, kind) <= replay_priority(high, d, kind) + 1e-12
    assert replay_priority(high, d + 1, kind) <= replay_priority(high, d, kind) + 1e-12
    assert replay_priority(high, d, kind) <= replay_priority(high, d, "goal") + 1e-12
    assert 0 < replay_priority(e1, d, kind) <= 2


def test_consolidation_strength_bounded() -> None:
    s = 0.0
    for _ in range(200):
        t = consolidate(s)
        assert s <= t <= 1.0
        s = t
    assert consolidate(0.0) == pytest.approx(0.1)
    assert consolidate(0.5) == pytest.approx(0.55)


def test_components_and_clusters() -> None:
    a, b, c, d, e = (uuid.UUID(int=n) for n in range(1, 6))
    assert connected_components([a, b, c, d, e], [(a, b), (b, c), (d, e)], 3) == [[a, b, c]]
    assert connected_components([a, b, c, d, e], [(a, b), (b, c), (d, e)], 2) == [
        [a, b, c],
        [d, e],
    ]
    contents = {a: "alpha", b: "beta", c: "gamma", d: "delta"}
    pairs = [(a, b, 0.95), (b, c, 0.97), (a, c, 0.91), (c, d, 0.5), (d, e, 0.99)]
    plans = plan_clusters(contents, pairs, min_cosine=0.9, min_size=3)
    assert len(plans) == 1
    plan = plans[0]
    assert plan.members == (a, b, c)
    assert plan.ordered[0] == b  # most similar to the others (0.95 + 0.97)
    assert plan.ordered == (b, c, a)
    assert plan.key == cluster_key([c, a, b])  # from the member ids alone, in any order
    assert plan.text.content == "beta | gamma | alpha"
    assert plan.text.summary == "beta (+2 related)"


def test_cluster_text_is_bounded() -> None:
    text = cluster_text(["x" * 1000] * 20)
    assert len(text.content) <= 2000
    assert len(text.summary) <= 160 + len(" (+19 related)")
    with pytest.raises(ValueError):
        cluster_text([])
