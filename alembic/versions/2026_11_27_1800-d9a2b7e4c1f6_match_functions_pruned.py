"""The full-text match functions take the tenant as an argument and return the tsvector

episodic.match_turns and semantic.match_memories run as the owner and applied the tenant
predicate from the transaction's setting (`tenant_id = current_setting(...)`), a value the
planner does not know: it planned the statement over all sixteen partitions of the trace (and
of memories) on every call whose plan it did not cache, and the turns' match was planned anew
on every search (pg_stat_statements over bench/conversations.py's questions). The tenant now
comes as an argument, checked against the setting (`p_tenant = current_setting(...)`: a
caller naming another tenant gets no row, as before), so the planner keeps the one partition
of (tenant, user). The match returns the row's tsvector itself: its text form was parsed back
into a tsvector for every matched row when BM25 read its term counts (app/db/fulltext.py).

Revision ID: d9a2b7e4c1f6
Revises: c3f1e8a2d5b7
Create Date: 2026-11-27 18:00:00.000000
"""

from collections.abc import Sequence

from alembic import op

from app.config import get_settings

revision: str = "d9a2b7e4c1f6"
down_revision: str | None = "c3f1e8a2d5b7"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

APP_ROLE = get_settings().app_role
SETTING = "current_setting('engram.tenant_id', true)"
AGENT = (
    "(m.agent_id IS NULL OR m.shared OR m.agent_id = current_setting('engram.agent_id', true)"
    " OR current_setting('engram.all_agents', true) = 'on')"
)
TURN_ARGS = (
    "p_query tsquery, p_limit integer, p_channel text, p_since timestamptz, p_until timestamptz"
)
MEMORY_ARGS = (
    "p_query tsquery, p_limit integer, p_superseded boolean, p_archived boolean,"
    " p_channel text, p_tags text[], p_kinds text[], p_since timestamptz,"
    " p_until timestamptz, p_min_importance double precision, p_exclude uuid[]"
)


def _types(args: str) -> str:
    return ", ".join(arg.split(" ", 1)[1] for arg in args.split(", "))


def _signature(tenant_argument: bool, args: str) -> str:
    return ("text, text, " if tenant_argument else "text, ") + _types(args)


def _function(name: str, args: str, alias: str, table: str, tenant_argument: bool) -> str:
    """CREATE FUNCTION `name` up to its WHERE's tenant and user: the owner-run probe of one
    user's rows in `table`, in either form."""
    if tenant_argument:
        head, tenant = "p_tenant text, ", f"{alias}.tenant_id = p_tenant AND p_tenant"
        returned, tsv = "tsvector", f"{alias}.search_tsv"
    else:
        head, tenant, returned = "", f"{alias}.tenant_id", "text"
        tsv = f"CAST({alias}.search_tsv AS text)"
    return f"""
CREATE FUNCTION {name}({head}p_user text, {args})
RETURNS TABLE (id uuid, v {returned})
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT {alias}.id, {tsv} FROM {table} AS {alias}
    WHERE {tenant} = {SETTING} AND {alias}.user_id = p_user
      AND {alias}.search_tsv @@ p_query"""


def _match_turns(tenant_argument: bool) -> str:
    return (
        _function("episodic.match_turns", TURN_ARGS, "t", "episodic.turns", tenant_argument)
        + """
      AND (p_channel IS NULL OR t.channel = p_channel)
      AND (p_since IS NULL OR t.occurred_at >= p_since)
      AND (p_until IS NULL OR t.occurred_at < p_until)
    ORDER BY ts_rank(t.search_tsv, p_query) DESC, t.id
    LIMIT p_limit
$$
"""
    )


def _match_memories(tenant_argument: bool) -> str:
    return (
        _function("semantic.match_memories", MEMORY_ARGS, "m", "semantic.memories", tenant_argument)
        + f"""
      AND {AGENT}
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
    )


def _replace(tenant_argument: bool) -> None:
    """Drop the other form of both functions (a changed result type needs a new function)
    and create this one, callable by the application's role alone."""
    for name, args, make in (
        ("episodic.match_turns", TURN_ARGS, _match_turns),
        ("semantic.match_memories", MEMORY_ARGS, _match_memories),
    ):
        op.execute(f"DROP FUNCTION {name}({_signature(not tenant_argument, args)})")
        op.execute(make(tenant_argument))
        signature = _signature(tenant_argument, args)
        op.execute(f"REVOKE ALL ON FUNCTION {name}({signature}) FROM PUBLIC")
        op.execute(f'GRANT EXECUTE ON FUNCTION {name}({signature}) TO "{APP_ROLE}"')


def upgrade() -> None:
    _replace(tenant_argument=True)


def downgrade() -> None:
    _replace(tenant_argument=False)
