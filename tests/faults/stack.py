"""A private Postgres and Redis for the fault suite, and the real processes that run on them.

Faults kill servers, so the suite never touches the shared ones other test runs use: it starts
its own embedded Postgres cluster (app/embedded/postgres.py, on its own data folder and socket)
and its own `redis-server` (the binary the embedded Redis uses, AOF on, its own port and
folder), and points every worker, beat and API process it starts at them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from app.cli.supervisor import api_command, celery_command, worker_command
from app.config import PROJECT_ROOT, Settings
from app.db.bootstrap import database_urls
from app.db.migrate import upgrade
from app.embedded import postgres as embedded_postgres
from tests.conftest import worker_env
from tests.integration.helpers import stop_process, wait_for
from tests.private_redis import PrivateRedis, free_port

DATABASE = "engram_faults"


class PrivatePostgres:
    """An embedded Postgres cluster under its own data folder (socket only, no TCP)."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir

    def start(self) -> None:
        embedded_postgres.ensure_running(self.data_dir)

    def running(self) -> bool:
        return embedded_postgres.is_running(self.data_dir)

    def kill(self) -> None:
        """SIGKILL the postmaster and every backend at once: a crash, recovered on restart."""
        pid = embedded_postgres.ensure_running(self.data_dir).pid  # running: nothing starts
        victims = [pid, *_children(pid)]
        for victim in victims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGKILL)
        wait_for(lambda: not any(_alive(v) for v in victims), timeout=30, every=0.05)

    def stop(self) -> None:
        embedded_postgres.stop(self.data_dir)


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@dataclass
class Stack:
    """The private services; `settings_for` points a test's settings at them."""

    root: Path
    postgres: PrivatePostgres
    redis: PrivateRedis

    @classmethod
    def start(cls, base: Settings, root: Path) -> Stack:
        stack = cls(root, PrivatePostgres(root), PrivateRedis(root / "redis"))
        try:
            stack.redis.start()
            stack.postgres.start()
            upgrade(database_urls(stack.settings_for(base)).owner)
        except BaseException:
            stack.close()
            raise
        return stack

    def settings_for(self, settings: Settings) -> Settings:
        return settings.model_copy(
            update={"data_dir": self.root, "database_name": DATABASE, "redis_url": self.redis.url}
        )

    def ensure_up(self) -> None:
        """A test that failed half-way may have left a server down: start it again."""
        if not self.postgres.running():
            self.postgres.start()
        if not self.redis.running():
            self.redis.start()

    def close(self) -> None:
        self.redis.kill()
        if self.postgres.running():
            self.postgres.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def private_env(settings: Settings) -> dict[str, str]:
    """What points a process at the private services (extra env for `celery_worker`)."""
    return {"ENGRAM_DATA_DIR": str(settings.data_dir), "REDIS_URL": str(settings.redis_url)}


def process_env(settings: Settings, **extra: str) -> dict[str, str]:
    """A process environment that sees the test's keys, database and the private services."""
    return {**os.environ, **worker_env(settings, **private_env(settings), **extra)}


@contextlib.contextmanager
def running(
    command: list[str], settings: Settings, log: Path, **env: str
) -> Iterator[subprocess.Popen[bytes]]:
    """A real process with the private services in its environment, stopped on the way out."""
    with log.open("ab") as out:
        process = subprocess.Popen(
            command,
            cwd=PROJECT_ROOT,
            env=process_env(settings, **env),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield process
    finally:
        stop_process(process)


def worker(
    settings: Settings, log: Path, queues: tuple[str, ...], **env: str
) -> contextlib.AbstractContextManager[subprocess.Popen[bytes]]:
    """A Celery worker serving `queues` (stream consumers too when `ingest` is one of them)."""
    command = worker_command(queues=queues, concurrency=2, consumers=1, loglevel="WARNING")
    return running(command, settings, log, **env)


def beat(
    settings: Settings, log: Path, schedule: Path, **env: str
) -> contextlib.AbstractContextManager[subprocess.Popen[bytes]]:
    """A `celery beat` with its own schedule file (two beats may run at once)."""
    command = celery_command("beat", "-l", "WARNING", "--schedule", str(schedule))
    return running(command, settings, log, **env)


@contextlib.contextmanager
def api(settings: Settings, log: Path) -> Iterator[str]:
    """The REST API (uvicorn) on a free loopback port; yields its base URL once it answers."""
    served = settings.model_copy(update={"api_host": "127.0.0.1", "api_port": free_port()})
    base = f"http://127.0.0.1:{served.api_port}"

    def ready() -> bool:
        try:
            return httpx.get(f"{base}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    with running(api_command(served), served, log) as process:
        if not wait_for(lambda: process.poll() is not None or ready(), timeout=90, every=0.2):
            raise RuntimeError(f"the API did not come up; see {log}")
        if process.poll() is not None:
            raise RuntimeError(f"the API exited ({process.returncode}); see {log}")
        yield base


def mint_key(settings: Settings, tenant: str) -> str:
    """A tenant and its API key on the private database, through the real CLI."""
    result = subprocess.run(
        [str(Path(sys.executable).parent / "engram"), "tenant", "create", tenant],
        cwd=PROJECT_ROOT,
        env=process_env(settings),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return result.stdout.strip().splitlines()[-1]
