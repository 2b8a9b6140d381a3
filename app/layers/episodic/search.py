"""SQL for searching L2 raw turns (full text and dense) and reading them back by id.

Turns are the unit of evidence: each has its own vector (set when attention scores it) and a
stored tsvector of the speaker's name and the text, so a turn is found whether or not a
memory was extracted from it yet.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from app.db.fulltext import FulltextScope, bm25_candidates
from app.db.nearest import nearest
from app.db.rows import fetch
from app.layers.episodic.message_order import MESSAGE_ORDER, SOURCES, owner, walk

PASSAGE_ROWS_PER_TURN = 2
SPEAKER_SAMPLE = 500  # the latest turns of a user whose speakers a question may name


@dataclass(frozen=True)
class TurnFilter:
    tenant_id: str
    user_id: str
    channel: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    def clause(self) -> tuple[str, dict[str, Any]]:
        parts = ["tenant_id = :tenant", "user_id = :user"]
        params: dict[str, Any] = {"tenant": self.tenant_id, "user": self.user_id}
        if self.channel is not None:
            parts.append("channel = :channel")
            params["channel"] = self.channel
        if self.since is not None:
            parts.append("occurred_at >= :since")
            params["since"] = self.since
        if self.until is not None:
            parts.append("occurred_at < :until")
            params["until"] = self.until
        return " AND ".join(parts), params


def lexical_candidates(
    session: Session, turn_filter: TurnFilter, query: str, *, limit: int
) -> dict[uuid.UUID, float]:
    """turn id → BM25 score over the user's raw turns in the filter."""
    where, params = turn_filter.clause()
    scope = FulltextScope(
        table="episodic.turns", vector="search_tsv", where=where, order="occurred_at DESC, id DESC"
    )
    f = turn_filter
    return bm25_candidates(
        session,
        scope,
        params,
        query=query,
        limit=limit,
        match=_MATCH,
        match_params={
            "tenant": f.tenant_id,
            "user": f.user_id,
            "channel": f.channel,
            "since": f.since,
            "until": f.until,
        },
    )


def recent_speakers(session: Session, tenant_id: str, user_id: str) -> list[str]:
    """The speakers of the user's latest SPEAKER_SAMPLE turns (the names a question about
    the conversation may name; app/text/speaker_names.py), read newest first by the
    (tenant, user, time) index."""
    rows = fetch(
        session,
        "SELECT DISTINCT speaker FROM (SELECT speaker FROM episodic.turns"  # noqa: S608
        f" WHERE {owner()} ORDER BY occurred_at DESC LIMIT :n) AS t"
        " WHERE speaker IS NOT NULL",
        {"tenant": tenant_id, "user": user_id, "n": SPEAKER_SAMPLE},
    )
    return sorted(row.speaker for row in rows)


def dense_candidates(
    session: Session,
    turn_filter: TurnFilter,
    vector: Sequence[float],
    *,
    limit: int,
    ef_search: int,
) -> dict[uuid.UUID, float]:
    """turn id → cosine similarity of its nearest passage (app/text/passages.py), for the
    `limit` nearest turns of the user in the filter (iterative HNSW scan, so the user filter
    does not leave the answer short). Passages carry their turn's time and channel."""
    where, params = turn_filter.clause()
    # A turn has a few passages: enough rows that `limit` distinct turns come back.
    found = nearest(
        session,
        "episodic.turn_passages",
        where,
        params,
        vector,
        limit=limit * PASSAGE_ROWS_PER_TURN,
        ef_search=ef_search,
        size_where=where if turn_filter.channel is None else None,
        key="turn_id",
    )
    return dict(list(found.items())[:limit])


# The index-backed match under the tenant's scope (see the recall migration for why).
_MATCH = (
    "episodic.match_turns(:tenant, :user, CAST(:tsq AS tsquery), :limit,"
    " CAST(:channel AS text), CAST(:since AS timestamptz), CAST(:until AS timestamptz))"
)


_TURN_FIELDS = (
    "id, user_id, session_id, external_id, role, speaker, content, channel, occurred_at,"
    " metadata, flags"
)


