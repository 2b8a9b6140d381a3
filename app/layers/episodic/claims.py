"""SQL for turns on their way to extraction: what is unscored or unclaimed, claiming turns
for a batch, and reading a batch's turns and the context before them. Set-based; never
commits. Every statement names the users, so each reads the users' partitions of the trace.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import text
from sqlalchemy.orm import Session as DbSession

from app.layers.episodic import context_words
from app.layers.episodic.message_order import arrival


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
    """`claim_users_turns` for one user and batch."""
    return claim_users_turns(
        session=session, tenant_id=tenant_id, batches=[(user_id, batch_id)], limit=limit, tail=tail
    ).get(batch_id, [])


def claim_users_turns(
    *,
    session: DbSession,
    tenant_id: str,
    batches: Sequence[tuple[str, uuid.UUID]],
    limit: int,
    tail: int = 0,
) -> dict[uuid.UUID, list[uuid.UUID]]:
    """For each (user, batch id): claim up to `limit` oldest unclaimed, already scored turns
    of the user for that batch; up to `tail` more when that empties the user (a remainder of
    at most `tail` turns, below the N-turn trigger, would otherwise wait for the idle
    timeout). Returns batch → claimed turn ids (batches that got none are left out).

    Only scored turns: attention comes before extraction, and a claim never holds a turn that
    a scoring task is about to lock.

    `FOR UPDATE SKIP LOCKED` plus the `IS NULL` re-check make racing triggers claim disjoint
    sets: a turn is extracted exactly once however many triggers fire together. A row it
    locks still holds `IS NULL` (the lock re-checks the condition on the newest version), so
    the UPDATE sets exactly the turns picked.
    """
    if not batches:
        return {}
    # Lock first (one statement, a LATERAL per user, each pruned to the user's partition),
    # then update by primary key: as one `UPDATE … WHERE id IN (subquery)` a generic plan
    # cached while the table was small re-ran the locking subquery once per unclaimed turn
    # of the tenant (seconds per claim by the end of a large ingest), and as one UPDATE …
    # FROM the picked ids it hash-joined every unclaimed turn of the tenant.
    # One row past `limit + tail` tells whether the remainder would still reach the trigger.
    rows = session.execute(
        text(
            "SELECT g.n, t.id FROM unnest(CAST(:users AS text[])) WITH ORDINALITY AS g(u, n)"  # noqa: S608
            f" CROSS JOIN LATERAL (SELECT id, occurred_at, {arrival('')} AS arrival"
            "  FROM episodic.turns WHERE tenant_id = :tenant AND user_id = g.u"
            "  AND extraction_batch_id IS NULL AND salience IS NOT NULL"
            f"  ORDER BY occurred_at, {arrival('')}, id LIMIT :limit FOR UPDATE SKIP LOCKED)"
            " AS t ORDER BY g.n, t.occurred_at, t.arrival, t.id"
        ),
        {
            "tenant": tenant_id,
            "users": [u for u, _ in batches],
            "limit": limit + tail + 1 if tail else limit,
        },
    )
    picked: list[list[uuid.UUID]] = [[] for _ in batches]
    for n, turn_id in rows:
        picked[int(n) - 1].append(turn_id)
    claimed: dict[uuid.UUID, list[uuid.UUID]] = {}
    for (_, batch_id), ids in zip(batches, picked, strict=True):
        if len(ids) > limit + tail:
            ids = ids[:limit]  # the rows past `limit` stay locked until commit, unclaimed
        if ids:
            claimed[batch_id] = ids
    updates = [
        {"batch": batch_id, "ids": ids, "tenant": tenant_id, "user": user_id}
        for user_id, batch_id in batches
        if (ids := claimed.get(batch_id))
    ]
    if updates:
        # One statement per user, sent together (executemany: one round trip).
        session.execute(
            text(
                "UPDATE episodic.turns SET extraction_batch_id = :batch"
                " WHERE tenant_id = :tenant AND user_id = :user"
                " AND id = ANY(CAST(:ids AS uuid[])) AND extraction_batch_id IS NULL"
            ),
            updates,
        )
        # The claimed turns' neighbours stand now (or rekey them when their own claim comes).
        for update in updates:
            context_words.rekey(
                session=session,
                tenant_id=tenant_id,
                user_id=update["user"],
                turn_ids=update["ids"],
                neighbours=True,
            )
    return claimed


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
                "SELECT t.id, t.user_id, t.session_id, t.external_id, t.role, t.speaker,"  # noqa: S608
                " t.content, t.channel, t.occurred_at,"
                " coalesce(t.emotional_intensity, 0) AS emotional_intensity,"
                " coalesce(t.salience, 0) AS salience, t.agent_id"
                " FROM episodic.turns AS t WHERE t.extraction_batch_id = :batch"
                " AND t.user_id = (SELECT b.user_id FROM semantic.extraction_batches AS b"
                f" WHERE b.id = :batch) ORDER BY t.occurred_at, {arrival('t.')}, t.id"
            ),
            {"batch": batch_id},
        )
    )


def turns_of_batches(
    *, session: DbSession, tenant_id: str, batches: Sequence[tuple[uuid.UUID, str]]
) -> dict[uuid.UUID, list[Any]]:
    """`batch_turns` of many (batch id, its user) pairs in one statement: batch → turns,
    oldest first. Each is read in its user's partition: `OFFSET 0` keeps the LATERAL a
    subquery run per batch (pruned to that partition), never a join that the planner may
    hash over every partition of the tenant."""
    if not batches:
        return {}
    rows = session.execute(
        text(
            "SELECT b.id AS batch_id, t.* FROM unnest(CAST(:ids AS uuid[]),"  # noqa: S608
            " CAST(:users AS text[])) AS b(id, u)"
            " CROSS JOIN LATERAL (SELECT id, user_id, session_id, external_id, role, speaker,"
            f"  content, channel, occurred_at, {arrival('')} AS arrival,"
            "  coalesce(emotional_intensity, 0) AS emotional_intensity,"
            "  coalesce(salience, 0) AS salience, agent_id FROM episodic.turns"
            "  WHERE tenant_id = :tenant AND user_id = b.u AND extraction_batch_id = b.id"
            "  OFFSET 0) AS t"
            " ORDER BY b.id, t.occurred_at, t.arrival, t.id"
        ),
        {"tenant": tenant_id, "ids": [b for b, _ in batches], "users": [u for _, u in batches]},
    )
    found: dict[uuid.UUID, list[Any]] = {b: [] for b, _ in batches}
    for row in rows:
        found[row.batch_id].append(row)
    return found


class Before(NamedTuple):
    """A place in a user's message order: a turn's (time, arrival, id), or with the defaults
    the start of a time (everything before it and nothing of it)."""

    user_id: str
    occurred_at: datetime
    arrival: str = ""
    id: uuid.UUID = uuid.UUID(int=0)


def contexts_before(
    *, session: DbSession, tenant_id: str, points: Sequence[Before], limit: int
) -> list[list[Any]]:
    """For each point (a batch's first turn), in order: the user's turns just before it in
    message order (message_order.py), newest first, with each turn's token count (counted
    once, at ingest); for the extractor to read. Turns of the point's own time that arrived
    before it are context too (a session stamped with one time). One statement, a LATERAL per
    point (each pruned to the user's partition): the turns of the point's time, and the
    `limit` latest before it with all of the oldest one's time, so ties are settled among
    whole groups of one time."""
    if not points:
        return []
    columns = "id, user_id, session_id, external_id, role, speaker, content, channel,"
    columns += f" occurred_at, token_count, {arrival('')} AS arrival"
    earlier = "tenant_id = :tenant AND user_id = g.u AND occurred_at < g.b"
    rows = session.execute(
        text(
            "SELECT g.n, c.* FROM unnest(CAST(:users AS text[]),"  # noqa: S608
            " CAST(:befores AS timestamptz[]), CAST(:arrivals AS text[]), CAST(:ids AS uuid[]))"
            " WITH ORDINALITY AS g(u, b, a, i, n)"
            f" CROSS JOIN LATERAL (SELECT * FROM (SELECT {columns} FROM episodic.turns"
            "  WHERE tenant_id = :tenant AND user_id = g.u AND occurred_at = g.b"
            f"  AND ({arrival('')}, id) < (g.a, g.i)"
            f"  UNION ALL SELECT {columns} FROM episodic.turns WHERE {earlier}"
            "  AND occurred_at >= coalesce((SELECT occurred_at FROM episodic.turns"
            f"  WHERE {earlier} ORDER BY occurred_at DESC OFFSET :last LIMIT 1), '-infinity'))"
            " AS w"
            "  ORDER BY occurred_at DESC, arrival DESC, id DESC LIMIT :limit) AS c"
            " ORDER BY g.n, c.occurred_at DESC, c.arrival DESC, c.id DESC"
        ),
        {
            "tenant": tenant_id,
            "users": [p.user_id for p in points],
            "befores": [p.occurred_at for p in points],
            "arrivals": [p.arrival for p in points],
            "ids": [p.id for p in points],
            "limit": limit,
            "last": max(limit - 1, 0),
        },
    )
    found: list[list[Any]] = [[] for _ in points]
    for row in rows:
        found[int(row.n) - 1].append(row)
    return found


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


def existing_turns(
    *, session: DbSession, tenant_id: str, cited: Sequence[tuple[str, str]]
) -> set[str]:
    """Which of these (user, turn id) pairs still name a turn: a gem extracted before its
    session was cleared cites turns that are gone (its store must not bring them back)."""
    if not cited:
        return set()
    rows = session.execute(
        text(
            "SELECT t.id FROM unnest(CAST(:users AS text[]), CAST(:ids AS uuid[])) AS c(u, i)"
            " JOIN episodic.turns AS t ON t.tenant_id = :tenant AND t.user_id = c.u"
            " AND t.id = c.i"
        ),
        {"tenant": tenant_id, "users": [u for u, _ in cited], "ids": [i for _, i in cited]},
    )
    return {str(r[0]) for r in rows}
