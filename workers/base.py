"""One decorator for every Engram task: stable name, queue, retry policy, delivery counting,
and once-per-period runs of what beat fires.

With late acks and reject-on-worker-lost, a task that kills its worker (OOM, segfault) is
redelivered forever. Each start therefore counts a delivery in Redis; past
ENGRAM_TASK_MAX_DELIVERIES it is written to the dead-task stream and acknowledged instead of
being run again.

A message fired by beat names its schedule entry and period (workers/beat.py); such a run
goes through `once_per_period`, so a second beat firing the same entry within the period is
skipped (returns None) instead of doing the work again.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from celery import Task
from sqlalchemy.exc import OperationalError

from app.config import Settings, get_settings
from app.db.session import app_engine
from app.keys import RedisKeys
from app.redis_client import get_redis
from app.services.jobs import once_per_period
from workers.beat import ENTRY_HEADER, PERIOD_HEADER, job_name
from workers.celery_app import app

_log = logging.getLogger(__name__)
F = TypeVar("F", bound=Callable[..., Any])


class EngramTask(Task):  # type: ignore[misc]
    abstract = True

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        settings = get_settings()
        task_id = self.request.id
        if task_id is None or self.request.is_eager:
            return super().__call__(*args, **kwargs)
        client = get_redis(settings)
        key = RedisKeys.from_settings(settings).task_deliveries(task_id)
        pipe = client.pipeline(transaction=False)
        pipe.incr(key)
        pipe.expire(key, settings.visibility_timeout_s * 2)
        deliveries = int(pipe.execute()[0])
        if deliveries > settings.task_max_deliveries:
            _log.error(
                "task %s[%s] started %d times without finishing; giving up on it",
                self.name,
                task_id,
                deliveries,
            )
            client.xadd(
                RedisKeys.from_settings(settings).dead_tasks(),
                {
                    "task": self.name,
                    "task_id": task_id,
                    "deliveries": deliveries,
                    "args": json.dumps([list(args), kwargs], default=str)[:4000],
                },
            )
            return None
        result = self._run_once_per_period(settings, args, kwargs)
        client.delete(key)
        return result

    def _run_once_per_period(self, settings: Settings, args: Any, kwargs: Any) -> Any:
        """Run, or for a beat-fired message, run unless this entry ran within its period."""
        entry = getattr(self.request, ENTRY_HEADER, None)
        period = getattr(self.request, PERIOD_HEADER, None)
        if entry is None or period is None:
            return Task.__call__(self, *args, **kwargs)
        engine = app_engine(settings)
        with once_per_period(job_name(str(entry)), float(period), engine=engine) as run:
            if run is None:
                return None
            result = Task.__call__(self, *args, **kwargs)
            run.rows = result if isinstance(result, int) and not isinstance(result, bool) else 0
            run.detail["task"] = self.name
            return result


def engram_task(name: str, **options: Any) -> Callable[[F], F]:
    """Register `fn` as `name` (routing follows the name's prefix, see workers/queues.py)."""

    def decorate(fn: F) -> F:
        return app.task(  # type: ignore[no-any-return]
            name=name,
            base=EngramTask,
            bind=False,
            # Outages and lost races (deadlock, serialization failure) are retried; other
            # errors surface in the task's state and logs, and beat's sweeps pick the work up.
            autoretry_for=(ConnectionError, TimeoutError, OperationalError),
            retry_backoff=True,
            retry_backoff_max=300,
            max_retries=10,
            **options,
        )(fn)

    return decorate
