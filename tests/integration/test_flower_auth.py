"""Flower, as a real process on a free port: every path asks for the password, the password
works, and it never shows on the process's command line — however Flower is started."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from app.cli.supervisor import flower_command
from app.config import PROJECT_ROOT, Settings
from tests.conftest import worker_env
from tests.integration.helpers import stop_process

PATHS = ["/", "/metrics", "/healthcheck", "/workers", "/tasks", "/api/workers", "/static/x.js"]
USER = "engram"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _plain_celery(port: int) -> list[str]:
    """What an operator types, with no credential flag at all."""
    celery = Path(sys.executable).with_name("celery")
    return [str(celery), "-A", "workers.celery_app", "flower", f"--port={port}"]


@contextmanager
def running_flower(command: list[str], env: dict[str, str], port: int) -> Iterator[int]:
    """Flower started for real; yields its pid once it answers HTTP, stops it after."""
    process = subprocess.Popen(
        command,
        cwd=PROJECT_ROOT,
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(600):  # up to about a minute on a loaded machine
            if process.poll() is not None:
                raise RuntimeError(f"flower exited with {process.returncode}")
            try:
                httpx.get(f"http://127.0.0.1:{port}/healthcheck", timeout=2)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        else:
            raise RuntimeError("flower did not answer")
        yield process.pid
    finally:
        stop_process(process, 20)


def _check(port: int, pid: int, password: str) -> None:
    base = f"http://127.0.0.1:{port}"
    for path in PATHS:
        anonymous = httpx.get(base + path, timeout=10)
        assert anonymous.status_code == 401, path
        assert anonymous.headers["WWW-Authenticate"].startswith("Basic"), path
        assert httpx.get(base + path, auth=(USER, "not-it"), timeout=10).status_code == 401
        assert httpx.get(base + path, auth=("someone", password), timeout=10).status_code == 401
    for path in ("/", "/metrics", "/healthcheck", "/api/workers"):
        assert httpx.get(base + path, auth=(USER, password), timeout=30).status_code == 200, path
    # State-changing calls are refused without credentials before anything else happens.
    refused = httpx.post(base + "/api/task/async-apply/engram.x", timeout=10)
    assert refused.status_code == 401
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    assert password.encode() not in cmdline
    assert b"basic-auth" not in cmdline


@pytest.fixture
def password() -> str:
    return f"pw-{secrets.token_urlsafe(12)}"


def test_engram_up_starts_flower_with_every_path_behind_auth(
    settings: Settings, redis_client: object, password: str
) -> None:
    port = _free_port()
    command = flower_command(
        settings.model_copy(update={"flower_port": port, "flower_address": "127.0.0.1"})
    )
    env = worker_env(settings, ENGRAM_FLOWER_USER=USER, ENGRAM_FLOWER_PASSWORD=password)
    with running_flower(command, env, port) as pid:
        _check(port, pid, password)


def test_plain_celery_flower_takes_the_password_from_a_file(
    settings: Settings, redis_client: object, password: str, tmp_path: Path
) -> None:
    secret = tmp_path / "flower-password"
    secret.write_text(password + "\n")
    secret.chmod(0o600)
    port = _free_port()
    env = worker_env(
        settings,
        ENGRAM_FLOWER_USER=USER,
        ENGRAM_FLOWER_PASSWORD="the-file-wins",
        ENGRAM_FLOWER_PASSWORD_FILE=str(secret),
    )
    with running_flower(_plain_celery(port), env, port) as pid:
        _check(port, pid, password)


def test_plain_celery_flower_honours_flowers_own_environment_variable(
    settings: Settings, redis_client: object, password: str
) -> None:
    port = _free_port()
    env = worker_env(settings, FLOWER_BASIC_AUTH=f"{USER}:{password}")
    with running_flower(_plain_celery(port), env, port) as pid:
        _check(port, pid, password)
