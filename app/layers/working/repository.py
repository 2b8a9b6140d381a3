"""SQL for working.summaries: where L1's rolling summary survives Redis' idle TTL."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from app.layers.working.models import WorkingSummary
from app.layers.working.store import WorkingMemory


def upsert_summary(*, session: Session, memory: WorkingMemory) -> None:
    last = max((t.at for t in memory.turns), default=None)
    stmt = insert(WorkingSummary).values(
        tenant_id=memory.tenant_id,
        user_id=memory.user_id,
        summary=memory.summary,
        summary_tokens=memory.summary_tokens,
        turns_summarised=memory.turns_summarised,
        last_turn_at=last,
    )
    stmt = stmt.on_conflict_do_update(
        index_elements=["tenant_id", "user_id"],
        set_={
            "summary": stmt.excluded.summary,
            "summary_tokens": stmt.excluded.summary_tokens,
            "turns_summarised": stmt.excluded.turns_summarised,
            "last_turn_at": stmt.excluded.last_turn_at,
            "flushed_at": stmt.excluded.flushed_at,
        },
    )
    session.execute(stmt)


def get_summary(*, session: Session, tenant_id: str, user_id: str) -> WorkingSummary | None:
    return session.scalar(
        select(WorkingSummary).where(
            WorkingSummary.tenant_id == tenant_id, WorkingSummary.user_id == user_id
        )
    )
