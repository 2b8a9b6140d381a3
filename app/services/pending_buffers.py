"""Per-user buffers with a shared index of users that have something buffered (the access and
co-activation buffers): append, and drop a user from the index once their buffer is empty.

On one Redis, appending is one pipeline and the drop is one script over both keys. On Redis
Cluster the buffer carries the user's hash tag and the index none, so they sit in different
slots and no script may touch both. There the order of steps carries the guarantee instead:
the writer pushes, and only after that reply adds to the index; the drop removes from the
index, then looks at the buffer and adds the user back if anything is there. In every
interleaving a user with buffered records ends up indexed (at worst indexed with an empty
buffer, which the next run drops).
"""

from __future__ import annotations

from typing import Any

import redis

from app.redis_client import is_cluster

# Leave the user in the pending set while their buffer still holds records.
_DONE_IF_EMPTY = """
if redis.call('LLEN', KEYS[1]) == 0 then
  return redis.call('SREM', KEYS[2], ARGV[1])
end
return 0
"""


def append(
    client: redis.Redis, *, buffer: str, record: str, ttl_s: int, index: str, member: str
) -> None:
    """Push `record` onto `buffer` (renewing its TTL) and list `member` in `index`."""
    pipe = client.pipeline(transaction=False)
    pipe.rpush(buffer, record)
    pipe.expire(buffer, ttl_s)
    if is_cluster(client):
        # A cluster pipeline sends to each node at once: the index must follow the push.
        pipe.execute()
        client.sadd(index, member)
        return
    pipe.sadd(index, member)
    pipe.execute()


def release_if_empty(client: redis.Redis, *, buffer: str, index: str, member: str) -> Any:
    """Drop `member` from `index` unless `buffer` still holds records."""
    if not is_cluster(client):
        return client.register_script(_DONE_IF_EMPTY)(keys=[buffer, index], args=[member])
    removed = int(client.srem(index, member))
    if int(client.llen(buffer)):
        client.sadd(index, member)
        return 0
    return removed
