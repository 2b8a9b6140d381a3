"""meta.tenants under row-level security, read by the app role only through its own tenant

Revision ID: b2d5f8c3e061
Revises: a1c4e7b2d950
Create Date: 2026-11-24 13:10:00.000000
"""

from collections.abc import Sequence

revision: str = "b2d5f8c3e061"
down_revision: str | None = "a1c4e7b2d950"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
