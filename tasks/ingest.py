"""Ingest-side periodic work. Stream consumption itself runs in workers/consumer_step.py."""

from __future__ import annotations

from app.config import get_settings
from app.keys import RedisKeys
from app.redis_client import get_redis
from app.streams.trim import trim_partitions
from workers.base import engram_task


@engram_task("engram.ingest.trim_streams")
def trim_streams() -> int:
    settings = get_settings()
    streams = RedisKeys.from_settings(settings).partitions(settings.stream_partitions)
    return trim_partitions(get_redis(settings), streams)
