"""Stored rows stay readable: repair rows accepted before the door checked their range

Revision ID: a1c4e7b2d950
Revises: 4d7a1c9e8b20
Create Date: 2026-11-24 13:00:00.000000
"""

from collections.abc import Sequence

revision: str = "a1c4e7b2d950"
down_revision: str | None = "4d7a1c9e8b20"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
