"""Per-process memos of what a search asks the database about a user's size: cheap to be a
minute stale, costly to ask on every search of a big user."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy.orm import Session

KEPT = 100_000  # entries of each cache; a full one starts afresh
V = TypeVar("V")


def remembered(
    cache: dict[Any, tuple[V, float]], key: Any, ttl: float, compute: Callable[[], V]
) -> V:
    """`compute()`, kept in this process's `cache` under `key` for `ttl` seconds."""
    found = recall(cache, key, ttl)
    if found is not None:
        return found
    value = compute()
    keep(cache, key, value)
    return value


def recall(cache: dict[Any, tuple[V, float]], key: Any, ttl: float) -> V | None:
    """What `cache` holds under `key`, if kept less than `ttl` seconds ago."""
    cached = cache.get(key)
    if cached is not None and time.monotonic() - cached[1] < ttl:
        return cached[0]
    return None


def keep(cache: dict[Any, tuple[V, float]], key: Any, value: V) -> None:
    """`value` under `key` from now. A full cache is started afresh (never emptied while
    read: a lookup meanwhile only misses)."""
    if len(cache) >= KEPT:
        cache.clear()
    cache[key] = (value, time.monotonic())


def scope_key(session: Session, table: str, where: str, params: dict[str, Any]) -> tuple:
    """A cache key for a scope: the database (one process may search several, a benchmark's
    databases of different sizes with the same table and user names), what row-level
    security lets the transaction see (its tenant and agent: app/db/session.py), the table,
    the predicate and the parameters it names."""
    database = str(session.get_bind().engine.url.database or "")
    named = sorted((k, str(v)) for k, v in params.items() if f":{k}" in where)
    return (database, session.info.get("rls_scope"), table, where, *named)
