"""BM25 candidates from a Postgres full-text (GIN) index, for any layer's table.

Two statements: the query's lexemes with their document frequencies over a sample of the
caller's scope (one user's rows, read under row-level security; past the sample, the user's
rows are counted too, once a minute), then the rows matching the selecting lexemes, through
the layer's index-backed match function, each with its length and its counts of the query's
terms read from its tsvector in SQL, scored in Python (`app.scoring.retrieval.bm25`). Table,
vector expression and scope clause come from the layer's own constants, never from input; the
query travels as a parameter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from app.db.remembered import keep, recall, remembered, scope_key
from app.db.rows import fetch, fetch_value
from app.scoring.retrieval import Bm25Query, bm25_ceiling

MAX_QUERY_TERMS = 48
# Positions labelled C are context a row borrows (a turn holds its neighbours' words so): each
# counts this much of one of the row's own (label D) in term frequency and length.
CONTEXT_WEIGHT = 0.5
COMMON_SHARE = 0.2
# The selecting terms may hold up to MATCH_ROWS rows of the user (ts_rank over them, BM25
# over the best `limit`), as a share of the rows between MIN and MAX: 0.05 of a 1.5k-turn
# conversation left out rows holding only the question's commoner words, which cost 0.03
# recall@10 (bench/conversations.py), while 0.2 of a 14k-memory user doubled search p95
# (bench/search.py). Past MAX_MATCH_ROWS / MIN_MATCH_SHARE rows the cap is MAX_MATCH_ROWS
# itself: each matched row is a heap fetch and a ts_rank (~4 us), and 5 % of a 107k-memory
# user (bench/scale.py's 1M database) made its lexical leg p95 17 ms, against 5 ms at 1 %.
MATCH_ROWS = 500
MAX_MATCH_ROWS = 2000
MAX_MATCH_SHARE = 0.2
MIN_MATCH_SHARE = 0.05
# A user's rows are counted (past `sample`) up to this many, once a minute per process.
COUNT_CAP = 200_000
USER_ROWS_TTL_S = 60.0
_user_rows: dict[tuple[Any, ...], tuple[int, float]] = {}
# A scope's sample's average length (BM25's length normalisation), per process.
AVERAGE_LENGTH_TTL_S = 60.0
_average_lengths: dict[tuple[Any, ...], tuple[float, float]] = {}


@dataclass(frozen=True)
class FulltextScope:
    """Where to search: `table` holds rows with an `id`; `vector` is their tsvector
    expression; `where` is the scope predicate (bound parameters supplied per call)."""

    table: str
    vector: str
    where: str
    sample: int = 500  # rows read for term statistics (fewer where `vector` is computed)
    # How many rows the user has, for match_share: a predicate an index answers alone (an
    # estimate is enough, and a filter on heap columns cost 6 ms per 10k rows); `where`
    # when None.
    size_where: str | None = None
    # The sample's order, one the scope's (tenant, user, time) index serves, ties broken by
    # id: the same rows are sampled whatever the table's physical layout (without it, a
    # migration's UPDATE or a VACUUM FULL changed a big user's statistics and so its
    # rankings; memories made from one turn share its time).
    order: str | None = None


# The lexeme as a quoted tsquery operand (quote_literal would give E'' strings tsquery rejects).
_QUOTED_LEXEME = (
    r"CAST('''' || replace(replace(q.lexeme, '\', '\\'), '''', '''''') || '''' AS tsquery)"
)


def _tsquery(lexemes: list[str]) -> str:
    """OR of the lexemes, each quoted so that no character is read as tsquery syntax."""
    return " | ".join(
        "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'" for lexeme in lexemes
    )


def match_share(total: int) -> float:
    """Share of a user's rows the selecting terms may hold (see MATCH_ROWS)."""
    if total <= 0:
        return MAX_MATCH_SHARE
    share = max(MIN_MATCH_SHARE, min(MAX_MATCH_SHARE, MATCH_ROWS / total))
    return min(share, MAX_MATCH_ROWS / total)


def _rows_in(session: Session, scope: FulltextScope, params: dict[str, Any]) -> int:
    """The scope's rows, up to COUNT_CAP, remembered for USER_ROWS_TTL_S: asked only of users
    past the sample, whose count would otherwise cost each of their searches more than
    anything but the match itself."""
    where = scope.size_where or scope.where

    def count() -> int:
        held = fetch_value(
            session,
            f"SELECT count(*) FROM (SELECT 1 FROM {scope.table} WHERE {where}"  # noqa: S608
            " LIMIT :count_cap) AS c",
            {**params, "count_cap": COUNT_CAP},
        )
        return int(held or 0)

    key = scope_key(session, scope.table, where, params)
    return remembered(_user_rows, key, USER_ROWS_TTL_S, count)


def _selecting(
    terms: dict[str, int], df: dict[str, int], sampled: int, *, full: bool, share: float
) -> list[str]:
    """The terms whose matches become candidates: all of them when the statistics covered
    every row of the user (a user that small costs little whatever matches). Over a big
    user's sample, terms held by more than COMMON_SHARE of the rows score little (low idf)
    and would pull in a large share of the rows, so they select nothing unless nothing else
    would; the rest are taken rarest first while together they hold at most `share` of
    the rows (match_share): the best BM25 rows hold the rare query terms, and the rows to
    rank stay few."""
    ordered = sorted(terms, key=lambda t: (df[t], t))
    if full:
        return ordered
    selective = [t for t in ordered if df[t] <= COMMON_SHARE * sampled] or ordered[:1]
    chosen, held = [], 0
    for term in selective:
        if chosen and held + df[term] > share * sampled:
            break
        chosen.append(term)
        held += df[term]
    return chosen


