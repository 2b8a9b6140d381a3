"""assign_sessions: idle gaps split sessions, backfill joins its own time, ids replay stably."""

from __future__ import annotations

import itertools
import uuid
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from app.layers.episodic.sessions import SESSION_NAMESPACE, SessionSpan, TurnRef, assign_sessions

IDLE = timedelta(minutes=30)
T0 = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)


def ref(minutes: float, user: str = "alice", channel: str = "web") -> TurnRef:
    at = T0 + timedelta(minutes=minutes)
    return TurnRef(uuid.uuid5(uuid.NAMESPACE_URL, f"{user}/{at.isoformat()}"), user, at, channel)


def span(start_min: float, last_min: float, user: str = "alice") -> SessionSpan:
    return SessionSpan(
        id=uuid.uuid4(),
        user_id=user,
        started_at=T0 + timedelta(minutes=start_min),
        last_turn_at=T0 + timedelta(minutes=last_min),
        channels={"web"},
    )


def test_gap_longer_than_idle_opens_a_new_session() -> None:
    first, second = ref(0), ref(31)
    assignment = assign_sessions([first, second], [], IDLE)
    mapping, touched = assignment.mapping, assignment.touched
    assert mapping[first.id] != mapping[second.id]
    assert len(touched) == 2
    assert all(s.is_new for s in touched)


def test_gap_within_idle_joins_the_session() -> None:
    turns = [ref(0), ref(20), ref(40, channel="sms")]
    assignment = assign_sessions(turns, [], IDLE)
    mapping, touched = assignment.mapping, assignment.touched
    assert len(set(mapping.values())) == 1
    (session,) = touched
    assert session.started_at == turns[0].occurred_at
    assert session.last_turn_at == turns[-1].occurred_at
    assert session.channels == {"web", "sms"}


def test_gap_of_exactly_idle_still_joins() -> None:
    first, second = ref(0), ref(30)
    assignment = assign_sessions([first, second], [], IDLE)
    mapping, _ = assignment.mapping, assignment.touched
    assert mapping[first.id] == mapping[second.id]


def test_turn_within_idle_of_an_existing_session_joins_and_extends_it() -> None:
    existing = span(0, 10)
    late = ref(35)
    assignment = assign_sessions([late], [existing], IDLE)
    mapping, touched = assignment.mapping, assignment.touched
    assert mapping[late.id] == existing.id
    assert touched == [existing]
    assert existing.last_turn_at == late.occurred_at
    assert not existing.is_new


def test_backfilled_turn_older_than_a_session_but_within_idle_of_its_start_joins_it() -> None:
    existing = span(60, 90)
    backfill = ref(40)  # 20 minutes before the session started
    assignment = assign_sessions([backfill], [existing], IDLE)
    mapping, _ = assignment.mapping, assignment.touched
    assert mapping[backfill.id] == existing.id
    assert existing.started_at == backfill.occurred_at
    assert existing.last_turn_at == T0 + timedelta(minutes=90)


def test_backfilled_turn_far_older_than_a_session_gets_its_own() -> None:
    existing = span(60, 90)
    backfill = ref(0)
    assignment = assign_sessions([backfill], [existing], IDLE)
    mapping, touched = assignment.mapping, assignment.touched
    assert mapping[backfill.id] != existing.id
    assert [s.is_new for s in touched] == [True]
    assert existing.started_at == T0 + timedelta(minutes=60)


def test_untouched_sessions_are_not_reported() -> None:
    near, far = span(0, 10), span(600, 610)
    assignment = assign_sessions([ref(20)], [near, far], IDLE)
    _, touched = assignment.mapping, assignment.touched
    assert touched == [near]


def test_users_never_share_a_session() -> None:
    alice, bob = ref(0, user="alice"), ref(1, user="bob")
    assignment = assign_sessions([alice, bob], [span(0, 5, user="alice")], IDLE)
    mapping, _ = assignment.mapping, assignment.touched
    assert mapping[alice.id] != mapping[bob.id]


def test_new_session_id_derives_from_its_first_turn() -> None:
    turns = [ref(5), ref(0), ref(10)]
    assignment = assign_sessions(turns, [], IDLE)
    mapping, _ = assignment.mapping, assignment.touched
    earliest = turns[1]
    assert set(mapping.values()) == {uuid.uuid5(SESSION_NAMESPACE, str(earliest.id))}


def test_replaying_a_batch_maps_to_the_same_sessions() -> None:
    turns = [ref(0), ref(10), ref(100), ref(110, user="bob")]
    assignment = assign_sessions(turns, [], IDLE)
    first, touched = assignment.mapping, assignment.touched
    assignment = assign_sessions(list(reversed(turns)), [], IDLE)
    fresh_replay, _ = assignment.mapping, assignment.touched
    assert fresh_replay == first
    stored = [
        SessionSpan(s.id, s.user_id, s.started_at, s.last_turn_at, set(s.channels)) for s in touched
    ]
    assignment = assign_sessions(turns, stored, IDLE)
    replay_after_commit, retouched = assignment.mapping, assignment.touched
    assert replay_after_commit == first
    assert not any(s.is_new for s in retouched)


def test_backfilled_turn_bridging_two_sessions_merges_them() -> None:
    early, late = span(0, 10), span(60, 70)
    bridge = ref(35)  # 25 min after `early`, 25 min before `late`
    assignment = assign_sessions([bridge], [early, late], IDLE)
    assert assignment.merged == {late.id: early.id}
    assert assignment.mapping == {bridge.id: early.id}
    assert [s.id for s in assignment.touched] == [early.id]
    kept = assignment.touched[0]
    assert (kept.started_at, kept.last_turn_at) == (early.started_at, late.last_turn_at)


# -- properties ---------------------------------------------------------------------------------

turn_batches = st.lists(
    st.tuples(
        st.sampled_from(["alice", "bob", "carol"]),
        st.integers(min_value=0, max_value=24 * 60),
        st.sampled_from(["web", "sms"]),
    ),
    min_size=1,
    max_size=40,
    unique_by=lambda t: (t[0], t[1]),
)


@given(batch=turn_batches, idle_min=st.integers(min_value=1, max_value=180))
def test_every_turn_is_mapped_and_sessions_have_no_gap_over_idle(
    batch: list[tuple[str, int, str]], idle_min: int
) -> None:
    idle = timedelta(minutes=idle_min)
    turns = [ref(minute, user=user, channel=channel) for user, minute, channel in batch]
    assignment = assign_sessions(turns, [], idle)
    mapping, touched = assignment.mapping, assignment.touched

    assert set(mapping) == {t.id for t in turns}
    sessions = {s.id: s for s in touched}
    assert set(mapping.values()) == set(sessions)

    by_session: dict[uuid.UUID, list[TurnRef]] = {}
    for t in turns:
        by_session.setdefault(mapping[t.id], []).append(t)
    for session_id, members in by_session.items():
        members.sort(key=lambda t: t.occurred_at)
        session = sessions[session_id]
        assert {t.user_id for t in members} == {session.user_id}
        assert session.started_at == members[0].occurred_at
        assert session.last_turn_at == members[-1].occurred_at
        for before, after in itertools.pairwise(members):
            assert after.occurred_at - before.occurred_at <= idle

    # A user's sessions are separated by more than idle (otherwise they should be one).
    for user in {t.user_id for t in turns}:
        spans = sorted((s for s in touched if s.user_id == user), key=lambda s: s.started_at)
        for before, after in itertools.pairwise(spans):
            assert after.started_at - before.last_turn_at > idle
