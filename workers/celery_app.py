"""The Celery app: its broker, per-concern queues, settings for at-least-once work.

Configuration is applied lazily (on first use of `app.conf`), so importing this module does no
I/O; the broker URL is resolved then (workers/broker.py: CELERY_BROKER_URL, else the data
Redis, starting the embedded Redis if that is the setup).
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from celery import Celery
from celery.signals import (
    after_setup_logger,
    after_setup_task_logger,
    celeryd_init,
    import_modules,
    task_postrun,
    task_prerun,
    worker_process_init,
)

from app.config import get_settings
from app.logs import close_context, configure_logging, open_context, use_json
from workers import broker
from workers.beat import beat_schedule
from workers.queues import MAINTENANCE, ROUTES, TASK_QUEUES

app = Celery(
    "engram",
    include=[
        "tasks.ingest",
        "tasks.maintenance",
        "tasks.extract",
        "tasks.recall",
        "tasks.associations",
        "tasks.dream",
        "tasks.housekeeping",
    ],
)


@app.on_configure.connect
def _configure(sender: Celery, **_: Any) -> None:
    settings = get_settings()
    url = broker.broker_url(settings)
    sender.conf.update(
        broker_url=url,
        # Results are not used: tasks hand ids to the next step, and state lives in Postgres.
        task_ignore_result=True,
        result_backend=None,
        # JSON only: no pickle from the broker, and messages readable by any tool.
        task_serializer="json",
        accept_content=["json"],
        result_serializer="json",
        task_queues=TASK_QUEUES,
        task_routes=ROUTES,
        task_default_queue=MAINTENANCE,
        # Ack after the task finishes, so a crash mid-task redelivers it (at-least-once; every
        # task is idempotent), and give the message back if the worker process is lost.
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        # Take one message at a time: with late acks a prefetched message would sit unacked
        # behind a long task, and be redelivered to another worker after the visibility timeout.
        worker_prefetch_multiplier=1,
        task_time_limit=settings.task_time_limit_s,
        task_soft_time_limit=max(settings.task_time_limit_s - 30, 1),
        # On Redis: a visibility timeout above any task and keys under ENGRAM_REDIS_PREFIX;
        # on RabbitMQ: publisher confirms (workers/broker.py).
        broker_transport_options=broker.transport_options(settings, url),
        worker_cancel_long_running_tasks_on_connection_loss=True,
        broker_connection_retry_on_startup=True,
        worker_send_task_events=True,
        task_send_sent_event=True,
        beat_schedule=beat_schedule(settings),
        timezone="UTC",
    )


@worker_process_init.connect
def _fresh_connections_after_fork(**_: Any) -> None:
    """Pooled connections must not be shared across a fork."""
    from app.db.session import dispose_engines

    dispose_engines(close=False)


@celeryd_init.connect
def _json_logs_from_the_start(**_: Any) -> None:
    """What a worker writes before Celery sets its logging up (its warning about running as
    root) is JSON too; Celery's own handlers then replace this one."""
    configure_logging(get_settings().log_format)


@after_setup_logger.connect
@after_setup_task_logger.connect
def _json_logs(logger: logging.Logger, **_: Any) -> None:
    """ENGRAM_LOG_FORMAT=json: the handlers Celery just set up write JSON lines (app/logs.py)."""
    if get_settings().log_format == "json":
        use_json(logger)
        logging.captureWarnings(True)


@task_prerun.connect
def _task_log_ids(task_id: str, task: Any, **_: Any) -> None:
    """Every line a task logs carries its id and name (closed by the post-run signal, which
    Celery sends from the same thread, whatever the outcome)."""
    open_context(task_id, task_id=task_id, task_name=task.name)


@task_postrun.connect
def _task_log_ids_done(task_id: str, **_: Any) -> None:
    close_context(task_id)


@import_modules.connect(sender=app)
def _flower_behind_auth(**_: Any) -> None:
    """Flower sends this from its constructor: gate all of its paths (workers/flower_auth.py)."""
    if "flower.app" in sys.modules:
        from workers.flower_auth import install_gate

        install_gate()


def _install_consumer_step() -> None:
    from workers.consumer_step import StreamConsumerStep, add_worker_options
    from workers.embedding_check import EmbeddingCheckStep

    app.steps["worker"].add(StreamConsumerStep)
    app.steps["worker"].add(EmbeddingCheckStep)
    add_worker_options(app)


_install_consumer_step()