# Whether the speaker speaks of themselves (I, me, my, mine, myself; "I'm" too): see
# search_turns._favour_self_disclosure.
_FACTS = r"id, speaker, occurred_at, content ~* '\m(i|me|my|mine|myself)\M' AS first_person"


def turn_facts(
    session: Session, tenant_id: str, user_id: str, ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, Any]:
    """turn id → (speaker, occurred_at, first_person): a light read of every fused turn,
    enough for the named-speaker and first-person boosts and for ranking the pool by recency
    before the whole rows of the few that are returned are read (turns_by_id).

    Reads by id name the tenant and the user: the trace is hash-partitioned by both, so the
    planner keeps the one partition (the row-level-security check alone is known only when
    the statement runs, and planning all sixteen cost more than the read), and the primary
    key (id, tenant_id, user_id) finds each turn there."""
    return {row.id: row for row in _by_id(session, tenant_id, user_id, ids, _FACTS)}


def turns_by_id(
    session: Session, tenant_id: str, user_id: str, ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, Any]:
    return {row.id: row for row in _by_id(session, tenant_id, user_id, ids, _TURN_FIELDS)}


def _by_id(
    session: Session, tenant_id: str, user_id: str, ids: Sequence[uuid.UUID], columns: str
) -> list[Any]:
    """`columns` (a fixed list) of the user's turns with these ids (see turn_facts)."""
    if not ids:
        return []
    return fetch(
        session,
        f"SELECT {columns} FROM episodic.turns"  # noqa: S608
        f" WHERE {owner()} AND id = ANY(CAST(:ids AS uuid[]))",
        {"tenant": tenant_id, "user": user_id, "ids": list(ids)},
    )


def neighbours_of(
    session: Session,
    tenant_id: str,
    user_id: str,
    turn_ids: Sequence[uuid.UUID],
    window: int,
    *,
    among: Sequence[uuid.UUID],
) -> list[tuple[uuid.UUID, uuid.UUID, int]]:
    """(turn, neighbour, distance in messages) for the turns of `among` up to `window`
    turns before or after each of `turn_ids` in its own session: each side one index-backed
    walk of the session's message order, so a long session costs no more than a short one."""
    if not turn_ids or not among or window <= 0:
        return []
    rows = fetch(
        session,
        f"WITH src AS ({SOURCES}), near AS ("  # noqa: S608
        " SELECT src.id AS turn_id, b.id AS neighbour, b.n AS distance FROM src"
        f" CROSS JOIN LATERAL ({walk('<')}) AS b"
        " UNION ALL SELECT src.id, a.id, a.n FROM src"
        f" CROSS JOIN LATERAL ({walk('>')}) AS a)"
        " SELECT turn_id, neighbour, distance FROM near"
        " WHERE neighbour = ANY(CAST(:among AS uuid[]))",
        {
            "tenant": tenant_id,
            "user": user_id,
            "ids": list(turn_ids),
            "n": window,
            "among": list(among),
        },
    )
    return [(row.turn_id, row.neighbour, int(row.distance)) for row in rows]


def turn_window(
    session: Session, tenant_id: str, user_id: str, turn_ids: Sequence[uuid.UUID], around: int
) -> list[Any]:
    """The turns themselves plus `around` turns before and after each, within each turn's
    own session, in message order, each once (`is_source` marks the asked-for turns)."""
    if not turn_ids:
        return []
    return list(
        session.execute(
            text(
                f"WITH src AS ({SOURCES}),"  # noqa: S608
                f" around AS (SELECT b.id FROM src CROSS JOIN LATERAL ({walk('<')}) AS b"
                f"  UNION SELECT a.id FROM src CROSS JOIN LATERAL ({walk('>')}) AS a"
                "  UNION SELECT id FROM src)"
                f" SELECT {_TURN_FIELDS}, id = ANY(CAST(:ids AS uuid[])) AS is_source"
                f" FROM episodic.turns WHERE {owner()} AND id IN (SELECT id FROM around)"
                f" ORDER BY {MESSAGE_ORDER}"
            ),
            {"tenant": tenant_id, "user": user_id, "ids": list(turn_ids), "n": around},
        )
    )
