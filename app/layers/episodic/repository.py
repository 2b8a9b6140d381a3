"""SQL for the episodic tables. Set-based, one statement per kind of row; never commits."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, func, select, text, update
from sqlalchemy.dialects.postgresql import ARRAY, insert
from sqlalchemy.orm import Session as DbSession
from sqlalchemy.types import BigInteger

from app.layers.episodic.models import Session
from app.layers.episodic.sessions import SessionSpan


def lock_users(*, session: DbSession, keys: Sequence[int]) -> None:
    """Serialise concurrent batches of the same users (transaction-scoped advisory locks).

    Keys are taken in ascending order, so two batches sharing users cannot deadlock.
    """
    if not keys:
        return
    session.execute(
        text(
            "SELECT pg_advisory_xact_lock(k) FROM "
            "(SELECT k FROM unnest(:keys) AS k ORDER BY k OFFSET 0) AS ordered"
        ).bindparams(bindparam("keys", type_=ARRAY(BigInteger))),
        {"keys": sorted(set(keys))},
    )


def sessions_around(
    *, session: DbSession, tenant_id: str, user_ids: Sequence[str], lo: datetime, hi: datetime
) -> list[SessionSpan]:
    """Sessions of these users that could take a turn between lo and hi (bounds widened)."""
    rows = session.execute(
        select(
            Session.id, Session.user_id, Session.started_at, Session.last_turn_at, Session.channels
        ).where(
            Session.tenant_id == tenant_id,
            Session.user_id.in_(list(user_ids)),
            Session.last_turn_at >= lo,
            Session.started_at <= hi,
        )
    ).all()
    return [
        SessionSpan(
            id=r.id,
            user_id=r.user_id,
            started_at=r.started_at,
            last_turn_at=r.last_turn_at,
            channels=set(r.channels),
        )
        for r in rows
    ]


def upsert_sessions(*, session: DbSession, tenant_id: str, spans: Sequence[SessionSpan]) -> None:
    """Create new sessions and widen existing ones; replaying the same spans changes nothing."""
    if not spans:
        return
    stmt = insert(Session).values(
        [
            {
                "id": s.id,
                "tenant_id": tenant_id,
                "user_id": s.user_id,
                "started_at": s.started_at,
                "last_turn_at": s.last_turn_at,
                "channels": sorted(s.channels),
            }
            for s in spans
        ]
    )
    table = Session.__table__
    stmt = stmt.on_conflict_do_update(
        index_elements=[table.c.id, table.c.tenant_id],
        set_={
            "started_at": func.least(table.c.started_at, stmt.excluded.started_at),
            "last_turn_at": func.greatest(table.c.last_turn_at, stmt.excluded.last_turn_at),
            "channels": text(
                "ARRAY(SELECT DISTINCT c FROM unnest(episodic.sessions.channels "
                "|| excluded.channels) AS c ORDER BY c)"
            ),
            "closed_at": text(
                "CASE WHEN excluded.last_turn_at > episodic.sessions.last_turn_at "
                "THEN NULL ELSE episodic.sessions.closed_at END"
            ),
            # A session that grows is summarised again when it closes again.
            "summary": text(
                "CASE WHEN excluded.last_turn_at > episodic.sessions.last_turn_at"
                " OR excluded.started_at < episodic.sessions.started_at"
                " THEN NULL ELSE episodic.sessions.summary END"
            ),
        },
    )
    session.execute(stmt)


_TURN_COLUMNS = (
    ("id", "uuid"),
    ("tenant_id", "text"),
    ("user_id", "text"),
    ("session_id", "uuid"),
    ("external_id", "text"),
    ("role", "text"),
    ("speaker", "text"),
    ("agent_id", "text"),
    ("content", "text"),
    ("channel", "text"),
    ("occurred_at", "timestamptz"),
    ("token_count", "int"),
    ("metadata", "jsonb"),
    ("flags", "text[]"),
    ("stream_entry_id", "text"),
)
_EVENT_COLUMNS = (
    ("id", "uuid"),
    ("tenant_id", "text"),
    ("user_id", "text"),
    ("type", "text"),
    ("known_type", "boolean"),
    ("channel", "text"),
    ("occurred_at", "timestamptz"),
    ("payload", "jsonb"),
    ("stream_entry_id", "text"),
)


def _insert_from_json(table: str, columns: Sequence[tuple[str, str]], returning: str) -> Any:
    """INSERT … SELECT FROM jsonb_to_recordset(:rows) … ON CONFLICT DO NOTHING.

    The whole batch travels as one JSON document (serialised in C on our side, parsed in C by
    Postgres): one small statement whatever the batch size, and ~5x cheaper per row than
    binding an array per column. Built from constant column lists, never from input.
    """
    names = ", ".join(name for name, _ in columns)
    types = ", ".join(f"{name} {kind}" for name, kind in columns)
    return text(
        f"INSERT INTO {table} ({names}) SELECT {names} "  # noqa: S608
        f"FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS r({types}) "
        f"ON CONFLICT DO NOTHING RETURNING {returning}"
    )


_INSERT_TURNS = _insert_from_json("episodic.turns", _TURN_COLUMNS, "id, session_id")
_INSERT_EVENTS = _insert_from_json("episodic.events", _EVENT_COLUMNS, "id")


def _rows_json(rows: Sequence[dict[str, Any]]) -> str:
    return json.dumps(list(rows), default=str, ensure_ascii=False)


def insert_turns(
    *, session: DbSession, rows: Sequence[dict[str, Any]]
) -> list[tuple[uuid.UUID, uuid.UUID]]:
    """Insert turns not stored yet; returns (turn id, session id) of the rows actually added."""
    if not rows:
        return []
    result = session.execute(_INSERT_TURNS, {"rows": _rows_json(rows)})
    return [(r[0], r[1]) for r in result]


_MERGE_SESSIONS = (
    "UPDATE episodic.turns AS t SET session_id = m.new FROM {pairs} WHERE t.session_id = m.old",
    "UPDATE semantic.memories AS x SET session_id = m.new FROM {pairs} WHERE x.session_id = m.old",
    "UPDATE episodic.sessions AS s SET turn_count = s.turn_count + moved.n FROM ("
    " SELECT m.new, sum(o.turn_count) AS n FROM {pairs}"
    " JOIN episodic.sessions AS o ON o.id = m.old GROUP BY m.new) AS moved"
    " WHERE s.id = moved.new",
    "DELETE FROM episodic.sessions AS s USING {pairs} WHERE s.id = m.old",
)
_PAIRS = "(SELECT unnest(CAST(:olds AS uuid[])) AS old, unnest(CAST(:news AS uuid[])) AS new) AS m"


def merge_sessions(*, session: DbSession, merged: dict[uuid.UUID, uuid.UUID]) -> None:
    """Move turns, memories and counts of merged sessions to the session that absorbed them."""
    if not merged:
        return
    params = {"olds": list(merged), "news": list(merged.values())}
    for statement in _MERGE_SESSIONS:
        session.execute(text(statement.format(pairs=_PAIRS)), params)


def add_turn_counts(*, session: DbSession, counts: dict[uuid.UUID, int]) -> None:
    if not counts:
        return
    ids, numbers = zip(*counts.items(), strict=True)
    values = select(
        func.unnest(bindparam("ids", list(ids), type_=ARRAY(Session.id.type))).label("id"),
        func.unnest(bindparam("ns", list(numbers), type_=ARRAY(BigInteger))).label("n"),
    ).subquery()
    session.execute(
        update(Session)
        .where(Session.id == values.c.id)
        .values(turn_count=Session.turn_count + values.c.n)
    )


def insert_events(*, session: DbSession, rows: Sequence[dict[str, Any]]) -> int:
    """Insert raw events not stored yet; returns how many were added."""
    if not rows:
        return 0
    return len(session.execute(_INSERT_EVENTS, {"rows": _rows_json(rows)}).all())


def close_idle_sessions(*, session: DbSession, tenant_id: str, before: datetime) -> int:
    """Mark sessions whose last turn is older than `before` as closed."""
    result = session.execute(
        update(Session)
        .where(
            Session.tenant_id == tenant_id,
            Session.closed_at.is_(None),
            Session.last_turn_at < before,
        )
        .values(closed_at=func.now())
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


def load_turns(*, session: DbSession, turn_ids: Sequence[str]) -> list[Any]:
    """Turns by id (under the current tenant scope), oldest first."""
    if not turn_ids:
        return []
    return list(
        session.execute(
            text(
                "SELECT id, user_id, session_id, external_id, role, speaker, content, channel,"
                " occurred_at FROM episodic.turns WHERE id = ANY(CAST(:ids AS uuid[]))"
                " ORDER BY occurred_at, id"
            ),
            {"ids": list(turn_ids)},
        )
    )


def unextracted_counts(
    *, session: DbSession, tenant_id: str, user_ids: Sequence[str]
) -> dict[str, tuple[int, datetime]]:
    """user → (turns not yet claimed for extraction, last arrival) for these users."""
    rows = session.execute(
        text(
            "SELECT user_id, count(*), max(received_at) FROM episodic.turns"
            " WHERE tenant_id = :tenant AND user_id = ANY(:users)"
            " AND extraction_batch_id IS NULL AND salience IS NOT NULL GROUP BY user_id"
        ),
        {"tenant": tenant_id, "users": list(user_ids)},
    )
    return {r[0]: (int(r[1]), r[2]) for r in rows}


def idle_unextracted_users(
    *, session: DbSession, tenant_id: str, idle_before: datetime, limit: int
) -> list[str]:
    """Users with unclaimed turns whose newest turn arrived before `idle_before`."""
    rows = session.execute(
        text(
            "SELECT user_id FROM episodic.turns WHERE tenant_id = :tenant"
            " AND extraction_batch_id IS NULL AND salience IS NOT NULL GROUP BY user_id"
            " HAVING max(received_at) < :before ORDER BY min(received_at) LIMIT :limit"
        ),
        {"tenant": tenant_id, "before": idle_before, "limit": limit},
    )
    return [r[0] for r in rows]


def claim_turns(
    *,
    session: DbSession,
    tenant_id: str,
    user_id: str,
    batch_id: uuid.UUID,
    limit: int,
    tail: int = 0,
) -> list[uuid.UUID]:
    """Claim up to `limit` oldest unclaimed, already scored turns of a user for one batch;
    up to `tail` more when that empties the user (a remainder of at most `tail` turns, below
    the N-turn trigger, would otherwise wait for the idle timeout).

    Only scored turns: attention comes before extraction, and a claim never holds a turn that
    a scoring task is about to lock.

    `FOR UPDATE SKIP LOCKED` plus the `IS NULL` re-check make racing triggers claim disjoint
    sets: a turn is extracted exactly once however many triggers fire together.
    """
    # Lock first, then update by primary key: as one `UPDATE … WHERE id IN (subquery)` a
    # generic plan cached while the table was small re-ran the locking subquery once per
    # unclaimed turn of the tenant (seconds per claim by the end of a large ingest).
    # One row past `limit + tail` tells whether the remainder would still reach the trigger.
    picked = [
        r[0]
        for r in session.execute(
            text(
                "SELECT id FROM episodic.turns WHERE tenant_id = :tenant AND user_id = :user"
                " AND extraction_batch_id IS NULL AND salience IS NOT NULL"
                " ORDER BY occurred_at, id LIMIT :limit FOR UPDATE SKIP LOCKED"
            ),
            {"tenant": tenant_id, "user": user_id, "limit": limit + tail + 1 if tail else limit},
        )
    ]
    if len(picked) > limit + tail:
        picked = picked[:limit]  # the rows past `limit` stay locked until commit, unclaimed
    if not picked:
        return []
    rows = session.execute(
        text(
            "UPDATE episodic.turns SET extraction_batch_id = :batch"
            " WHERE tenant_id = :tenant AND user_id = :user AND id = ANY(CAST(:ids AS uuid[]))"
            " AND extraction_batch_id IS NULL RETURNING id"
        ),
        {"batch": batch_id, "ids": picked, "tenant": tenant_id, "user": user_id},
    )
    return [r[0] for r in rows]


def extraction_counts(*, session: DbSession, tenant_id: str, user_id: str) -> tuple[int, int, int]:
    """(turns, unscored turns, scored turns not claimed yet) of one user; each count reads
    its own index (the two partial ones for the second and third)."""
    row = session.execute(
        text(
            "SELECT (SELECT count(*) FROM episodic.turns"
            "  WHERE tenant_id = :tenant AND user_id = :user),"
            " (SELECT count(*) FROM episodic.turns"
            "  WHERE tenant_id = :tenant AND user_id = :user AND salience IS NULL),"
            " (SELECT count(*) FROM episodic.turns WHERE tenant_id = :tenant AND user_id = :user"
            "  AND extraction_batch_id IS NULL AND salience IS NOT NULL)"
        ),
        {"tenant": tenant_id, "user": user_id},
    ).one()
    return int(row[0]), int(row[1]), int(row[2])


def unscored_counts(
    *, session: DbSession, tenant_id: str, user_ids: Sequence[str]
) -> dict[str, int]:
    """user → turns not scored yet, for these users (users with none are left out)."""
    rows = session.execute(
        text(
            "SELECT user_id, count(*) FROM episodic.turns WHERE tenant_id = :tenant"
            " AND user_id = ANY(:users) AND salience IS NULL GROUP BY user_id"
        ),
        {"tenant": tenant_id, "users": list(user_ids)},
    )
    return {r[0]: int(r[1]) for r in rows}


def batch_turns(*, session: DbSession, batch_id: uuid.UUID) -> list[Any]:
    """The turns of an extraction batch, oldest first, with their salience parts (read in
    the partition of the batch's user)."""
    return list(
        session.execute(
            text(
                "SELECT t.id, t.user_id, t.session_id, t.external_id, t.role, t.speaker,"
                " t.content, t.channel, t.occurred_at,"
                " coalesce(t.emotional_intensity, 0) AS emotional_intensity,"
                " coalesce(t.salience, 0) AS salience, t.agent_id"
                " FROM episodic.turns AS t WHERE t.extraction_batch_id = :batch"
                " AND t.user_id = (SELECT b.user_id FROM semantic.extraction_batches AS b"
                " WHERE b.id = :batch) ORDER BY t.occurred_at, t.id"
            ),
            {"batch": batch_id},
        )
    )


def context_before(
    *, session: DbSession, tenant_id: str, user_id: str, before: datetime, limit: int
) -> list[Any]:
    """The user's turns just before `before` (newest first), for the extractor to read."""
    return list(
        session.execute(
            text(
                "SELECT id, user_id, session_id, external_id, role, speaker, content, channel,"
                " occurred_at FROM episodic.turns WHERE tenant_id = :tenant AND user_id = :user"
                " AND occurred_at < :before ORDER BY occurred_at DESC LIMIT :limit"
            ),
            {"tenant": tenant_id, "user": user_id, "before": before, "limit": limit},
        )
    )


def users_with_unscored(
    *, session: DbSession, tenant_id: str, received_before: datetime, limit: int
) -> list[str]:
    """Users whose turns wait for scoring since before `received_before` (a lost dispatch)."""
    rows = session.execute(
        text(
            "SELECT DISTINCT user_id FROM episodic.turns WHERE tenant_id = :tenant"
            " AND salience IS NULL AND received_at < :before LIMIT :limit"
        ),
        {"tenant": tenant_id, "before": received_before, "limit": limit},
    )
    return [r[0] for r in rows]
