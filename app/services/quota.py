"""Each tenant's share of the API's shared doors: a token bucket in Redis per tenant and door.

Events: every tenant's go into the same stream partitions, which workers drain in order, so
one tenant sending as fast as it can would fill them (every tenant then gets 503s at the
cap) and put everyone else's turns behind its own. Reads: searches and context blocks run on
the same API processes and Postgres, so one tenant's flood slows every other's answers. Calls:
every other route (listings, edits, remembering, procedures, status) is such work too.

A bucket holds `burst` tokens and refills at `per_s` (ENGRAM_TENANT_EVENTS_*,
ENGRAM_TENANT_READS_*, ENGRAM_TENANT_CALLS_*); a batch of events takes one token per event,
any other request one, or none and the request is refused with the seconds until it would fit
(429 and Retry-After). Redis's own clock times the refill, so every API process shares one
bucket per tenant and door. Redis unreachable lets the request through: it then fails or
degrades as it would have (the streams are Redis; a read works without it).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Literal

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


Door = Literal["events", "reads", "calls"]

# KEYS[1] the bucket; ARGV: capacity, tokens to give back (up to the capacity).
_GIVE_BACK = """
local tokens = tonumber(redis.call('HGET', KEYS[1], 'tokens'))
if tokens == nil then return 0 end
redis.call('HSET', KEYS[1], 'tokens', tostring(math.min(tonumber(ARGV[1]), tokens + ARGV[2])))
return 1
"""


@dataclass(frozen=True)
class OverQuota:
    """A request refused for its tenant's rate: what to tell the client."""

    tenant_id: str
    door: Door
    per_s: float
    burst: int
    retry_after_s: int

    def message(self) -> str:
        what = {
            "events": "events",
            "reads": "searches and context requests",
            "calls": "requests",
        }[self.door]
        again = "send this batch again" if self.door == "events" else "ask again"
        return (
            f"tenant {self.tenant_id} is sending {what} faster than its share "
            f"({self.per_s:g} per second, bursts of {self.burst}): "
            f"{again} in {self.retry_after_s} s"
        )


class TenantQuota:
    """One door's buckets, one per tenant."""

    def __init__(self, client: redis.Redis, settings: Settings, door: Door) -> None:
        self.keys = RedisKeys.from_settings(settings)
        self.door = door
        self.per_s, self.burst = {
            "events": (settings.tenant_events_per_s, settings.tenant_events_burst),
            "reads": (settings.tenant_reads_per_s, settings.tenant_reads_burst),
            "calls": (settings.tenant_calls_per_s, settings.tenant_calls_burst),
        }[door]
        self._take = client.register_script(_TAKE)
        self._give_back = client.register_script(_GIVE_BACK)

    def take(self, tenant_id: str, cost: int = 1) -> OverQuota | None:
        """Charge `cost` to the tenant's bucket; the refusal when it does not fit."""
        if self.per_s <= 0 or cost <= 0:
            return None
        key = self.keys.tenant_quota(self.door, tenant_id)
        try:
            taken, wait_ms = self._take(keys=[key], args=[self.per_s, self.burst, cost])
        except redis.RedisError as exc:
            _log.warning("%s quota unavailable, request let through: %s", self.door, exc)
            return None
        if int(taken):
            return None
        wait_s = max(1, math.ceil(int(wait_ms) / 1000))
        return OverQuota(tenant_id, self.door, self.per_s, self.burst, wait_s)

    def give_back(self, tenant_id: str, cost: int) -> None:
        """Return what a request was charged for work it did not get (events the streams
        refused with a 503): a client resending them is charged once."""
        if self.per_s <= 0 or cost <= 0:
            return
        key = self.keys.tenant_quota(self.door, tenant_id)
        try:
            self._give_back(keys=[key], args=[self.burst, cost])
        except redis.RedisError as exc:
            _log.warning("%s quota unavailable, nothing given back: %s", self.door, exc)
