"""L1 working memory lives in Redis; this table keeps its rolling summary past the idle TTL."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import DateTime, Integer, PrimaryKeyConstraint, Text, func
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, tenant_column, user_column


class WorkingSummary(Base):
    __tablename__ = "summaries"
    __table_args__ = (
        PrimaryKeyConstraint("tenant_id", "user_id"),
        {"schema": "working"},
    )

    tenant_id: Mapped[str] = tenant_column()
    user_id: Mapped[str] = user_column()
    summary: Mapped[str] = mapped_column(Text, nullable=False, server_default="")
    summary_tokens: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    turns_summarised: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    last_turn_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    flushed_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now()
    )
