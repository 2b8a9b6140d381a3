"""Periodic jobs, and what keeps a second beat from running them twice.

Each job is idempotent, and many also hold a Postgres advisory lock per (job, tenant, scope)
while they run (app/services/jobs.py). On top of that every entry fired by beat carries its
name and period in the message headers, and the worker runs it under `once_per_period`
(workers/base.py): one run at a time per entry, and none within 90 % of the period after the
last successful one. Two beats (or a beat restarted mid-period) therefore run each entry
once per period, whichever fires first. A task sent by hand, without the headers, just runs.
"""

from __future__ import annotations

from typing import Any

from app.config import Settings

# Message headers of a beat-fired task (read back as attributes of `task.request`).
ENTRY_HEADER = "engram_beat_entry"
PERIOD_HEADER = "engram_beat_period_s"


def job_name(entry: str) -> str:
    """The meta.job_runs name of a beat entry's runs."""
    return f"beat:{entry}"


def beat_schedule(settings: Settings) -> dict[str, dict[str, Any]]:
    schedule = _entries(settings)
    for name, entry in schedule.items():
        headers = {ENTRY_HEADER: name, PERIOD_HEADER: float(entry["schedule"])}
        entry["options"] = {**entry.get("options", {}), "headers": headers}
    return schedule


def _entries(settings: Settings) -> dict[str, dict[str, Any]]:
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
