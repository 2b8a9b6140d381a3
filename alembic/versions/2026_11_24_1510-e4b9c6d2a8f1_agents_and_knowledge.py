"""agents over one archive, and tenant-wide knowledge

Several agents of one user share the raw archive (L2 turns record their agent for provenance
only) while each agent's semantic map — the L3 memories and L4 edges it formed — is private
unless marked shared. Row-level security enforces it: a row carrying an agent is visible only
to a transaction scoped to that agent (`engram.agent_id`) or to background work that asked
for every agent (`engram.all_agents` = 'on'); a transaction that says nothing sees user-level
and shared rows only. Edges take their agent from the memories they join (a trigger), so
every writer of an edge inherits the rule without knowing it.

Tenant-wide knowledge needs no schema: it is stored as memories of a reserved user id that no
client-facing identifier can spell.

Revision ID: e4b9c6d2a8f1
Revises: d1e8f3a5b7c2
Create Date: 2026-11-24 15:10:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "e4b9c6d2a8f1"
down_revision: str | None = "d1e8f3a5b7c2"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TENANT_PREDICATE = "tenant_id = current_setting('engram.tenant_id', true)"


def agent_predicate(alias: str = "") -> str:
    """A row of no agent, a shared row, the transaction's agent's row, or every row for
    background work that asked for all agents."""
    p = f"{alias}." if alias else ""
    return (
        f"({p}agent_id IS NULL OR {p}shared"
        f" OR {p}agent_id = current_setting('engram.agent_id', true)"
        " OR current_setting('engram.all_agents', true) = 'on')"
    )


# The tables whose rows an agent forms and may keep private.
AGENT_TABLES = ("semantic.memories", "conceptual.associations", "conceptual.relations")

# An edge belongs to the agent of the private memory it touches (memories of two private
# scopes are never joined: dedup and consolidation stay inside one scope). It runs as the
# writing role, under its row-level security: background writers see every agent.
EDGE_AGENT_FUNCTION = """
CREATE FUNCTION conceptual.edge_agent() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF TG_TABLE_NAME = 'associations' THEN
        SELECT m.agent_id INTO NEW.agent_id FROM semantic.memories AS m
        WHERE m.id IN (NEW.memory_a, NEW.memory_b) AND m.agent_id IS NOT NULL AND NOT m.shared
        ORDER BY m.agent_id LIMIT 1;
    ELSIF NEW.memory_id IS NOT NULL THEN
        SELECT m.agent_id, m.shared INTO NEW.agent_id, NEW.shared FROM semantic.memories AS m
        WHERE m.id = NEW.memory_id;
        NEW.shared := coalesce(NEW.shared, false);
    END IF;
    RETURN NEW;
END
$$
"""

MATCH_MEMORIES = """
CREATE OR REPLACE FUNCTION semantic.match_memories(
    p_user text, p_query tsquery, p_limit integer, p_superseded boolean, p_archived boolean,
    p_channel text, p_tags text[], p_kinds text[], p_since timestamptz, p_until timestamptz,
    p_min_importance double precision, p_exclude uuid[])
RETURNS TABLE (id uuid, v text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT m.id, CAST(m.search_tsv AS text) FROM semantic.memories AS m
    WHERE m.tenant_id = current_setting('engram.tenant_id', true) AND m.user_id = p_user
      AND m.search_tsv @@ p_query{agent}
      AND (p_archived OR m.archived_at IS NULL) AND (p_superseded OR m.valid_to IS NULL)
      AND (p_channel IS NULL OR m.channel = p_channel)
      AND (p_tags IS NULL OR m.tags && p_tags)
      AND (p_kinds IS NULL OR m.kind = ANY(p_kinds))
      AND (p_since IS NULL OR m.occurred_at >= p_since)
      AND (p_until IS NULL OR m.occurred_at < p_until)
      AND (p_min_importance IS NULL OR m.importance >= p_min_importance)
      AND (p_exclude IS NULL OR NOT (m.id = ANY(p_exclude)))
    ORDER BY ts_rank(m.search_tsv, p_query) DESC, m.id
    LIMIT p_limit
$$
"""


def _policy(table: str, predicate: str) -> None:
    op.execute(f"DROP POLICY tenant_isolation ON {table}")
    op.execute(
        f"CREATE POLICY tenant_isolation ON {table} USING ({predicate}) WITH CHECK ({predicate})"
    )


def _user_index(include: list[str] | None) -> None:
    op.drop_index("ix_memories_tenant_user_occurred", table_name="memories", schema="semantic")
    op.create_index(
        "ix_memories_tenant_user_occurred",
        "memories",
        ["tenant_id", "user_id", "occurred_at"],
        schema="semantic",
        postgresql_include=include or [],
    )


def upgrade() -> None:
    op.add_column("turns", sa.Column("agent_id", sa.String(128)), schema="episodic")
    for table in AGENT_TABLES:
        schema, name = table.split(".")
        op.add_column(name, sa.Column("agent_id", sa.String(128)), schema=schema)
        op.add_column(
            name,
            sa.Column("shared", sa.Boolean(), nullable=False, server_default=sa.false()),
            schema=schema,
        )
        _policy(table, f"{TENANT_PREDICATE} AND {agent_predicate()}")
    # The policy now reads agent_id and shared: carried in the user index, counting a user's
    # memories stays an index-only scan (app/db/nearest.py, app/db/fulltext.py size them).
    _user_index(include=["agent_id", "shared"])
    op.execute(EDGE_AGENT_FUNCTION)
    for table in ("conceptual.associations", "conceptual.relations"):
        op.execute(
            f"CREATE TRIGGER edge_agent BEFORE INSERT ON {table}"
            " FOR EACH ROW EXECUTE FUNCTION conceptual.edge_agent()"
        )
    # The owner-run full-text probe applies the policy's agent rule itself.
    op.execute(MATCH_MEMORIES.replace("{agent}", f"\n      AND {agent_predicate('m')}"))


def downgrade() -> None:
    op.execute(MATCH_MEMORIES.replace("{agent}", ""))
    for table in ("conceptual.associations", "conceptual.relations"):
        op.execute(f"DROP TRIGGER IF EXISTS edge_agent ON {table}")
    op.execute("DROP FUNCTION IF EXISTS conceptual.edge_agent()")
    _user_index(include=None)
    for table in AGENT_TABLES:
        schema, name = table.split(".")
        _policy(table, TENANT_PREDICATE)
        op.drop_column(name, "shared", schema=schema)
        op.drop_column(name, "agent_id", schema=schema)
    op.drop_column("turns", "agent_id", schema="episodic")
