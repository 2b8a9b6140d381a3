"""Run Alembic programmatically (CLI, demo, tests) against the owner's URL."""

from __future__ import annotations

from alembic import command
from alembic.config import Config

from app.config import PROJECT_ROOT
from app.db.bootstrap import database_urls


def alembic_config(url: str | None = None) -> Config:
    config = Config(str(PROJECT_ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(PROJECT_ROOT / "alembic"))
    config.attributes["url"] = url or database_urls().owner
    config.attributes["configure_logging"] = False
    return config


def upgrade(url: str | None = None, revision: str = "head") -> None:
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str | None = None, revision: str = "base") -> None:
    command.downgrade(alembic_config(url), revision)
