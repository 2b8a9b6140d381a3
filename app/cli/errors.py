"""What went wrong at the command line, in one line, with the command that fixes it.

A user's mistakes (no schema yet, a wrong DATABASE_URL, Redis down while REDIS_URL names it)
end in driver exceptions hundreds of lines deep whose last line alone helps. `explain` reads
the exception chain and names the problem and its fix; the CLI prints that line and shows the
traceback only with `--verbose`.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pydantic
import redis
from psycopg import errors as pg_errors
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import make_url

from app.config import Settings, get_settings
from app.db.bootstrap import database_urls
from app.db.migrate import MigrationError, SchemaState, schema_state
from app.embedded import postgres as embedded_postgres
from app.embedded.postgres import EmbeddedPostgresError
from app.embedded.redis import EmbeddedRedisError
from app.streams.producer import NotReplicatedError, ProducerError

# The schema is missing or older than the code: a table, a function or a schema is unknown.
_SCHEMA_MISSING = (
    pg_errors.UndefinedTable,
    pg_errors.UndefinedFunction,
    pg_errors.InvalidSchemaName,
    pg_errors.UndefinedColumn,
    pg_errors.UndefinedObject,
)
_REDIS_DOWN = (redis.ConnectionError, redis.TimeoutError)
_DB_DOWN = (psycopg.OperationalError, sa_exc.OperationalError, sa_exc.InterfaceError)


class SchemaNotReadyError(Exception):
    """The database's schema is not this code's head (raised before a command reads it)."""

    def __init__(self, state: SchemaState) -> None:
        super().__init__(state.describe())
        self.state = state


@dataclass(frozen=True)
class Problem:
    what: str
    fix: str

    def line(self) -> str:
        return f"engram: {self.what}; {self.fix}"


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        if isinstance(current, sa_exc.DBAPIError) and current.orig is not None:
            yield current.orig
        current = current.__cause__ or current.__context__


def _first(exc: BaseException, kinds: tuple[type[BaseException], ...]) -> BaseException | None:
    return next((e for e in _chain(exc) if isinstance(e, kinds)), None)


def _database_where(settings: Settings) -> str:
    if not settings.database_url:
        return f"{settings.database_name} (embedded PostgreSQL)"
    try:
        url = make_url(settings.database_url)
    except sa_exc.ArgumentError:
        return "DATABASE_URL"
    return f"{url.database or '?'} at {url.host or 'localhost'}:{url.port or 5432}"


def _driver_reason(exc: BaseException) -> str:
    """The driver's own reason, without its preamble ("connection to server at … failed:")
    or its advice, the SQL and SQLAlchemy's link."""
    text = str(exc).split("[SQL:")[0].split("(Background on this error")[0]
    text = text.rsplit("failed: ", 1)[-1]
    first = " ".join((text.strip().splitlines() or [""])[0].split())
    first = re.sub(r"^\([\w.]+\)\s*", "", first)  # SQLAlchemy's "(psycopg.OperationalError)"
    return first.rstrip(".") or type(exc).__name__


def _database_problem(exc: BaseException, settings: Settings) -> Problem:
    reason = _driver_reason(exc)
    where = _database_where(settings)
    fix_url = (
        "check DATABASE_URL (or unset it to use the embedded PostgreSQL)"
        if settings.database_url
        else "run `engram services stop`, then retry (`--verbose` shows why it failed)"
    )
    lowered = reason.lower()
    if "password authentication failed" in lowered or (
        "role" in lowered and "not exist" in lowered
    ):
        user = re.search(r'user "([^"]+)"|role "([^"]+)"', reason)
        name = next((g for g in user.groups() if g), "?") if user else "?"
        return Problem(
            f"the database {where} refused user {name} ({reason})",
            "check the user and password in DATABASE_URL / APP_DATABASE_URL, and create the app"
            " role as in the README (Database roles)",
        )
    if "database" in lowered and "does not exist" in lowered:
        return Problem(
            f"{reason} ({where})",
            "create it (`CREATE DATABASE …` as a superuser) or fix the name in DATABASE_URL",
        )
    return Problem(f"cannot connect to the database {where} ({reason})", fix_url)


def _schema_problem(exc: BaseException, settings: Settings) -> Problem | None:
    where = _database_where(settings)
    if isinstance(exc, SchemaNotReadyError):
        state = exc.state
    else:
        try:
            # Never start the embedded server just to explain an error (and leave it running).
            if not settings.database_url and not embedded_postgres.is_running(settings.data_dir):
                raise EmbeddedPostgresError("stopped")
            state = schema_state(database_urls(settings).owner)
        except Exception:  # the server is gone (a one-shot command stopped it): the error says
            missing = _first(exc, _SCHEMA_MISSING)
            reason = _driver_reason(missing or exc)
            return Problem(
                f"the database {where} lacks part of Engram's schema ({reason})",
                "run `engram migrate`",
            )
    if state.current is None:
        return Problem(f"the database {where} has no Engram schema yet", "run `engram migrate`")
    if not state.at_head and state.known:
        return Problem(
            f"the database {where} is at schema {state.current}, this code needs {state.head}",
            "run `engram migrate`",
        )
    if not state.known:
        return Problem(
            f"the database {where} was migrated by newer code (revision {state.current})",
            "upgrade Engram, or `engram migrate --revision <id>` with the newer code",
        )
    return None


