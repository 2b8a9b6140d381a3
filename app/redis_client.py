"""Where Redis is: REDIS_URL, else 127.0.0.1:6379 if it answers, else this checkout's embedded
server (its own port, app/embedded/redis.py).

A REDIS_URL with the scheme `redis+cluster://` (or `rediss+cluster://`) names a Redis Cluster
by any one of its nodes: get_redis then returns redis-py's RedisCluster, which learns the
slot map from that node and routes each command to the master owning its keys.
"""

from __future__ import annotations

from typing import Any

import redis
from redis.cluster import ClusterPipeline, RedisCluster
from redis.commands.core import Script

from app.config import Settings, get_settings
from app.embedded import redis as embedded_redis

_urls: dict[tuple[str | None, str], str] = {}
_clients: dict[str, redis.Redis] = {}

CLUSTER_SCHEMES = ("redis+cluster://", "rediss+cluster://")


def is_cluster_url(url: str | None) -> bool:
    """True when `url` names a Redis Cluster rather than one server."""
    return bool(url) and str(url).startswith(CLUSTER_SCHEMES)


def is_cluster(client: Any) -> bool:
    """True for a cluster client (or one of its pipelines): code that must take another path
    on a cluster (cross-slot work, scripts in pipelines) asks this, not the URL."""
    return isinstance(client, RedisCluster | ClusterPipeline)


def _plain_url(url: str) -> str:
    return url.replace("+cluster://", "://", 1)


def resolve_redis_url(settings: Settings | None = None) -> str:
    settings = settings or get_settings()
    if settings.redis_url:
        return settings.redis_url
    key = (settings.redis_url, str(settings.data_dir))
    if key not in _urls:
        if embedded_redis.answers(embedded_redis.DEFAULT_URL):
            _urls[key] = embedded_redis.DEFAULT_URL
        else:
            _urls[key], _ = embedded_redis.ensure_running(settings.data_dir)
    return _urls[key]


def forget_resolved() -> None:
    """Drop what was resolved: the embedded server was stopped and may come back elsewhere."""
    _urls.clear()
    for client in _clients.values():
        client.close()
    _clients.clear()


def get_redis(settings: Settings | None = None) -> redis.Redis:
    """A pooled client (thread-safe) for the configured Redis: RedisCluster when the URL names
    a cluster (it has the same command methods; see is_cluster for where paths differ)."""
    url = resolve_redis_url(settings)
    if url not in _clients:
        options: dict[str, Any] = {
            "socket_timeout": 30,
            "socket_connect_timeout": 5,
            "health_check_interval": 30,
        }
        if is_cluster_url(url):
            _clients[url] = RedisCluster.from_url(_plain_url(url), **options)  # type: ignore[assignment]
        else:
            _clients[url] = redis.Redis.from_url(url, **options)
    return _clients[url]


def run_script(script: Script, client: Any, *, keys: list[Any], args: list[Any]) -> Any:
    """Call a registered script, also from a pipeline. A cluster pipeline refuses EVALSHA (it
    cannot reload a script missing on one node mid-pipeline, and its `eval` method takes no
    arguments), so there the source goes as a plain EVAL command; every key of one call must
    share a slot either way."""
    if isinstance(client, ClusterPipeline):
        return client.execute_command("EVAL", script.script, len(keys), *keys, *args)
    return script(keys=keys, args=args, client=client)
