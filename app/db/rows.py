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

A search's transaction also reads uuid columns as their text (TEXT_IDS): it keys dicts and
sets by a few thousand ids (its legs, the fusion, the boosts), and a str hashes and compares
in C and keeps its hash, where uuid.UUID's `__hash__` and `__eq__` are Python calls, ~10,000
per search: about 5 % of a search's time (bench/conversations.py's questions asked in one
process, text and uuid ids interleaved; every hit the same). Every read of that transaction
goes through here, so its ids are all of one type; the hits it returns are uuids again
(app/services/search_models.py).
"""

from __future__ import annotations

import functools
import re
import uuid
from collections.abc import Mapping
from typing import Any

from psycopg.rows import namedtuple_row
from psycopg.types.string import TextLoader
from sqlalchemy.orm import Session

# session.info key: this transaction's reads return uuid columns (and arrays of them) as text.
TEXT_IDS = "text_ids"

# SQLAlchemy's own rule for a bound name: not after a colon, a word character or a backslash
# ('x'::regconfig is a cast), and not followed by a colon.
_BIND = re.compile(r"(?<![:\w\\]):(\w+)(?!:)")
# A list of uuids in their text form, joined by commas (ids read with TEXT_IDS).
_UUID = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_UUID_LIST = re.compile(f"{_UUID}(?:,{_UUID})*")


@functools.lru_cache(maxsize=512)
def _pyformat(statement: str) -> str:
    """`:name` placeholders as psycopg's `%(name)s`, a literal `%` doubled."""
    return _BIND.sub(r"%(\1)s", statement.replace("%", "%%"))


def _bound(params: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """The parameters, a list of uuids as the text of a Postgres array ("{…,…}"): psycopg
    dumps a list element by element, each through a regular expression that decides its
    quoting, and a search sends a few hundred ids (the statements CAST them to uuid[]). Each
    is written as its 32 hex digits, which Postgres reads as the same uuid: formatting the
    hyphens was most of the cost. A list of uuids' text (TEXT_IDS reads) is joined as it
    is: such text needs no quoting in an array."""
    if not params:
        return {}
    return {name: _array_text(value) for name, value in params.items()}


def _array_text(value: Any) -> Any:
    if not isinstance(value, list | tuple) or not value:
        return value
    if all(type(item) is uuid.UUID for item in value):
        return "{" + ",".join(item.hex for item in value) + "}"
    if all(type(item) is str for item in value):
        joined = ",".join(value)
        if _UUID_LIST.fullmatch(joined):
            return "{" + joined + "}"
    return value


def fetch(session: Session, statement: str, params: Mapping[str, Any] | None = None) -> list[Any]:
    """The rows of a read statement as named tuples (`row.column`), in the session's
    transaction. A list of uuids arrives as text (`_bound`): the statement CASTs it to
    uuid[] (`id = ANY(...)` would infer it; `unnest(...)` would not)."""
    with _cursor(session, row_factory=namedtuple_row) as cursor:
        cursor.execute(_pyformat(statement), _bound(params), prepare=True)
        return cursor.fetchall() if cursor.description is not None else []


def run(session: Session, statement: str, params: Mapping[str, Any] | None = None) -> None:
    """A statement whose rows, if any, are not wanted (SET LOCAL, set_config)."""
    with _driver(session).cursor() as cursor:
        cursor.execute(_pyformat(statement), _bound(params))


def fetch_value(session: Session, statement: str, params: Mapping[str, Any] | None = None) -> Any:
    """The first column of the first row, None without one."""
    with _cursor(session) as cursor:
        cursor.execute(_pyformat(statement), _bound(params), prepare=True)
        row = cursor.fetchone() if cursor.description is not None else None
    return row[0] if row else None


def _cursor(session: Session, **options: Any) -> Any:
    """A cursor on the session's driver connection that reads as the transaction asked
    (TEXT_IDS: uuids as their text)."""
    cursor = _driver(session).cursor(**options)
    if session.info.get(TEXT_IDS):
        cursor.adapters.register_loader("uuid", TextLoader)
    return cursor


def _driver(session: Session) -> Any:
    """The psycopg connection under the session's transaction (begun if it was not)."""
    return session.connection().connection.driver_connection
