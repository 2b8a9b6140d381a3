"""Where Celery's messages travel: the data Redis by default, or a broker of its own.

Unset, CELERY_BROKER_URL means the data Redis (REDIS_URL, else the local or embedded one), with
Celery's keys under `<ENGRAM_REDIS_PREFIX>:celery:` so installs with their own prefix never
exchange tasks. A Redis broker of its own takes the same options. RabbitMQ takes none of
them: `global_keyprefix` and the visibility timeout are Redis-transport options (RabbitMQ
hands an unacked message back when the worker's connection drops, not after a timeout), and
deployments sharing a RabbitMQ keep apart by vhost, one each. Queue names and routes are the
same on both (workers/queues.py: a direct exchange per queue).

Nothing else reads the broker: streams, working memory, delivery counters and dead tasks stay
in the data Redis, and results are off (state lives in Postgres), so no result backend moves.
"""

from __future__ import annotations

from typing import Any

from app.config import AMQP_BROKER_SCHEMES, REDIS_BROKER_SCHEMES, Settings
from app.redis_client import resolve_redis_url


def broker_url(settings: Settings) -> str:
    """CELERY_BROKER_URL, else the data Redis (resolved as every Redis client resolves it)."""
    return settings.celery_broker_url or resolve_redis_url(settings)


def scheme_of(url: str) -> str:
    return url.split("://", 1)[0].lower()


def is_redis_broker(url: str) -> bool:
    return scheme_of(url) in REDIS_BROKER_SCHEMES


def is_amqp_broker(url: str) -> bool:
    return scheme_of(url) in AMQP_BROKER_SCHEMES


def transport_options(settings: Settings, url: str) -> dict[str, Any]:
    """Options for the broker's transport: each kind gets only what it understands."""
    if is_redis_broker(url):
        # Redelivery of an unacked message after the visibility timeout: it must exceed the
        # longest task (time limit) and any countdown/ETA, or a running task gets a second
        # worker. Keys under the prefix, not the deployment id: that is read from the
        # database, and configuring Celery must not need one (README, "Deployments sharing
        # a Redis").
        return {
            "visibility_timeout": settings.visibility_timeout_s,
            "global_keyprefix": f"{settings.redis_prefix}:celery:",
        }
    if is_amqp_broker(url):
        # Publisher confirms: a send returns once RabbitMQ holds the message, so a batch is
        # acked on the stream only after its scoring task is safe (workers/consumer_step.py).
        return {"confirm_publish": True}
    return {}
