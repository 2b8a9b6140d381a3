"""The attention competition: windows per user, winners, and routing by the two thresholds."""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.config import Settings
from app.scoring.attention import (
    AttentionOutcome,
    Candidate,
    compete,
    compete_with_settings,
    windows,
)

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
RULES = {"window_s": 5.0, "consolidate_threshold": 0.55, "forget_threshold": 0.2}


def cand(
    turn: str, at_s: float, salience: float, user: str = "u1", tenant: str = "t1"
) -> Candidate:
    return Candidate(turn, tenant, user, T0 + timedelta(seconds=at_s), salience)


def ids(cands: tuple[Candidate, ...]) -> list[str]:
    return [c.turn_id for c in cands]


# -- winners --------------------------------------------------------------------------------------


def test_one_winner_per_window_and_routing() -> None:
    out = compete([cand("a", 0, 0.6), cand("b", 1, 0.9), cand("c", 2, 0.1)], **RULES)
    assert ids(out.consolidate) == ["b"]
    assert ids(out.keep) == ["a"]  # a loser, but not below the forget threshold
    assert ids(out.forget) == ["c"]


def test_only_the_best_of_two_salient_turns_is_consolidated() -> None:
    out = compete([cand("a", 0, 0.8), cand("b", 4.9, 0.9)], **RULES)
    assert ids(out.consolidate) == ["b"]
    assert ids(out.keep) == ["a"]


def test_ties_go_to_the_earlier_turn_then_the_smaller_id() -> None:
    out = compete([cand("b", 1, 0.7), cand("a", 2, 0.7)], **RULES)
    assert ids(out.consolidate) == ["b"]
    out = compete([cand("b", 1, 0.7), cand("a", 1, 0.7)], **RULES)
    assert ids(out.consolidate) == ["a"]


def test_more_winners_per_window() -> None:
    turns = [cand("a", 0, 0.9), cand("b", 1, 0.8), cand("c", 2, 0.7), cand("d", 3, 0.1)]
    out = compete(turns, **RULES, winners_per_window=3)
    assert ids(out.consolidate) == ["a", "b", "c"]
    assert ids(out.forget) == ["d"]


# -- users ----------------------------------------------------------------------------------------


def test_users_never_compete_with_each_other() -> None:
    out = compete(
        [
            cand("a1", 0, 0.9, user="alice"),
            cand("b1", 0.5, 0.6, user="bob"),
            cand("b2", 1, 0.1, user="bob"),
        ],
        **RULES,
    )
    assert ids(out.consolidate) == ["a1", "b1"]
    assert ids(out.forget) == ["b2"]


def test_the_same_user_id_in_two_tenants_is_two_users() -> None:
    out = compete([cand("x", 0, 0.9, tenant="t1"), cand("y", 1, 0.8, tenant="t2")], **RULES)
    assert ids(out.consolidate) == ["x", "y"]


# -- windows --------------------------------------------------------------------------------------


def test_windows_split_at_window_s() -> None:
    turns = [cand(str(i), at, 0.9) for i, at in enumerate([0, 4.999, 5.0, 9.9, 10.0])]
    out = compete(turns, **RULES)
    assert ids(out.consolidate) == ["0", "2", "4"]
    assert ids(out.keep) == ["1", "3"]


def test_windows_are_anchored_at_their_first_candidate_not_the_clock() -> None:
    turns = [cand(str(i), at, 0.5) for i, at in enumerate([0, 4, 7, 11])]
    assert [[c.turn_id for c in w] for w in windows(turns, 5.0)] == [["0", "1"], ["2", "3"]]


def test_a_quiet_user_gets_a_window_per_turn() -> None:
    turns = [cand(str(i), 60 * i, 0.6) for i in range(4)]
    assert ids(compete(turns, **RULES).consolidate) == ["0", "1", "2", "3"]


def test_naive_times_are_utc_and_input_order_does_not_matter() -> None:
    naive = Candidate("n", "t1", "u1", (T0 + timedelta(seconds=1)).replace(tzinfo=None), 0.9)
    turns = [cand("a", 0, 0.9), naive, cand("b", 6, 0.3)]
    out = compete(turns, **RULES)
    assert out == compete(list(reversed(turns)), **RULES)
    assert ids(out.consolidate) == ["a"]  # tied with "n" one second later: earlier wins
    assert ids(out.keep) == ["n", "b"]


# -- thresholds -----------------------------------------------------------------------------------


def test_thresholds_are_inclusive_for_consolidation_and_strict_for_forgetting() -> None:
    out = compete([cand("w", 0, 0.55), cand("l", 1, 0.2)], **RULES)
    assert ids(out.consolidate) == ["w"]
    assert ids(out.keep) == ["l"]


def test_a_weak_winner_is_kept_not_forgotten() -> None:
    out = compete([cand("w", 0, 0.05), cand("l", 1, 0.01)], **RULES)
    assert ids(out.keep) == ["w"]
    assert ids(out.forget) == ["l"]


