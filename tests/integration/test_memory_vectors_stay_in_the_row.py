"""A memory's vector is stored in its row, never moved to TOAST: every cosine over memories
reads it; nor are the other values search reads moved out in its place (migration
b8d4f2a6c913)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text

from app.config import Settings
from app.db.session import owner_engine
from app.embedding.factory import get_embedder
from app.services.memories import MemoryIn, RememberRequest, remember


def test_a_memorys_vector_stays_in_the_row(
    settings: Settings, redis_client: Any, tenant: str
) -> None:
    # With its vector, a memory of a few sentences is over the 2 KB TOAST threshold; the
    # vector is its widest value, the one TOAST would move out first.
    said = " ".join(
        [
            "Ida walks her dog Pixel along the river past the old mill every morning.",
            "On Sundays they take the long loop through the birch woods to the lake.",
            "Pixel is a greyhound she adopted from the shelter in Lisbon last spring.",
            "The vet says he needs a lighter diet, longer walks and a new harness.",
            "Ida's sister Maya looks after him when Ida travels for work in June.",
            "He is scared of thunder and sleeps under the piano during storms.",
        ]
    )
    remember(
        tenant,
        RememberRequest(user_id="ida", memories=[MemoryIn(content=said)]),
        settings=settings,
        embedder=get_embedder(settings, redis_client),
    )
    with owner_engine(settings).connect() as conn:
        has_chunk_id = conn.execute(
            text("SELECT to_regproc('pg_column_toast_chunk_id') IS NOT NULL")
        ).scalar()
        if not has_chunk_id:
            pytest.skip("pg_column_toast_chunk_id needs PostgreSQL 17 or later")
        row = conn.execute(
            text(
                "SELECT pg_column_toast_chunk_id(embedding) AS vector_chunk,"
                " pg_column_toast_chunk_id(search_tsv) AS words_chunk,"
                " pg_column_size(embedding) AS vector_bytes, pg_column_size(m.*) AS row_bytes"
                " FROM semantic.memories AS m WHERE tenant_id = :t AND user_id = 'ida'"
            ),
            {"t": tenant},
        ).one()
    assert row.vector_chunk is None, row  # in the row
    assert row.words_chunk is None, row  # and so are the words BM25 reads
    assert row.vector_bytes == 4 * settings.embedding_dim + 8  # and not compressed
