"""Start and stop Engram's processes (services, worker, beat, flower) for `engram up`/`demo`.

Whatever a command starts, it stops: a one-shot command (`status`, `tenant`, `key`, ...)
leaves the embedded servers as it found them, and the foreground ones (`up`, `demo`, `api`)
stop their children and the servers they started on SIGTERM (systemd, `docker stop`) as on
Ctrl-C. A server that was already running is left running.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import ParamSpec, TypeVar

from app.config import Settings, get_settings
from app.db.bootstrap import database_urls
from app.embedded import postgres as embedded_postgres
from app.embedded import redis as embedded_redis
from app.redis_client import forget_resolved, resolve_redis_url
from workers.queues import ALL_QUEUES

_log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")


@dataclass
class Services:
    """What `ensure_services` found or started; stop() undoes only what it started."""

    settings: Settings
    started_postgres: bool = False
    started_redis: bool = False

    def stop(self) -> None:
        from app.db.session import dispose_engines

        dispose_engines()
        if self.started_postgres:
            embedded_postgres.stop(self.settings.data_dir)
            self.started_postgres = False
        if self.started_redis:
            embedded_redis.stop(self.settings.data_dir)
            forget_resolved()
            self.started_redis = False


def ensure_services(settings: Settings) -> Services:
    """Find or start the database and Redis; if that fails half-way, stop what it started."""
    services = Services(settings)
    try:
        if not settings.database_url:
            server = embedded_postgres.ensure_running(settings.data_dir)
            services.started_postgres = server.started_here
        database_urls(settings)
        if not settings.redis_url and not embedded_redis.answers(embedded_redis.DEFAULT_URL):
            _, services.started_redis = embedded_redis.ensure_running(settings.data_dir)
        resolve_redis_url(settings)
    except BaseException:
        services.stop()
        raise
    return services


def with_services(command: Callable[P, R]) -> Callable[P, R]:
    """Run a one-shot command with the services it needs, stopping afterwards the ones it
    had to start (a server that was already running stays up)."""

    @functools.wraps(command)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        with sigterm_as_interrupt():
            services = ensure_services(get_settings())
            try:
                return command(*args, **kwargs)
            finally:
                services.stop()

    return run


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (what systemd and `docker stop` send) raises KeyboardInterrupt, so the clean-up
    written for Ctrl-C runs; a second SIGTERM is ignored until that clean-up is done. Also a
    decorator (`@sigterm_as_interrupt()`); only the main thread can take signals."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def celery_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "celery", "-A", "workers.celery_app", *args]


def worker_command(
    queues: Sequence[str] = ALL_QUEUES,
    concurrency: int = 4,
    consumers: int | None = None,
    loglevel: str = "INFO",
    hostname: str | None = None,
) -> list[str]:
    """`celery worker` for these queues; `hostname` names the node (`-n ingest@%h`), which
    must differ between workers sharing a broker, as on separate hosts it does by default."""
    command = celery_command(
        "worker",
        "-Q",
        ",".join(queues),
        "-P",
        "threads",
        "-c",
        str(concurrency),
        "-l",
        loglevel,
        "--without-mingle",
        "--without-gossip",
    )
    if consumers is not None:
        command += ["--stream-consumers", str(consumers)]
    if hostname is not None:
        command += ["-n", hostname]
    return command


def beat_command(settings: Settings) -> list[str]:
    schedule = settings.data_dir / "celerybeat-schedule"
    return celery_command("beat", "-l", "INFO", "--schedule", str(schedule))


def flower_command(settings: Settings) -> list[str]:
    """Flower with no credentials on its command line (anyone can read those in `ps`): it
    takes them from ENGRAM_FLOWER_* in its environment and puts every path behind them
    (workers/flower_auth.py)."""
    return celery_command(
        "flower", f"--address={settings.flower_address}", f"--port={settings.flower_port}"
    )


def api_command(settings: Settings) -> list[str]:
    return [
        sys.executable,
        "-m",
        "uvicorn",
        "--factory",
        "app.api.app:create_app",
        "--host",
        settings.api_host,
        "--port",
        str(settings.api_port),
    ]


@dataclass
class ProcessGroup:
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(
        self, command: list[str], env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        process = subprocess.Popen(command, env={**os.environ, **(env or {})})
        self.processes.append(process)
        return process

    def stop(self, timeout: float = 30) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.processes.clear()

    def wait_any(self) -> int:
        """Block until one process exits; returns its exit code."""
        while True:
            for process in self.processes:
                code = process.poll()
                if code is not None:
                    return code
            try:
                self.processes[0].wait(timeout=1)
            except subprocess.TimeoutExpired:
                continue


def upgrade_and_announce(revision: str = "head") -> None:
    """`services start`, `up`, `demo`: migrate the configured database, then record its
    deployment id in Redis for producers without a database (app/deployment.py)."""
    from app.db.migrate import upgrade
    from app.deployment import announce_quietly

    upgrade(revision=revision)
    announce_quietly(get_settings())


def announce_deployment() -> None:
    """After `engram migrate`: record the deployment id in Redis (see upgrade_and_announce)."""
    from app.deployment import announce_quietly

    announce_quietly(get_settings())


def fresh_database(settings: Settings) -> Services:
    """Services with `settings.database_name` recreated empty and migrated to head (tests,
    benchmarks). With a DATABASE_URL the database is only migrated, never dropped."""
    from app.db.bootstrap import drop_database
    from app.db.migrate import upgrade

    started_here = False
    if not settings.database_url:
        started_here = embedded_postgres.ensure_running(settings.data_dir).started_here
        drop_database(settings.database_name, settings)
    services = ensure_services(settings)
    services.started_postgres = services.started_postgres or started_here
    upgrade()
    return services
