"""Routing of the salience stream: one stream carries every tenant's consolidation winners,
and a cycle runs per user, so entries are filed under their user first. An entry stays
pending in the consumer group until a cycle has committed its effect, so a crash anywhere
loses none (a router that died between reading and filing is reclaimed by the next run)."""

from __future__ import annotations

import json
import logging
import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import redis

from app.config import Settings
from app.keys import DreamKeys

_log = logging.getLogger(__name__)

GROUP = "dream"
CONSUMER = "dream-router"
ROUTE_BATCH = 1000
ROUTE_MAX = 100_000  # entries filed per run at most (the rest wait for the next run)
PEEK_MAX = 10_000  # undelivered entries a dry run looks through


@dataclass(frozen=True)
class SalienceEntry:
    entry_id: str
    turn_id: uuid.UUID
    emotional_intensity: float
    salience: float

    @property
    def at(self) -> datetime:
        return datetime.fromtimestamp(int(self.entry_id.split("-")[0]) / 1000, UTC)


def as_text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _entry_order(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def _float(value: Any) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return 0.0
    return 0.0 if math.isnan(x) else min(1.0, max(0.0, x))


def _parse(fields: dict[Any, Any]) -> tuple[str, str, dict[str, Any]] | None:
    """(tenant, user, filed fields) of a salience entry, or None if it is malformed."""
    f = {as_text(k): as_text(v) for k, v in fields.items()}
    try:
        turn = uuid.UUID(f["turn_id"])
        tenant, user = f["tenant_id"], f["user_id"]
    except (KeyError, ValueError):
        return None
    if not tenant or not user or "|" in tenant or "|" in user:
        return None
    filed = {
        "turn_id": str(turn),
        "emotional_intensity": _float(f.get("emotional_intensity")),
        "salience": _float(f.get("salience")),
    }
    return tenant, user, filed


def ensure_group(client: redis.Redis, keys: DreamKeys) -> None:
    try:
        client.xgroup_create(keys.salience(), GROUP, id="0", mkstream=True)
    except redis.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


def _file(client: redis.Redis, keys: DreamKeys, entries: Sequence[Any]) -> int:
    pipe = client.pipeline(transaction=False)
    malformed: list[str] = []
    for raw_id, fields in entries:
        entry_id = as_text(raw_id)
        parsed = _parse(fields or {})
        if parsed is None:
            malformed.append(entry_id)
            continue
        tenant, user, filed = parsed
        pipe.hset(keys.pending(tenant, user), entry_id, json.dumps(filed))
        pipe.zadd(keys.users(), {f"{tenant}|{user}": _entry_order(entry_id)[0]}, nx=True)
    if malformed:
        _log.warning("dropping %d malformed salience entries: %s", len(malformed), malformed[:5])
        pipe.xack(keys.salience(), GROUP, *malformed)
    pipe.execute()
    return len(entries) - len(malformed)


def route_salience(settings: Settings, client: redis.Redis, *, limit: int = ROUTE_MAX) -> int:
    """File new salience entries under their users (they stay pending in the group until a
    cycle acks them); also re-files entries a router read but may not have filed."""
    keys = DreamKeys.from_settings(settings)
    ensure_group(client, keys)
    routed = 0
    idle_ms = max(settings.claim_min_idle_ms, int(settings.dream_interval_s * 2000))
    claimed = client.xautoclaim(
        keys.salience(), GROUP, CONSUMER, min_idle_time=idle_ms, start_id="0-0", count=ROUTE_BATCH
    )
    if claimed and claimed[1]:
        routed += _file(client, keys, [e for e in claimed[1] if e and e[1] is not None])
    while routed < limit:
        reply = client.xreadgroup(GROUP, CONSUMER, {keys.salience(): ">"}, count=ROUTE_BATCH)
        entries = reply[0][1] if reply else []
        if not entries:
            break
        routed += _file(client, keys, entries)
    return routed


def _decode_filed(entry_id: str, value: Any) -> SalienceEntry | None:
    try:
        f = json.loads(as_text(value))
        return SalienceEntry(
            entry_id=entry_id,
            turn_id=uuid.UUID(f["turn_id"]),
            emotional_intensity=_float(f.get("emotional_intensity")),
            salience=_float(f.get("salience")),
        )
    except (KeyError, ValueError, TypeError):
        return None


def pending_entries(
    client: redis.Redis, keys: DreamKeys, tenant_id: str, user_id: str, limit: int
) -> list[SalienceEntry]:
    """The user's filed entries, oldest first (at most `limit`)."""
    raw = client.hgetall(keys.pending(tenant_id, user_id))
    entries = [_decode_filed(as_text(k), v) for k, v in raw.items()]
    found = sorted((e for e in entries if e is not None), key=lambda e: _entry_order(e.entry_id))
    return found[:limit]


def peek_entries(
    client: redis.Redis, keys: DreamKeys, tenant_id: str, user_id: str, limit: int
) -> list[SalienceEntry]:
    """Read-only: the user's filed entries plus those the group has not delivered yet."""
    found = {e.entry_id: e for e in pending_entries(client, keys, tenant_id, user_id, limit)}
    start = "-"
    try:
        for group in client.xinfo_groups(keys.salience()):
            if as_text(group.get("name")) == GROUP:
                start = "(" + as_text(group.get("last-delivered-id"))
    except redis.ResponseError:  # no stream yet
        return list(found.values())
    for raw_id, fields in client.xrange(keys.salience(), min=start, max="+", count=PEEK_MAX):
        parsed = _parse(fields or {})
        if parsed is None or parsed[:2] != (tenant_id, user_id):
            continue
        entry = _decode_filed(as_text(raw_id), json.dumps(parsed[2]))
        if entry is not None:
            found.setdefault(entry.entry_id, entry)
    return sorted(found.values(), key=lambda e: _entry_order(e.entry_id))[:limit]


def ack(
    client: redis.Redis, keys: DreamKeys, tenant_id: str, user_id: str, entry_ids: Sequence[str]
) -> int:
    """Ack consumed entries, unfile them, and move the user to the back of the queue (or off
    it when nothing is left)."""
    member = f"{tenant_id}|{user_id}"
    pending = keys.pending(tenant_id, user_id)
    acked = 0
    if entry_ids:
        pipe = client.pipeline(transaction=False)
        pipe.xack(keys.salience(), GROUP, *entry_ids)
        pipe.hdel(pending, *entry_ids)
        acked = int(pipe.execute()[0])
    if client.hlen(pending) == 0:
        client.zrem(keys.users(), member)
    else:
        client.zadd(keys.users(), {member: int(datetime.now(UTC).timestamp() * 1000)}, xx=True)
    return acked
