"""Run Alembic programmatically (CLI, demo, tests) against the owner's URL.

`migrate_to` goes to any revision whichever way it lies (`head`, `base`, `-1`, `+1`, an id
or a unique prefix of one); `schema_state` says where a database stands against this code's
head, for /healthz and the CLI's errors.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from alembic import command
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.script.revision import RevisionError
from alembic.util import CommandError
from sqlalchemy import Connection, create_engine, pool

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


class MigrationError(Exception):
    """A revision that cannot be reached from here (unknown id, before base, past head)."""


@dataclass(frozen=True)
class SchemaState:
    """Where the database's schema stands: `current` is None on an empty database."""

    current: str | None
    head: str

    @property
    def at_head(self) -> bool:
        return self.current == self.head

    @property
    def known(self) -> bool:
        """The database's revision is one this code has (else it was migrated by newer code)."""
        return self.current is None or self.current in revision_ids()

    def describe(self) -> str:
        if self.at_head:
            return f"at head ({self.head})"
        if self.current is None:
            return f"empty (no Engram schema; head is {self.head})"
        if not self.known:
            return f"at {self.current}, a revision this code does not know (head {self.head})"
        return f"behind: at {self.current}, head is {self.head}"


def script_directory() -> ScriptDirectory:
    config = Config(str(PROJECT_ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(PROJECT_ROOT / "alembic"))
    return ScriptDirectory.from_config(config)


@cache
def head_revision() -> str:
    """The revision this code's models expect (one head: branches are merged before release)."""
    head = script_directory().get_current_head()
    if head is None:
        raise MigrationError("no migrations found")
    return head


@cache
def revision_ids() -> frozenset[str]:
    return frozenset(r.revision for r in script_directory().walk_revisions())


def current_revision(connection: Connection) -> str | None:
    """The database's revision (None before the first migration)."""
    return MigrationContext.configure(connection).get_current_revision()


def schema_state(url: str | None = None) -> SchemaState:
    """Where the database at `url` (the owner's by default) stands against this code."""
    engine = create_engine(url or database_urls().owner, poolclass=pool.NullPool)
    try:
        with engine.connect() as connection:
            return SchemaState(current_revision(connection), head_revision())
    finally:
        engine.dispose()


def downgrades(revision: str, current: str | None) -> bool:
    """True when going to `revision` from `current` undoes migrations (and drops what they
    created); an unknown id is left for `migrate_to` to refuse."""
    if revision == "base" or revision.startswith("-"):
        return current is not None
    if revision in ("head", "heads") or revision.startswith("+") or current is None:
        return False
    script = script_directory()
    try:
        target = script.get_revision(revision)
    except (CommandError, RevisionError):
        return False
    return target is not None and any(
        r.revision == target.revision for r in script.iterate_revisions(current, "base")
    )


def migrate_to(revision: str, url: str | None = None) -> tuple[SchemaState, SchemaState]:
    """Upgrade or downgrade to `revision`, whichever way it lies; (before, after)."""
    url = url or database_urls().owner
    config = alembic_config(url)
    before = schema_state(url)
    try:
        if not revision.strip():
            raise MigrationError("no revision given (head, base, -1, +1 or a revision id)")
        if revision.startswith("-") and before.current is None:
            raise MigrationError(f"the database is empty: there is nothing to undo ({revision})")
        if revision not in ("head", "heads", "base") and revision[:1] not in "+-":
            target = script_directory().get_revision(revision)
            if target is None:
                raise MigrationError(f"unknown revision {revision!r}")
            revision = target.revision
        if downgrades(revision, before.current):
            command.downgrade(config, revision)
        else:
            command.upgrade(config, revision)
    except (CommandError, RevisionError) as exc:
        raise MigrationError(str(exc)) from exc
    return before, schema_state(url)


def history() -> list[tuple[str, str]]:
    """(revision, description), oldest first."""
    revisions = list(script_directory().walk_revisions())
    return [(r.revision, r.doc or "") for r in reversed(revisions)]
