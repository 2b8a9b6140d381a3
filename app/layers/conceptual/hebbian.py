"""SQL for Hebbian memory associations: co-activations in, stale edges weakened and pruned.

Set-based (one statement per batch, whatever its size) and never commits: the caller owns
the transaction. Weights follow app/scoring/hebbian.py, computed here in SQL.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from sqlalchemy import Uuid, bindparam, text
from sqlalchemy.orm import Session

from app.layers.scopes import not_knowledge


class Coactivation(NamedTuple):
    """One pair of memories of one user that fired `count` times, the last time at `at`.
    Ids are UUIDs or their canonical strings; any 4-tuple in this order will do."""

    memory_a: uuid.UUID | str
    memory_b: uuid.UUID | str
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


# The user's memories among the given ids, each locked against deletion (key share) until
# the transaction ends: a pair is written only when both of its memories are here, so a
# memory deleted concurrently is either still there at commit (the delete waits) or skipped
# -- never a foreign-key error. Filtering the pairs in Python keeps the upsert free of joins
# (so its plan cannot turn into a nested loop over the pairs when statistics are stale).
_LIVE = text(
    "SELECT m.id FROM semantic.memories AS m"
    " WHERE m.id = ANY(CAST(:ids AS uuid[])) AND m.tenant_id = :tenant AND m.user_id = :user"
    " FOR KEY SHARE"
)

# The pairs travel as four array literals (one parameter each, parsed by Postgres in C),
# distinct and each as (least, greatest), so no row is hit twice by the one statement. The
# closed form 1 - (1 - w)(1 - eta)^n is n steps of w <- w + eta (1 - w): bounded by 1, and
# never below the weight it started from.
_APPLY = text(
    """
WITH written AS (
    INSERT INTO conceptual.associations AS e
        (tenant_id, user_id, memory_a, memory_b, weight, co_activations, origin,
         last_activated_at)
    SELECT :tenant, :user, p.a, p.b,
           least(1.0, 1.0 - power(1.0 - :rate, p.n)), p.n, 'hebbian', p.at
    FROM unnest(CAST(:a AS uuid[]), CAST(:b AS uuid[]), CAST(:n AS int[]),
                CAST(:at AS timestamptz[])) AS p(a, b, n, at)
    ON CONFLICT (memory_a, memory_b, tenant_id) DO UPDATE SET
        weight = least(1.0, greatest(e.weight,
            1.0 - (1.0 - e.weight) * power(1.0 - :rate, EXCLUDED.co_activations))),
        co_activations = least(CAST(e.co_activations AS bigint) + EXCLUDED.co_activations,
            2147483647),
        last_activated_at = greatest(e.last_activated_at, EXCLUDED.last_activated_at)
    WHERE e.tenant_id = EXCLUDED.tenant_id AND e.user_id = EXCLUDED.user_id
    RETURNING (e.xmax = 0) AS created
)
SELECT count(*) AS edges, count(*) FILTER (WHERE created) AS created FROM written
"""
)

_MAX_COUNT = 2_147_483_647


def _array(values: Iterable[object]) -> str:
    """A Postgres array literal of values that need no quoting (UUIDs, numbers, ISO times)."""
    return "{" + ",".join(map(str, values)) + "}"


def apply_coactivations(
    session: Session,
    tenant_id: str,
    user_id: str,
    pairs_with_counts: Sequence[tuple[uuid.UUID | str, uuid.UUID | str, int, datetime]],
    *,
    rate: float,
) -> Applied:
    """Strengthen (or create) the edge of every pair by its count: one upsert for them all.

    co_activations grows by the count, last_activated_at becomes the later of the two, and an
    existing edge keeps its origin (an entity or embedding link that fires is strengthened,
    not relabelled). Pairs naming a memory that is not this user's (any more) are skipped.
    A pair given twice (in either order) counts twice. Column-wise and C-level where it can
    be: 100,000 distinct pairs cost well under a second of Python."""
    if not pairs_with_counts:
        return Applied(pairs=0, edges=0, created=0)
    raw_a, raw_b, raw_n, raw_at = zip(*pairs_with_counts, strict=True)
    a, b = list(map(str, raw_a)), list(map(str, raw_b))
    keys = list(zip(a, b, strict=True))
    if not all(x < y for x, y in keys) or len(set(keys)) != len(keys) or min(raw_n) <= 0:
        a, b, raw_n, raw_at = _merged(keys, raw_n, raw_at)
        keys = list(zip(a, b, strict=True))
    pairs = len(keys)
    if not pairs:
        return Applied(pairs=0, edges=0, created=0)
    ids = set(a) | set(b)
    live = {
        str(m)
        for m in session.execute(
            _LIVE, {"ids": _array(ids), "tenant": tenant_id, "user": user_id}
        ).scalars()
    }
    if not ids <= live:
        kept = [k for k, (x, y) in enumerate(keys) if x in live and y in live]
        if not kept:
            return Applied(pairs=pairs, edges=0, created=0)
        a, b = [a[k] for k in kept], [b[k] for k in kept]
        raw_n, raw_at = tuple(raw_n[k] for k in kept), tuple(raw_at[k] for k in kept)
    times = {at: at.isoformat() for at in set(raw_at)}
    row = session.execute(
        _APPLY,
        {
            "a": _array(a),
            "b": _array(b),
            "n": _array(min(n, _MAX_COUNT) for n in raw_n),
            "at": _array(times[at] for at in raw_at),
            "tenant": tenant_id,
            "user": user_id,
            "rate": float(rate),
        },
    ).one()
    return Applied(pairs=pairs, edges=int(row.edges), created=int(row.created))


def _merged(
    keys: list[tuple[str, str]], counts: Sequence[int], times: Sequence[datetime]
) -> tuple[list[str], list[str], list[int], list[datetime]]:
    """Pairs put in (least, greatest) order and summed; self-pairs and counts < 1 dropped."""
    merged: dict[tuple[str, str], tuple[int, datetime]] = {}
    for (x, y), n, at in zip(keys, counts, times, strict=True):
        if x == y or n <= 0:
            continue
        key = (x, y) if x < y else (y, x)
        if key in merged:
            total, last = merged[key]
            merged[key] = (total + n, max(last, at))
        else:
            merged[key] = (n, at)
    return (
        [k[0] for k in merged],
        [k[1] for k in merged],
        [v[0] for v in merged.values()],
        [v[1] for v in merged.values()],
    )


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
# The tenant's knowledge is no user's and has no retrievals of its own: its edges are left be.
_WEAKEN = text(
    f"""
WITH batch AS (
    SELECT e.user_id, e.memory_a, e.memory_b FROM conceptual.associations AS e
    WHERE e.tenant_id = :tenant AND e.user_id >= :user AND {not_knowledge("e.user_id")}
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
"""  # noqa: S608 - a constant predicate
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
