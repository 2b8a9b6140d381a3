"""SQL for L5 procedural memory (meta.procedures). Set-based; never commits.

Tenant scoping is row-level security (the caller's unit of work); the user is filtered here.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from app.layers.semantic.repository import vector_literal
from app.scoring.procedural import EXECUTIONS_SCALE


def confidence_sql(avg_success: str, executions: str) -> str:
    """The SQL twin of app.scoring.procedural.confidence over two trusted SQL expressions
    (column names or bind markers written in code, never input).

    Same operation order in float8 as the Python version (tests hold them equal), so the
    stored confidence and the one the service would compute never disagree."""
    scale = float(EXECUTIONS_SCALE)
    return (
        "LEAST(GREATEST("
        f"LEAST(GREATEST(CAST({avg_success} AS float8), 0), 1)"
        f" * (CAST(1 AS float8) + CAST(GREATEST({executions}, 0) AS float8)"
        f" / CAST({scale!r} AS float8)), 0), 1)"
    )


def _running_mean_sql(mean: str, count: str, value: str) -> str:
    """SQL twin of app.scoring.procedural.running_mean (same order of operations)."""
    return f"({mean} + ({value} - {mean}) / CAST({count} + 1 AS float8))"


_COLUMNS = (
    "id, query_pattern, tool_sequence, executions, avg_success, avg_duration_ms, confidence,"
    " last_executed_at, created_at"
)

# Built from constant expressions, never from input. On conflict every right-hand side reads
# the row before this execution (PostgreSQL semantics), so the new confidence is written out
# from the old values plus this outcome.
_NEW_SUCCESS = _running_mean_sql("p.avg_success", "p.executions", "EXCLUDED.avg_success")
_RECORD = text(
    "INSERT INTO meta.procedures AS p (id, tenant_id, user_id, query_pattern, pattern_hash,"  # noqa: S608
    " query_embedding, tool_sequence, sequence_hash, executions, avg_success, avg_duration_ms,"
    " confidence, last_executed_at)"
    " VALUES (:id, :tenant, :user, :pattern, :pattern_hash, CAST(:embedding AS vector),"
    " CAST(:sequence AS jsonb), :sequence_hash, 1, :success, :duration,"
    f" {confidence_sql(':success', '1')}, COALESCE(CAST(:at AS timestamptz), now()))"
    " ON CONFLICT (tenant_id, user_id, pattern_hash, sequence_hash) DO UPDATE SET"
    " executions = p.executions + 1,"
    f" avg_success = {_NEW_SUCCESS},"
    " avg_duration_ms = "
    f"{_running_mean_sql('p.avg_duration_ms', 'p.executions', 'EXCLUDED.avg_duration_ms')},"
    f" confidence = {confidence_sql(_NEW_SUCCESS, 'p.executions + 1')},"
    " last_executed_at = GREATEST(p.last_executed_at, EXCLUDED.last_executed_at),"
    " query_embedding = COALESCE(EXCLUDED.query_embedding, p.query_embedding)"
    f" RETURNING {_COLUMNS}, (xmax = 0) AS inserted"
)


def record_outcome(
    *,
    session: Session,
    tenant_id: str,
    user_id: str,
    query_pattern: str,
    pattern_hash: str,
    query_embedding: Sequence[float] | None,
    tool_sequence_json: str,
    sequence_hash: str,
    success: float,
    duration_ms: float,
    executed_at: datetime | None = None,
    procedure_id: uuid.UUID | None = None,
) -> Any:
    """Count one execution of (pattern → sequence) in one upsert; returns the updated row.

    Concurrent recordings of the same procedure serialise on the unique key, so no execution
    is lost. `tool_sequence_json` is the canonical JSON (what `sequence_hash` was taken of);
    `executed_at` defaults to the transaction's time."""
    return session.execute(
        _RECORD,
        {
            "id": procedure_id or uuid.uuid4(),
            "tenant": tenant_id,
            "user": user_id,
            "pattern": query_pattern,
            "pattern_hash": pattern_hash,
            "embedding": vector_literal(query_embedding) if query_embedding is not None else None,
            "sequence": tool_sequence_json,
            "sequence_hash": sequence_hash,
            "success": float(success),
            "duration": float(duration_ms),
            "at": executed_at,
        },
    ).one()


def _enable_filtered_hnsw(session: Session) -> None:
    """Let the HNSW scan go on past filtered-out rows (pgvector ≥ 0.8), so a user with few
    procedures among many other users' still gets their k nearest; transaction-local."""
    session.execute(text("SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true)"))


def any_trusted(session: Session, user_id: str, *, min_confidence: float = 0.0) -> bool:
    """Whether the user has a procedure with an embedding at `min_confidence` or above: most
    users have none, and then a suggestion need not embed the query at all."""
    return bool(
        session.execute(
            text(
                "SELECT EXISTS (SELECT 1 FROM meta.procedures WHERE user_id = :user"
                " AND query_embedding IS NOT NULL AND confidence >= :min_confidence)"
            ),
            {"user": user_id, "min_confidence": float(min_confidence)},
        ).scalar()
    )


def nearest(
    session: Session,
    user_id: str,
    vector: Sequence[float],
    k: int = 5,
    *,
    min_confidence: float = 0.0,
) -> list[Any]:
    """The user's k procedures whose query embedding is nearest `vector`, best first, each
    with `similarity` (cosine). Rows below `min_confidence` are skipped inside the index scan,
    so weak procedures never crowd good ones out of the k."""
    if k <= 0:
        return []
    _enable_filtered_hnsw(session)
    return list(
        session.execute(
            text(
                "WITH hits AS MATERIALIZED ("  # noqa: S608
                f" SELECT {_COLUMNS}, query_embedding <=> CAST(:v AS vector) AS distance"
                " FROM meta.procedures WHERE user_id = :user AND query_embedding IS NOT NULL"
                " AND confidence >= :min_confidence"
                " ORDER BY query_embedding <=> CAST(:v AS vector) LIMIT :k)"
                f" SELECT {_COLUMNS}, 1 - distance AS similarity FROM hits"
                " ORDER BY distance, confidence DESC, id"
            ),
            {
                "v": vector_literal(vector),
                "user": user_id,
                "k": int(k),
                "min_confidence": float(min_confidence),
            },
        )
    )


def list_for_user(session: Session, user_id: str, limit: int = 50, offset: int = 0) -> list[Any]:
    """The user's procedures, most trusted first (then most recently used) — for inspection."""
    return list(
        session.execute(
            text(
                f"SELECT {_COLUMNS} FROM meta.procedures WHERE user_id = :user"  # noqa: S608
                " ORDER BY confidence DESC, last_executed_at DESC NULLS LAST, id"
                " LIMIT :limit OFFSET :offset"
            ),
            {"user": user_id, "limit": max(int(limit), 0), "offset": max(int(offset), 0)},
        )
    )


def has_trusted(session: Session, user_id: str, *, min_confidence: float) -> bool:
    """Whether the user has any procedure confident enough to be suggested."""
    return bool(
        session.execute(
            text(
                "SELECT EXISTS (SELECT 1 FROM meta.procedures WHERE user_id = :user"
                " AND confidence >= :min)"
            ),
            {"user": user_id, "min": min_confidence},
        ).scalar_one()
    )
