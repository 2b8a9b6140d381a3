"""Every Redis key Engram uses, built in one place.

Every key of a deployment starts with `<ENGRAM_REDIS_PREFIX>:<deployment id>:` (see
app/deployment.py): two deployments sharing a Redis, even with one prefix, share no key. The
only key outside a deployment is the prefix's list of deployments, read by producers that
have no database.

Stream partitions and per-user keys carry a hash tag (`{...}`) so that on Redis Cluster each
partition is its own slot and a user's working-memory keys share one slot (its Lua runs there).
Keys that are not streams expire (idle TTL) unless the comment says why they must live on.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from app.config import Settings

if TYPE_CHECKING:
    import redis


def partition_of(tenant_id: str, user_id: str, partitions: int) -> int:
    """Stable across processes and restarts (unlike `hash()`), so a user stays on one stream."""
    digest = hashlib.blake2b(f"{tenant_id}\x1f{user_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % partitions


class RedisKeys:
    def __init__(self, prefix: str, deployment: str | None = None) -> None:
        self.deployment = deployment
        self.prefix = f"{prefix}:{deployment}" if deployment else prefix
        self.base = prefix

    @classmethod
    def from_settings(cls, settings: Settings) -> RedisKeys:
        """The keys of this process's deployment (its id read once from the database)."""
        from app.deployment import deployment_id

        return cls(settings.redis_prefix, deployment_id(settings))

    @classmethod
    def for_producer(cls, settings: Settings, client: redis.Redis) -> RedisKeys:
        """The keys a producer writes to; without a database it learns the deployment from
        ENGRAM_DEPLOYMENT_ID or from what the deployment announced in `client`."""
        from app.deployment import deployment_id

        return cls(settings.redis_prefix, deployment_id(settings, client, producer=True))

    def deployments(self) -> str:
        """Deployments using this prefix (id → last announced), for producers without a
        database; outside every deployment, one field each, kept (it is how they are found)."""
        return f"{self.base}:deployments"

    # L0 streams (trimmed by MINID, never by blind MAXLEN; see app/streams/trim.py).
    def partition(self, index: int) -> str:
        return f"{self.prefix}:events:{{p{index}}}"

    def partitions(self, count: int) -> list[str]:
        return [self.partition(i) for i in range(count)]

    def dead_letters(self) -> str:
        """Kept until an operator drains it: a dead letter must never vanish silently."""
        return f"{self.prefix}:events:dead"

    def failures(self) -> str:
        """Per-entry failure counts of the ingest group; expires a week after the last failure."""
        return f"{self.prefix}:events:failures"

    def lost_entries(self) -> str:
        """Counter of entries found deleted while still pending (must stay 0); lives forever."""
        return f"{self.prefix}:events:lost"

    def consumer_heartbeat(self, name: str) -> str:
        """A live consumer's stats; expires if it stops beating (see HEARTBEAT_TTL_S)."""
        return f"{self.prefix}:consumers:{name}"

    def consumer_heartbeats(self) -> str:
        return f"{self.prefix}:consumers:*"

    def ingest_lag(self) -> str:
        """Recent XADD → acked lags in ms (last 100k), for operators and the benchmark."""
        return f"{self.prefix}:metrics:ingest_lag_ms"

    def embedded_count(self) -> str:
        """Texts embedded by the model (cache misses) across workers; expires with the cache."""
        return f"{self.prefix}:metrics:embedded"

    def salience_stream(self) -> str:
        """Turns that won attention and await consolidation (read by the dream cycle);
        capped at SALIENCE_STREAM_MAX_LEN entries (~) until that consumer exists."""
        return f"{self.prefix}:salience"

    # L1 working memory, per tenant and user.
    def _user(self, tenant_id: str, user_id: str) -> str:
        # `|` cannot occur in tenant or user ids (see IDENTIFIER), so no two pairs share a key.
        return f"{self.prefix}:wm:{{{tenant_id}|{user_id}}}"

    def working_turns(self, tenant_id: str, user_id: str) -> str:
        return f"{self._user(tenant_id, user_id)}:turns"

    def working_state(self, tenant_id: str, user_id: str) -> str:
        return f"{self._user(tenant_id, user_id)}:state"

    def working_seen(self, tenant_id: str, user_id: str) -> str:
        return f"{self._user(tenant_id, user_id)}:seen"

    def working_evicted(self, tenant_id: str, user_id: str) -> str:
        return f"{self._user(tenant_id, user_id)}:evicted"

    def working_active(self) -> str:
        """Index of users with live working memory, scored by last activity; entries are
        removed when their summary is flushed, so it stays as small as the active set."""
        return f"{self.prefix}:wm:active"

    def user_pattern(self, tenant_id: str, user_id: str) -> str:
        """SCAN pattern matching every per-user key (working memory, prefetch, access buffer):
        they all carry the `{tenant|user}` tag, which is what forgetting a user deletes."""
        return f"{self.prefix}:*{{{tenant_id}|{user_id}}}*"

    # Recall (see app/services/prefetch.py and app/services/access.py).
    def prefetch(self, tenant_id: str, user_id: str, channel: str) -> str:
        """A user's speculatively prefetched memories for one channel (JSON, short TTL)."""
        digest = hashlib.blake2b(channel.encode(), digest_size=8).hexdigest()
        return f"{self.prefix}:prefetch:{{{tenant_id}|{user_id}}}:{digest}"

    def access_buffer(self, tenant_id: str, user_id: str) -> str:
        """Searches and assemblies of one user not yet written to L5 (a list of JSON records)."""
        return f"{self.prefix}:access:{{{tenant_id}|{user_id}}}"

    def access_pending(self) -> str:
        """Set of `tenant|user` members whose access buffer has records to apply."""
        return f"{self.prefix}:access:pending"

    # API keys (see app/services/tenants.py).
    def revoked_key(self, tenant_id: str, key_prefix: str) -> str:
        """Marks a revoked key for API processes answering from their cache while Postgres is
        down; expires once no cache could still hold the key."""
        return f"{self.prefix}:auth:revoked:{{{tenant_id}}}:{key_prefix}"

    # Each tenant's share of the API's doors (see app/services/quota.py).
    def tenant_quota(self, door: str, tenant_id: str) -> str:
        """A tenant's token bucket at one door; expires once it would have refilled."""
        return f"{self.prefix}:quota:{door}:{{{tenant_id}}}"

    # Embedding cache (see app/embedding/cache.py).
    def embedding_cache(self, tenant_id: str, user_id: str, digest: str) -> str:
        """One vector of one user's text (float32 bytes); expires after
        ENGRAM_EMBEDDING_CACHE_TTL_S. It carries the user's tag: a cached vector is found
        only by its owner, and forgetting the user deletes it."""
        return f"{self.prefix}:emb:{{{tenant_id}|{user_id}}}:{digest}"

    # Celery delivery counting (see workers/base.py).
    def dead_tasks(self) -> str:
        """Tasks that kept killing their worker; kept until an operator drains it."""
        return f"{self.prefix}:tasks:dead"

    def task_deliveries(self, task_id: str) -> str:
        return f"{self.prefix}:task:deliveries:{task_id}"


