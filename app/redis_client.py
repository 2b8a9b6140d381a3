"""Where Redis is: REDIS_URL, else 127.0.0.1:6379 if it answers, else this checkout's embedded
server (its own port, app/embedded/redis.py)."""

from __future__ import annotations

import redis

from app.config import Settings, get_settings
from app.embedded import redis as embedded_redis

_urls: dict[tuple[str | None, str], str] = {}
_clients: dict[str, redis.Redis] = {}


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
    """A pooled client (thread-safe) for the configured Redis."""
    url = resolve_redis_url(settings)
    if url not in _clients:
        _clients[url] = redis.Redis.from_url(
            url, socket_timeout=30, socket_connect_timeout=5, health_check_interval=30
        )
    return _clients[url]
