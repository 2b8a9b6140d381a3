"""Nearest neighbours by cosine from a pgvector HNSW index, for any layer's table.

The layer supplies its table and its filter (fixed fragments, bound parameters); the query
travels as a parameter. pgvector's iterative index scan keeps returning neighbours until
`limit` rows pass the filter, so a filtered ANN query does not come back short; its relaxed
order is re-sorted by the exact distance in the outer query.

Which plan serves a user is chosen here, not by the planner: it prices the filtered index
scan badly and, once psycopg prepares the statement, plans for the average user. The index
walk visits about limit * relation / user rows, where the relation is the table or, for a
partitioned one, the partition holding the user's rows (its own HNSW index); the exact sort
reads the user's rows. So the walk wins once the user holds sqrt(CROSSOVER * relation rows)
rows. Measured on bench/scale.py's 1M-memory database (16 partitions of 46k-162k rows, users
of 1.7k-107k memories, the median of 10 searches each, one run): the sort cost 1.3 us per row
of the user (13 ms for 10k), the walk about 3 ms + 1 ms / (the user's share of its partition)
(8 ms at a share of 0.2, 60-97 ms at 0.02), so the crossover sits near 770-1,000; 1,000 chose
the faster plan for all 19 users sized, the earlier rule (2,000, with the partitions' average
size) for 15: users of 7.9k-9.3k rows in small partitions were sorted in 11-13 ms where the
walk took 8-9, and one of 11k in the biggest partition walked in 22 ms where the sort took 14.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session

from app.db.remembered import remembered, scope_key
from app.db.rows import fetch, fetch_value, run

_FORMATS: dict[int, str] = {}


def vector_literal(vector: Sequence[float]) -> str:
    """pgvector's text form; vectors travel as text inside JSON documents and arrays.

    Six significant digits per float ("%.6g"), with one %-format of the whole vector: a
    format string per dimension count, so the floats are formatted in C in one call (~40 µs
    for 384, against ~70 for a format call per float)."""
    size = len(vector)
    template = _FORMATS.get(size)
    if template is None:
        template = _FORMATS.setdefault(size, "[" + ",".join(["%.6g"] * size) + "]")
    return template % tuple(vector)


CROSSOVER = 1000.0
SMALLEST_TABLE = 10_000  # below this (or before ANALYZE) a relation's size is taken as this
USER_SIZE_TTL_S = 60.0
_user_walks: dict[tuple[Any, ...], tuple[bool, float]] = {}


def index_threshold(table_rows: float) -> int:
    """Rows of a user from which the HNSW walk beats sorting the user's rows."""
    return math.ceil(math.sqrt(CROSSOVER * max(table_rows, SMALLEST_TABLE)))


def relation_rows(
    session: Session, table: str, size_where: str, params: dict[str, Any]
) -> float | None:
    """Rows of the relation holding the scope's rows (the table, or the user's partition of
    a partitioned one), from the catalog's estimate; None when the scope holds no row."""
    return fetch_value(
        session,
        "SELECT greatest(c.reltuples, 0) FROM pg_class AS c WHERE c.oid ="  # noqa: S608
        f" (SELECT tableoid FROM {table} WHERE {size_where} LIMIT 1)",
        params,
    )


def _through_index(session: Session, table: str, size_where: str, params: dict[str, Any]) -> bool:
    """Whether the user (the scope `size_where` and `params` name) holds the threshold's
    rows for the relation it lies in, counted up to that many and remembered for
    USER_SIZE_TTL_S: a search asks it of every dense leg, and a user crossing the threshold
    meanwhile is only served by the other plan (both give the right rows) a little longer."""

    def holds() -> bool:
        rows = relation_rows(session, table, size_where, params)
        if rows is None:
            return False
        threshold = index_threshold(float(rows))
        held = fetch_value(
            session,
            f"SELECT count(*) FROM (SELECT 1 FROM {table} WHERE {size_where}"  # noqa: S608
            " LIMIT :threshold) AS c",
            {**params, "threshold": threshold},
        )
        return int(held or 0) >= threshold

    key = scope_key(session, table, size_where, params)
    return remembered(_user_walks, key, USER_SIZE_TTL_S, holds)


def nearest(
    session: Session,
    table: str,
    where: str,
    params: dict[str, Any],
    vector: Sequence[float],
    *,
    limit: int,
    ef_search: int,
    exact: bool = False,
    size_where: str | None = None,
    key: str = "id",
) -> dict[Any, float]:
    """id → cosine similarity of the `limit` rows of `table` nearest to `vector` among those
    matching `where`. `size_where`, a predicate an index answers alone that holds at least
    the rows `where` does, lets the plan be chosen by the user's size (module docstring);
    without it the planner chooses. `exact` disables the index for this transaction (the
    ground truth ANN recall is measured against). `key` names the column the rows stand for
    (several rows may share one: each keeps its nearest row's similarity)."""
    order = "embedding <=> CAST(:vector AS vector)"
    walk = False
    if exact:
        run(session, "SET LOCAL enable_indexscan = off")
    elif size_where is not None and not _through_index(session, table, size_where, params):
        # Sorted exactly, by an expression the HNSW index cannot serve: no index settings.
        order = f"({order}) + 0"
    else:
        walk = size_where is not None
        run(
            session,
            "SELECT set_config('hnsw.ef_search', :ef, true),"
            " set_config('hnsw.iterative_scan', 'relaxed_order', true),"
            " set_config('enable_sort', :sort, true)",
            {"ef": str(ef_search), "sort": "off" if walk else "on"},
        )
    rows = fetch(
        session,
        f"SELECT id, 1 - distance AS cosine FROM (SELECT {key} AS id,"  # noqa: S608
        f" embedding <=> CAST(:vector AS vector) AS distance FROM {table}"
        f" WHERE {where} AND embedding IS NOT NULL"
        f" ORDER BY {order} LIMIT :limit) AS c"
        " ORDER BY distance",
        {**params, "vector": vector_literal(vector), "limit": limit},
    )
    if exact:
        run(session, "SET LOCAL enable_indexscan = on")
    elif walk:
        run(session, "SET LOCAL enable_sort = on")
    found: dict[Any, float] = {}
    for row in rows:
        found.setdefault(row.id, float(row.cosine))
    return found
