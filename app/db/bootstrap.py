"""Where the database is, and the roles and extensions the schema needs before Alembic runs.

Two login roles, on purpose: migrations (and cross-tenant maintenance such as refreshing the
hot-memories view) run as the owner; the application connects as `app_role`, which owns nothing,
is no superuser and has no BYPASSRLS — so row-level security always applies to it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import psycopg
from psycopg import sql
from sqlalchemy.engine import make_url

from app.config import Settings, get_settings
from app.embedded import postgres as embedded_postgres

_log = logging.getLogger(__name__)

OWNER_ROLE = "engram_owner"
EXTENSIONS = ("vector", "pg_trgm", "btree_gin")


@dataclass(frozen=True)
class DatabaseUrls:
    owner: str
    app: str
    embedded: bool


def libpq_conninfo(url: str) -> str:
    """SQLAlchemy URL → libpq conninfo for plain psycopg."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def _ensure_role(cur: psycopg.Cursor, name: str, password: str, attributes: str) -> None:
    cur.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,))
    if cur.fetchone() is None:
        cur.execute(
            sql.SQL("CREATE ROLE {} LOGIN PASSWORD {} " + attributes).format(
                sql.Identifier(name), sql.Literal(password)
            )
        )


def provision_embedded(server: embedded_postgres.RunningServer, settings: Settings) -> None:
    """Create the roles, the database and its extensions on the embedded server (idempotent)."""
    admin = libpq_conninfo(server.url(user=embedded_postgres.SUPERUSER, database="postgres"))
    with psycopg.connect(admin, autocommit=True) as conn, conn.cursor() as cur:
        _ensure_role(cur, OWNER_ROLE, OWNER_ROLE, "NOSUPERUSER BYPASSRLS")
        _ensure_role(
            cur,
            settings.app_role,
            settings.app_role_password.get_secret_value(),
            "NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE",
        )
        cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (settings.database_name,))
        if cur.fetchone() is None:
            cur.execute(
                sql.SQL("CREATE DATABASE {} OWNER {}").format(
                    sql.Identifier(settings.database_name), sql.Identifier(OWNER_ROLE)
                )
            )
    target = libpq_conninfo(
        server.url(user=embedded_postgres.SUPERUSER, database=settings.database_name)
    )
    with psycopg.connect(target, autocommit=True) as conn:
        for extension in EXTENSIONS:
            conn.execute(
                sql.SQL("CREATE EXTENSION IF NOT EXISTS {}").format(sql.Identifier(extension))
            )


def drop_database(name: str, settings: Settings | None = None) -> None:
    """Drop a database on the embedded server (tests use throwaway databases)."""
    settings = settings or get_settings()
    server = embedded_postgres.ensure_running(settings.data_dir)
    admin = libpq_conninfo(server.url(user=embedded_postgres.SUPERUSER, database="postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
    from app.deployment import forget

    forget()  # a database made again under this name has another deployment id
    for key in [k for k in _resolved if k[2] == name]:
        del _resolved[key]  # and must be provisioned again


def _app_url_from_owner(owner_url: str, settings: Settings) -> str:
    url = make_url(owner_url).set(
        username=settings.app_role, password=settings.app_role_password.get_secret_value()
    )
    return url.render_as_string(hide_password=False)


def resolve_urls(settings: Settings) -> DatabaseUrls:
    """The owner and application URLs, starting and provisioning the embedded server if needed."""
    if settings.database_url:
        owner = make_url(settings.database_url).set(drivername="postgresql+psycopg")
        owner_url = owner.render_as_string(hide_password=False)
        app_url = settings.app_database_url or _app_url_from_owner(owner_url, settings)
        app_url = make_url(app_url).set(drivername="postgresql+psycopg")
        return DatabaseUrls(owner_url, app_url.render_as_string(hide_password=False), False)
    server = embedded_postgres.ensure_running(settings.data_dir)
    provision_embedded(server, settings)
    owner_url = server.url(user=OWNER_ROLE, database=settings.database_name)
    return DatabaseUrls(owner_url, _app_url_from_owner(owner_url, settings), True)


_resolved: dict[tuple[str | None, ...], DatabaseUrls] = {}


def database_urls(settings: Settings | None = None) -> DatabaseUrls:
    """`resolve_urls`, once per process and configuration."""
    settings = settings or get_settings()
    key = (
        settings.database_url,
        settings.app_database_url,
        settings.database_name,
        str(settings.data_dir),
    )
    if key not in _resolved:
        _resolved[key] = resolve_urls(settings)
    return _resolved[key]