def bm25_candidates(
    session: Session,
    scope: FulltextScope,
    params: dict[str, Any],
    *,
    query: str,
    limit: int,
    match: str,
    match_params: dict[str, Any],
) -> dict[Any, float]:
    """id → BM25 score over its ceiling (0..1) for up to `limit` rows of the scope matching
    the query's selecting terms. `match` calls the layer's index-backed match function,
    which returns those rows as (id, v = their tsvector), best `ts_rank` first, with
    `:tsq` and `:limit` and the layer's own `match_params`; each row's length and its counts
    of the query's terms are read from its tsvector in the same statement (see _MATCHED).

    Document frequencies come from the first `scope.sample` rows of the scope (all of them
    for most users, so exact there): idf depends on the share of rows holding a term, which
    a sample of a big user's rows estimates well, at a bounded cost. All query terms count in
    the score; only the rarer ones select candidates (see `_selecting`). The sample's average
    length is remembered for a minute (AVERAGE_LENGTH_TTL_S): it moves slowly, and measuring
    it reads every sampled tsvector again (bench/conversations.py: API search p95 down by
    a few ms with the match cut below)."""
    len_key = (*scope_key(session, scope.table, scope.where, params), scope)
    known_len = recall(_average_lengths, len_key, AVERAGE_LENGTH_TTL_S)
    stats = fetch(
        session,
        (
            "WITH q AS (SELECT q.lexeme, coalesce(cardinality(q.positions), 1) AS tf,"  # noqa: S608
            f"  {_QUOTED_LEXEME} AS tq"
            "  FROM unnest(to_tsvector('english'::regconfig, :query)) AS q LIMIT :max_terms),"
            f" s AS MATERIALIZED (SELECT {scope.vector} AS v FROM {scope.table}"
            f"  WHERE {scope.where}{f' ORDER BY {scope.order}' if scope.order else ''}"
            "  LIMIT :sample)"
            " SELECT q.lexeme, q.tf,"
            " (SELECT count(*) FROM s WHERE s.v @@ q.tq) AS df,"
            " (SELECT count(*) FROM s) AS sampled, CASE WHEN :measure THEN"
            f" (SELECT avg({_LENGTH.format(v='v')}) FROM s) END AS avg_len"
            " FROM q"
        ),
        {
            **params,
            "query": query[:20_000],
            "max_terms": MAX_QUERY_TERMS,
            "sample": scope.sample,
            "context": CONTEXT_WEIGHT,
            "measure": known_len is None,
        },
    )
    if not stats or not stats[0].sampled:
        return {}
    n_docs = int(stats[0].sampled)
    if known_len is None:
        known_len = float(stats[0].avg_len or 1.0)
        keep(_average_lengths, len_key, known_len)
    avg_len = known_len
    terms = {row.lexeme: int(row.tf) for row in stats}
    df = {row.lexeme: int(row.df) for row in stats}
    full = n_docs < scope.sample
    share = MAX_MATCH_SHARE if full else match_share(_rows_in(session, scope, params))
    selecting = _selecting(terms, df, n_docs, full=full, share=share)
    rows = fetch(
        session,
        _MATCHED.format(match=match),
        {
            **match_params,
            "tsq": _tsquery(selecting),
            "limit": limit,
            "terms": list(terms),
            "context": CONTEXT_WEIGHT,
        },
    )
    # The ceiling counts every query term, found or not: words of the query that no row holds
    # are part of what was asked, so a row matching one common word scores low.
    ceiling = bm25_ceiling(terms, df=df, n_docs=n_docs) or 1.0
    scorer = Bm25Query.of(terms, df=df, n_docs=n_docs, avg_len=avg_len)
    return {
        row.id: scorer.score(
            dict(zip(row.lexemes or (), row.tfs or (), strict=True)), float(row.doc_len or 0)
        )
        / ceiling
        for row in rows
    }


# A row's length for BM25, in C, in lexemes: one the row says counts one, one it borrows from
# a neighbour (label C) CONTEXT_WEIGHT, one it both says and borrows both; the sample's
# average is of the same expression, so the two share a unit (a word repeated within one turn
# is rare). A lexeme without positions counts nothing here nor in the term counts below:
# stored keys never have one (to_tsvector positions every lexeme), and counting them would
# cost every row a third pass.
_LENGTH = (
    "(length(ts_filter({v}, CAST(ARRAY['a', 'b', 'd'] AS \"char\"[])))"
    " + :context * length(ts_filter({v}, CAST(ARRAY['c'] AS \"char\"[]))))"
)

# A matched row's length and the query terms it holds with their counts (a position labelled
# C counting CONTEXT_WEIGHT of one): the tsvector is cut down to the query's terms in C, by
# deleting every lexeme that is not one, and only those few are unnested. Unnesting the whole
# tsvector of each of a hundred rows cost more than finding them.
_MATCHED = (
    "SELECT m.id, " + _LENGTH.format(v="m.v") + " AS doc_len, d.lexemes, d.tfs"  # noqa: S608
    " FROM {match} AS m CROSS JOIN LATERAL ("
    " SELECT array_agg(x.lexeme) AS lexemes, array_agg(coalesce(cardinality(x.weights)"
    "  - (1 - :context) * cardinality(array_positions(x.weights, 'C')), 0)) AS tfs"
    " FROM unnest(ts_delete(m.v, tsvector_to_array(ts_delete(m.v, CAST(:terms AS text[])))))"
    "  AS x) AS d"
)
