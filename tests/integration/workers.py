"""Real Celery worker processes for integration tests."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from app.cli.supervisor import worker_command
from app.config import PROJECT_ROOT, Settings
from tests.conftest import worker_env
from tests.integration.helpers import stop_process


@contextmanager
def celery_worker(
    settings: Settings,
    *,
    queues: Sequence[str] = ("ingest",),
    concurrency: int = 1,
    consumers: int = 1,
    hostname: str | None = None,
    stop_timeout: float = 30,
    **env: str,
) -> Iterator[subprocess.Popen[bytes]]:
    """A real `celery worker` on these queues (ingest by default), with this test's keys and
    database; stopped (TERM, then KILL after `stop_timeout`) when the block ends."""
    process = subprocess.Popen(
        worker_command(
            queues=tuple(queues), concurrency=concurrency, consumers=consumers, hostname=hostname
        ),
        cwd=PROJECT_ROOT,
        env={**os.environ, **worker_env(settings, **env)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield process
    finally:
        stop_process(process, stop_timeout)
