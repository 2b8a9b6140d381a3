"""Hebbian association entry points: buffered co-activations into L4 edges, and the daily
weakening of edges left unused (both in app/services/hebbian.py, which owns the transactions)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from app.config import get_settings
from app.redis_client import get_redis
from app.services import hebbian
from app.services.jobs import tenants
from workers.base import engram_task


@engram_task("engram.maintenance.apply_coactivations")
def apply_coactivations(max_users: int = 200) -> dict[str, Any]:
    settings = get_settings()
    return asdict(hebbian.apply_pending(settings, get_redis(settings), max_users=max_users))


@engram_task("engram.maintenance.weaken_associations")
def weaken_associations() -> dict[str, int]:
    """Every registered tenant, once per period: a run for a period already done is a no-op,
    so this can be scheduled far more often than the period (and by more than one beat)."""
    settings = get_settings()
    totals = {"tenants": 0, "weakened": 0, "pruned": 0, "skipped": 0}
    for tenant_id in tenants():
        report = hebbian.weaken(settings, tenant_id)
        totals["tenants"] += 1
        totals["weakened"] += report.weakened
        totals["pruned"] += report.pruned
        totals["skipped"] += report.skipped is not None
    return totals
