"""Trim partitions without ever deleting an entry a consumer group still needs.

Redis 7.0 lets XTRIM delete entries that are still pending. So the trim point of a partition
is the smallest, over every consumer group, of its oldest pending id and the id just after its
last delivered one; `XTRIM MINID ~` removes only entries strictly below that point (and the
`~` only ever trims less). Entries not yet delivered to a group, or delivered but unacked, stay.
"""

from __future__ import annotations

import logging

import redis

_log = logging.getLogger(__name__)


def _parse(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def _after(entry_id: str) -> str:
    ms, seq = _parse(entry_id)
    return f"{ms}-{seq + 1}"


def safe_trim_point(client: redis.Redis, stream: str) -> str | None:
    """The lowest id some group still needs, or None when there is no group (trim nothing)."""
    try:
        groups = client.xinfo_groups(stream)
    except redis.ResponseError:
        return None
    if not groups:
        return None
    points: list[str] = []
    for group in groups:
        name = group["name"]
        name = name.decode() if isinstance(name, bytes) else name
        last = group["last-delivered-id"]
        last = last.decode() if isinstance(last, bytes) else last
        points.append(_after(last))
        summary = client.xpending(stream, name)
        if summary and summary.get("pending"):
            low = summary["min"]
            points.append(low.decode() if isinstance(low, bytes) else low)
    return min(points, key=_parse)


def trim_partition(client: redis.Redis, stream: str) -> int:
    """Trim one partition to its safe point; returns entries removed."""
    point = safe_trim_point(client, stream)
    if point is None or point == "0-1":
        return 0
    removed = int(client.xtrim(stream, minid=point, approximate=True))
    if removed:
        _log.info("trimmed %d consumed entries from %s (minid %s)", removed, stream, point)
    return removed


def trim_partitions(client: redis.Redis, streams: list[str]) -> int:
    return sum(trim_partition(client, stream) for stream in streams)
