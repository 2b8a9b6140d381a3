"""Each tenant's share of the event door: a token bucket in Redis per tenant.

Every tenant's events go into the same stream partitions, which workers drain in order: one
tenant sending as fast as it can would fill them (every tenant then gets 503s at the cap) and
put everyone else's turns behind its own. The bucket holds ENGRAM_TENANT_EVENTS_BURST events
and refills at ENGRAM_TENANT_EVENTS_PER_S; a batch takes as many tokens as it has events, or
none and is refused with the seconds until it would fit (429 and Retry-After). Redis's own
clock times the refill, so every API process shares one bucket per tenant. Redis unreachable
lets the batch through: the streams are Redis, so the producer then answers for the door.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import redis

from app.config import Settings
from app.keys import RedisKeys

_log = logging.getLogger(__name__)

# KEYS[1] the bucket; ARGV: refill per second, capacity, cost. Returns {taken (0/1), ms to wait}.
_TAKE = """
local rate, burst, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local clock = redis.call('TIME')
local now = clock[1] * 1000 + math.floor(clock[2] / 1000)
local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens, at = tonumber(state[1]) or burst, tonumber(state[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - at) * rate / 1000)
local taken = 0
if tokens >= cost then
    tokens = tokens - cost
    taken = 1
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', now)
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + 1000)
if taken == 1 then return {1, 0} end
return {0, math.ceil((cost - tokens) * 1000 / rate)}
"""


@dataclass(frozen=True)
class OverQuota:
    """A batch refused for its tenant's rate: what to tell the client."""

    tenant_id: str
    per_s: float
    burst: int
    retry_after_s: int

    def message(self) -> str:
        return (
            f"tenant {self.tenant_id} is sending events faster than its share "
            f"({self.per_s:g} per second, bursts of {self.burst}): "
            f"send this batch again in {self.retry_after_s} s"
        )


class EventQuota:
    def __init__(self, client: redis.Redis, settings: Settings) -> None:
        self.client = client
        self.keys = RedisKeys.from_settings(settings)
        self.per_s = settings.tenant_events_per_s
        self.burst = settings.tenant_events_burst
        self._take = client.register_script(_TAKE)

    def take(self, tenant_id: str, events: int) -> OverQuota | None:
        """Charge `events` to the tenant's bucket; the refusal when they do not fit."""
        if self.per_s <= 0 or events <= 0:
            return None
        key = self.keys.event_quota(tenant_id)
        try:
            taken, wait_ms = self._take(keys=[key], args=[self.per_s, self.burst, events])
        except redis.RedisError as exc:
            _log.warning("event quota unavailable, batch let through: %s", exc)
            return None
        if int(taken):
            return None
        return OverQuota(tenant_id, self.per_s, self.burst, max(1, math.ceil(int(wait_ms) / 1000)))
