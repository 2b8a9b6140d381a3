"""Cycle identity: the same (tenant, user, window) always names the same cycle, so a cycle
that crashed and is re-run in its window finds its own receipts and does nothing twice."""

from __future__ import annotations

import math
import uuid
from datetime import UTC, datetime

CYCLE_NAMESPACE = uuid.UUID("5b0c3a8e-6f1d-4c2a-9e47-0d8f3b6a2c11")


def cycle_window(now: datetime, interval_s: float) -> int:
    return math.floor(now.timestamp() / interval_s)


def window_start(window: int, interval_s: float) -> datetime:
    return datetime.fromtimestamp(window * interval_s, UTC)


def cycle_id_for(tenant_id: str, user_id: str, window: int) -> uuid.UUID:
    """The same (tenant, user, window) always names the same cycle."""
    return uuid.uuid5(CYCLE_NAMESPACE, f"{tenant_id}\x1f{user_id}\x1f{window}")
