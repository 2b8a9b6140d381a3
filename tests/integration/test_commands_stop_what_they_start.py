"""Commands leave the machine as they found it, with real processes.

One-shot commands (`migrate`, `tenant`, `key`, `status`) stop the embedded Postgres they had
to start and leave one that was running; `engram up` stops its worker, beat, API, Flower and
the Postgres it started on SIGTERM (systemd, `docker stop`) as on Ctrl-C; `engram services
stop` stops this checkout's embedded Redis only, never another checkout's.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from app.config import PROJECT_ROOT, Settings
from app.embedded import postgres as embedded_postgres
from app.embedded import redis as embedded_redis
from app.redis_client import get_redis
from tests.integration.helpers import wait_for

pytestmark = pytest.mark.slow

# What the checkout's own configuration would be: no URLs, its own data folder.
UNSET = ("DATABASE_URL", "APP_DATABASE_URL", "ENGRAM_DATABASE_NAME", "ENGRAM_DATA_DIR")


@dataclass(frozen=True)
class Checkout:
    data_dir: Path
    prefix: str

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in UNSET}
        env.update(
            {
                "ENGRAM_DATA_DIR": str(self.data_dir),
                "ENGRAM_REDIS_PREFIX": self.prefix,
                "ENGRAM_DATABASE_NAME": "engram",
            }
        )
        env.update(extra)
        return env


def engram(checkout: Checkout, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from app.cli import main; main()", *args],
        cwd=PROJECT_ROOT,
        env=checkout.env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(parent, []).append(int(entry.name))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _cleanup(data_dir: Path) -> None:
    embedded_postgres.stop(data_dir)
    embedded_redis.stop(data_dir)
    shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def checkout(base_settings: Settings) -> Iterator[Checkout]:
    """A data folder of its own: its own embedded cluster (and Redis, if 6379 is silent)."""
    if base_settings.database_url:
        pytest.skip("about the embedded services")
    data_dir = base_settings.data_dir / f"firsthour-{uuid.uuid4().hex[:8]}"
    found = Checkout(data_dir, f"test-cmd-{uuid.uuid4().hex[:8]}")
    yield found
    _cleanup(data_dir)
    client = get_redis(base_settings)
    keys = list(client.scan_iter(match=f"{found.prefix}:*", count=1000))
    if keys:
        client.delete(*keys)


def _nothing_of_ours_runs(checkout: Checkout) -> bool:
    return not embedded_postgres.is_running(checkout.data_dir) and (
        embedded_redis.owned_url(checkout.data_dir) is None
    )


def test_one_shot_commands_stop_what_they_started(checkout: Checkout) -> None:
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    for args in (["migrate"], ["tenant", "create", tenant], ["key", "list"], ["status"]):
        result = engram(checkout, *args)
        assert result.returncode == 0, (args, result.stdout, result.stderr)
        assert _nothing_of_ours_runs(checkout), args
    assert tenant in engram(checkout, "key", "list", "--tenant", tenant).stdout


def test_one_shot_commands_leave_a_running_server_running(checkout: Checkout) -> None:
    assert engram(checkout, "migrate").returncode == 0
    server = embedded_postgres.ensure_running(checkout.data_dir)
    try:
        for args in (["key", "list"], ["status"]):
            result = engram(checkout, *args)
            assert result.returncode == 0, (args, result.stdout, result.stderr)
            live = embedded_postgres.ensure_running(checkout.data_dir)
            assert (live.pid, live.started_here) == (server.pid, False), args
    finally:
        embedded_postgres.stop(checkout.data_dir)


def test_sigterm_stops_everything_up_started(checkout: Checkout, tmp_path: Path) -> None:
    api_port, flower_port = _free_port(), _free_port()
    env = checkout.env(ENGRAM_API_PORT=str(api_port), ENGRAM_FLOWER_PORT=str(flower_port))
    log = (tmp_path / "up.log").open("wb")
    up = subprocess.Popen(
        [sys.executable, "-c", "from app.cli import main; main()", "up", "--concurrency", "1"],
        cwd=PROJECT_ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    started: set[int] = set()
    try:

        def serving() -> bool:
            try:
                httpx.get(f"http://127.0.0.1:{api_port}/healthz", timeout=2)
                with socket.create_connection(("127.0.0.1", flower_port), timeout=2):
                    pass
            except (httpx.HTTPError, OSError):
                return False
            return len(_descendants(up.pid)) >= 4

        assert wait_for(serving, timeout=180, every=0.5), (tmp_path / "up.log").read_text()
        assert embedded_postgres.is_running(checkout.data_dir)
        postmaster = int(
            (embedded_postgres.data_folder(checkout.data_dir) / "postmaster.pid")
            .read_text()
            .split()[0]
        )
        started = {*_descendants(up.pid), postmaster}

        up.send_signal(signal.SIGTERM)
        assert up.wait(timeout=120) == 0, (tmp_path / "up.log").read_text()
        assert wait_for(lambda: not any(_alive(pid) for pid in started), timeout=30)
        assert _nothing_of_ours_runs(checkout)
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()
        for pid in started:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        embedded_postgres.stop(checkout.data_dir)
        log.close()


@pytest.fixture
def two_checkouts(base_settings: Settings) -> Iterator[tuple[Checkout, Checkout]]:
    made = tuple(
        Checkout(base_settings.data_dir / f"firsthour-{uuid.uuid4().hex[:8]}", "unused")
        for _ in range(2)
    )
    yield made  # type: ignore[misc]
    for checkout in made:
        _cleanup(checkout.data_dir)


def test_services_stop_leaves_another_checkouts_redis_alone(
    two_checkouts: tuple[Checkout, Checkout],
) -> None:
    mine, other = two_checkouts
    my_url, _ = embedded_redis.ensure_running(mine.data_dir)
    other_url, _ = embedded_redis.ensure_running(other.data_dir)
    assert my_url != other_url  # a port of its own per checkout

    result = engram(mine, "services", "stop")
    assert result.returncode == 0, result.stderr
    assert "embedded redis stopped" in result.stdout
    assert not embedded_redis.answers(my_url)
    assert embedded_redis.answers(other_url)

    # Our record now names the other checkout's port (ours died, it took the port): not ours.
    other_port = other_url.rsplit(":", 1)[1].split("/")[0]
    (mine.data_dir / "redis" / "port").write_text(f"{other_port}\n")
    result = engram(mine, "services", "stop")
    assert "embedded redis not running" in result.stdout
    assert embedded_redis.answers(other_url)
    assert embedded_redis.owned_url(other.data_dir) == other_url
