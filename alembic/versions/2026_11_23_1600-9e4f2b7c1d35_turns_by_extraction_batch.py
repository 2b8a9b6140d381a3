"""Turns by extraction batch: every extraction step reads its batch's turns

Revision ID: 9e4f2b7c1d35
Revises: 3c9a6e2f51b8
Create Date: 2026-11-23 16:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "9e4f2b7c1d35"
down_revision: str | None = "3c9a6e2f51b8"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Extract and store each read a batch's turns by batch id; without this index each read
    # was a scan of the whole turns table, two or three times per batch. Built concurrently:
    # a plain CREATE INDEX would block ingest's inserts for as long as the build takes.
    with op.get_context().autocommit_block():
        op.create_index(
            "ix_turns_extraction_batch",
            "turns",
            ["extraction_batch_id"],
            unique=False,
            schema="episodic",
            postgresql_where=sa.text("extraction_batch_id IS NOT NULL"),
            postgresql_concurrently=True,
        )


def downgrade() -> None:
    with op.get_context().autocommit_block():
        op.drop_index(
            "ix_turns_extraction_batch",
            table_name="turns",
            schema="episodic",
            postgresql_concurrently=True,
        )
