"""SQL for Hebbian memory associations: co-activations in, stale edges weakened and pruned.

Set-based (one statement per batch, whatever its size) and never commits: the caller owns
the transaction. Weights follow app/scoring/hebbian.py, computed here in SQL.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from sqlalchemy import DateTime, Integer, Uuid, bindparam, text
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Session


class Coactivation(NamedTuple):
    """One pair of memories of one user that fired `count` times, the last time at `at`."""

    memory_a: uuid.UUID
    memory_b: uuid.UUID
    count: int
    at: datetime


@dataclass(frozen=True)
class Applied:
    pairs: int  # distinct pairs given
    edges: int  # edges written (created + strengthened)
    created: int

    @property
    def skipped(self) -> int:
        """Pairs left out because a memory is gone (forgotten, deleted) or not the user's."""
        return self.pairs - self.edges


# Pairs are summed per (least, greatest) so no row is hit twice by one statement. Both
# memories must exist for this user: `live` reads them once each and takes a key-share lock,
# so a memory deleted concurrently is either still there at commit (the delete waits) or is
# skipped here — never a foreign-key error. The closed form 1 - (1 - w)(1 - η)ⁿ is n steps of
# w ← w + η(1 - w): bounded by 1, and never below the weight it started from.
_APPLY = text(
    """
WITH p AS (
    SELECT least(p.a, p.b) AS a, greatest(p.a, p.b) AS b, sum(p.n) AS n, max(p.at) AS at
    FROM unnest(:a, :b, :n, :at) AS p(a, b, n, at)
    WHERE p.a <> p.b AND p.n > 0
    GROUP BY 1, 2
),
live AS (
    SELECT m.id FROM semantic.memories AS m
    WHERE m.id = ANY(:ids) AND m.tenant_id = :tenant AND m.user_id = :user
    FOR KEY SHARE
)
INSERT INTO conceptual.associations AS e
    (tenant_id, user_id, memory_a, memory_b, weight, co_activations, origin, last_activated_at)
SELECT :tenant, :user, p.a, p.b,
       least(1.0, 1.0 - power(1.0 - :rate, p.n)), least(p.n, 2147483647), 'hebbian', p.at
FROM p
JOIN live AS la ON la.id = p.a
JOIN live AS lb ON lb.id = p.b
ORDER BY p.a, p.b
ON CONFLICT (memory_a, memory_b) DO UPDATE SET
    weight = least(1.0, greatest(e.weight,
        1.0 - (1.0 - e.weight) * power(1.0 - :rate, EXCLUDED.co_activations))),
    co_activations = least(CAST(e.co_activations AS bigint) + EXCLUDED.co_activations,
        2147483647),
    last_activated_at = greatest(e.last_activated_at, EXCLUDED.last_activated_at)
WHERE e.tenant_id = EXCLUDED.tenant_id AND e.user_id = EXCLUDED.user_id
RETURNING (e.xmax = 0) AS created
"""
).bindparams(
    bindparam("a", type_=ARRAY(Uuid)),
    bindparam("b", type_=ARRAY(Uuid)),
    bindparam("n", type_=ARRAY(Integer)),
    bindparam("at", type_=ARRAY(DateTime(timezone=True))),
    bindparam("ids", type_=ARRAY(Uuid)),
)


def apply_coactivations(
    session: Session,
    tenant_id: str,
    user_id: str,
    pairs_with_counts: Sequence[Coactivation],
    *,
    rate: float,
) -> Applied:
    """Strengthen (or create) the edge of every pair by its count, in one statement.

    co_activations grows by the count, last_activated_at becomes the later of the two, and an
    existing edge keeps its origin (an entity or embedding link that fires is strengthened,
    not relabelled). Pairs naming a memory that is not this user's (any more) are skipped."""
    if not pairs_with_counts:
        return Applied(pairs=0, edges=0, created=0)
    a = [p.memory_a for p in pairs_with_counts]
    b = [p.memory_b for p in pairs_with_counts]
    rows = session.execute(
        _APPLY,
        {
            "a": a,
            "b": b,
            "n": [int(p.count) for p in pairs_with_counts],
            "at": [p.at for p in pairs_with_counts],
            "ids": list({*a, *b}),
            "tenant": tenant_id,
            "user": user_id,
            "rate": float(rate),
        },
    ).all()
    distinct = {
        (min(p.memory_a, p.memory_b), max(p.memory_a, p.memory_b))
        for p in pairs_with_counts
        if p.memory_a != p.memory_b and p.count > 0
    }
    return Applied(pairs=len(distinct), edges=len(rows), created=sum(1 for r in rows if r.created))