def test_settings_drive_compete_with_settings() -> None:
    settings = Settings(
        attention_window_s=10.0,
        attention_winners_per_window=2,
        attention_consolidate_threshold=0.5,
        attention_forget_threshold=0.3,
    )
    turns = [cand("a", 0, 0.9), cand("b", 6, 0.6), cand("c", 7, 0.25)]
    out = compete_with_settings(turns, settings)
    assert (ids(out.consolidate), ids(out.keep), ids(out.forget)) == (["a", "b"], [], ["c"])


def test_settings_defaults() -> None:
    fields = Settings.model_fields
    assert fields["attention_window_s"].default == 5.0
    assert fields["attention_winners_per_window"].default == 1
    assert fields["attention_consolidate_threshold"].default == 0.55
    assert fields["attention_forget_threshold"].default == 0.2


# -- bad input ------------------------------------------------------------------------------------


def test_empty_input() -> None:
    assert compete([], **RULES) == AttentionOutcome()


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"window_s": 0.0}, "window_s"),
        ({"window_s": math.inf}, "window_s"),
        ({"consolidate_threshold": 1.5}, "consolidate_threshold"),
        ({"forget_threshold": math.nan}, "forget_threshold"),
        ({"winners_per_window": 0}, "winners_per_window"),
    ],
)
def test_bad_parameters_name_the_field(override: dict[str, float], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        compete([cand("a", 0, 0.5)], **{**RULES, **override})  # type: ignore[arg-type]


@pytest.mark.parametrize("salience", [-0.1, 1.1, math.nan])
def test_bad_salience_is_refused(salience: float) -> None:
    with pytest.raises(ValueError, match="salience"):
        cand("a", 0, salience)


def test_duplicate_turns_are_refused() -> None:
    with pytest.raises(ValueError, match="duplicate"):
        compete([cand("a", 0, 0.5), cand("a", 1, 0.6)], **RULES)


# -- properties -----------------------------------------------------------------------------------


def reference_winners(
    cands: list[Candidate], window_s: float, per_window: int
) -> set[tuple[str, str]]:
    """A naive oracle: per (tenant, user), time-ordered, windows anchored at their first turn."""
    winners: set[tuple[str, str]] = set()
    users = {(c.tenant_id, c.user_id) for c in cands}
    for user in users:
        mine = sorted(
            (c for c in cands if (c.tenant_id, c.user_id) == user), key=lambda c: (c.at, c.turn_id)
        )
        groups: list[list[Candidate]] = []
        for c in mine:
            if groups and (c.at - groups[-1][0].at).total_seconds() < window_s:
                groups[-1].append(c)
            else:
                groups.append([c])
        for group in groups:
            best = sorted(group, key=lambda c: (-c.salience, c.at, c.turn_id))[:per_window]
            winners.update((c.tenant_id, c.turn_id) for c in best)
    return winners


@st.composite
def candidate_lists(draw: st.DrawFn) -> list[Candidate]:
    rows = draw(
        st.lists(
            st.tuples(
                st.sampled_from(["t1", "t2"]),
                st.sampled_from(["alice", "bob", "carol"]),
                st.integers(min_value=0, max_value=60_000),
                st.floats(min_value=0.0, max_value=1.0) | st.sampled_from([0.0, 0.2, 0.55, 1.0]),
            ),
            max_size=40,
        )
    )
    return [
        Candidate(f"turn-{i}", tenant, user, T0 + timedelta(milliseconds=ms), salience)
        for i, (tenant, user, ms, salience) in enumerate(rows)
    ]


thresholds = st.floats(min_value=0.0, max_value=1.0) | st.sampled_from([0.0, 0.2, 0.55, 1.0])


@given(
    candidate_lists(),
    st.floats(min_value=0.001, max_value=30.0),
    thresholds,
    thresholds,
    st.integers(min_value=1, max_value=4),
    st.randoms(use_true_random=False),
)
def test_the_outcome_partitions_the_candidates(
    cands: list[Candidate],
    window_s: float,
    consolidate_at: float,
    forget_below: float,
    per_window: int,
    rng: random.Random,
) -> None:
    rules = {
        "window_s": window_s,
        "consolidate_threshold": consolidate_at,
        "forget_threshold": forget_below,
        "winners_per_window": per_window,
    }
    out = compete(cands, **rules)  # type: ignore[arg-type]
    routed = [*out.consolidate, *out.keep, *out.forget]
    assert sorted(routed, key=lambda c: c.turn_id) == sorted(cands, key=lambda c: c.turn_id)

    winners = reference_winners(cands, window_s, per_window)
    for c in out.consolidate:
        assert (c.tenant_id, c.turn_id) in winners  # a loser is never consolidated
        assert c.salience >= consolidate_at
    for c in out.forget:
        assert (c.tenant_id, c.turn_id) not in winners  # a winner is never forgotten
        assert c.salience < forget_below
    for c in out.keep:
        won = (c.tenant_id, c.turn_id) in winners
        assert (won and c.salience < consolidate_at) or (not won and c.salience >= forget_below)

    shuffled = list(cands)
    rng.shuffle(shuffled)
    assert compete(shuffled, **rules) == out  # type: ignore[arg-type]
