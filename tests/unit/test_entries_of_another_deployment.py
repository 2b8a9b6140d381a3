"""A worker keeps the entries its own deployment stamped (or nobody did) and refuses others."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from app.streams.deployment import FIELD, foreign_deployment, refuse_foreign, stamped
from app.streams.entries import StreamEntry

OURS = "0123456789abcdef"


def entry(entry_id: str, **fields: str) -> StreamEntry:
    return StreamEntry("s", entry_id, {"event": "{}", **fields})


def test_a_producer_stamps_its_deployment_beside_the_event() -> None:
    assert stamped({"event": "{}"}, OURS) == {"event": "{}", FIELD: OURS}
    assert stamped({"event": "{}"}, None) == {"event": "{}"}


def test_unstamped_and_own_entries_are_kept() -> None:
    assert foreign_deployment(entry("1-0"), OURS) is None
    assert foreign_deployment(entry("1-0", deployment=OURS), OURS) is None


def test_keys_without_a_deployment_check_nothing() -> None:
    assert foreign_deployment(entry("1-0", deployment="fedcba9876543210"), None) is None


@given(st.text(min_size=1, max_size=200).filter(lambda s: s != OURS))
def test_any_other_stamp_is_refused_naming_both(stamp: str) -> None:
    problem = foreign_deployment(entry("1-0", deployment=stamp), OURS)
    assert problem is not None
    assert problem.startswith("DeploymentMismatch")
    assert OURS in problem and repr(stamp[:64]) in problem


def test_refused_entries_are_dead_lettered_and_the_rest_kept_in_order() -> None:
    entries = [
        entry("1-0", deployment=OURS),
        entry("2-0", deployment="fedcba9876543210"),
        entry("3-0"),
    ]
    letters: list[tuple[str, str, int]] = []
    kept = refuse_foreign(entries, OURS, lambda e, error, n: letters.append((e.entry_id, error, n)))
    assert [e.entry_id for e in kept] == ["1-0", "3-0"]
    assert [(i, n) for i, _, n in letters] == [("2-0", 1)]
    assert "fedcba9876543210" in letters[0][1]
