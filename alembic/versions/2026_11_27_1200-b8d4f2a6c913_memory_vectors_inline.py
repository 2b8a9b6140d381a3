"""memory rows inline: semantic.memories keeps its embedding (and its other values) in the row

A memory's row (text, summary, topics, tags, scores, source turns) averages ~2.5 KB with its
384-d vector, over Postgres' default 2 KB TOAST target; the vector, the widest value, was the
one moved out of line, so every cosine computed on a memory (the exact sort of a user's
memories, the re-sort after an HNSW walk, near-duplicate checks at extraction) first
fetched it from the TOAST table (EXPLAIN ANALYZE on bench/conversations.py's database:
ranking one user's 990 memories read 6,284 buffers in 9.3 ms, inline 1,011 in 2.5 ms). Keeping only the vector inline
(STORAGE PLAIN) is not enough: the row is still over the target and TOAST then moves the
next widest values out (the stored tsvector the BM25 statistics read, the text search
returns), which doubled those reads. So the table's TOAST target is raised to the maximum
(8160 bytes): a memory row is stored whole unless it is longer than that (a long text is
still compressed or moved out), and the vector is PLAIN so that it never leaves the row.

Existing vectors are rewritten in one set-based UPDATE (subvector of the whole vector: the
same floats, now a fresh value stored under the new rules); rows without a vector are not
touched, nor are other values already moved out. The downgrade only restores the defaults:
values stored inline stay valid.

Revision ID: b8d4f2a6c913
Revises: a7c3e5f9b1d2
Create Date: 2026-11-27 12:00:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "b8d4f2a6c913"
down_revision: str | None = "a7c3e5f9b1d2"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("ALTER TABLE semantic.memories SET (toast_tuple_target = 8160)")
    op.execute("ALTER TABLE semantic.memories ALTER COLUMN embedding SET STORAGE PLAIN")
    op.execute(
        "UPDATE semantic.memories SET embedding = subvector(embedding, 1, vector_dims(embedding))"
        " WHERE embedding IS NOT NULL"
    )


def downgrade() -> None:
    op.execute("ALTER TABLE semantic.memories ALTER COLUMN embedding SET STORAGE EXTENDED")
    op.execute("ALTER TABLE semantic.memories RESET (toast_tuple_target)")
