"""A turn's full-text key holds its neighbours' words; the session walk reads an index in order

Each turn's `search_tsv` gains the own words of the turn just before and the turn just after
it in its session (label C; app/layers/episodic/context_words.py keeps them in step from now
on), and episodic.match_turns ranks such borrowed words at half the weight of a turn's own.
Existing turns are rekeyed here, each session in message order.

The walks from a turn to its neighbours (the search's neighbour boost, the context window, the
rekeying) sorted every earlier or later turn of the session by (time, arrival, id) to keep a
few: `ix_turns_session_order` holds that order, so a walk reads only the rows it returns. It
replaces `ix_turns_session_occurred`, whose every use it serves.

Revision ID: e4b8c2d7a1f3
Revises: d9a2b7e4c1f6
Create Date: 2026-11-28 09:00:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "e4b8c2d7a1f3"
down_revision: str | None = "d9a2b7e4c1f6"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ARRIVAL = (
    "lpad(split_part(coalesce(stream_entry_id, ''), '-', 1), 20, '0') || '-'"
    " || lpad(split_part(coalesce(stream_entry_id, ''), '-', 2), 20, '0')"
)
# ts_rank's weights, for labels {D, C, B, A}: a borrowed (C) word counts half an own (D) one.
WEIGHTED_RANK = "ts_rank('{0.1, 0.05, 0.4, 1.0}'::float4[], t.search_tsv, p_query)"
PLAIN_RANK = "ts_rank(t.search_tsv, p_query)"

MATCH_TURNS = """
CREATE OR REPLACE FUNCTION episodic.match_turns(p_tenant text, p_user text, p_query tsquery,
    p_limit integer, p_channel text, p_since timestamptz, p_until timestamptz)
RETURNS TABLE (id uuid, v tsvector)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT t.id, t.search_tsv FROM episodic.turns AS t
    WHERE t.tenant_id = p_tenant AND p_tenant = current_setting('engram.tenant_id', true)
      AND t.user_id = p_user
      AND t.search_tsv @@ p_query
      AND (p_channel IS NULL OR t.channel = p_channel)
      AND (p_since IS NULL OR t.occurred_at >= p_since)
      AND (p_until IS NULL OR t.occurred_at < p_until)
    ORDER BY {rank} DESC, t.id
    LIMIT p_limit
$$
"""

REKEY_ALL = f"""
WITH o AS (
    SELECT id, tenant_id, user_id, search_tsv,
        lag(ts_filter(search_tsv, '{{d}}')) OVER w AS before,
        lead(ts_filter(search_tsv, '{{d}}')) OVER w AS after
    FROM episodic.turns
    WINDOW w AS (PARTITION BY tenant_id, user_id, session_id
        ORDER BY occurred_at, {ARRIVAL}, id)),
k AS (
    SELECT id, tenant_id, user_id, ts_filter(search_tsv, '{{d}}')
        || setweight(coalesce(before, ''), 'C') || setweight(coalesce(after, ''), 'C') AS v
    FROM o)
UPDATE episodic.turns AS t SET search_tsv = k.v FROM k
WHERE t.id = k.id AND t.tenant_id = k.tenant_id AND t.user_id = k.user_id
  AND t.search_tsv IS DISTINCT FROM k.v
"""


def upgrade() -> None:
    op.execute(
        "CREATE INDEX ix_turns_session_order ON episodic.turns"
        f" (session_id, occurred_at, ({ARRIVAL}), id)"
    )
    op.execute("DROP INDEX episodic.ix_turns_session_occurred")
    op.execute(MATCH_TURNS.format(rank=WEIGHTED_RANK))
    op.execute(REKEY_ALL)


def downgrade() -> None:
    op.execute(
        "UPDATE episodic.turns SET search_tsv = ts_filter(search_tsv, '{d}')"
        " WHERE search_tsv IS DISTINCT FROM ts_filter(search_tsv, '{d}')"
    )
    op.execute(MATCH_TURNS.format(rank=PLAIN_RANK))
    op.execute("CREATE INDEX ix_turns_session_occurred ON episodic.turns (session_id, occurred_at)")
    op.execute("DROP INDEX episodic.ix_turns_session_order")
