"""Why an entry failed decides what happens to it: wait, retry it, or dead-letter it now.

* transient — the database or Redis is away (or a deadlock lost a race, or a lock wait hit
  `lock_timeout`): nobody's fault; the consumer keeps its batch and retries it with backoff,
  counting nothing against the entries;
* deterministic — the entry cannot be decoded or its payload is refused by validation: every
  delivery would fail the same way, so it is dead-lettered at once;
* anything else — counted per entry and retried, dead-lettered after `max_deliveries`.
"""

from __future__ import annotations

import json

import redis
from redis.exceptions import AskError, ClusterError, RedisClusterException, TryAgainError
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from app.streams.events import EventValidationError

# Postgres error classes that are about the server, not the entry: connection (08), rollback
# by deadlock or serialization (40), resources (53), operator intervention (57), system (58).
TRANSIENT_SQLSTATE_CLASSES = frozenset({"08", "40", "53", "57", "58"})
# And single states of other classes: a lock wait cut short by `lock_timeout` (55P03), as a
# batch of a user whom a forget or a session clear holds locked meets; the lock frees.
TRANSIENT_SQLSTATES = frozenset({"55P03"})
# A Redis Cluster between two states (a failover, a resharding): CLUSTERDOWN, TRYAGAIN, a
# redirect redis-py could not follow, a slot no master covers yet. It settles by itself.
CLUSTER_IN_FLUX = (ClusterError, TryAgainError, AskError, RedisClusterException)


def is_transient(exc: BaseException) -> bool:
    """Outages we wait out rather than blame on the entry. A database error counts only if
    its SQLSTATE says so (a value too large for an index is the entry's fault, though
    psycopg files it under OperationalError)."""
    if isinstance(exc, redis.ConnectionError | redis.TimeoutError | ConnectionError | TimeoutError):
        return True
    if isinstance(exc, CLUSTER_IN_FLUX):
        return True
    if isinstance(exc, DBAPIError):
        if exc.connection_invalidated:
            return True
        state = getattr(exc.orig, "sqlstate", None)
        if state:
            state = str(state)
            return state[:2] in TRANSIENT_SQLSTATE_CLASSES or state in TRANSIENT_SQLSTATES
        return isinstance(exc, OperationalError | InterfaceError)
    return False


def is_deterministic(exc: BaseException) -> bool:
    """Failures that the same entry will hit on every delivery: no point in retrying."""
    return isinstance(exc, EventValidationError | UnicodeError | json.JSONDecodeError)


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"
