"""How the CLI names a user's mistake from the exception it ended in (the error lines of
cases a test machine cannot stage for real: a refused password, a missing database)."""

from __future__ import annotations

import psycopg
import pydantic
import redis
from sqlalchemy import exc as sa_exc

from app.cli.errors import explain, without_password
from app.config import Settings
from app.db.migrate import MigrationError
from app.streams.producer import ProducerError

REMOTE = Settings(database_url="postgresql://bob:hunter2@db.internal:6543/engram")


def _from_driver(message: str) -> sa_exc.OperationalError:
    """What SQLAlchemy raises for a connection the driver could not open."""
    try:
        try:
            raise psycopg.OperationalError(message)
        except psycopg.OperationalError as driver:
            raise sa_exc.OperationalError("connect", {}, driver) from driver
    except sa_exc.OperationalError as wrapped:
        return wrapped


def test_a_refused_password_names_the_user_and_where_to_fix_it() -> None:
    problem = explain(
        _from_driver(
            'connection failed: connection to server at "10.0.0.5", port 6543 failed: '
            'FATAL:  password authentication failed for user "bob"'
        ),
        REMOTE,
    )
    assert problem is not None
    line = problem.line()
    assert "engram at db.internal:6543 refused user bob" in line, line
    assert "DATABASE_URL" in line and "hunter2" not in line, line


def test_a_missing_database_says_create_it() -> None:
    problem = explain(
        _from_driver('connection failed: FATAL:  database "engram" does not exist'), REMOTE
    )
    assert problem is not None
    assert 'database "engram" does not exist' in problem.what
    assert "CREATE DATABASE" in problem.fix


def test_a_refused_connection_keeps_only_the_drivers_reason() -> None:
    problem = explain(
        _from_driver(
            'connection failed: connection to server at "10.0.0.5", port 6543 failed: '
            "Connection refused\n\tIs the server running on that host and accepting TCP/IP"
            " connections?"
        ),
        REMOTE,
    )
    assert problem is not None
    assert (
        problem.what
        == "cannot connect to the database engram at db.internal:6543 (Connection refused)"
    )


def test_redis_errors_name_the_url_without_its_password() -> None:
    settings = Settings(redis_url="redis://:s3cret@cache:6379/0")
    for exc in (
        redis.ConnectionError("Error 111 connecting to cache:6379. Connection refused."),
        ProducerError("could not reach Redis: Error 111 connecting to cache:6379."),
    ):
        problem = explain(exc, settings)
        assert problem is not None
        assert problem.what.startswith("cannot reach Redis at redis://:***@cache:6379/0 (Error 111")
        assert "s3cret" not in problem.line()
        assert "REDIS_URL" in problem.fix


def test_a_missing_table_says_migrate_even_once_the_server_is_gone() -> None:
    """A one-shot command stops the embedded server it started before the error is read."""
    try:
        try:
            raise psycopg.errors.UndefinedTable('relation "meta.tenants" does not exist')
        except psycopg.Error as driver:
            raise sa_exc.ProgrammingError("SELECT …", {}, driver) from driver
    except sa_exc.ProgrammingError as exc:
        missing = exc
    gone = Settings(database_url="postgresql://bob:pw@127.0.0.1:1/engram")
    problem = explain(missing, gone)
    assert problem is not None
    assert problem.what == (
        "the database engram at 127.0.0.1:1 lacks part of Engram's schema"
        ' (relation "meta.tenants" does not exist)'
    )
    assert problem.fix == "run `engram migrate`"


def test_a_bad_revision_and_a_bad_url() -> None:
    problem = explain(MigrationError("Can't locate revision identified by 'x'"), REMOTE)
    assert problem is not None and "engram migrate --list" in problem.fix
    problem = explain(sa_exc.ArgumentError("Could not parse SQLAlchemy URL"), REMOTE)
    assert problem is not None and problem.what.startswith("DATABASE_URL is not a database URL")


def test_a_bug_is_not_dressed_up_as_a_user_mistake() -> None:
    assert explain(KeyError("x"), REMOTE) is None
    assert explain(ValueError("bad"), REMOTE) is None


def test_without_password() -> None:
    assert without_password("redis://:pw@h:1/0") == "redis://:***@h:1/0"
    assert without_password("redis://user:pw@h:1/0") == "redis://user:***@h:1/0"
    assert without_password("redis://h:1/0") == "redis://h:1/0"


def _refused_settings(**values: object) -> pydantic.ValidationError:
    try:
        Settings(**values)  # type: ignore[arg-type]
    except pydantic.ValidationError as exc:
        return exc
    raise AssertionError(f"{values} were accepted")


def test_a_refused_setting_is_one_line_naming_its_variable() -> None:
    """Before, the CLI read the settings again to explain the error they raised, and the
    second error escaped as a traceback."""
    line = explain(_refused_settings(embedding_dim=3072)).line()  # type: ignore[union-attr]
    assert line.startswith("engram: a setting is refused: ENGRAM_EMBEDDING_DIM=3072 is"), line
    assert "ENGRAM_EMBEDDING_REQUEST_DIM" in line and "Value error" not in line, line
    line = explain(_refused_settings(stream_partitions="many")).line()  # type: ignore[union-attr]
    assert "ENGRAM_STREAM_PARTITIONS: Input should be a valid integer" in line, line
    line = explain(_refused_settings(CELERY_BROKER_URL="ftp://x")).line()  # type: ignore[union-attr]
    assert "CELERY_BROKER_URL must be a Redis or RabbitMQ URL" in line, line
