"""Recall entry points: prefetch for users about to ask, and buffered access into L5."""

from __future__ import annotations

from app.config import get_settings
from app.embedding.factory import get_embedder
from app.redis_client import get_redis
from app.services.access import apply_pending
from app.services.prefetch import prefetch as prefetch_user
from workers.base import engram_task


@engram_task("engram.recall.prefetch")
def prefetch(items: list[list[str | None]]) -> int:
    """items: [tenant, user, channel] triples; returns memories cached in all."""
    settings = get_settings()
    client = get_redis(settings)
    embedder = get_embedder(settings, client)
    total = 0
    for tenant_id, user_id, channel in items:
        assert tenant_id is not None and user_id is not None
        total += prefetch_user(
            tenant_id, user_id, channel, settings=settings, embedder=embedder, client=client
        )
    return total


@engram_task("engram.recall.apply_access")
def apply_access() -> int:
    settings = get_settings()
    return apply_pending(settings, get_redis(settings))