class DreamKeys:
    """Redis keys of the dream cycle (app/services/dream.py), under the deployment's prefix."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    @classmethod
    def from_settings(cls, settings: Settings) -> DreamKeys:
        return cls(RedisKeys.from_settings(settings).prefix)

    def salience(self) -> str:
        return RedisKeys(self.prefix).salience_stream()

    def stream(self) -> str:
        """Replays, one entry per (cycle, memory); capped at DREAM_STREAM_MAX_LEN (~; see
        app/services/dream_replay.py)."""
        return f"{self.prefix}:dream"

    def pending(self, tenant_id: str, user_id: str) -> str:
        """A user's routed, not yet consolidated salience entries (entry id → fields). It
        carries the user's `{tenant|user}` tag, so forgetting the user removes it."""
        return f"{self.prefix}:dream:pending:{{{tenant_id}|{user_id}}}"

    def users(self) -> str:
        """`tenant|user` of users with pending entries, scored by when they started waiting."""
        return f"{self.prefix}:dream:users"

    def analysed(self, tenant_id: str, user_id: str) -> str:
        """The last cycle whose graph analytics committed for the user; expires after two
        windows (it only spares a rerun of the same cycle from analysing the graph again)."""
        return f"{self.prefix}:dream:analysed:{{{tenant_id}|{user_id}}}"
