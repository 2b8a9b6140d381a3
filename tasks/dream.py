"""Dream entry points: arguments → one call into app/services/dream.py (which owns the
transactions, the job locks and the stream acks)."""

from __future__ import annotations

from typing import Any

from app.config import get_settings
from app.services.dream import run_dream
from workers.base import engram_task


@engram_task("engram.dream.cycle")
def cycle() -> dict[str, Any]:
    """Beat: route new salience entries, then dream for the users due (every tenant)."""
    return run_dream(get_settings()).summary()


@engram_task("engram.dream.run_user")
def run_user(tenant_id: str, user_id: str, dry_run: bool = False) -> dict[str, Any]:
    """On demand: one user's cycle of the current window (or its plan, with dry_run)."""
    return run_dream(
        get_settings(), tenant_id=tenant_id, user_id=user_id, dry_run=dry_run
    ).summary()
