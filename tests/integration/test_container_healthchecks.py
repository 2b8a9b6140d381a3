"""The healthchecks docker/compose.yaml runs (`python -m workers.healthcheck ...`), run the
same way against real processes: each says healthy when its service answers, and not when it
does not."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from app.cli.supervisor import flower_command
from app.config import PROJECT_ROOT, Settings
from tests.conftest import worker_env
from tests.integration.api_server import serve
from tests.integration.helpers import wait_for
from tests.integration.test_flower_auth import running_flower
from tests.integration.workers import celery_worker


def healthcheck(settings: Settings, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "workers.healthcheck", *args],
        cwd=PROJECT_ROOT,
        env={**os.environ, **worker_env(settings, **env)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_api(settings: Settings, redis_client: object) -> None:
    with serve(settings) as url:
        assert healthcheck(settings, "api", url).returncode == 0
    down = healthcheck(settings, "api", f"http://127.0.0.1:{free_port()}")
    assert down.returncode == 1 and "api check failed" in down.stderr


def test_beat_pidfile(settings: Settings, tmp_path: Path) -> None:
    pidfile = tmp_path / "beat.pid"
    assert healthcheck(settings, "beat", str(pidfile)).returncode == 1
    pidfile.write_text(f"{os.getpid()}\n")
    assert healthcheck(settings, "beat", str(pidfile)).returncode == 0
    gone = subprocess.Popen(["true"])
    gone.wait()
    pidfile.write_text(str(gone.pid))
    stopped = healthcheck(settings, "beat", str(pidfile))
    assert stopped.returncode == 1 and "beat is not running" in stopped.stderr


@pytest.mark.slow
def test_worker_answers_ping(settings: Settings, redis_client: object) -> None:
    node = f"celery@{socket.gethostname()}"
    with celery_worker(settings):
        assert wait_for(
            lambda: healthcheck(settings, "worker", node).returncode == 0, timeout=120, every=1
        )
        other = healthcheck(settings, "worker", f"nobody@{socket.gethostname()}")
        assert other.returncode == 1 and "did not answer" in other.stderr


@pytest.mark.slow
def test_flower_with_its_credentials(settings: Settings, redis_client: object) -> None:
    port = free_port()
    password = secrets.token_urlsafe(12)
    command = flower_command(
        settings.model_copy(update={"flower_port": port, "flower_address": "127.0.0.1"})
    )
    env = worker_env(settings, ENGRAM_FLOWER_USER="engram", ENGRAM_FLOWER_PASSWORD=password)
    url = f"http://127.0.0.1:{port}"
    with running_flower(command, env, port):
        ok = healthcheck(settings, "flower", url, ENGRAM_FLOWER_PASSWORD=password)
        assert ok.returncode == 0, ok.stderr
        wrong = healthcheck(settings, "flower", url, ENGRAM_FLOWER_PASSWORD="not-it")
        assert wrong.returncode == 1 and "401" in wrong.stderr
