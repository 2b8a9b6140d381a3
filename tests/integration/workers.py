"""Real Celery worker processes for integration tests."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

from app.cli.supervisor import worker_command
from app.config import PROJECT_ROOT, Settings
from tests.conftest import worker_env


@contextmanager
def celery_worker(
    settings: Settings, *, consumers: int = 1, **env: str
) -> Iterator[subprocess.Popen[bytes]]:
    """A real `celery worker` serving the ingest queue, with this test's keys and database."""
    process = subprocess.Popen(
        worker_command(queues=("ingest",), concurrency=1, consumers=consumers),
        cwd=PROJECT_ROOT,
        env={**os.environ, **worker_env(settings, **env)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
