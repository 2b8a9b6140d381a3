"""turn passages: a turn's dense keys are its sentences, each with the speaker's name

A chat message often carries several things ("Work was long. Oh, and I finally booked the
trip to Lisbon for June!"); one vector of the whole message is the average of them and close
to none. In bench/conversations.py cosine over these keys (each sentence led by the
speaker's name, the best per turn: its `dense-passages` row) against the whole message (its
`dense` row) has recall@10 0.508 against 0.381 on the development conversations (1-7), 0.501
against 0.481 on the held-out ones (8-10); the name matches questions that say who said it. So a turn's vectors move to episodic.turn_passages: one row per
sentence of a multi-sentence turn, or one for the whole turn; the dense leg walks them and a
turn scores its best passage.

The table follows the trace: HASH (tenant_id, user_id) into the same 16 partitions (a user's
passages in one partition, beside its turns), the tenant and the user in every key, a
foreign key to the turn so that whatever removes a turn removes its passages, the turn's
time and channel copied (turns are immutable) so a time-bound or channel-bound dense search
filters passages without a join. Existing turns keep their one vector as their one passage
(ordinal 0); the column and its per-partition HNSW indexes leave episodic.turns.

Revision ID: a7c3e5f9b1d2
Revises: f5a0d3c8e2b4
Create Date: 2026-11-24 17:00:00.000000
"""

from collections.abc import Sequence

from alembic import op

from app.config import get_settings

revision: str = "a7c3e5f9b1d2"
down_revision: str | None = "f5a0d3c8e2b4"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

APP_ROLE = get_settings().app_role
DIM = get_settings().embedding_dim
PARTITIONS = 16  # the trace's own (episodic.turns), so a user's passages sit beside its turns
TENANT_PREDICATE = "tenant_id = current_setting('engram.tenant_id', true)"
TABLE = "episodic.turn_passages"


def upgrade() -> None:
    op.execute(
        f"""
        CREATE TABLE {TABLE} (
            turn_id uuid NOT NULL,
            tenant_id varchar(128) NOT NULL,
            user_id varchar(128) NOT NULL,
            ordinal smallint NOT NULL,
            channel varchar(128) NOT NULL,
            occurred_at timestamptz NOT NULL,
            embedding vector({DIM}) NOT NULL,
            CONSTRAINT pk_turn_passages PRIMARY KEY (turn_id, ordinal, tenant_id, user_id),
            CONSTRAINT fk_turn_passages_turn FOREIGN KEY (turn_id, tenant_id, user_id)
                REFERENCES episodic.turns (id, tenant_id, user_id) ON DELETE CASCADE
        ) PARTITION BY HASH (tenant_id, user_id)
        """
    )
    for n in range(PARTITIONS):
        op.execute(
            f"CREATE TABLE {TABLE}_p{n:02d} PARTITION OF {TABLE}"
            f" FOR VALUES WITH (MODULUS {PARTITIONS}, REMAINDER {n})"
        )
    op.execute(
        f"CREATE INDEX ix_turn_passages_tenant_user_occurred ON {TABLE}"
        " (tenant_id, user_id, occurred_at)"
    )
    op.execute(
        f"CREATE INDEX ix_turn_passages_embedding_hnsw ON {TABLE}"
        " USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64)"
    )
    op.execute(f"ALTER TABLE {TABLE} ENABLE ROW LEVEL SECURITY")
    op.execute(f"ALTER TABLE {TABLE} FORCE ROW LEVEL SECURITY")
    op.execute(
        f"CREATE POLICY tenant_isolation ON {TABLE}"
        f" USING ({TENANT_PREDICATE}) WITH CHECK ({TENANT_PREDICATE})"
    )
    op.execute(f'GRANT SELECT, INSERT, UPDATE, DELETE ON {TABLE} TO "{APP_ROLE}"')
    op.execute(
        f"INSERT INTO {TABLE} (turn_id, tenant_id, user_id, ordinal, channel, occurred_at,"
        " embedding) SELECT id, tenant_id, user_id, 0, channel, occurred_at, embedding"
        " FROM episodic.turns WHERE embedding IS NOT NULL"
    )
    op.execute("DROP INDEX IF EXISTS episodic.ix_turns_embedding_hnsw")
    op.execute("ALTER TABLE episodic.turns DROP COLUMN embedding")
    op.execute(f"ANALYZE {TABLE}")


def downgrade() -> None:
    op.execute(f"ALTER TABLE episodic.turns ADD COLUMN embedding vector({DIM})")
    # The first passage stands for the turn: a whole turn's vector, or its first sentence's.
    op.execute(
        f"UPDATE episodic.turns AS t SET embedding = p.embedding FROM {TABLE} AS p"
        " WHERE p.turn_id = t.id AND p.tenant_id = t.tenant_id AND p.user_id = t.user_id"
        " AND p.ordinal = 0"
    )
    op.execute(
        "CREATE INDEX ix_turns_embedding_hnsw ON episodic.turns"
        " USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64)"
        " WHERE embedding IS NOT NULL"
    )
    op.execute(f"DROP TABLE {TABLE}")
