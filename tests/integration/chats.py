"""A two-person chat for search tests: each line a turn of its speaker, a minute apart, the
first speaker as the user; persisted by the real ingest and given its passage vectors by
attention (no extraction), so the turns legs can find it."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from app.config import Settings
from app.services.attention import score_users
from tests.integration.test_hybrid_search import ingest

T0 = datetime(2024, 1, 4, 18, 0, tzinfo=UTC)


def chat(
    settings: Settings,
    redis_client: Any,
    embedder: Any,
    tenant: str,
    user: str,
    lines: Sequence[tuple[str, str]],
    *,
    start: datetime = T0,
) -> None:
    """Ingest and score `lines` ((speaker, content)) as `user`'s chat; external ids m0, m1…"""
    first = lines[0][0]
    events = [
        {
            "type": "turn",
            "tenant_id": tenant,
            "user_id": user,
            "role": "user" if speaker == first else "assistant",
            "speaker": speaker,
            "content": content,
            "external_id": f"m{n}",
            "channel": "chat",
            "timestamp": (start + timedelta(minutes=n)).isoformat(),
        }
        for n, (speaker, content) in enumerate(lines)
    ]
    ingest(settings, redis_client, events)
    score_users(
        settings=settings, client=redis_client, embedder=embedder, tenant_id=tenant, user_ids=[user]
    )
