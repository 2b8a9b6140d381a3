"""Retrieval maths: BM25 over Postgres tsvectors, rank fusion, and the memory prior.

Postgres' `ts_rank` has no inverse document frequency, so a query made of a whole dialogue
turn is dominated by its common words. Engram takes candidates from the GIN index and scores
them here with BM25, using document frequencies counted over the user's own rows.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

K = TypeVar("K", bound=Hashable)
Number = TypeVar("Number", float, np.ndarray)

BM25_K1 = 1.2
BM25_B = 0.75


def idf(df: int, n_docs: int) -> float:
    """BM25's idf with the +1 inside the log, so it never goes negative for common terms."""
    n = max(n_docs, df, 1)
    return math.log(1.0 + (n - df + 0.5) / (df + 0.5))


def bm25(
    query: Mapping[str, int],
    doc: Mapping[str, float],
    *,
    df: Mapping[str, int],
    n_docs: int,
    avg_len: float,
    k1: float = BM25_K1,
    b: float = BM25_B,
    doc_len: float | None = None,
) -> float:
    """`doc` holds the document's terms and counts, the query's at least; `doc_len` its
    length when `doc` holds only those (the sum of `doc`'s counts otherwise)."""
    doc_len = sum(doc.values()) if doc_len is None else doc_len
    scorer = Bm25Query.of(query, df=df, n_docs=n_docs, avg_len=avg_len, k1=k1, b=b)
    return scorer.score(doc, doc_len)


@dataclass(frozen=True)
class Bm25Query:
    """A query's terms with their weights (count in the query times idf), worked out once for
    the hundreds of rows a search scores."""

    weights: dict[str, float]
    avg_len: float
    k1: float = BM25_K1
    b: float = BM25_B

    @classmethod
    def of(
        cls,
        query: Mapping[str, int],
        *,
        df: Mapping[str, int],
        n_docs: int,
        avg_len: float,
        k1: float = BM25_K1,
        b: float = BM25_B,
    ) -> Bm25Query:
        weights = {term: qtf * idf(df.get(term, 1), n_docs) for term, qtf in query.items()}
        return cls(weights, avg_len, k1, b)

    def score(self, doc: Mapping[str, float], doc_len: float) -> float:
        """BM25 of a document holding `doc`'s counts (the query's terms at least), of length
        `doc_len`."""
        k1 = self.k1
        norm = k1 * (1.0 - self.b + self.b * doc_len / max(self.avg_len, 1.0))
        score = 0.0
        for term, weight in self.weights.items():
            tf = doc.get(term, 0)
            if tf:
                score += weight * tf * (k1 + 1.0) / (tf + norm)
        return score


def bm25_ceiling(
    query: Mapping[str, int], *, df: Mapping[str, int], n_docs: int, k1: float = BM25_K1
) -> float:
    """The score a document matching every query term without limit would approach: dividing
    by it puts BM25 on an absolute 0..1 scale (the share of the query's weight matched), so a
    lone match of one common word stays small whatever else the index holds."""
    return sum(qtf * idf(df.get(t, 1), n_docs) * (k1 + 1.0) for t, qtf in query.items())


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[K]], *, k: int, weights: Sequence[float] | None = None
) -> dict[K, float]:
    """Σ weight / (k + rank) over the rankings an item appears in (rank from 1)."""
    fused: dict[K, float] = {}
    for index, ranking in enumerate(rankings):
        weight = 1.0 if weights is None else weights[index]
        for rank, item in enumerate(ranking, start=1):
            fused[item] = fused.get(item, 0.0) + weight / (k + rank)
    return fused


def weighted_fusion(
    scores: Sequence[Mapping[K, float]], *, weights: Sequence[float]
) -> dict[K, float]:
    """Σ weight * score per ranking, scores clamped to [0, 1]; missing from a ranking → 0.

    The scores must already be on absolute scales (cosine; BM25 over its ceiling): dividing
    by each ranking's best would stretch a weak best match to 1 and let it outrank a strong
    match from the other ranking."""
    fused: dict[K, float] = {}
    for ranking, weight in zip(scores, weights, strict=True):
        for item, score in ranking.items():
            fused[item] = fused.get(item, 0.0) + weight * min(max(score, 0.0), 1.0)
    return fused


def recency(age_days: Number, half_life_days: float) -> Number:
    """1 now, ½ after one half-life; future timestamps count as now (scalars or arrays)."""
    if isinstance(age_days, float | int):  # a search's hits: numpy's ufuncs cost more here
        return 0.5 ** (max(age_days, 0.0) / half_life_days)  # type: ignore[return-value]
    return 0.5 ** (np.maximum(age_days, 0.0) / half_life_days)


@dataclass(frozen=True)
class PriorWeights:
    importance: float
    recency: float
    consolidation: float


def memory_prior(
    *, importance: Number, recency_score: Number, consolidation: Number, weights: PriorWeights
) -> Number:
    """Multiplier on the fused relevance: 1 for an average memory, bounded so that the prior
    re-orders near-ties but never lets an important, irrelevant memory outrank a relevant one.

    Importance is centred on 0.5 (the default), so unknown importance changes nothing.
    Works on scalars and on numpy arrays alike (the prefetch path ranks a whole set)."""
    if all(isinstance(x, float | int) for x in (importance, recency_score, consolidation)):
        return max(  # type: ignore[return-value]
            0.1,
            1.0
            + weights.importance * (_clip01(importance) - 0.5)
            + weights.recency * _clip01(recency_score)
            + weights.consolidation * _clip01(consolidation),
        )
    return np.maximum(
        0.1,
        1.0
        + weights.importance * (np.clip(importance, 0.0, 1.0) - 0.5)
        + weights.recency * np.clip(recency_score, 0.0, 1.0)
        + weights.consolidation * np.clip(consolidation, 0.0, 1.0),
    )


def _clip01(value: float) -> float:
    return min(max(value, 0.0), 1.0)