# Where a weakening pass stands: the last edge it has looked at, in (user, a, b) order.
Cursor = tuple[str, uuid.UUID, uuid.UUID]
START: Cursor = ("", uuid.UUID(int=0), uuid.UUID(int=0))


@dataclass(frozen=True)
class Weakened:
    scanned: int  # edges of the tenant looked at (up to `limit`)
    weakened: int
    pruned: int
    cursor: Cursor | None  # the last edge looked at; None when there was none left
    more: bool  # the batch was full: call again from `cursor`


# One bounded step over the tenant's edges in key order after the cursor: the stale Hebbian
# ones among them lose the share `factor` of their weight, or are deleted when that takes
# them under the floor. An edge co-activated meanwhile is re-checked under its row lock
# (read committed) and left alone. Both writes see the same snapshot and touch disjoint rows.
_WEAKEN = text(
    """
WITH batch AS (
    SELECT e.user_id, e.memory_a, e.memory_b FROM conceptual.associations AS e
    WHERE e.tenant_id = :tenant AND e.user_id >= :user
      AND (e.user_id, e.memory_a, e.memory_b) > (:user, :a, :b)
    ORDER BY e.user_id, e.memory_a, e.memory_b
    LIMIT :limit
),
pruned AS (
    DELETE FROM conceptual.associations AS e USING batch AS k
    WHERE e.memory_a = k.memory_a AND e.memory_b = k.memory_b
      AND e.origin = 'hebbian' AND e.last_activated_at < :before
      AND e.weight * (1.0 - :factor) < :floor
    RETURNING 1
),
weakened AS (
    UPDATE conceptual.associations AS e SET weight = e.weight * (1.0 - :factor)
    FROM batch AS k
    WHERE e.memory_a = k.memory_a AND e.memory_b = k.memory_b
      AND e.origin = 'hebbian' AND e.last_activated_at < :before
      AND e.weight * (1.0 - :factor) >= :floor
    RETURNING 1
)
SELECT (SELECT count(*) FROM batch) AS scanned,
       (SELECT count(*) FROM weakened) AS weakened,
       (SELECT count(*) FROM pruned) AS pruned,
       last.user_id, last.memory_a, last.memory_b
FROM (SELECT 1) AS one
LEFT JOIN LATERAL (
    SELECT * FROM batch ORDER BY user_id DESC, memory_a DESC, memory_b DESC LIMIT 1
) AS last ON true
"""
).bindparams(bindparam("a", type_=Uuid), bindparam("b", type_=Uuid))


def weaken_and_prune(
    session: Session,
    tenant_id: str,
    before: datetime,
    factor: float,
    floor: float,
    limit: int,
    *,
    after: Cursor = START,
) -> Weakened:
    """One batch of at most `limit` edges after `after`: Hebbian edges not co-activated since
    `before` get w ← w·(1 - factor); those that end under `floor` are deleted instead.
    Call again from the returned cursor (each call in a transaction of its own, if you like)
    while `more`."""
    row = session.execute(
        _WEAKEN,
        {
            "tenant": tenant_id,
            "user": after[0],
            "a": after[1],
            "b": after[2],
            "limit": limit,
            "before": before,
            "factor": float(factor),
            "floor": float(floor),
        },
    ).one()
    cursor = None if row.user_id is None else (row.user_id, row.memory_a, row.memory_b)
    scanned = int(row.scanned)
    return Weakened(
        scanned=scanned,
        weakened=int(row.weakened),
        pruned=int(row.pruned),
        cursor=cursor,
        more=scanned >= limit,
    )
