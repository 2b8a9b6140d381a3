"""SQL for scoring turns (attention): the unscored turns, their scores and their passages.

Set-based, one statement per kind of row; never commits. Every row names its turn's user, so
each statement reads one partition of the trace.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session as DbSession


def _rows_json(rows: Sequence[dict[str, Any]]) -> str:
    return json.dumps(list(rows), default=str, ensure_ascii=False)


def lock_unscored(
    *, session: DbSession, tenant_id: str, user_ids: Sequence[str], limit: int
) -> list[Any]:
    """Turns of these users not scored yet, locked for this transaction; turns another
    transaction holds are skipped (the caller makes further passes for those)."""
    return list(
        session.execute(
            text(
                "SELECT id, user_id, speaker, content, occurred_at, channel FROM episodic.turns"
                " WHERE tenant_id = :tenant AND user_id = ANY(:users) AND salience IS NULL"
                " ORDER BY occurred_at, id LIMIT :limit FOR UPDATE SKIP LOCKED"
            ),
            {"tenant": tenant_id, "users": list(user_ids), "limit": limit},
        )
    )


_SAVE_ATTENTION = text(
    "UPDATE episodic.turns AS t SET emotional_intensity = r.emotional_intensity,"
    " connection_relevance = r.connection_relevance, novelty = r.novelty,"
    " salience = r.salience, attention = r.attention"
    " FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS r(id uuid, emotional_intensity float8,"
    " connection_relevance float8, novelty float8, salience float8, attention text,"
    " user_id text)"
    " WHERE t.id = r.id AND t.tenant_id = :tenant AND t.user_id = r.user_id"
    " AND t.salience IS NULL"
)

# The turn's time and channel travel with each passage (turns never change), so a time- or
# channel-bound dense search filters passages alone. They come from the locked turn rows
# (`lock_unscored`): joining episodic.turns here hash-joined every turn of the tenant.
_SAVE_PASSAGES = text(
    "INSERT INTO episodic.turn_passages (turn_id, tenant_id, user_id, ordinal, channel,"
    " occurred_at, embedding)"
    " SELECT r.turn_id, :tenant, r.user_id, r.ordinal, r.channel, r.occurred_at,"
    " CAST(r.embedding AS vector)"
    " FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS r(turn_id uuid, user_id text,"
    " ordinal int, channel text, occurred_at timestamptz, embedding text)"
    " ON CONFLICT DO NOTHING"
)


def save_attention(*, session: DbSession, tenant_id: str, rows: Sequence[dict[str, Any]]) -> None:
    """Store salience parts and the attention outcome of scored turns (one statement).
    Each row names its turn's `user_id`, so each update reads one partition of the trace;
    the turns are the ones `lock_unscored` holds, so the join reads unscored turns only
    (a partial index), not every turn of the tenant."""
    if rows:
        session.execute(_SAVE_ATTENTION, {"rows": _rows_json(rows), "tenant": tenant_id})


def save_passages(*, session: DbSession, tenant_id: str, rows: Sequence[dict[str, Any]]) -> None:
    """Store turns' dense keys: rows of turn_id, user_id, ordinal, the turn's channel and
    occurred_at, and embedding (a vector literal); one statement, and a passage stored
    before is left as it was."""
    if rows:
        session.execute(_SAVE_PASSAGES, {"rows": _rows_json(rows), "tenant": tenant_id})
