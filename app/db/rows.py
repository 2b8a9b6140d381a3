"""Read statements on the search path, run on the session's own driver connection.

A search runs many small statements, and SQLAlchemy's generic path (an execution context, a
compiled `text()` construct, result metadata built from every cursor description, a Row per
row) was a large share of its Python (bench/search.py, README). These reads take
no ORM objects, so they go to psycopg directly, on the connection of the session's
transaction: the tenant's row-level-security scope (set_config in unit_of_work) and the
transaction's snapshot are the same. Statements keep SQLAlchemy's `:name` placeholders, so
they read as every other statement of the project. Each is prepared on its connection at
once (psycopg keeps the last hundred): a search's transaction asks for generic plans
(app/db/session.py, GENERIC_PLANS), which only a prepared statement keeps.
"""

from __future__ import annotations

import functools
import re
import uuid
from collections.abc import Mapping
from typing import Any

from psycopg.rows import namedtuple_row
from sqlalchemy.orm import Session

# SQLAlchemy's own rule for a bound name: not after a colon, a word character or a backslash
# ('x'::regconfig is a cast), and not followed by a colon.
_BIND = re.compile(r"(?<![:\w\\]):(\w+)(?!:)")


@functools.lru_cache(maxsize=512)
def _pyformat(statement: str) -> str:
    """`:name` placeholders as psycopg's `%(name)s`, a literal `%` doubled."""
    return _BIND.sub(r"%(\1)s", statement.replace("%", "%%"))


def _bound(params: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """The parameters, a list of uuids as the text of a Postgres array ("{…,…}"): psycopg
    dumps a list element by element, each through a regular expression that decides its
    quoting, and a search sends a few hundred ids (the statements CAST them to uuid[]). Each
    is written as its 32 hex digits, which Postgres reads as the same uuid: formatting the
    hyphens was most of the cost."""
    if not params:
        return {}
    return {
        name: (
            "{" + ",".join(item.hex for item in value) + "}"
            if isinstance(value, list | tuple)
            and value
            and all(type(item) is uuid.UUID for item in value)
            else value
        )
        for name, value in params.items()
    }


def fetch(session: Session, statement: str, params: Mapping[str, Any] | None = None) -> list[Any]:
    """The rows of a read statement as named tuples (`row.column`), in the session's
    transaction. A list of uuids arrives as text (`_bound`): the statement CASTs it to
    uuid[] (`id = ANY(...)` would infer it; `unnest(...)` would not)."""
    with _driver(session).cursor(row_factory=namedtuple_row) as cursor:
        cursor.execute(_pyformat(statement), _bound(params), prepare=True)
        return cursor.fetchall() if cursor.description is not None else []


def run(session: Session, statement: str, params: Mapping[str, Any] | None = None) -> None:
    """A statement whose rows, if any, are not wanted (SET LOCAL, set_config)."""
    with _driver(session).cursor() as cursor:
        cursor.execute(_pyformat(statement), _bound(params))


def fetch_value(session: Session, statement: str, params: Mapping[str, Any] | None = None) -> Any:
    """The first column of the first row, None without one."""
    with _driver(session).cursor() as cursor:
        cursor.execute(_pyformat(statement), _bound(params), prepare=True)
        row = cursor.fetchone() if cursor.description is not None else None
    return row[0] if row else None


def _driver(session: Session) -> Any:
    """The psycopg connection under the session's transaction (begun if it was not)."""
    return session.connection().connection.driver_connection
