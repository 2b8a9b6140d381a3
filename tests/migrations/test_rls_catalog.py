"""Row-level security cannot be skipped by the application: the catalog says so."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import Connection, create_engine, text
from sqlalchemy.exc import DBAPIError, ProgrammingError
from sqlalchemy.pool import NullPool

from app.config import Settings
from app.db.bootstrap import drop_database, resolve_urls
from app.db.migrate import downgrade, upgrade
from app.db.models import TENANT_TABLES
from app.db.session import owner_engine, unit_of_work
from app.layers.meta.repository import list_tenants, register_tenants

# The revision before the registry came under row-level security.
PREVIOUS = "a1c4e7b2d950"

TENANT_TABLE_NAMES = sorted(f"{t.__table__.schema}.{t.__table__.name}" for t in TENANT_TABLES)
# The registry has no rows of another tenant's either, so it carries the same policy.
RLS_TABLE_NAMES = sorted([*TENANT_TABLE_NAMES, "meta.tenants"])


def test_every_table_of_every_layer_is_a_tenant_table_or_the_registry() -> None:
    from app.db.models import Base

    all_tables = {f"{t.schema}.{t.name}" for t in Base.metadata.tables.values()}
    assert all_tables - set(TENANT_TABLE_NAMES) == {"meta.tenants"}
    assert all_tables == set(RLS_TABLE_NAMES)


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


def test_every_table_forces_rls_with_a_tenant_policy(base_settings: Settings) -> None:
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
            {"names": RLS_TABLE_NAMES},
        ).all()
    assert sorted(r[0] for r in rows) == RLS_TABLE_NAMES
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


def _registry_rights(conn: Connection, role: str) -> dict[str, bool]:
    row = conn.execute(
        text(
            "SELECT c.relrowsecurity, c.relforcerowsecurity, "
            "has_table_privilege(:r, 'meta.tenants', 'SELECT'), "
            "has_table_privilege(:r, 'meta.tenants', 'INSERT'), "
            "has_table_privilege(:r, 'meta.tenants', 'UPDATE'), "
            "has_table_privilege(:r, 'meta.tenants', 'DELETE'), "
            "has_table_privilege(:r, 'meta.tenants', 'TRUNCATE') "
            "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'meta' AND c.relname = 'tenants'"
        ),
        {"r": role},
    ).one()
    names = ("rls", "forced", "select", "insert", "update", "delete", "truncate")
    return dict(zip(names, row, strict=True))


def test_app_role_only_reads_the_registry(base_settings: Settings) -> None:
    with owner_engine(base_settings).connect() as conn:
        rights = _registry_rights(conn, base_settings.app_role)
    assert rights == {
        "rls": True,
        "forced": True,
        "select": True,
        "insert": False,
        "update": False,
        "delete": False,
        "truncate": False,
    }


def test_registry_functions_run_as_owner_with_a_pinned_path_for_the_app_role_only(
    base_settings: Settings,
) -> None:
    with owner_engine(base_settings).connect() as conn:
        rows = conn.execute(
            text(
                "SELECT p.oid::regprocedure::text, p.prosecdef, p.proconfig, "
                "has_function_privilege(:r, p.oid, 'EXECUTE'), "
                # No ACL is the default one, which lets PUBLIC (grantee 0) execute.
                "p.proacl IS NULL OR EXISTS (SELECT 1 FROM aclexplode(p.proacl) AS a "
                " WHERE a.grantee = 0) "
                "FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
                "WHERE n.nspname = 'meta' AND p.proname IN "
                "('tenant_ids', 'register_tenants', 'api_key_tenant') ORDER BY 1"
            ),
            {"r": base_settings.app_role},
        ).all()
    assert [r[0] for r in rows] == [
        "meta.api_key_tenant(text)",
        "meta.register_tenants(text[])",
        "meta.tenant_ids()",
    ]
    for name, definer, config, app_may_run, public_may_run in rows:
        assert definer, name
        assert config == ["search_path=pg_catalog, pg_temp"], name
        assert app_may_run and not public_may_run, name


def test_app_role_sees_only_its_own_registry_row_and_cannot_write_it(
    base_settings: Settings,
) -> None:
    mine, other = f"t-{uuid.uuid4().hex[:10]}", f"t-{uuid.uuid4().hex[:10]}"
    with unit_of_work() as session:
        register_tenants(session=session, tenant_ids=[mine, other, mine])
    with unit_of_work() as session:
        assert {mine, other} <= set(list_tenants(session=session))
        assert session.scalars(text("SELECT tenant_id FROM meta.tenants")).all() == []
    with unit_of_work(mine) as session:
        assert session.scalars(text("SELECT tenant_id FROM meta.tenants")).all() == [mine]
    for statement in (
        "INSERT INTO meta.tenants (tenant_id) VALUES (:t)",
        "UPDATE meta.tenants SET tenant_id = tenant_id WHERE tenant_id = :t",
        "DELETE FROM meta.tenants WHERE tenant_id = :t",
    ):
        with (
            pytest.raises(ProgrammingError, match="permission denied"),
            unit_of_work(mine) as session,
        ):
            session.execute(text(statement), {"t": mine})


@pytest.mark.parametrize("bad", ["", "-leading-dash", "has space", "x" * 129, "a|b"])
def test_registering_a_malformed_tenant_id_is_refused_by_name(bad: str) -> None:
    with pytest.raises(DBAPIError, match="not a tenant id"), unit_of_work() as session:
        register_tenants(session=session, tenant_ids=[bad])


def test_downgrade_gives_the_registry_back_its_previous_rights(base_settings: Settings) -> None:
    if base_settings.database_url:
        pytest.skip("needs the embedded server to create a scratch database")
    scratch = f"{base_settings.database_name}_registry_rights"
    drop_database(scratch, base_settings)
    url = resolve_urls(base_settings.model_copy(update={"database_name": scratch})).owner
    engine = create_engine(url, poolclass=NullPool)
    try:
        upgrade(url)
        downgrade(url, PREVIOUS)
        with engine.connect() as conn:
            rights = _registry_rights(conn, base_settings.app_role)
            functions = conn.scalar(
                text(
                    "SELECT count(*) FROM pg_proc p JOIN pg_namespace n "
                    "ON n.oid = p.pronamespace WHERE n.nspname = 'meta' "
                    "AND p.proname IN ('tenant_ids', 'register_tenants')"
                )
            )
            policies = conn.scalar(
                text("SELECT count(*) FROM pg_policies WHERE tablename = 'tenants'")
            )
        assert rights == {
            "rls": False,
            "forced": False,
            "select": True,
            "insert": True,
            "update": False,
            "delete": False,
            "truncate": False,
        }
        assert (functions, policies) == (0, 0)
        upgrade(url)  # and up again
        with engine.connect() as conn:
            assert _registry_rights(conn, base_settings.app_role)["insert"] is False
    finally:
        engine.dispose()
        drop_database(scratch, base_settings)


AGENT_TABLES = ["conceptual.associations", "conceptual.relations", "semantic.memories"]


def test_an_agents_map_is_private_by_policy_and_the_archive_is_not(
    base_settings: Settings,
) -> None:
    with owner_engine(base_settings).connect() as conn:
        rows = conn.execute(
            text(
                "SELECT schemaname || '.' || tablename FROM pg_policies"
                " WHERE qual LIKE '%engram.agent_id%' AND qual LIKE '%engram.all_agents%'"
                " AND with_check LIKE '%engram.agent_id%' ORDER BY 1"
            )
        ).all()
    assert [r[0] for r in rows] == AGENT_TABLES


def test_a_transaction_that_names_no_agent_sees_no_private_row() -> None:
    tenant = f"t-{uuid.uuid4().hex[:10]}"
    insert = (
        "INSERT INTO semantic.memories (id, tenant_id, user_id, agent_id, kind, content,"
        " content_hash, occurred_at, valid_from)"
        " VALUES (gen_random_uuid(), :t, 'u', :a, 'fact', 'x', :a, now(), now())"
    )
    with unit_of_work(tenant, agent_id="alpha") as session:
        session.execute(text(insert), {"t": tenant, "a": "alpha"})
    count = "SELECT count(*) FROM semantic.memories"
    with unit_of_work(tenant) as session:
        assert session.scalar(text(count)) == 0
    with unit_of_work(tenant, agent_id="beta") as session:
        assert session.scalar(text(count)) == 0
    with unit_of_work(tenant, all_agents=True) as session:
        assert session.scalar(text(count)) == 1
        session.execute(text("DELETE FROM semantic.memories WHERE tenant_id = :t"), {"t": tenant})
