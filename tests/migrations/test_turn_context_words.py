"""The turn_context_words revision: existing turns borrow their session neighbours' words (in
message order: time, then arrival), the match ranks a turn saying a word above one borrowing
it, the session walk reads its index in order, and the downgrade gives the old keys back."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Connection, text

from app.config import Settings
from app.db.migrate import downgrade, upgrade
from app.db.session import unit_of_work
from tests.migrations.test_tenant_keys_and_partitions import Scratch, scratch_database

BEFORE = "d9a2b7e4c1f6"
REVISION = "e4b8c2d7a1f3"
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
# (tenant, user, external id, seconds after T0, stream entry id, text): alice's first two
# turns share a time and keep their arrival order; bob's turn sits between them in time.
TURNS = (
    ("ta", "alice", "a1", 0, "1714564800000-1", "the harbour at dusk"),
    ("ta", "alice", "a0", 0, "1714564800000-0", "my grandmother's lighthouse"),
    ("ta", "alice", "a2", 60, "1714564860000-0", "lanterns along the quay"),
    ("ta", "bob", "b0", 30, "1714564830000-0", "walnut cake recipe"),
)


@pytest.fixture
def scratch(base_settings: Settings) -> Iterator[Scratch]:
    with scratch_database(base_settings, "context_words", BEFORE, _fill) as database:
        yield database


def _fill(conn: Connection) -> None:
    sessions = {}
    for tenant, user in {(t[0], t[1]) for t in TURNS}:
        sessions[user] = conn.execute(
            text(
                "INSERT INTO episodic.sessions (id, tenant_id, user_id, started_at, last_turn_at)"
                " VALUES (gen_random_uuid(), :t, :u, :at, :at) RETURNING id"
            ),
            {"t": tenant, "u": user, "at": T0},
        ).scalar_one()
    for tenant, user, external_id, seconds, entry, content in TURNS:
        conn.execute(
            text(
                "INSERT INTO episodic.turns (id, tenant_id, user_id, session_id, external_id,"
                " role, speaker, content, channel, occurred_at, token_count, stream_entry_id)"
                " VALUES (gen_random_uuid(), :t, :u, :s, :e, 'user', NULL, :c, 'chat', :at, 4,"
                " :entry)"
            ),
            {
                "t": tenant,
                "u": user,
                "s": sessions[user],
                "e": external_id,
                "c": content,
                "at": T0 + timedelta(seconds=seconds),
                "entry": entry,
            },
        )


def _keys(scratch: Scratch) -> dict[str, str]:
    with unit_of_work("ta", engine=scratch.app) as session:
        rows = session.execute(
            text("SELECT external_id, CAST(search_tsv AS text) FROM episodic.turns")
        ).all()
    return dict(rows)


def _turn_indexes(scratch: Scratch) -> set[str]:
    with scratch.owner.connect() as conn:
        return set(
            conn.execute(
                text("SELECT indexname FROM pg_indexes WHERE tablename = 'turns'")
            ).scalars()
        )


def test_existing_turns_borrow_their_neighbours_words_in_message_order(scratch: Scratch) -> None:
    before = _keys(scratch)
    upgrade(scratch.url, REVISION)
    keys = _keys(scratch)
    for name in ("a0", "a1", "a2"):  # own words and their positions stay as they were
        assert set(before[name].split()) <= set(keys[name].split())
    assert "'harbour':" in keys["a0"]
    assert "'lantern'" not in keys["a0"]  # a2 is two messages away
    assert "'lighthous':" in keys["a1"] and "'lantern':" in keys["a1"]
    assert "'harbour':" in keys["a2"] and "'grandmoth'" not in keys["a2"]
    assert all("walnut" not in keys[k] for k in ("a0", "a1", "a2"))
    assert keys["b0"] == before["b0"]  # alone in its session
    with unit_of_work("ta", engine=scratch.app) as session:
        ranked = session.execute(
            text(
                "SELECT t.external_id FROM episodic.match_turns('ta', 'alice',"
                " to_tsquery('english', 'harbour'), 10, NULL, NULL, NULL) AS m"
                " JOIN episodic.turns AS t ON t.id = m.id"
            )
        ).scalars()
        assert next(iter(ranked)) == "a1"
    names = _turn_indexes(scratch)
    assert "ix_turns_session_order" in names and "ix_turns_session_occurred" not in names


def test_the_downgrade_gives_the_old_keys_back(scratch: Scratch) -> None:
    before = _keys(scratch)
    upgrade(scratch.url, REVISION)
    downgrade(scratch.url, BEFORE)
    assert _keys(scratch) == before
    names = _turn_indexes(scratch)
    assert "ix_turns_session_occurred" in names and "ix_turns_session_order" not in names
