"""Row-level security cannot be skipped by the application: the catalog says so."""

from __future__ import annotations

from sqlalchemy import text

from app.config import Settings
from app.db.models import TENANT_TABLES
from app.db.session import owner_engine

TENANT_TABLE_NAMES = sorted(f"{t.__table__.schema}.{t.__table__.name}" for t in TENANT_TABLES)


def test_every_table_of_every_layer_is_a_tenant_table_or_the_registry() -> None:
    from app.db.models import Base

    all_tables = {f"{t.schema}.{t.name}" for t in Base.metadata.tables.values()}
    assert all_tables - set(TENANT_TABLE_NAMES) == {"meta.tenants"}


def test_app_role_is_no_superuser_no_bypassrls_and_owns_nothing(base_settings: Settings) -> None:
    with owner_engine(base_settings).connect() as conn:
        role = conn.execute(
            text("SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = :r"),
            {"r": base_settings.app_role},
        ).one()
        assert role == (False, False)
        owned = conn.execute(
            text(
                "SELECT n.nspname || '.' || c.relname FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE pg_get_userbyid(c.relowner) = :r"
            ),
            {"r": base_settings.app_role},
        ).all()
        assert owned == []


def test_tenant_tables_force_rls_with_a_tenant_policy(base_settings: Settings) -> None:
    with owner_engine(base_settings).connect() as conn:
        rows = conn.execute(
            text(
                "SELECT n.nspname || '.' || c.relname, c.relrowsecurity, c.relforcerowsecurity, "
                "(SELECT count(*) FROM pg_policies p WHERE p.schemaname = n.nspname "
                " AND p.tablename = c.relname AND p.qual LIKE '%engram.tenant_id%' "
                " AND p.with_check LIKE '%engram.tenant_id%') "
                "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname || '.' || c.relname = ANY(:names)"
            ),
            {"names": TENANT_TABLE_NAMES},
        ).all()
    assert sorted(r[0] for r in rows) == TENANT_TABLE_NAMES
    for name, enabled, forced, policies in rows:
        assert enabled and forced, name
        assert policies == 1, name


def test_app_role_reads_hot_memories_only_through_the_tenant_filtered_view(
    base_settings: Settings,
) -> None:
    with owner_engine(base_settings).connect() as conn:
        can = conn.execute(
            text(
                "SELECT has_table_privilege(:r, 'meta.hot_memories_mv', 'SELECT'), "
                "has_table_privilege(:r, 'meta.hot_memories', 'SELECT')"
            ),
            {"r": base_settings.app_role},
        ).one()
    assert can == (False, True)
