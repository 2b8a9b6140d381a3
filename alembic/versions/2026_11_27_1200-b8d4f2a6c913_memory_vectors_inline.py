"""memory vectors inline: semantic.memories keeps its embedding in the row, not in TOAST

A memory's row (text, summary, topics, tags, scores, source turns) averages ~2.5 KB with its
384-d vector, over Postgres' 2 KB TOAST threshold; the vector, the widest value, was the one
moved out of line, so every cosine computed on a memory (the exact sort of a user's
memories, the re-sort after an HNSW walk, near-duplicate checks at extraction) first
fetched it from the TOAST table: 990 memories of one user cost 6,284 buffer reads and
7.5 ms to rank where the same vectors inline rank in ~1 ms. With STORAGE PLAIN the vector
always stays in the row and the other, rarely compared columns are moved out instead.

Existing vectors are rewritten in one set-based UPDATE (subvector of the whole vector: the
same floats, now a fresh value stored under the new rule); rows without a vector are not
touched. The downgrade only restores the default rule: vectors stored inline stay valid.

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
    op.execute("ALTER TABLE semantic.memories ALTER COLUMN embedding SET STORAGE PLAIN")
    op.execute(
        "UPDATE semantic.memories SET embedding = subvector(embedding, 1, vector_dims(embedding))"
        " WHERE embedding IS NOT NULL"
    )


def downgrade() -> None:
    op.execute("ALTER TABLE semantic.memories ALTER COLUMN embedding SET STORAGE EXTENDED")
