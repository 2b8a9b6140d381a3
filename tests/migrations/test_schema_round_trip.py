"""Alembic owns the schema: upgrade from empty creates every layer, downgrade removes it all,
and the models agree with the migrations."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, text

from app.config import Settings
from app.db.base import LAYER_SCHEMAS
from app.db.bootstrap import drop_database, resolve_urls
from app.db.migrate import alembic_config, downgrade, upgrade
from app.db.models import Base

SCRATCH_DB = "engram_migrations_test"


@pytest.fixture(scope="module")
def scratch_url(base_settings: Settings) -> Iterator[str]:
    if base_settings.database_url:
        pytest.skip("needs the embedded server to create a scratch database")
    drop_database(SCRATCH_DB, base_settings)
    settings = base_settings.model_copy(update={"database_name": SCRATCH_DB})
    yield resolve_urls(settings).owner
    drop_database(SCRATCH_DB, base_settings)


def _schemas(url: str) -> set[str]:
    engine = create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT nspname FROM pg_namespace")).scalars().all()
    engine.dispose()
    return set(rows) & set(LAYER_SCHEMAS)


def _relations(url: str) -> dict[str, str]:
    engine = create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT n.nspname || '.' || c.relname, c.relkind FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = ANY(:schemas) AND c.relkind IN ('r', 'p', 'm', 'v')"
            ),
            {"schemas": list(LAYER_SCHEMAS)},
        ).all()
    engine.dispose()
    return {name: kind for name, kind in rows}


def test_upgrade_from_empty_creates_every_layer_and_downgrade_removes_it(scratch_url: str) -> None:
    assert _schemas(scratch_url) == set()
    upgrade(scratch_url)
    assert _schemas(scratch_url) == set(LAYER_SCHEMAS)
    relations = _relations(scratch_url)
    for table in Base.metadata.tables.values():
        # 'p': partitioned (the trace, raw events, access records), 'r' any other table.
        kind = "p" if table.dialect_options["postgresql"]["partition_by"] else "r"
        assert relations.get(f"{table.schema}.{table.name}") == kind, table.fullname
    assert relations["meta.hot_memories_mv"] == "m"
    assert relations["meta.hot_memories"] == "v"

    downgrade(scratch_url)
    assert _schemas(scratch_url) == set()
    assert _relations(scratch_url) == {}

    upgrade(scratch_url)  # and back up again: the round trip is repeatable
    assert _schemas(scratch_url) == set(LAYER_SCHEMAS)


def test_models_and_migrations_agree(scratch_url: str) -> None:
    upgrade(scratch_url)
    engine = create_engine(scratch_url)
    config = alembic_config(scratch_url)
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(config).get_current_head()
    with engine.connect() as conn:
        context = MigrationContext.configure(
            conn,
            opts={
                "include_schemas": True,
                "compare_type": True,
                "include_object": _include_object,
            },
        )
        assert context.get_current_revision() == head
        diff = compare_metadata(context, Base.metadata)
    engine.dispose()
    assert diff == []


def _include_object(obj, name, type_, reflected, compare_to):  # type: ignore[no-untyped-def]
    from app.db.schema_objects import in_models

    if type_ == "table" and getattr(obj, "schema", None) not in LAYER_SCHEMAS:
        return False
    return in_models(obj, name, type_)


def test_hot_memories_view_has_the_unique_index_concurrent_refresh_needs(scratch_url: str) -> None:
    upgrade(scratch_url)
    engine = create_engine(scratch_url)
    with engine.begin() as conn:
        conn.execute(text("REFRESH MATERIALIZED VIEW CONCURRENTLY meta.hot_memories_mv"))
    engine.dispose()
