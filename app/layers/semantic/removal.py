"""SQL for removing memories of one user: deleting rows, and trimming what they cite.

Deleting a memory row cascades to its dream replays and mentions (foreign keys) and drops
its associations (the `memories_drop_edges` trigger); callers unlink L4 first so entity and
relation counts stay true (app/layers/conceptual/unlink.py). Never commits.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session


def delete_memories(*, session: Session, user_id: str, memory_ids: Sequence[uuid.UUID]) -> int:
    """Delete these memories of the user; returns the rows removed."""
    if not memory_ids:
        return 0
    result = session.execute(
        text(
            "DELETE FROM semantic.memories WHERE user_id = :user AND id = ANY(CAST(:ids AS uuid[]))"
        ),
        {"user": user_id, "ids": list(memory_ids)},
    )
    return int(getattr(result, "rowcount", 0) or 0)


def sole_source_turns(
    *, session: Session, user_id: str, memory_ids: Sequence[uuid.UUID]
) -> list[uuid.UUID]:
    """Turns these memories cite that no other memory of the user cites."""
    if not memory_ids:
        return []
    return list(
        session.execute(
            text(
                "SELECT DISTINCT t.turn_id FROM semantic.memories AS m"
                " CROSS JOIN LATERAL unnest(m.source_turn_ids) AS t(turn_id)"
                " WHERE m.user_id = :user AND m.id = ANY(CAST(:ids AS uuid[]))"
                " AND NOT EXISTS (SELECT 1 FROM semantic.memories AS o"
                "  WHERE o.user_id = :user AND NOT (o.id = ANY(CAST(:ids AS uuid[])))"
                "  AND o.source_turn_ids @> ARRAY[t.turn_id])"
            ),
            {"user": user_id, "ids": list(memory_ids)},
        ).scalars()
    )


def citing_memories(*, session: Session, user_id: str, turn_ids: Sequence[uuid.UUID]) -> list[Any]:
    """Memories of the user citing any of these turns: (id, session_id, the turns they cite
    outside the set, the session of the first of those)."""
    if not turn_ids:
        return []
    return list(
        session.execute(
            text(
                "SELECT m.id, m.session_id,"
                " ARRAY(SELECT s FROM unnest(m.source_turn_ids) WITH ORDINALITY AS u(s, n)"
                "  WHERE NOT (s = ANY(CAST(:turns AS uuid[]))) ORDER BY n) AS kept,"
                " (SELECT t.session_id FROM unnest(m.source_turn_ids) WITH ORDINALITY AS u(s, n)"
                "  JOIN episodic.turns AS t ON t.id = u.s AND t.user_id = m.user_id"
                "  WHERE NOT (u.s = ANY(CAST(:turns AS uuid[]))) ORDER BY u.n LIMIT 1)"
                "  AS kept_session"
                " FROM semantic.memories AS m WHERE m.user_id = :user"
                " AND m.source_turn_ids && CAST(:turns AS uuid[])"
            ),
            {"user": user_id, "turns": list(turn_ids)},
        )
    )


def keep_citations(
    *, session: Session, rows: Sequence[tuple[uuid.UUID, list[uuid.UUID], Any]]
) -> int:
    """Set (memory id, cited turns, session id) on memories that keep other turns, in one
    statement."""
    if not rows:
        return 0
    session.execute(
        text(
            "UPDATE semantic.memories AS m SET source_turn_ids = ARRAY(SELECT CAST(e AS uuid)"
            "  FROM jsonb_array_elements_text(x.kept) WITH ORDINALITY AS k(e, n) ORDER BY n),"
            " session_id = x.session, updated_at = now()"
            " FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS x(id uuid, kept jsonb, session uuid)"
            " WHERE m.id = x.id"
        ),
        {
            "rows": json.dumps(
                [
                    {
                        "id": str(memory_id),
                        "kept": [str(t) for t in kept],
                        "session": str(session_id) if session_id else None,
                    }
                    for memory_id, kept, session_id in rows
                ]
            )
        },
    )
    return len(rows)


def count_associations(*, session: Session, user_id: str, memory_ids: Sequence[uuid.UUID]) -> int:
    """Associations touching these memories (deleting them drops these by trigger)."""
    if not memory_ids:
        return 0
    return int(
        session.execute(
            text(
                "SELECT count(*) FROM conceptual.associations WHERE user_id = :user"
                " AND (memory_a = ANY(CAST(:ids AS uuid[]))"
                "  OR memory_b = ANY(CAST(:ids AS uuid[])))"
            ),
            {"user": user_id, "ids": list(memory_ids)},
        ).scalar()
        or 0
    )
