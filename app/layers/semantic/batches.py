"""SQL for extraction batches: a user's claimed turns on their way to L3 memories, with
their state, gems and failed attempts. Set-based; never commits."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session


def create_batches(
    *, session: Session, tenant_id: str, batches: Sequence[tuple[uuid.UUID, str, str, int]]
) -> None:
    """New extraction batches, as (id, user, trigger, claimed turn count), in one statement."""
    if not batches:
        return
    session.execute(
        text(
            "INSERT INTO semantic.extraction_batches (id, tenant_id, user_id, trigger,"
            " turn_count) SELECT r.id, :tenant, r.u, r.t, r.c"
            " FROM unnest(CAST(:ids AS uuid[]), CAST(:users AS text[]),"
            " CAST(:triggers AS text[]), CAST(:counts AS int[])) AS r(id, u, t, c)"
        ),
        {
            "tenant": tenant_id,
            "ids": [b[0] for b in batches],
            "users": [b[1] for b in batches],
            "triggers": [b[2] for b in batches],
            "counts": [b[3] for b in batches],
        },
    )


def get_batch(*, session: Session, batch_id: uuid.UUID, lock: bool = False) -> Any | None:
    """The batch row; `lock` takes it for this transaction (skipping it if another has it)."""
    rows = get_batches(session=session, batch_ids=[batch_id], lock=lock)
    return rows[0] if rows else None


def advance_batch(
    *,
    session: Session,
    batch_id: uuid.UUID,
    state: str,
    gems: list[dict[str, Any]] | None = None,
    error: str | None = None,
    only_from: Sequence[str] | None = None,
) -> None:
    """Move a batch to `state` (and store its gems or its error); with `only_from`, only a
    batch still in one of those states moves (a late duplicate step must not move a stored
    batch back)."""
    params: dict[str, Any] = {"id": batch_id, "state": state, "error": error}
    sets = "state = :state, error = :error, updated_at = now()"
    if gems is not None:
        sets += ", gems = CAST(:gems AS jsonb), gem_count = :count"
        params.update(gems=json.dumps(gems, default=str), count=len(gems))
    where = "id = :id"
    if only_from is not None:
        where += " AND state = ANY(:only_from)"
        params["only_from"] = list(only_from)
    session.execute(
        text(f"UPDATE semantic.extraction_batches SET {sets} WHERE {where}"),  # noqa: S608
        params,
    )


_BATCH_COLUMNS = "id, tenant_id, user_id, trigger, state, gems, attempts, error"


def get_batches(
    *, session: Session, batch_ids: Sequence[uuid.UUID], lock: bool = False
) -> list[Any]:
    """`get_batch` for many: the rows found, in the order of `batch_ids` (the order a user's
    batches were claimed in is the order they are stored in); `lock` takes them in id order
    and skips those another transaction holds."""
    if not batch_ids:
        return []
    query = (
        f"SELECT {_BATCH_COLUMNS} FROM semantic.extraction_batches"  # noqa: S608
        " WHERE id = ANY(CAST(:ids AS uuid[])) ORDER BY id"
    )
    if lock:
        query += " FOR UPDATE SKIP LOCKED"
    found = {row.id: row for row in session.execute(text(query), {"ids": list(batch_ids)})}
    return [found[i] for i in dict.fromkeys(batch_ids) if i in found]


_ADVANCE_WITH_GEMS = text(
    "UPDATE semantic.extraction_batches AS b SET state = :state, error = NULL,"
    " updated_at = now(), gems = r.gems, gem_count = r.count"
    " FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS r(id uuid, gems jsonb, count int)"
    " WHERE b.id = r.id"
)


def advance_batches(
    *,
    session: Session,
    batch_ids: Sequence[uuid.UUID],
    state: str,
    gems: Sequence[list[dict[str, Any]]] | None = None,
    only_from: Sequence[str] | None = None,
) -> None:
    """`advance_batch` for many batches in one statement (with `gems`, each batch's own)."""
    if not batch_ids:
        return
    if gems is not None:
        rows = [
            {"id": str(b), "gems": g, "count": len(g)} for b, g in zip(batch_ids, gems, strict=True)
        ]
        document = json.dumps(rows, default=str)
        session.execute(_ADVANCE_WITH_GEMS, {"rows": document, "state": state})
        return
    params: dict[str, Any] = {"ids": list(batch_ids), "state": state}
    where = "id = ANY(CAST(:ids AS uuid[]))"
    if only_from is not None:
        where += " AND state = ANY(:only_from)"
        params["only_from"] = list(only_from)
    session.execute(
        text(
            "UPDATE semantic.extraction_batches SET state = :state, error = NULL,"  # noqa: S608
            f" updated_at = now() WHERE {where}"
        ),
        params,
    )


def record_failure(
    *, session: Session, batch_id: uuid.UUID, error: str, max_attempts: int, counted: bool = True
) -> None:
    """Count a failed attempt; the batch keeps its state (beat retries it from there) until
    `max_attempts`, when it is parked as 'failed' with its error for an operator. An outage
    (`counted` False) only records its error: waited out, it parks nothing. A stored batch (a
    redelivered task's, caught in a failed read of its whole call) is left alone: its
    memories exist."""
    session.execute(
        text(
            "UPDATE semantic.extraction_batches SET attempts = attempts + :n, error = :error,"
            " updated_at = now(), state = CASE WHEN attempts + :n >= :max THEN 'failed'"
            " ELSE state END WHERE id = :id AND state <> 'stored'"
        ),
        {"id": batch_id, "error": error[:4000], "max": max_attempts, "n": 1 if counted else 0},
    )


def stale_batches(*, session: Session, older_than: datetime, max_attempts: int) -> list[Any]:
    """Batches stuck or failed before `older_than`, still worth retrying (this tenant)."""
    return list(
        session.execute(
            text(
                "SELECT id, state FROM semantic.extraction_batches"
                " WHERE state NOT IN ('stored', 'failed') AND updated_at < :before"
                " AND attempts < :max"
                " ORDER BY updated_at LIMIT 500"
            ),
            {"before": older_than, "max": max_attempts},
        )
    )


def fresh_in_flight_counts(
    *, session: Session, tenant_id: str, user_ids: Sequence[str], updated_after: datetime
) -> dict[str, int]:
    """user → batches on their way through the chain: not finished, no failed attempt, moved
    since `updated_after` (older ones are stale, beat's to retry)."""
    rows = session.execute(
        text(
            "SELECT user_id, count(*) FROM semantic.extraction_batches"
            " WHERE tenant_id = :tenant AND user_id = ANY(:users)"
            " AND state IN ('claimed', 'extracted', 'embedded') AND attempts = 0"
            " AND updated_at > :after GROUP BY user_id"
        ),
        {"tenant": tenant_id, "users": list(user_ids), "after": updated_after},
    )
    return {r[0]: int(r[1]) for r in rows}


def batch_counts(*, session: Session, tenant_id: str, user_id: str) -> tuple[int, int, int]:
    """(unfinished batches, of which retrying after a failed attempt, batches parked as
    'failed') of one user."""
    row = session.execute(
        text(
            "SELECT count(*) FILTER (WHERE state IN ('claimed', 'extracted', 'embedded')),"
            " count(*) FILTER (WHERE state IN ('claimed', 'extracted', 'embedded')"
            "  AND attempts > 0),"
            " count(*) FILTER (WHERE state = 'failed')"
            " FROM semantic.extraction_batches WHERE tenant_id = :tenant AND user_id = :user"
        ),
        {"tenant": tenant_id, "user": user_id},
    ).one()
    return int(row[0]), int(row[1]), int(row[2])


def users_of_batches(*, session: Session, batch_ids: Sequence[uuid.UUID]) -> list[str]:
    """The users these batches belong to (under the current tenant scope), sorted."""
    if not batch_ids:
        return []
    rows = session.execute(
        text(
            "SELECT DISTINCT user_id FROM semantic.extraction_batches"
            " WHERE id = ANY(CAST(:ids AS uuid[])) ORDER BY user_id"
        ),
        {"ids": list(batch_ids)},
    )
    return [r[0] for r in rows]
