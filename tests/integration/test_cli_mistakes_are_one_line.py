"""A user's mistake at the command line is one line: what is wrong and the command that fixes
it, no traceback (that comes with --verbose). Each case runs the real `engram` against the
real embedded Postgres and the machine's Redis, or against addresses where nothing listens."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.config import PROJECT_ROOT, Settings
from app.db.bootstrap import drop_database

ENGRAM = str(Path(sys.executable).parent / "engram")
NOTHING_LISTENS = "127.0.0.1:1"  # port 1 on loopback: refused at once


def engram(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ENGRAM, *args],
        cwd=PROJECT_ROOT,
        env={**os.environ, "ENGRAM_REDIS_PREFIX": f"test-cli-{uuid.uuid4().hex[:8]}", **env},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def migrated(database: str, *args: str) -> None:
    done = engram("migrate", *args, ENGRAM_DATABASE_NAME=database)
    assert done.returncode == 0, done.stdout + done.stderr


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    """The error line, after checking it is all the command said on stderr."""
    assert done.returncode != 0, done.stdout
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert lines[0].startswith("engram: ")
    return lines[0]


@pytest.fixture(scope="module")
def unmigrated(base_settings: Settings) -> Iterator[str]:
    """A database the embedded server provisions (roles, extensions) but nobody migrated."""
    if base_settings.database_url:
        pytest.skip("needs the embedded server to create a scratch database")
    name = f"{base_settings.database_name}_unmigrated"
    drop_database(name, base_settings)
    yield name
    drop_database(name, base_settings)


@pytest.mark.parametrize(
    "command", [("status",), ("tenant", "create", "acme"), ("key", "list")], ids=" ".join
)
def test_before_migrating_it_says_run_migrate(unmigrated: str, command: tuple[str, ...]) -> None:
    migrated(unmigrated, "--revision", "base", "--yes")
    done = engram(*command, ENGRAM_DATABASE_NAME=unmigrated)
    line = one_line(done)
    assert f"the database {unmigrated}" in line and "no Engram schema" in line, line
    assert "run `engram migrate`" in line, line
    assert "L0 streams" not in done.stdout  # status stops before printing anything


def test_a_schema_behind_head_says_run_migrate(unmigrated: str) -> None:
    migrated(unmigrated, "--revision", "base", "--yes")
    migrated(unmigrated, "--revision", "+2")
    line = one_line(engram("status", ENGRAM_DATABASE_NAME=unmigrated))
    assert "is at schema" in line and "this code needs" in line, line
    assert "run `engram migrate`" in line, line


def test_a_downgrade_without_yes_is_refused_without_a_terminal(unmigrated: str) -> None:
    migrated(unmigrated)
    done = engram("migrate", "--revision", "-1", ENGRAM_DATABASE_NAME=unmigrated)
    assert done.returncode == 2
    assert "add --yes" in done.stdout + done.stderr
    listed = engram("migrate", "--list", ENGRAM_DATABASE_NAME=unmigrated)
    assert "database: at head" in listed.stdout, listed.stdout


def test_an_unknown_revision_points_at_the_list(unmigrated: str) -> None:
    line = one_line(engram("migrate", "--revision", "nope", ENGRAM_DATABASE_NAME=unmigrated))
    assert "nope" in line and "engram migrate --list" in line, line


@pytest.mark.parametrize("command", [("status",), ("migrate",), ("tenant", "create", "acme")])
def test_a_database_url_where_nothing_listens(command: tuple[str, ...]) -> None:
    url = f"postgresql://engram:secret-pw@{NOTHING_LISTENS}/engram"
    line = one_line(engram(*command, DATABASE_URL=url))
    assert "cannot connect to the database engram at 127.0.0.1:1" in line, line
    assert "Connection refused" in line and "check DATABASE_URL" in line, line
    assert "secret-pw" not in line


def test_a_database_url_that_is_no_url() -> None:
    line = one_line(engram("status", DATABASE_URL="postgres:/nowhere"))
    assert "DATABASE_URL is not a database URL" in line, line


def test_a_refused_setting_names_its_variable() -> None:
    line = one_line(engram("status", ENGRAM_EMBEDDING_DIM="3072"))
    assert "a setting is refused: ENGRAM_EMBEDDING_DIM=3072" in line, line
    assert "ENGRAM_EMBEDDING_REQUEST_DIM=true" in line, line


@pytest.mark.parametrize(
    "command", [("push", "hello", "--tenant", "acme", "--user", "alice"), ("status",)]
)
def test_redis_down_with_redis_url_set(command: tuple[str, ...]) -> None:
    line = one_line(engram(*command, REDIS_URL=f"redis://:secret-pw@{NOTHING_LISTENS}/0"))
    assert "cannot reach Redis at redis://:***@127.0.0.1:1/0" in line, line
    assert "fix REDIS_URL, or unset REDIS_URL" in line, line


def test_verbose_shows_the_traceback(unmigrated: str) -> None:
    migrated(unmigrated, "--revision", "base", "--yes")
    done = engram("--verbose", "status", ENGRAM_DATABASE_NAME=unmigrated)
    assert done.returncode != 0
    assert "Traceback" in done.stderr or "SchemaNotReadyError" in done.stderr, done.stderr
