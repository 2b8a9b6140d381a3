"""Stream consumption inside the Celery worker, as a worker bootstep.

Why a bootstep and not tasks: kombu's ConsumerStep reads AMQP-style queues, not Redis Streams,
and one Celery task per event tops out near 1,000 events/s on the Redis broker here. A
`StartStopStep` starts with the worker and stops with it, so `celery worker` alone runs the
consumers: each worker that serves the `ingest` queue starts `--stream-consumers` threads
(default ENGRAM_CONSUMER_THREADS), each a consumer of the group with a name unique to this
process, reading every partition in batches. Adding a worker adds consumers.

Why it survives SIGKILL: a consumer acks only after its batch is committed, so entries it held
stay pending under its name; any other consumer reclaims them after `claim_min_idle_ms` (a live
one keeps touching what it holds, so only the dead lose theirs), the idempotent writes make the
replay invisible, and the dead consumer is then removed from the group. On a clean stop the
threads finish their batch and leave the group.

Run ingest workers with `-P threads` (or `solo`): with prefork, children forked while these
threads hold a lock could inherit it held.
"""

from __future__ import annotations

import gc
import logging
import os
import socket
import threading
import uuid
from typing import Any

from celery import Celery, bootsteps
from click import Option

from app.config import get_settings
from app.redis_client import get_redis
from app.services.ingest import IngestResult, IngestService
from app.streams.consumer import StreamConsumer
from workers.queues import INGEST

_log = logging.getLogger(__name__)


def add_worker_options(app: Celery) -> None:
    app.user_options["worker"].add(
        Option(
            ["--stream-consumers"],
            type=int,
            default=None,
            help="Stream consumer threads in this worker (default ENGRAM_CONSUMER_THREADS; "
            "0 disables). Only workers serving the 'ingest' queue consume.",
        )
    )


def dispatch_scoring(result: IngestResult) -> None:
    """After commit, before ack: one scoring task per ingest batch (never per turn). If the
    send fails the batch is not acked, and its replay dispatches again."""
    if result.turn_users:
        from workers.celery_app import app

        try:
            app.send_task(
                "engram.extract.score_turns",
                args=[{tenant: sorted(users) for tenant, users in result.turn_users.items()}],
            )
        except Exception as exc:
            # A broker outage: retry the batch with backoff (its writes are idempotent);
            # never blame, count or dead-letter the entries for it.
            raise ConnectionError(f"could not queue scoring for the batch: {exc}") from exc


def dispatch_committed(result: IngestResult) -> None:
    dispatch_scoring(result)
    dispatch_prefetch(result)


def dispatch_prefetch(result: IngestResult) -> None:
    """Prefetch is a guess: a failed send costs a cache miss later, never the batch."""
    if not result.prefetch:
        return
    from workers.celery_app import app

    try:
        app.send_task(
            "engram.recall.prefetch",
            args=[[list(item) for item in sorted(result.prefetch, key=str)]],
        )
    except Exception as exc:
        _log.warning("prefetch not queued: %s", exc)


def consumer_name(index: int) -> str:
    """Unique per process lifetime, so a restarted worker never inherits a dead one's PEL."""
    return f"{socket.gethostname()}:{os.getpid()}:{index}:{uuid.uuid4().hex[:6]}"


class StreamConsumerStep(bootsteps.StartStopStep):
    requires = {"celery.worker.components:Pool"}

    def __init__(self, worker: Any, stream_consumers: int | None = None, **_: Any) -> None:
        super().__init__(worker)
        settings = get_settings()
        self.count = settings.consumer_threads if stream_consumers is None else stream_consumers
        self.stop_event = threading.Event()
        self.threads: list[threading.Thread] = []

    def _serves_ingest(self, worker: Any) -> bool:
        selected = getattr(worker.app.amqp.queues, "consume_from", None)
        return not selected or INGEST in selected

    def start(self, worker: Any) -> None:
        if self.count <= 0 or not self._serves_ingest(worker):
            return
        settings = get_settings()
        client = get_redis(settings)
        # What is loaded by now (the app, its libraries) lives as long as the worker: frozen,
        # the collector's full passes (tens of ms each, every few thousand turns ingested)
        # no longer walk it.
        gc.freeze()
        for index in range(self.count):
            consumer = StreamConsumer(
                client=client,
                settings=settings,
                handler=IngestService(
                    client=client, settings=settings, on_committed=dispatch_committed
                ),
                name=consumer_name(index),
            )
            thread = threading.Thread(
                target=consumer.run,
                args=(self.stop_event,),
                name=f"engram-consumer-{index}",
                daemon=True,
            )
            thread.start()
            self.threads.append(thread)
        _log.info("started %d stream consumer(s)", len(self.threads))

    def stop(self, worker: Any) -> None:
        self.stop_event.set()
        for thread in self.threads:
            thread.join(timeout=30)
        self.threads.clear()

    def shutdown(self, worker: Any) -> None:
        self.stop(worker)
