"""Periodic jobs. Each is idempotent, so a second beat or an overlap does no harm."""

from __future__ import annotations

from app.config import Settings


def beat_schedule(settings: Settings) -> dict[str, dict[str, object]]:
    return {
        "trim-streams": {
            "task": "engram.ingest.trim_streams",
            "schedule": settings.trim_interval_s,
        },
        "flush-working-memory": {
            "task": "engram.maintenance.flush_working_memory",
            "schedule": 300.0,
        },
        "extract-idle-users": {
            "task": "engram.extract.sweep_idle",
            "schedule": 60.0,
        },
        "retry-stale-extractions": {
            "task": "engram.extract.retry_stale",
            "schedule": 300.0,
        },
        "apply-access": {
            "task": "engram.recall.apply_access",
            "schedule": 10.0,
        },
        "close-idle-sessions": {
            "task": "engram.maintenance.close_idle_sessions",
            "schedule": 300.0,
        },
    }
