"""Periodic jobs. Each is idempotent, and the background-cognition jobs also hold a Postgres
advisory lock per (job, tenant, scope) while they run (app/services/jobs.py), so a second beat
or an overlap does no harm."""

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
        # Closes idle sessions, then gives the closed ones their summary.
        "close-and-summarise-sessions": {
            "task": "engram.maintenance.summarise_sessions",
            "schedule": 300.0,
        },
        "decay": {
            "task": "engram.maintenance.decay",
            "schedule": settings.decay_interval_s,
        },
        "apply-coactivations": {
            "task": "engram.maintenance.apply_coactivations",
            "schedule": settings.hebbian_interval_s,
        },
        "weaken-associations": {
            "task": "engram.maintenance.weaken_associations",
            "schedule": 3600.0,
        },
        # Each user dreams at most once per ENGRAM_DREAM_INTERVAL_S window and a run takes
        # ENGRAM_DREAM_USERS_PER_RUN users, so the beat comes often and finds the next ones.
        "dream-cycle": {
            "task": "engram.dream.cycle",
            "schedule": 60.0,
        },
        "refresh-hot-memories": {
            "task": "engram.maintenance.refresh_hot_memories",
            "schedule": settings.meta_refresh_interval_s,
        },
        # Between the six-hourly refreshes: refresh early after a large ingest.
        "refresh-hot-memories-if-due": {
            "task": "engram.maintenance.refresh_hot_memories",
            "schedule": 300.0,
            "kwargs": {"only_if_due": True},
        },
        "prune-access-patterns": {
            "task": "engram.maintenance.prune_access_patterns",
            "schedule": 3600.0,
        },
        "prune-job-runs": {
            "task": "engram.maintenance.prune_job_runs",
            "schedule": 86_400.0,
        },
        "recompute-procedures": {
            "task": "engram.maintenance.recompute_procedures",
            "schedule": 86_400.0,
        },
        "event-retention": {
            "task": "engram.maintenance.apply_event_retention",
            "schedule": 3600.0,
        },
    }
