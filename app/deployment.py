"""Which deployment a process belongs to: what keeps two installs apart on one Redis.

A deployment is one database. Its id is random, made once by the migration that creates
`meta.deployment_id()` (the first `engram migrate`), and it travels with the database. Every
Redis key and stream of the deployment lives under `<ENGRAM_REDIS_PREFIX>:<id>:` (app/keys.py)
and producers stamp each stream entry with the id, so two deployments sharing a Redis, even
with one prefix, share no key, and a worker dead-letters an entry another deployment stamped
(app/streams/deployment.py).

How a process learns the id (once; it never changes for a database):
- every process reads it in the database, which must be migrated; ENGRAM_DEPLOYMENT_ID, if
  set too, must agree, so a worker can never be pointed at another deployment's streams;
  `engram migrate` (and `services start`, `up`) announce it in Redis (`<prefix>:deployments`);
- a producer without a database (no DATABASE_URL and no embedded cluster in its checkout,
  typically an application given only REDIS_URL) takes ENGRAM_DEPLOYMENT_ID, else the one
  deployment that announced itself under the prefix. None, or several, is an error saying
  what to set: it never guesses.
"""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime

import psycopg
import redis
from psycopg import errors

from app.config import Settings

_log = logging.getLogger(__name__)
_lock = threading.Lock()
_from_database: dict[tuple[str | None, ...], str] = {}


class DeploymentError(RuntimeError):
    """The deployment's id is unknown or contradicts the configuration."""


def _database_key(settings: Settings) -> tuple[str | None, ...]:
    return (
        settings.database_url,
        settings.app_database_url,
        settings.database_name,
        str(settings.data_dir),
    )


def has_database(settings: Settings) -> bool:
    """A DATABASE_URL, or an embedded cluster already made in this checkout."""
    if settings.database_url:
        return True
    from app.embedded.postgres import has_cluster

    return has_cluster(settings.data_dir)


def read_from_database(settings: Settings) -> str:
    """The id the database holds (starting this checkout's embedded server if needed)."""
    from app.db.bootstrap import database_urls, libpq_conninfo

    url = libpq_conninfo(database_urls(settings).app)
    try:
        with psycopg.connect(url, connect_timeout=10, autocommit=True) as conn:
            row = conn.execute("SELECT meta.deployment_id()").fetchone()
    except (errors.UndefinedFunction, errors.InvalidSchemaName):
        raise DeploymentError(
            "the database has no deployment id yet: run `engram migrate`"
        ) from None
    if row is None or not row[0]:
        raise DeploymentError("meta.deployment_id() returned nothing: run `engram migrate`")
    return str(row[0])


def deployment_id(
    settings: Settings, client: redis.Redis | None = None, *, producer: bool = False
) -> str:
    """This process's deployment id: from the database, which must be migrated.

    Only a producer (`producer=True`) without a database may take it from
    ENGRAM_DEPLOYMENT_ID or the announcements in `client` (its Redis); a consumer never
    does, so it can never read another deployment's streams."""
    if producer and not has_database(settings):
        return settings.deployment_id or _announced_one(settings, client)
    key = _database_key(settings)
    with _lock:
        found = _from_database.get(key)
    if found is None:
        found = read_from_database(settings)
        with _lock:
            _from_database[key] = found
    if settings.deployment_id and settings.deployment_id != found:
        raise DeploymentError(
            f"ENGRAM_DEPLOYMENT_ID={settings.deployment_id} but the database belongs to "
            f"deployment {found}: unset it, or point DATABASE_URL at that deployment's database"
        )
    return found


def announce(settings: Settings, client: redis.Redis | None = None) -> str:
    """Record in Redis that this deployment uses the prefix, for producers without a database
    (`engram migrate`, `services start` and `up` do it); returns the id."""
    from app.keys import RedisKeys

    found = deployment_id(settings)
    client = client if client is not None else _default_client(settings)
    client.hset(
        RedisKeys(settings.redis_prefix).deployments(), found, datetime.now(UTC).isoformat()
    )
    return found


def announce_quietly(settings: Settings) -> str | None:
    """`announce` after a migration: nothing to announce below the revision that makes the
    id, and a Redis that is down only costs producers without a database their lookup."""
    try:
        found = announce(settings)
    except DeploymentError as exc:
        _log.info("no deployment id to announce: %s", exc)
        return None
    except redis.RedisError as exc:
        _log.warning("could not announce the deployment in Redis: %s", exc)
        return None
    _log.info("deployment %s announced under the Redis prefix %s", found, settings.redis_prefix)
    return found


def announced(client: redis.Redis, prefix: str) -> dict[str, str]:
    """Deployments that announced themselves under `prefix`: id → when last."""
    from app.keys import RedisKeys

    raw = client.hgetall(RedisKeys(prefix).deployments())
    return {_text(k): _text(v) for k, v in raw.items()}


def _announced_one(settings: Settings, client: redis.Redis | None) -> str:
    client = client if client is not None else _default_client(settings)
    found = sorted(announced(client, settings.redis_prefix))
    if len(found) == 1:
        return found[0]
    if not found:
        raise DeploymentError(
            f"no Engram deployment has announced itself on this Redis under the prefix "
            f"'{settings.redis_prefix}': run `engram migrate` (or start a worker) where the "
            "database is, or set ENGRAM_DEPLOYMENT_ID (`engram status` shows it)"
        )
    raise DeploymentError(
        f"{len(found)} deployments share the prefix '{settings.redis_prefix}' on this Redis "
        f"({', '.join(found)}): set ENGRAM_DEPLOYMENT_ID to the one to send to"
    )


def _default_client(settings: Settings) -> redis.Redis:
    from app.redis_client import get_redis

    return get_redis(settings)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def forget() -> None:
    """Drop what was read (a database was dropped and may come back with another id)."""
    with _lock:
        _from_database.clear()
