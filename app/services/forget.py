"""Forget a user: every row of theirs in every layer, then every per-user Redis key.

The database goes first, in one transaction scoped to the tenant (row-level security) and
holding the same advisory lock an ingest batch of this user takes, so a concurrent batch lands
wholly before or wholly after. Redis is cleared only once that commit succeeded: a failed
transaction deletes nothing anywhere. Running it again finds nothing and reports zeros.

What is not touched, by design:

* `meta.hot_memories_mv` may list the user's memory ids until its next scheduled refresh (the
  application role does not own it, so it cannot refresh it here). Readers of
  `meta.hot_memories` must join to `semantic.memories` (where the rows are gone) or tolerate
  ids that no longer resolve.
* Events of the user still in the L0 streams (not yet consumed) or in the dead letters are not
  deleted: removing pending stream entries would break the consumers' delivery accounting.
  Events consumed after this call re-create the user, as any new event would.
* The salience stream holds ids only (no content) of turns that are now deleted; it is capped.
* The embedding cache is keyed by a digest of text, shared by every user, and expires.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import redis
from sqlalchemy import CursorResult, Table, delete
from sqlalchemy.schema import sort_tables

from app.config import Settings
from app.db.models import TENANT_TABLES, Base
from app.db.session import unit_of_work
from app.keys import RedisKeys
from app.layers.conceptual.models import Association
from app.layers.episodic import repository as episodic
from app.layers.semantic.models import Memory
from app.services.ingest import user_lock_key

# Keys are unlinked this many at a time (and SCAN asks for this many per step).
REDIS_BATCH = 500


@dataclass
class ForgetReport:
    """What was removed: rows per "schema.table", and Redis keys."""

    rows: dict[str, int] = field(default_factory=dict)
    redis_keys: int = 0

    @property
    def total(self) -> int:
        return sum(self.rows.values()) + self.redis_keys


def user_tables() -> list[Table]:
    """Every tenant table with a `user_id`, children before parents.

    Derived from the models so that a new table is forgotten too; the order is the metadata's
    foreign-key order reversed, so no delete trips over (or silently cascades into) a row that
    a later, explicitly counted delete should have removed.
    """
    wanted = {model.__table__ for model in TENANT_TABLES if "user_id" in model.__table__.c}
    # Associations point at memories without a foreign key (a trigger drops the edges of
    # deleted memories): they are still children, deleted and counted first.
    ordered = sort_tables(
        Base.metadata.tables.values(),
        extra_dependencies=[(Memory.__table__, Association.__table__)],
    )
    return [table for table in reversed(ordered) if table in wanted]


def forget_user(
    *, tenant_id: str, user_id: str, settings: Settings, client: redis.Redis
) -> ForgetReport:
    """Delete one user of one tenant from every layer; other users and tenants are untouched."""
    report = ForgetReport()
    with unit_of_work(tenant_id, all_agents=True) as session:
        episodic.lock_users(session=session, keys=[user_lock_key(tenant_id, user_id)])
        for table in user_tables():
            # RLS already confines the statement to the tenant; the explicit filter keeps it
            # correct even on a connection that bypasses RLS.
            result = cast(
                CursorResult[Any],
                session.execute(
                    delete(table).where(table.c.tenant_id == tenant_id, table.c.user_id == user_id)
                ),
            )
            report.rows[table.fullname] = int(result.rowcount or 0)
    report.redis_keys = _forget_redis(
        client, RedisKeys.from_settings(settings), tenant_id=tenant_id, user_id=user_id
    )
    return report


def _batches(client: redis.Redis, pattern: str) -> Iterator[list[bytes]]:
    batch: list[bytes] = []
    for key in client.scan_iter(match=pattern, count=REDIS_BATCH):
        batch.append(key)
        if len(batch) >= REDIS_BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def _forget_redis(client: redis.Redis, keys: RedisKeys, *, tenant_id: str, user_id: str) -> int:
    """Unlink every key tagged with the user and drop them from the shared indexes.

    The index entries go first: a worker that finds the user in an index but no keys behind it
    does nothing, whereas keys removed first could be re-read through a stale index entry.
    """
    pipe = client.pipeline(transaction=False)
    # Member formats: see WorkingMemoryStore.push and the access buffer's pending set.
    pipe.zrem(keys.working_active(), f"{tenant_id}\x1f{user_id}")
    pipe.srem(keys.access_pending(), f"{tenant_id}|{user_id}")
    pipe.execute()
    removed = 0
    for batch in _batches(client, keys.user_pattern(tenant_id, user_id)):
        removed += int(client.unlink(*batch))
    return removed