def _redis_problem(exc: BaseException, settings: Settings) -> Problem:
    reason = " ".join(str(exc).split()).removeprefix("could not reach Redis: ").rstrip(".")
    if settings.redis_url:
        shown = without_password(settings.redis_url)
        return Problem(
            f"cannot reach Redis at {shown} ({reason})",
            "start it, fix REDIS_URL, or unset REDIS_URL to use the embedded Redis",
        )
    return Problem(
        f"cannot reach Redis ({reason})",
        "run `engram services stop`, then retry (`--verbose` shows why it failed)",
    )


def _settings_problem(exc: pydantic.ValidationError) -> Problem:
    """A setting the environment (or .env) gives that Engram refuses, named as the variable
    (an alias such as REDIS_URL as it is, the others with ENGRAM_)."""

    def said(error: Any) -> str:
        message = str(error["msg"]).removeprefix("Value error, ")
        if not error["loc"]:
            return message
        name = str(error["loc"][0])
        variable = name if name.isupper() else f"ENGRAM_{name.upper()}"
        return message if message.startswith(variable) else f"{variable}: {message}"

    problems = "; ".join(said(e) for e in exc.errors()[:5])
    return Problem(f"a setting is refused: {problems}", "change it in the environment or .env")


def busy_port(host: str, port: int) -> Problem | None:
    """Bind now, as the server will: a port another process holds is named here, before a
    server's start-up logs that it could not bind and exits 3."""
    if port == 0:
        return None
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        return Problem(f"cannot listen on {host}:{port}: {exc.strerror}", "check the bind address")
    family, kind, proto, _, address = addresses[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind(address)
        except OSError as exc:
            return Problem(
                f"cannot listen on {host}:{port}: {exc.strerror}",
                "stop what listens there, or choose another --port",
            )
    return None


def without_password(url: str) -> str:
    """A Redis or database URL without its password."""
    return re.sub(r"//([^:/@]*):[^@/]*@", r"//\1:***@", url)


def explain(exc: BaseException, settings: Settings | None = None) -> Problem | None:
    """The user's problem behind `exc` and its fix, or None for an error that is a bug."""
    if isinstance(exc, pydantic.ValidationError) and exc.title == Settings.__name__:
        return _settings_problem(exc)
    settings = settings or get_settings()
    if isinstance(exc, MigrationError):
        return Problem(
            f"cannot migrate: {exc}",
            "see `engram migrate --list` for the revisions (head, base, -1 and +1 work too)",
        )
    if isinstance(exc, SchemaNotReadyError) or _first(exc, _SCHEMA_MISSING) is not None:
        return _schema_problem(exc, settings)
    if (found := _first(exc, _REDIS_DOWN)) is not None:
        return _redis_problem(found, settings)
    if (found := _first(exc, (redis.ResponseError,))) is not None and "DB index" in str(found):
        return _redis_problem(found, settings)
    if isinstance(exc, ValueError) and str(exc).startswith("Redis URL must specify"):
        return Problem(
            f"REDIS_URL is not a Redis URL ({exc})",
            "set it as redis://host:6379/0, or unset it to use the embedded Redis",
        )
    if isinstance(exc, NotReplicatedError):
        return Problem(str(exc), "run it again once they answer: nothing is stored twice")
    if isinstance(exc, ProducerError):
        return _redis_problem(exc, settings)
    if (found := _first(exc, _DB_DOWN)) is not None:
        return _database_problem(found, settings)
    if isinstance(exc, sa_exc.ArgumentError | sa_exc.NoSuchModuleError):
        return Problem(
            f"DATABASE_URL is not a database URL ({exc})",
            "set it as postgresql://user:password@host:5432/database",
        )
    if isinstance(exc, EmbeddedPostgresError):
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        return Problem(
            f"the embedded PostgreSQL did not start ({first})",
            "set DATABASE_URL to use your own server, or retry with --verbose to see why",
        )
    if isinstance(exc, EmbeddedRedisError):
        return Problem(
            f"the embedded Redis did not start ({exc})",
            "set REDIS_URL to use your own server, or retry with --verbose to see why",
        )
    return None


def require_schema() -> None:
    """Stop before a command reads tables the database does not have yet."""
    state = schema_state()
    if not state.at_head:
        raise SchemaNotReadyError(state)
