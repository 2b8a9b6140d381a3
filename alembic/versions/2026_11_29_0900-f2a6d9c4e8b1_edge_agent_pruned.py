"""An edge's agent is read from its memory's own partition

conceptual.edge_agent() (the trigger that gives a relation or association the agent of the
private memory it touches) looked its memory up by id alone, so every partition of
semantic.memories was probed: ~1 ms per relation row written by extraction, against a few
microseconds for one partition (pg_stat_statements over bench/scale.py's extraction phase).
An edge and its memories share tenant and user (the relations' foreign keys say so, and
associations join memories of one user), so naming them prunes the lookup to one partition.

Revision ID: f2a6d9c4e8b1
Revises: e4b8c2d7a1f3
Create Date: 2026-11-29 09:00:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "f2a6d9c4e8b1"
down_revision: str | None = "e4b8c2d7a1f3"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FUNCTION = """
CREATE OR REPLACE FUNCTION conceptual.edge_agent() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF TG_TABLE_NAME = 'associations' THEN
        SELECT m.agent_id INTO NEW.agent_id FROM semantic.memories AS m
        WHERE m.id IN (NEW.memory_a, NEW.memory_b){same_user}
          AND m.agent_id IS NOT NULL AND NOT m.shared
        ORDER BY m.agent_id LIMIT 1;
    ELSIF NEW.memory_id IS NOT NULL THEN
        SELECT m.agent_id, m.shared INTO NEW.agent_id, NEW.shared FROM semantic.memories AS m
        WHERE m.id = NEW.memory_id{same_user};
        NEW.shared := coalesce(NEW.shared, false);
    END IF;
    RETURN NEW;
END
$$
"""

SAME_USER = " AND m.tenant_id = NEW.tenant_id AND m.user_id = NEW.user_id"


def upgrade() -> None:
    op.execute(FUNCTION.format(same_user=SAME_USER))


def downgrade() -> None:
    op.execute(FUNCTION.format(same_user=""))
