"""Access recording: searches and assemblies go to a per-user Redis buffer on the request
path (one round trip) and into L5 access patterns and L3 access stats in batches, off it.

Applying is idempotent: each record carries its own id, which becomes the access pattern's
primary key, and memories are bumped only for records inserted now. The buffer is trimmed
after the commit, so a crash in between replays records that then change nothing.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import redis

from app.config import Settings
from app.db.session import unit_of_work
from app.keys import RedisKeys
from app.layers.meta import access as access_sql
from app.services import pending_buffers
from app.services.hebbian import record_coactivation

_log = logging.getLogger(__name__)

BUFFER_TTL_S = 7 * 86_400
BATCH = 1000


def record_access(
    client: redis.Redis,
    keys: RedisKeys,
    *,
    tenant_id: str,
    user_id: str,
    channel: str | None,
    query: str,
    memory_ids: Sequence[uuid.UUID],
    scores: Sequence[float],
    at: datetime | None = None,
) -> None:
    record = {
        "id": str(uuid.uuid4()),
        "channel": channel,
        "query": query[:2000],
        "hit_ids": [str(m) for m in memory_ids],
        "scores": [round(float(s), 6) for s in scores],
        "at": (at or datetime.now(UTC)).isoformat(),
    }
    buffer = keys.access_buffer(tenant_id, user_id)
    pending_buffers.append(
        client,
        buffer=buffer,
        record=json.dumps(record),
        ttl_s=BUFFER_TTL_S,
        index=keys.access_pending(),
        member=f"{tenant_id}|{user_id}",
    )


def record_retrieval(
    client: redis.Redis,
    settings: Settings,
    *,
    tenant_id: str,
    user_id: str,
    channel: str | None,
    query: str,
    memory_ids: Sequence[uuid.UUID],
    scores: Sequence[float],
    source: str,
) -> None:
    """What a search or a context assembly leaves behind, best effort (the answer does not
    wait on it): the access record, and the co-activation of the memories returned together.
    Nothing is written for no memories, so a forgotten user's search leaves no key."""
    if not memory_ids:
        return
    keys = RedisKeys.from_settings(settings)
    try:
        record_access(
            client,
            keys,
            tenant_id=tenant_id,
            user_id=user_id,
            channel=channel,
            query=query,
            memory_ids=memory_ids,
            scores=scores,
        )
    except redis.RedisError as exc:
        _log.warning("access not recorded: %s", exc)
    if len(memory_ids) < 2:
        return
    try:
        record_coactivation(
            client,
            keys,
            tenant_id,
            user_id,
            list(memory_ids),
            source,
            max_pairs=settings.hebbian_max_pairs,
        )
    except redis.RedisError as exc:
        _log.warning("co-activation not recorded: %s", exc)


def apply_pending(settings: Settings, client: redis.Redis, *, max_users: int = 200) -> int:
    """Write buffered accesses of up to `max_users` users; returns records applied."""
    keys = RedisKeys.from_settings(settings)
    pending = client.srandmember(keys.access_pending(), max_users) or []
    applied = 0
    for raw in pending:
        member = raw.decode() if isinstance(raw, bytes) else str(raw)
        tenant_id, _, user_id = member.partition("|")
        buffer = keys.access_buffer(tenant_id, user_id)
        items = client.lrange(buffer, 0, BATCH - 1)
        if items:
            records = [json.loads(item) for item in items]
            applied += _apply(tenant_id, user_id, records)
            remove_applied(client, buffer, items)
        pending_buffers.release_if_empty(
            client, buffer=buffer, index=keys.access_pending(), member=member
        )
    return applied


def remove_applied(client: redis.Redis, buffer: str, items: list[Any]) -> None:
    """Remove exactly the records applied (each is unique JSON): trimming by count would,
    when an overlapping run applied and trimmed the same records, drop newer ones no run
    applied. Applying twice is harmless (records are inserted by id)."""
    pipe = client.pipeline(transaction=False)
    for item in items:
        pipe.lrem(buffer, 1, item)
    pipe.execute()


def _apply(tenant_id: str, user_id: str, records: list[dict[str, Any]]) -> int:
    with unit_of_work(tenant_id, all_agents=True) as session:
        inserted = access_sql.insert_patterns(
            session=session, tenant_id=tenant_id, user_id=user_id, records=records
        )
        fresh = [r for r in records if r["id"] in inserted]
        counts: dict[str, int] = {}
        last: dict[str, str] = {}
        for record in fresh:
            for memory_id in record["hit_ids"]:
                counts[memory_id] = counts.get(memory_id, 0) + 1
                last[memory_id] = max(last.get(memory_id, record["at"]), record["at"])
        access_sql.bump_memories(
            session=session,
            user_id=user_id,
            rows=[{"id": m, "hits": n, "at": last[m]} for m, n in counts.items()],
        )
    return len(inserted)
