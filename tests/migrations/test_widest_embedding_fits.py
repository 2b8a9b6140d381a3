"""A schema at the widest embedding Engram accepts stores a memory whose every column is at
its widest: the vector is kept in the row (STORAGE PLAIN), and a row must fit one page, so a
new column or a wider limit that breaks this fails here, not in a worker at INSERT time."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from app.config import MAX_EMBEDDING_DIM, PROJECT_ROOT, Settings
from app.db.bootstrap import drop_database, resolve_urls

_MIGRATE = "from app.db.migrate import upgrade; upgrade()"

# Every column of semantic.memories given a value, the short ones at their longest.
_WIDEST = text(
    "INSERT INTO semantic.memories (id, tenant_id, user_id, kind, content, summary, original,"
    " topics, tags, occurred_at, valid_from, valid_to, archived_at, decayed_at,"
    " last_accessed_at, superseded_by, session_id, source_turn_ids, member_ids,"
    " content_hash, embedding, subject, value, extractor, extraction_batch_id, metadata,"
    " channel, search_tsv, agent_id, shared)"
    " SELECT gen_random_uuid(), repeat('t', 128), repeat('u', 128), 'consolidated',"
    " repeat('content ', 3000), repeat('summary ', 500), repeat('original ', 3000),"
    " jsonb_build_array(repeat('topic', 50)), ARRAY[repeat('tag', 50)], now(), now(), now(),"
    " now(), now(), now(), NULL, NULL,"
    " (SELECT array_agg(gen_random_uuid()) FROM generate_series(1, 500)),"
    " (SELECT array_agg(gen_random_uuid()) FROM generate_series(1, 500)),"
    " repeat('h', 64), (SELECT array_agg(random())::vector FROM generate_series(1, :dim)),"
    " repeat('subject ', 100), repeat('value ', 100), repeat('e', 64), gen_random_uuid(),"
    " jsonb_build_object('note', repeat('m', 4000)), repeat('c', 128),"
    " to_tsvector('english', repeat('word ', 200) || md5(random()::text)),"
    " repeat('a', 128), true"
)


def test_a_memory_at_the_widest_embedding_fits_its_row(base_settings: Settings) -> None:
    if base_settings.database_url:
        pytest.skip("needs the embedded server to create a scratch database")
    name = f"{base_settings.database_name}_widest_embedding"
    drop_database(name, base_settings)
    env = {
        **os.environ,
        "ENGRAM_DATABASE_NAME": name,
        "ENGRAM_EMBEDDING_DIM": str(MAX_EMBEDDING_DIM),
    }
    subprocess.run(
        [sys.executable, "-c", _MIGRATE], cwd=PROJECT_ROOT, env=env, check=True, timeout=300
    )
    urls = resolve_urls(base_settings.model_copy(update={"database_name": name}))
    owner = create_engine(urls.owner, poolclass=NullPool)
    try:
        with owner.begin() as conn:
            conn.execute(_WIDEST, {"dim": MAX_EMBEDDING_DIM})
            stored = conn.execute(
                text("SELECT vector_dims(embedding) FROM semantic.memories")
            ).scalar_one()
        assert stored == MAX_EMBEDDING_DIM
    finally:
        owner.dispose()
        drop_database(name, base_settings)
