"""The conversation benchmark's metrics: recall@k over distinct turns, MRR, any/all@10."""

from __future__ import annotations

import math

import pytest

from tests.bench_modules import load_bench

realtalk = load_bench("_realtalk")


def test_recall_counts_distinct_turns() -> None:
    ranked = ["D1:1", "D1:1", "D1:2", "D1:1", "D1:3", "D1:4", "D1:5", "D2:9"]
    scores = realtalk.score(ranked, {"D1:1", "D2:9"})
    # Repeats are dropped before cutting: D2:9 is the 6th distinct turn, not the 8th entry.
    assert scores["recall@5"] == 0.5
    assert scores["recall@10"] == 1.0
    assert scores["recall@20"] == 1.0
    assert scores["any@10"] == 1.0
    assert scores["all@10"] == 1.0
    assert scores["mrr"] == 1.0


def test_mrr_any_all() -> None:
    ranked = [f"D1:{n}" for n in range(1, 16)]
    scores = realtalk.score(ranked, {"D1:3", "D1:12", "D9:9"})
    assert scores["mrr"] == pytest.approx(1 / 3)
    assert scores["recall@10"] == pytest.approx(1 / 3)
    assert scores["recall@20"] == pytest.approx(2 / 3)
    assert scores["any@10"] == 1.0
    assert scores["all@10"] == 0.0
    none = realtalk.score(ranked, {"D9:9"})
    assert none["mrr"] == 0.0 and none["any@10"] == 0.0 and none["recall@20"] == 0.0
    assert realtalk.score([], {"D1:1"})["mrr"] == 0.0
    with pytest.raises(ValueError):
        realtalk.score(ranked, set())


def test_evaluate_and_split_means() -> None:
    def question(conversation: int, category: int, evidence: set[str]) -> object:
        return realtalk.Question(
            conversation, f"realtalk-{conversation}", "q", "a", category, frozenset(evidence)
        )

    questions = [question(1, 1, {"D1:1"}), question(8, 2, {"D1:9"})]
    metrics = realtalk.evaluate(questions, lambda user, text: ["D1:1", "D1:2"])
    assert metrics.mean("recall@10") == 0.5
    assert metrics.mean("recall@10", category=1) == 1.0
    assert metrics.only({8}).mean("mrr") == 0.0
    assert math.isnan(metrics.mean("recall@10", category=3))
    assert metrics.summary()["cat2 recall@10"] == 0.0


def test_evidence_parsing_and_rrf() -> None:
    raw = ["D5:3.", "D5:12;D5:16", "D12:3-D12:5", "D 2:18", "23:29", "D13:45:D20:19", "D:56"]
    assert realtalk.parse_evidence(raw) == [
        "D5:3",
        "D5:12",
        "D5:16",
        "D12:3",
        "D12:4",
        "D12:5",
        "D2:18",
        "D23:29",
        "D13:45",
        "D20:19",
    ]
    assert realtalk.rrf([["a", "b"], ["b", "c"]]) == ["b", "a", "c"]
    assert realtalk.in_context("Hello   there, HOW are you", "x hello there, how are you? y")
