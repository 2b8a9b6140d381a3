"""Retrieval maths: BM25, rank fusion, recency and the memory prior."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.scoring.retrieval import (
    PriorWeights,
    bm25,
    idf,
    memory_prior,
    recency,
    reciprocal_rank_fusion,
    weighted_fusion,
)

DEFAULT_WEIGHTS = PriorWeights(importance=0.2, recency=0.1, consolidation=0.1)


# -- bm25 ----------------------------------------------------------------------------------


def _score(query: dict[str, int], doc: dict[str, int], df: dict[str, int], **kw: float) -> float:
    return bm25(
        query, doc, df=df, n_docs=int(kw.get("n_docs", 1000)), avg_len=kw.get("avg_len", 8.0)
    )


def test_more_occurrences_score_higher() -> None:
    df = {"peanut": 10}
    once = _score({"peanut": 1}, {"peanut": 1, "allerg": 1, "daughter": 1}, df)
    twice = _score({"peanut": 1}, {"peanut": 2, "allerg": 1, "daughter": 1}, df)
    assert 0 < once < twice


def test_rarer_term_scores_higher() -> None:
    doc = {"peanut": 1, "budget": 1, "review": 1}
    df = {"peanut": 3, "budget": 400}
    assert _score({"peanut": 1}, doc, df) > _score({"budget": 1}, doc, df) > 0


def test_no_overlap_scores_zero() -> None:
    assert _score({"peanut": 1}, {"budget": 2, "review": 1}, {"peanut": 1}) == 0.0
    assert _score({}, {"budget": 2}, {}) == 0.0
    assert _score({"peanut": 1}, {}, {"peanut": 1}) == 0.0


def test_longer_document_scores_lower_for_the_same_occurrences() -> None:
    df = {"peanut": 5}
    short = _score({"peanut": 1}, {"peanut": 1, "allerg": 1}, df)
    long = _score({"peanut": 1}, {"peanut": 1, **{f"w{i}": 1 for i in range(30)}}, df)
    assert short > long > 0


@given(
    doc=st.dictionaries(st.sampled_from(["peanut", "allerg", "w1", "w2", "w3"]), st.integers(1, 5)),
    query=st.dictionaries(st.sampled_from(["peanut", "allerg", "absent"]), st.integers(1, 3)),
)
def test_the_query_terms_and_the_length_score_as_the_whole_document(
    doc: dict[str, int], query: dict[str, int]
) -> None:
    # The matched rows come back with only the query's terms and the row's length.
    held = {term: count for term, count in doc.items() if term in query}
    df = {"peanut": 4, "allerg": 40, "absent": 1}
    whole = bm25(query, doc, df=df, n_docs=500, avg_len=6.0)
    part = bm25(query, held, df=df, n_docs=500, avg_len=6.0, doc_len=sum(doc.values()))
    assert part == whole


def test_idf_never_negative_even_for_a_term_in_every_document() -> None:
    assert idf(1000, 1000) > 0
    assert idf(5000, 10) > 0  # df above n_docs (capped counts) still positive
    assert idf(1, 1000) > idf(100, 1000)


_term = st.sampled_from(["alpha", "beta", "gamma", "delta", "eps"])


@given(
    query=st.dictionaries(_term, st.integers(1, 3), min_size=1),
    doc=st.dictionaries(_term, st.integers(1, 5)),
    extra=st.integers(1, 5),
    df=st.integers(2, 500),
    n_docs=st.integers(1, 2000),
    avg_len=st.floats(0.5, 50),
)
def test_bm25_properties(
    query: dict[str, int], doc: dict[str, int], extra: int, df: int, n_docs: int, avg_len: float
) -> None:
    dfs = dict.fromkeys(query, df)
    score = bm25(query, doc, df=dfs, n_docs=n_docs, avg_len=avg_len)
    assert score >= 0
    assert (score > 0) == bool(set(query) & set(doc))
    # More occurrences of a query term in a document of the same length score higher: move
    # `extra` occurrences of a word the query lacks onto a query term.
    term = sorted(query)[0]
    base = {**doc, "filler": extra}
    more = {**doc, term: doc.get(term, 0) + extra}
    assert sum(base.values()) == sum(more.values())
    assert bm25(query, more, df=dfs, n_docs=n_docs, avg_len=avg_len) > bm25(
        query, base, df=dfs, n_docs=n_docs, avg_len=avg_len
    )
    # A rarer term weighs more than a common one.
    if set(query) & set(doc):
        n = max(n_docs, df)
        rarer = dict.fromkeys(query, df // 2)
        assert bm25(query, doc, df=rarer, n_docs=n, avg_len=avg_len) > bm25(
            query, doc, df=dfs, n_docs=n, avg_len=avg_len
        )


# -- fusion --------------------------------------------------------------------------------


def test_rrf_scores_by_rank() -> None:
    fused = reciprocal_rank_fusion([["a", "b", "c"], ["b", "a"]], k=60)
    assert fused["a"] == pytest.approx(1 / 61 + 1 / 62)
    assert fused["b"] == pytest.approx(1 / 62 + 1 / 61)
    assert fused["c"] == pytest.approx(1 / 63)


def test_rrf_item_in_both_rankings_beats_one_in_only_one() -> None:
    fused = reciprocal_rank_fusion([["solo", "both"], ["both"]], k=60)
    assert fused["both"] > fused["solo"]


def test_rrf_missing_item_gets_nothing_from_that_ranking() -> None:
    fused = reciprocal_rank_fusion([["a"], [], ["b", "a"]], k=10)
    assert set(fused) == {"a", "b"}
    assert fused["b"] == pytest.approx(1 / 11)
    assert fused["a"] == pytest.approx(1 / 11 + 1 / 12)


def test_rrf_weights_scale_each_ranking() -> None:
    fused = reciprocal_rank_fusion([["dense"], ["lexical"]], k=60, weights=[0.8, 0.2])
    assert fused["dense"] == pytest.approx(0.8 / 61)
    assert fused["lexical"] == pytest.approx(0.2 / 61)
    assert reciprocal_rank_fusion([["x"]], k=60, weights=[0.0]) == {"x": 0.0}


def test_rrf_of_nothing_is_empty() -> None:
    assert reciprocal_rank_fusion([], k=60) == {}
    assert reciprocal_rank_fusion([[], []], k=60) == {}


@given(
    st.lists(st.lists(st.integers(0, 30), unique=True, max_size=15), min_size=1, max_size=4),
    st.integers(1, 200),
)
def test_rrf_properties(rankings: list[list[int]], k: int) -> None:
    fused = reciprocal_rank_fusion(rankings, k=k)
    assert set(fused) == {item for ranking in rankings for item in ranking}
    for ranking in rankings:
        # Within one ranking alone, a better rank never fuses lower.
        alone = reciprocal_rank_fusion([ranking], k=k)
        scores = [alone[item] for item in ranking]
        assert scores == sorted(scores, reverse=True)
    assert all(0 < v <= len(rankings) / (k + 1) + 1e-12 for v in fused.values())


def test_weighted_fusion_adds_weighted_absolute_scores() -> None:
    fused = weighted_fusion([{"a": 0.8, "b": 0.4}, {"b": 0.6, "c": 0.2}], weights=[0.5, 0.5])
    assert fused == pytest.approx({"a": 0.4, "b": 0.5, "c": 0.1})
    assert sorted(fused, key=fused.__getitem__, reverse=True) == ["b", "a", "c"]


def test_weighted_fusion_keeps_a_weak_best_match_weak() -> None:
    # A ranking whose best item is poor must not hand it the ranking's full weight: a strong
    # match from the other ranking stays ahead.
    fused = weighted_fusion([{"strong": 0.7}, {"weak": 0.1}], weights=[0.5, 0.5])
    assert fused["strong"] > fused["weak"]
    assert fused["weak"] == pytest.approx(0.05)


def test_weighted_fusion_missing_items_get_zero_there() -> None:
    fused = weighted_fusion([{"a": 1.0}, {"b": 1.0}], weights=[0.7, 0.3])
    assert fused == pytest.approx({"a": 0.7, "b": 0.3})


def test_weighted_fusion_clamps_scores_to_the_unit_interval() -> None:
    fused = weighted_fusion([{}, {"a": 0.0, "b": -1.0}, {"c": 2.0}], weights=[1.0, 1.0, 1.0])
    assert fused == {"a": 0.0, "b": 0.0, "c": 1.0}


def test_weighted_fusion_needs_a_weight_per_ranking() -> None:
    with pytest.raises(ValueError):
        weighted_fusion([{"a": 1.0}, {"b": 1.0}], weights=[1.0])


@given(
    st.lists(
        st.dictionaries(st.integers(0, 20), st.floats(0, 100, allow_nan=False), max_size=10),
        min_size=1,
        max_size=3,
    ),
    st.data(),
)
def test_weighted_fusion_properties(rankings: list[dict[int, float]], data: st.DataObject) -> None:
    weights = data.draw(st.lists(st.floats(0, 1), min_size=len(rankings), max_size=len(rankings)))
    fused = weighted_fusion(rankings, weights=weights)
    assert set(fused) <= {item for ranking in rankings for item in ranking}
    assert all(0 <= v <= sum(weights) + 1e-9 for v in fused.values())
    if len(rankings) == 1 and weights[0] > 0 and rankings[0]:
        # One ranking alone keeps its order.
        only = rankings[0]
        for x in fused:
            for y in fused:
                if only[x] > only[y]:
                    assert fused[x] >= fused[y]


# -- recency and the prior -----------------------------------------------------------------


def test_recency_is_one_now_and_half_after_a_half_life() -> None:
    assert recency(0, 30) == 1.0
    assert recency(30, 30) == pytest.approx(0.5)
    assert recency(60, 30) == pytest.approx(0.25)
    assert recency(7, 7) == pytest.approx(0.5)


def test_future_timestamps_count_as_now() -> None:
    assert recency(-3, 30) == 1.0
    assert recency(-1e6, 1) == 1.0


@given(st.floats(0, 1e4), st.floats(0, 1e4), st.floats(0.01, 1e3))
def test_recency_is_bounded_and_decreasing(a: float, b: float, half_life: float) -> None:
    older, newer = max(a, b), min(a, b)
    assert 0 <= recency(older, half_life) <= recency(newer, half_life) <= 1


def test_neutral_memory_has_prior_one() -> None:
    neutral = memory_prior(
        importance=0.5, recency_score=0.0, consolidation=0.0, weights=DEFAULT_WEIGHTS
    )
    assert neutral == 1.0
    assert memory_prior(
        importance=0.9,
        recency_score=1.0,
        consolidation=1.0,
        weights=PriorWeights(0.0, 0.0, 0.0),
    ) == pytest.approx(1.0)


def test_prior_is_bounded_below() -> None:
    harsh = PriorWeights(importance=2.0, recency=0.0, consolidation=0.0)
    assert memory_prior(importance=0.0, recency_score=0, consolidation=0, weights=harsh) == 0.1


def test_prior_clamps_out_of_range_inputs() -> None:
    weights = DEFAULT_WEIGHTS
    assert memory_prior(
        importance=7.0, recency_score=3.0, consolidation=9.0, weights=weights
    ) == memory_prior(importance=1.0, recency_score=1.0, consolidation=1.0, weights=weights)
    assert memory_prior(
        importance=-4.0, recency_score=-1.0, consolidation=-2.0, weights=weights
    ) == memory_prior(importance=0.0, recency_score=0.0, consolidation=0.0, weights=weights)


def test_default_prior_cannot_swamp_relevance() -> None:
    """With the default weights the prior stays within [0.9, 1.3]: a memory with twice the
    relevance of another still wins, whatever their importance, age or strength."""
    low = memory_prior(
        importance=0.0, recency_score=0.0, consolidation=0.0, weights=DEFAULT_WEIGHTS
    )
    high = memory_prior(
        importance=1.0, recency_score=1.0, consolidation=1.0, weights=DEFAULT_WEIGHTS
    )
    assert low == pytest.approx(0.9) and high == pytest.approx(1.3)
    assert 2 * low > high


_unit = st.floats(-1, 2, allow_nan=False)
_weights = st.builds(PriorWeights, st.floats(0, 2), st.floats(0, 2), st.floats(0, 2))


@given(_unit, _unit, _unit, _unit, _weights)
def test_prior_properties(
    importance: float, other: float, fresh: float, strength: float, weights: PriorWeights
) -> None:
    prior = memory_prior(
        importance=importance, recency_score=fresh, consolidation=strength, weights=weights
    )
    assert prior >= 0.1 and math.isfinite(prior)
    upper = 1.0 + 0.5 * weights.importance + weights.recency + weights.consolidation
    assert prior <= upper + 1e-12
    # Monotone in importance (and in recency and consolidation).
    lo, hi = sorted((importance, other))
    assert memory_prior(
        importance=lo, recency_score=fresh, consolidation=strength, weights=weights
    ) <= memory_prior(importance=hi, recency_score=fresh, consolidation=strength, weights=weights)
    assert memory_prior(
        importance=importance, recency_score=0.0, consolidation=strength, weights=weights
    ) <= memory_prior(
        importance=importance, recency_score=1.0, consolidation=strength, weights=weights
    )


# -- which query terms select full-text candidates -------------------------------------------


def test_every_term_selects_when_the_statistics_covered_every_row() -> None:
    from app.db.fulltext import _selecting

    terms = {"allerg": 1, "food": 1}
    assert _selecting(terms, {"allerg": 1, "food": 0}, 3, full=True, share=0.05) == [
        "food",
        "allerg",
    ]


def test_over_a_sample_rare_terms_select_and_common_ones_do_not() -> None:
    from app.db.fulltext import _selecting

    terms = {"review": 1, "oskar": 1, "thursday": 1, "kickoff": 1}
    df = {"review": 300, "oskar": 4, "thursday": 20, "kickoff": 0}
    # 500 sampled rows: review (60 %) is common; the rest are taken rarest first while they
    # hold at most 5 % of the rows together (0 + 4 + 20 = 24 ≤ 25).
    assert _selecting(terms, df, 500, full=False, share=0.05) == ["kickoff", "oskar", "thursday"]


def test_over_a_sample_the_rarest_term_selects_even_when_all_are_common() -> None:
    from app.db.fulltext import _selecting

    assert _selecting({"a": 1, "b": 1}, {"a": 400, "b": 300}, 500, full=False, share=0.05) == ["b"]


def test_the_match_share_shrinks_as_the_user_grows() -> None:
    from app.db.fulltext import MAX_MATCH_SHARE, MIN_MATCH_SHARE, match_share

    assert match_share(0) == MAX_MATCH_SHARE  # small users: every term selects anyway
    assert match_share(1_500) == MAX_MATCH_SHARE
    assert MIN_MATCH_SHARE < match_share(5_000) < MAX_MATCH_SHARE
    assert match_share(10_000) == MIN_MATCH_SHARE == match_share(40_000)


@given(st.integers(min_value=1, max_value=10_000_000), st.integers(min_value=1, max_value=1000))
def test_the_rows_a_match_may_hold_are_bounded_and_never_shrink_as_the_user_grows(
    total: int, more: int
) -> None:
    """Big users' matches stay near MAX_MATCH_ROWS rows (each costs a heap fetch and a
    ts_rank); a bigger user never gets fewer rows to rank than a smaller one."""
    from app.db.fulltext import MAX_MATCH_ROWS, match_share

    rows = match_share(total) * total
    assert rows <= MAX_MATCH_ROWS + 1e-6
    assert match_share(total + more) * (total + more) >= rows - 1e-6
