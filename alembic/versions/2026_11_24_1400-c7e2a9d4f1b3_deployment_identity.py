"""the deployment's identity: `meta.deployment_id()`, random, made once

Two installs sharing one Redis must not share its keys: every key and stream of a deployment
carries this id (app/deployment.py, app/keys.py). It is made here, at the first `engram
migrate`, and kept in the database as the body of an immutable function, so it travels with
the database (a dump carries it) and needs no table, no tenant and no row-level policy. The
application role may run it; nobody else needs to.

Downgrading past this revision forgets the id: upgrading again makes a new one, under which
entries still in the old streams are not read. Drain the streams first (`engram status`).

Revision ID: c7e2a9d4f1b3
Revises: b2d5f8c3e061
Create Date: 2026-11-24 14:00:00.000000
"""

import secrets
from collections.abc import Sequence

from alembic import op

from app.config import get_settings

revision: str = "c7e2a9d4f1b3"
down_revision: str | None = "b2d5f8c3e061"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

APP_ROLE = get_settings().app_role


def upgrade() -> None:
    deployment = secrets.token_hex(8)
    op.execute(
        "CREATE FUNCTION meta.deployment_id() RETURNS text "
        "LANGUAGE sql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp "
        f"AS $$ SELECT '{deployment}'::text $$"
    )
    op.execute("REVOKE ALL ON FUNCTION meta.deployment_id() FROM PUBLIC")
    op.execute(f'GRANT EXECUTE ON FUNCTION meta.deployment_id() TO "{APP_ROLE}"')


def downgrade() -> None:
    op.execute("DROP FUNCTION IF EXISTS meta.deployment_id()")
