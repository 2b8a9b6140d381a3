"""SQL for the episodic tables. Set-based, one statement per kind of row; never commits."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, func, select, text, update
from sqlalchemy.dialects.postgresql import ARRAY
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


_SESSION_COLUMNS = (
    ("id", "uuid"),
    ("tenant_id", "text"),
    ("user_id", "text"),
    ("started_at", "timestamptz"),
    ("last_turn_at", "timestamptz"),
    ("channels", "text[]"),
)


def _insert_from_json(
    table: str, columns: Sequence[tuple[str, str]], conflict: str = "ON CONFLICT DO NOTHING"
) -> str:
    """INSERT … SELECT FROM jsonb_to_recordset(:rows) … ON CONFLICT ….

    The whole batch travels as one JSON document (serialised in C on our side, parsed in C by
    Postgres): one small statement whatever the batch size, and ~5x cheaper per row than
    binding an array per column (or compiling a VALUES row each). Built from constant
    column lists, never from input.
    """
    names = ", ".join(name for name, _ in columns)
    types = ", ".join(f"{name} {kind}" for name, kind in columns)
    return (
        f"INSERT INTO {table} ({names}) SELECT {names} "  # noqa: S608
        f"FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS r({types}) {conflict}"
    )


_INSERT_TURNS = text(
    _insert_from_json("episodic.turns", _TURN_COLUMNS) + " RETURNING id, session_id"
)
_INSERT_EVENTS = text(_insert_from_json("episodic.events", _EVENT_COLUMNS) + " RETURNING id")
# A session that grows is summarised again when it closes again.
_UPSERT_SESSIONS = text(
    _insert_from_json(
        "episodic.sessions",
        _SESSION_COLUMNS,
        "ON CONFLICT (id, tenant_id) DO UPDATE SET"
        " started_at = least(episodic.sessions.started_at, excluded.started_at),"
        " last_turn_at = greatest(episodic.sessions.last_turn_at, excluded.last_turn_at),"
        " channels = ARRAY(SELECT DISTINCT c FROM unnest(episodic.sessions.channels"
        " || excluded.channels) AS c ORDER BY c),"
        " closed_at = CASE WHEN excluded.last_turn_at > episodic.sessions.last_turn_at"
        " THEN NULL ELSE episodic.sessions.closed_at END,"
        " summary = CASE WHEN excluded.last_turn_at > episodic.sessions.last_turn_at"
        " OR excluded.started_at < episodic.sessions.started_at"
        " THEN NULL ELSE episodic.sessions.summary END",
    )
)


def _rows_json(rows: Sequence[dict[str, Any]]) -> str:
    return json.dumps(list(rows), default=str, ensure_ascii=False)


def upsert_sessions(*, session: DbSession, tenant_id: str, spans: Sequence[SessionSpan]) -> None:
    """Create new sessions and widen existing ones; replaying the same spans changes nothing."""
    if not spans:
        return
    rows = [
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
    session.execute(_UPSERT_SESSIONS, {"rows": _rows_json(rows)})


def insert_turns(
    *, session: DbSession, rows: Sequence[dict[str, Any]]
) -> list[tuple[uuid.UUID, uuid.UUID]]:
    """Insert turns not stored yet; returns (turn id, session id) of the rows actually added."""
    if not rows:
        return []
    result = session.execute(_INSERT_TURNS, {"rows": _rows_json(rows)})
    return [(r[0], r[1]) for r in result.all()]


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


_RECENT_TRACE = text(
    "SELECT * FROM ("
    " SELECT received_at, occurred_at, user_id, channel, 'turn:' || role AS kind,"
    "  content AS body FROM episodic.turns WHERE received_at > :since"
    " UNION ALL"
    " SELECT received_at, occurred_at, user_id, channel, type, payload::text"
    "  FROM episodic.events WHERE received_at > :since"
    ") AS rows ORDER BY received_at DESC, occurred_at DESC LIMIT :limit"
)


def recent_trace(*, session: DbSession, since: datetime, limit: int) -> list[Any]:
    """The scope's turns and events persisted after `since`, oldest first (`engram tail`)."""
    rows = session.execute(_RECENT_TRACE, {"since": since, "limit": limit}).all()
    return list(reversed(rows))
