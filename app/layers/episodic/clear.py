"""SQL for removing raw turns on request: a whole session, or the turns a deleted memory
alone cited. The trace is otherwise immutable; these run only when a caller asks.

Deleting turns cascades to the mentions that point at them and unsets relations' `turn_id`
(foreign keys); sessions keep their turn counts true, and a session left without turns
goes. Never commits.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from app.layers.episodic import context_words


def find_session(*, session: Session, user_id: str, session_id: uuid.UUID) -> Any | None:
    """The user's session (id, started_at, last_turn_at, turn_count), locked for the
    transaction; None when it is not theirs (or not this tenant's)."""
    return session.execute(
        text(
            "SELECT id, started_at, last_turn_at, turn_count FROM episodic.sessions"
            " WHERE id = :id AND user_id = :user FOR UPDATE"
        ),
        {"id": session_id, "user": user_id},
    ).first()


def session_turns(*, session: Session, user_id: str, session_id: uuid.UUID) -> list[Any]:
    """(id, occurred_at) of every turn of the session."""
    return list(
        session.execute(
            text(
                "SELECT id, occurred_at FROM episodic.turns"
                " WHERE user_id = :user AND session_id = :session ORDER BY occurred_at"
            ),
            {"user": user_id, "session": session_id},
        )
    )


def turn_times(
    *, session: Session, user_id: str, turn_ids: Sequence[uuid.UUID]
) -> list[tuple[uuid.UUID, datetime]]:
    """(id, occurred_at) of these turns of the user."""
    if not turn_ids:
        return []
    rows = session.execute(
        text(
            "SELECT id, occurred_at FROM episodic.turns"
            " WHERE user_id = :user AND id = ANY(CAST(:ids AS uuid[]))"
        ),
        {"user": user_id, "ids": list(turn_ids)},
    )
    return [(r[0], r[1]) for r in rows]


def delete_turns(
    *, session: Session, tenant_id: str, user_id: str, turn_ids: Sequence[uuid.UUID]
) -> int:
    """Delete these turns of the user; sessions lose their count, empty ones go, and the
    turns that were beside them lose their words (context_words.py)."""
    if not turn_ids:
        return 0
    near = context_words.beside(
        session=session, tenant_id=tenant_id, user_id=user_id, turn_ids=turn_ids
    )
    counted = session.execute(
        text(
            "WITH gone AS (DELETE FROM episodic.turns WHERE user_id = :user"
            "  AND id = ANY(CAST(:ids AS uuid[])) RETURNING session_id),"
            " per AS (SELECT session_id, count(*) AS n FROM gone GROUP BY session_id),"
            " counted AS (UPDATE episodic.sessions AS s"
            "  SET turn_count = GREATEST(0, s.turn_count - per.n)"
            "  FROM per WHERE s.id = per.session_id RETURNING s.id)"
            " SELECT session_id AS id, n FROM per"
        ),
        {"user": user_id, "ids": list(turn_ids)},
    ).all()
    if counted:
        session.execute(
            text(
                "DELETE FROM episodic.sessions AS s WHERE s.id = ANY(CAST(:ids AS uuid[]))"
                " AND NOT EXISTS (SELECT 1 FROM episodic.turns AS t"
                " WHERE t.user_id = s.user_id AND t.session_id = s.id)"
            ),
            {"ids": [row.id for row in counted]},
        )
    context_words.rekey(
        session=session,
        tenant_id=tenant_id,
        user_id=user_id,
        turn_ids=near,
        neighbours=False,
        wait=True,
    )
    return sum(int(row.n) for row in counted)


def delete_session(*, session: Session, user_id: str, session_id: uuid.UUID) -> int:
    """Delete the session row (its turns must be gone already); returns rows removed."""
    result = session.execute(
        text("DELETE FROM episodic.sessions WHERE id = :id AND user_id = :user"),
        {"id": session_id, "user": user_id},
    )
    return int(getattr(result, "rowcount", 0) or 0)
