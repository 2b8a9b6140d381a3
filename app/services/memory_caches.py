"""Redis copies of memories, cleared when a memory is edited, deleted or its session cleared.

Three places can hold a memory after its row changed:

* the user's prefetch entries (one per channel) carry memory content: all of them are
  unlinked (the next `typing_start` computes them again);
* the access buffer holds recorded searches (hit ids and scores) not yet written to L5;
* the Hebbian buffer holds co-activated pairs not yet applied.

Buffered records are rewritten without the ids, under WATCH, so a record pushed or applied
meanwhile makes the rewrite start again rather than be lost. A rewritten record keeps its id,
so an applier that read it before is not fooled into applying it twice (accesses are inserted
by record id; the Hebbian apply skips pairs whose memory is gone).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Collection, Sequence
from typing import Any

import redis

from app.config import Settings
from app.keys import RedisKeys
from app.services.forget import REDIS_BATCH
from app.services.hebbian import buffer_key

Rewrite = Callable[[dict[str, Any], set[str]], dict[str, Any] | None]


def drop_prefetch(client: redis.Redis, keys: RedisKeys, tenant_id: str, user_id: str) -> int:
    """Unlink every prefetch entry of the user; returns keys removed."""
    pattern = keys.prefetch(tenant_id, user_id, "").rsplit(":", 1)[0] + ":*"
    found = list(client.scan_iter(match=pattern, count=REDIS_BATCH))
    return int(client.unlink(*found)) if found else 0


def _without_hits(record: dict[str, Any], gone: set[str]) -> dict[str, Any] | None:
    pairs = [
        (h, s)
        for h, s in zip(record.get("hit_ids", []), record.get("scores", []), strict=False)
        if h not in gone
    ]
    if not pairs:
        return None
    return {**record, "hit_ids": [h for h, _ in pairs], "scores": [s for _, s in pairs]}


def _without_pairs(record: dict[str, Any], gone: set[str]) -> dict[str, Any] | None:
    ids = list(record.get("ids", []))
    kept = [
        (ids[a], ids[b])
        for a, b in record.get("pairs", [])
        if ids[a] not in gone and ids[b] not in gone
    ]
    if not kept:
        return None
    index: dict[str, int] = {}
    for a, b in kept:
        index.setdefault(a, len(index))
        index.setdefault(b, len(index))
    return {**record, "ids": list(index), "pairs": [[index[a], index[b]] for a, b in kept]}


def _rewrite_list(client: redis.Redis, key: str, gone: set[str], rewrite: Rewrite) -> int:
    """Rewrite the records of one buffer that name a gone id; returns records changed."""
    with client.pipeline(transaction=True) as pipe:
        while True:
            try:
                pipe.watch(key)
                raw = pipe.lrange(key, 0, -1)
                if not raw or not any(g.encode() in item for item in raw for g in gone):
                    pipe.unwatch()
                    return 0
                ttl = pipe.ttl(key)
                kept: list[str] = []
                changed = 0
                for item in raw:
                    text = item.decode() if isinstance(item, bytes) else str(item)
                    if not any(g in text for g in gone):
                        kept.append(text)
                        continue
                    changed += 1
                    record = rewrite(json.loads(text), gone)
                    if record is not None:
                        kept.append(json.dumps(record, separators=(",", ":")))
                pipe.multi()
                pipe.delete(key)
                if kept:
                    pipe.rpush(key, *kept)
                    if ttl and ttl > 0:
                        pipe.expire(key, ttl)
                pipe.execute()
                return changed
            except redis.WatchError:
                continue


def purge_memories(
    client: redis.Redis,
    settings: Settings,
    *,
    tenant_id: str,
    user_id: str,
    memory_ids: Collection[uuid.UUID],
) -> int:
    """Clear the memories from every Redis copy (module docstring); returns keys touched
    (prefetch entries removed plus buffers rewritten)."""
    keys = RedisKeys.from_settings(settings)
    touched = drop_prefetch(client, keys, tenant_id, user_id)
    if not memory_ids:
        return touched
    gone = {str(m) for m in memory_ids}
    buffers: Sequence[tuple[str, Rewrite]] = (
        (keys.access_buffer(tenant_id, user_id), _without_hits),
        (buffer_key(keys, tenant_id, user_id), _without_pairs),
    )
    for key, rewrite in buffers:
        touched += 1 if _rewrite_list(client, key, gone, rewrite) else 0
    return touched
