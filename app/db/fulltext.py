"""BM25 candidates from a Postgres full-text (GIN) index, for any layer's table.

Two statements: the query's lexemes with their document frequencies in the caller's scope
(one user's rows), then the rows matching any lexeme, with their tsvectors for scoring in
Python (`app.scoring.retrieval.bm25`). Table, vector expression and scope clause come from the
layer's own constants, never from input; the query text travels only as a bound parameter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from app.scoring.retrieval import bm25, bm25_ceiling, tsvector_terms

MAX_QUERY_TERMS = 48
DF_CAP = 10_000  # beyond this a term is common whatever the exact count
STATS_SAMPLE = 500


@dataclass(frozen=True)
class FulltextScope:
    """Where to search: `table` holds rows with an `id`; `vector` is their tsvector
    expression; `where` is the scope predicate (bound parameters supplied per call)."""

    table: str
    vector: str
    where: str


# The lexeme as a quoted tsquery operand (quote_literal would give E'' strings tsquery rejects).
_QUOTED_LEXEME = (
    r"CAST('''' || replace(replace(q.lexeme, '\', '\\'), '''', '''''') || '''' AS tsquery)"
)


def _tsquery(lexemes: list[str]) -> str:
    """OR of the lexemes, each quoted so that no character is read as tsquery syntax."""
    return " | ".join(
        "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'" for lexeme in lexemes
    )


def bm25_candidates(
    session: Session,
    scope: FulltextScope,
    params: dict[str, Any],
    *,
    query: str,
    limit: int,
) -> dict[Any, float]:
    """id → BM25 score over its ceiling (0..1) for up to `limit` rows of the scope matching
    any query term."""
    stats = session.execute(
        text(
            "WITH q AS (SELECT lexeme, coalesce(cardinality(positions), 1) AS tf"  # noqa: S608
            "  FROM unnest(to_tsvector('english'::regconfig, :query)) LIMIT :max_terms)"
            " SELECT q.lexeme, q.tf, (SELECT count(*) FROM (SELECT 1 FROM"
            f"  {scope.table} WHERE {scope.where}"
            f"  AND {scope.vector} @@ {_QUOTED_LEXEME}"
            "  LIMIT :df_cap) AS d) AS df FROM q"
        ),
        {**params, "query": query[:20_000], "max_terms": MAX_QUERY_TERMS, "df_cap": DF_CAP},
    ).all()
    if not stats:
        return {}
    terms = {row.lexeme: int(row.tf) for row in stats if row.df > 0}
    if not terms:
        return {}
    df = {row.lexeme: int(row.df) for row in stats}
    # The ceiling counts every query term, found or not: words of the query that no row holds
    # are part of what was asked, so a row matching one common word scores low.
    everything = {row.lexeme: int(row.tf) for row in stats}
    size = session.execute(
        text(
            "SELECT count(*) AS n, avg(length(v)) AS avg_len FROM"  # noqa: S608
            f" (SELECT {scope.vector} AS v FROM {scope.table} WHERE {scope.where}"
            "  LIMIT :sample) AS s"
        ),
        {**params, "sample": STATS_SAMPLE},
    ).one()
    n_docs = int(size.n)
    if n_docs >= STATS_SAMPLE:
        n_docs = int(
            session.execute(
                text(
                    "SELECT count(*) FROM (SELECT 1 FROM"  # noqa: S608
                    f" {scope.table} WHERE {scope.where} LIMIT 1000000) AS s"
                ),
                params,
            ).scalar_one()
        )
    tsquery = _tsquery(sorted(terms))
    rows = session.execute(
        text(
            f"SELECT id, CAST({scope.vector} AS text) AS v FROM {scope.table}"  # noqa: S608
            f" WHERE {scope.where} AND {scope.vector} @@ CAST(:tsq AS tsquery)"
            f" ORDER BY ts_rank({scope.vector}, CAST(:tsq AS tsquery)) DESC LIMIT :limit"
        ),
        {**params, "tsq": tsquery, "limit": limit},
    ).all()
    avg_len = float(size.avg_len or 1.0)
    ceiling = bm25_ceiling(everything, df=df, n_docs=n_docs) or 1.0
    return {
        row.id: bm25(terms, tsvector_terms(row.v), df=df, n_docs=n_docs, avg_len=avg_len) / ceiling
        for row in rows
    }
