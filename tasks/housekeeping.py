"""Housekeeping entry points (L5 upkeep, L2 summaries and retention): one call into app/ each.

Every job takes its own lock per tenant (app/services/jobs.py), so overlapping runs from two
beats or a redelivered message do the work once.
"""

from __future__ import annotations

from app.config import get_settings
from app.services import meta_refresh, retention
from workers.base import engram_task


@engram_task("engram.maintenance.refresh_hot_memories")
def refresh_hot_memories(only_if_due: bool = False) -> int | None:
    """Refresh meta.hot_memories_mv; with only_if_due, only once enough memories were created
    since the last refresh. Rows in the view, or None when nothing ran."""
    settings = get_settings()
    if only_if_due:
        result = meta_refresh.maybe_refresh_after_ingest(settings)
    else:
        result = meta_refresh.refresh_hot_memories(settings)
    return None if result is None else result.rows


@engram_task("engram.maintenance.prune_access_patterns")
def prune_access_patterns() -> int:
    return meta_refresh.prune_access_patterns(get_settings())


@engram_task("engram.maintenance.recompute_procedures")
def recompute_procedures() -> int:
    return meta_refresh.recompute_procedure_confidence(get_settings())


@engram_task("engram.maintenance.summarise_sessions")
def summarise_sessions() -> dict[str, int]:
    """Close idle sessions, then summarise every closed session that has no summary yet."""
    return retention.close_and_summarise(get_settings())


@engram_task("engram.maintenance.apply_event_retention")
def apply_event_retention() -> int:
    return retention.apply_event_retention(get_settings())


@engram_task("engram.maintenance.prune_job_runs")
def prune_job_runs() -> int:
    return meta_refresh.prune_job_runs(get_settings())
