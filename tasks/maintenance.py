"""Maintenance entry points: arguments → one call into app/ (which owns the transactions)."""

from __future__ import annotations

from app.config import get_settings
from app.layers.episodic.service import close_idle_sessions as close_sessions
from app.layers.working.service import flush_idle
from app.layers.working.store import WorkingMemoryStore
from app.redis_client import get_redis
from app.services.decay import run_decay
from workers.base import engram_task


@engram_task("engram.maintenance.flush_working_memory")
def flush_working_memory() -> int:
    settings = get_settings()
    return flush_idle(WorkingMemoryStore(get_redis(settings), settings), settings)


@engram_task("engram.maintenance.close_idle_sessions")
def close_idle_sessions() -> int:
    return close_sessions(get_settings())


@engram_task("engram.maintenance.decay")
def decay() -> int:
    return run_decay(get_settings())
