"""meta.tenants under row-level security, read by the app role only through its own tenant

The application role could read every tenant id and insert rows of its own choosing. Now the
table is under the same tenant policy as every layer table, and the role holds SELECT only:
in a tenant's scope it sees that tenant's row and nothing else. The two things it does need
across tenants go through security-definer functions owned by the schema owner:

- `meta.tenant_ids()`: the ids maintenance walks, one RLS scope at a time (ids only);
- `meta.register_tenants(text[])`: record tenants seen on the stream, well-formed ids only,
  insert-or-nothing (it can neither change nor remove a row).

API keys still resolve through `meta.api_key_tenant()`; minting, revoking and creating a
tenant with a key stay the owner's (the operator's CLI).

Revision ID: b2d5f8c3e061
Revises: a1c4e7b2d950
Create Date: 2026-11-24 13:10:00.000000
"""

from collections.abc import Sequence

from alembic import op

from app.config import get_settings

revision: str = "b2d5f8c3e061"
down_revision: str | None = "a1c4e7b2d950"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

APP_ROLE = get_settings().app_role
TENANT_PREDICATE = "tenant_id = current_setting('engram.tenant_id', true)"
# The identifier rule of app/streams/events.py, kept here as the migration's own copy.
TENANT_ID_PATTERN = "^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$"

TENANT_IDS = """
CREATE FUNCTION meta.tenant_ids() RETURNS SETOF text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT tenant_id::text FROM meta.tenants ORDER BY tenant_id
$$
"""

REGISTER_TENANTS = f"""
CREATE FUNCTION meta.register_tenants(ids text[]) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    bad text;
BEGIN
    SELECT id INTO bad FROM unnest(ids) AS id
    WHERE id IS NULL OR id !~ '{TENANT_ID_PATTERN}' LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'not a tenant id: %', coalesce(quote_literal(bad), 'NULL')
            USING ERRCODE = '22023';
    END IF;
    INSERT INTO meta.tenants (tenant_id)
    SELECT DISTINCT id FROM unnest(ids) AS id ORDER BY id
    ON CONFLICT (tenant_id) DO NOTHING;
END
$$
"""

FUNCTIONS = {"meta.tenant_ids": "", "meta.register_tenants": "text[]"}


def upgrade() -> None:
    op.execute("ALTER TABLE meta.tenants ENABLE ROW LEVEL SECURITY")
    op.execute("ALTER TABLE meta.tenants FORCE ROW LEVEL SECURITY")
    op.execute(
        "CREATE POLICY tenant_isolation ON meta.tenants "
        f"USING ({TENANT_PREDICATE}) WITH CHECK ({TENANT_PREDICATE})"
    )
    op.execute(f'REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON meta.tenants FROM "{APP_ROLE}"')
    op.execute(f'GRANT SELECT ON meta.tenants TO "{APP_ROLE}"')
    op.execute(TENANT_IDS)
    op.execute(REGISTER_TENANTS)
    for function, signature in FUNCTIONS.items():
        op.execute(f"REVOKE ALL ON FUNCTION {function}({signature}) FROM PUBLIC")
        op.execute(f'GRANT EXECUTE ON FUNCTION {function}({signature}) TO "{APP_ROLE}"')


def downgrade() -> None:
    for function, signature in FUNCTIONS.items():
        op.execute(f"DROP FUNCTION IF EXISTS {function}({signature})")
    op.execute("DROP POLICY IF EXISTS tenant_isolation ON meta.tenants")
    op.execute("ALTER TABLE meta.tenants NO FORCE ROW LEVEL SECURITY")
    op.execute("ALTER TABLE meta.tenants DISABLE ROW LEVEL SECURITY")
    op.execute(f'GRANT SELECT, INSERT ON meta.tenants TO "{APP_ROLE}"')
