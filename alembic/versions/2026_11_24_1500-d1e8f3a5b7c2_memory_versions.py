"""memory versions: edits write a new version and close the old one

An edit links the old version to the new one through `superseded_by` (which contradictions
already use). History walks those links backwards too (`WHERE superseded_by = :id`), and
deleting a memory makes Postgres look for rows pointing at it (the foreign key's
ON DELETE SET NULL): without an index both scan every memory of the tenant.

Revision ID: d1e8f3a5b7c2
Revises: c7e2a9d4f1b3
Create Date: 2026-11-24 15:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "d1e8f3a5b7c2"
down_revision: str | None = "c7e2a9d4f1b3"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(
        "ix_memories_superseded_by",
        "memories",
        ["superseded_by"],
        schema="semantic",
        postgresql_where=sa.text("superseded_by IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_memories_superseded_by", table_name="memories", schema="semantic")
