"""Where a root-run embedded cluster may live: only where its OS user can walk, and a cluster
kept outside a checkout goes when its data folder was deleted, not when it is out of sight."""

from __future__ import annotations

import os
from pathlib import Path

from app.embedded.placement import Account, can_search, checkout_id, reachable, sweep

STRANGER = Account("stranger", uid=54_321, gid=54_321, groups=frozenset({54_321}))


def folder(path: Path, mode: int) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(mode)
    return path


def test_a_private_folder_stops_a_stranger_and_a_searchable_one_lets_them_pass(
    tmp_path: Path,
) -> None:
    open_dir = folder(tmp_path / "open", 0o711)
    private = folder(tmp_path / "private", 0o700)
    assert can_search(open_dir, STRANGER)
    assert not can_search(private, STRANGER)
    own = Account("me", uid=os.geteuid(), gid=os.getegid(), groups=frozenset({os.getegid()}))
    assert can_search(private, own)


def test_one_private_folder_on_the_way_makes_the_place_unreachable(tmp_path: Path) -> None:
    inner = folder(folder(tmp_path / "a", 0o700) / "b", 0o755)
    assert can_search(inner, STRANGER)
    assert not reachable(inner, STRANGER)
    assert reachable(Path("/"), STRANGER)


def test_the_name_outside_is_stable_and_per_folder(tmp_path: Path) -> None:
    assert checkout_id(tmp_path / "x") == checkout_id(tmp_path / "x")
    assert checkout_id(tmp_path / "x") != checkout_id(tmp_path / "y")


def test_only_clusters_of_deleted_data_folders_are_swept(tmp_path: Path) -> None:
    base = tmp_path / "system"
    checkouts = tmp_path / "checkouts"
    (checkouts / "kept").mkdir(parents=True)

    def home(name: str, origin: Path, *, running: bool = False) -> Path:
        made = base / name
        (made / "pg").mkdir(parents=True)
        (made / "origin").write_text(f"{origin}\n")
        if running:
            (made / "pg" / "postmaster.pid").write_text("1\n")
        return made

    deleted = home("deleted", checkouts / "gone" / ".engram")
    (checkouts / "gone").mkdir()
    alive = home("alive", checkouts / "kept")
    unmounted = home("unmounted", tmp_path / "mnt" / "disk" / ".engram")
    running = home("running", checkouts / "also-gone" / ".engram", running=True)
    (checkouts / "also-gone").mkdir()
    current = home("current", checkouts / "gone" / "other")

    assert sweep(base, keep=current) == [deleted]
    assert not deleted.exists()
    assert alive.exists() and unmounted.exists() and running.exists() and current.exists()
