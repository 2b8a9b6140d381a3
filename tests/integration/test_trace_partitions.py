"""One user's reads of the trace touch one partition of it: episodic.turns is partitioned by
hash of (tenant, user), and every read path of a search names the user (under the tenant's
row-level security), so Postgres prunes the other partitions, the HNSW graphs included.

The dense leg's own vectors are not planted: where they live is the dense leg's business;
that it reads one slot of the user's partitions, with either plan, is what is checked here.
Counted from the backend's own scan statistics (`pg_stat_get_xact_numscans`, per table and
per index) before and after the reads, so what is measured is what ran, the owner-run
full-text probe too.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from app.db import nearest as nearest_module
from app.db.session import unit_of_work
from app.layers.episodic import claims
from app.layers.episodic.models import TURN_PARTITIONS
from app.layers.episodic.search import (
    TurnFilter,
    dense_candidates,
    lexical_candidates,
    turn_facts,
    turn_window,
    turns_by_id,
)

DIM = 384
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
WORDS = ("lisbon", "offsite", "budget", "venue", "flights", "seafood", "invitations")


def _plant(tenant: str, users: list[str], per_user: int) -> dict[str, list[uuid.UUID]]:
    ids: dict[str, list[uuid.UUID]] = {}
    with unit_of_work(tenant) as session:
        for user in users:
            sid = uuid.uuid4()
            session.execute(
                text(
                    "INSERT INTO episodic.sessions (id, tenant_id, user_id, started_at,"
                    " last_turn_at) VALUES (:id, :t, :u, :at, :at)"
                ),
                {"id": sid, "t": tenant, "u": user, "at": T0},
            )
            ids[user] = []
            for n in range(per_user):
                turn = uuid.uuid4()
                ids[user].append(turn)
                session.execute(
                    text(
                        "INSERT INTO episodic.turns (id, tenant_id, user_id, session_id,"
                        " external_id, role, speaker, content, channel, occurred_at,"
                        " token_count, salience) VALUES (:id, :t, :u, :s, :e,"
                        " 'user', 'Ana', :c, 'web', :at, 8, 0.5)"
                    ),
                    {
                        "id": turn,
                        "t": tenant,
                        "u": user,
                        "s": sid,
                        "e": f"{user}-{n}",
                        "c": f"{user} talks about the {WORDS[n % len(WORDS)]} plan {n}",
                        "at": T0 + timedelta(minutes=n),
                    },
                )
    return ids


def _partition_of(session: Session, user: str) -> str:
    """The user's hash slot (`_pNN`): the same in every table partitioned like the trace."""
    return str(
        session.scalar(
            text("SELECT tableoid::regclass::text FROM episodic.turns WHERE user_id = :u LIMIT 1"),
            {"u": user},
        )
    )[-4:]


def _scans(session: Session) -> dict[str, int]:
    """Scans of each partition of the user-partitioned episodic tables (the trace, and any
    table partitioned like it), the table or any of its indexes, counted by this backend
    since its statistics were last flushed (never inside a transaction)."""
    rows = session.execute(
        text(
            "SELECT c.oid::regclass::text, pg_stat_get_xact_numscans(c.oid) + coalesce((SELECT"
            " sum(pg_stat_get_xact_numscans(x.indexrelid)) FROM pg_index AS x"
            " WHERE x.indrelid = c.oid), 0) FROM pg_partitioned_table AS pt"
            " JOIN pg_inherits AS i ON i.inhparent = pt.partrelid"
            " JOIN pg_class AS c ON c.oid = i.inhrelid"
            " WHERE pt.partstrat = 'h' AND pt.partrelid::regclass::text LIKE 'episodic.%'"
        )
    ).all()
    return {name: int(n) for name, n in rows}


def _scanned_since(session: Session, before: dict[str, int]) -> set[str]:
    """Which of the 16 hash slots (`_pNN`) were read since `before`, in any of the tables."""
    return {name[-4:] for name, n in _scans(session).items() if n > before.get(name, 0)}


@pytest.mark.parametrize("walk", [False, True], ids=["sorted", "hnsw"])
def test_one_users_search_reads_touch_one_partition(
    tenant: str, walk: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    users = [f"user-{n}" for n in range(24)]
    ids = _plant(tenant, users, per_user=6)
    if walk:  # a threshold of 1 row: the dense leg walks its partition's HNSW index
        monkeypatch.setattr(nearest_module, "SMALLEST_TABLE", 1)
        monkeypatch.setattr(nearest_module, "CROSSOVER", 1e-9)
    rng = np.random.default_rng(12)
    with unit_of_work(tenant) as session:
        theirs = {_partition_of(session, user) for user in users}
        mine = _partition_of(session, "user-0")
        assert len(theirs) > 1, "the users spread over several partitions"

    with unit_of_work(tenant) as session:
        before = _scans(session)
        found = turns_by_id(session, tenant, "user-0", ids["user-0"][:3])
        window = turn_window(session, tenant, "user-0", ids["user-0"][2:3], around=1)
        facts = turn_facts(session, tenant, "user-0", ids["user-0"])
        scope = TurnFilter(tenant_id=tenant, user_id="user-0")
        dense = dense_candidates(
            session, scope, rng.normal(size=DIM).tolist(), limit=4, ef_search=40
        )
        lexical = lexical_candidates(session, scope, "the lisbon budget", limit=5)
        scanned = _scanned_since(session, before)

    # No turn has a vector here (the dense leg's plan and pruning are what is measured).
    assert len(found) == 3 and len(window) == 3 and len(facts) == 6
    assert dense == {} and lexical
    assert scanned == {mine}


def test_an_extraction_batch_reads_its_users_partition(tenant: str) -> None:
    ids = _plant(tenant, [f"user-{n}" for n in range(8)], per_user=3)
    batch = uuid.uuid4()
    with unit_of_work(tenant) as session:
        session.execute(
            text(
                "INSERT INTO semantic.extraction_batches (id, tenant_id, user_id, trigger)"
                " VALUES (:id, :t, 'user-3', 'count')"
            ),
            {"id": batch, "t": tenant},
        )
        claimed = claims.claim_turns(
            session=session, tenant_id=tenant, user_id="user-3", batch_id=batch, limit=10
        )
    assert sorted(claimed) == sorted(ids["user-3"])
    with unit_of_work(tenant) as session:
        mine = _partition_of(session, "user-3")
    with unit_of_work(tenant) as session:
        before = _scans(session)
        rows = claims.batch_turns(session=session, batch_id=batch)
        scanned = _scanned_since(session, before)
    assert [r.id for r in rows] == ids["user-3"]
    assert scanned == {mine}


def test_a_call_of_batches_reads_their_users_partitions(tenant: str) -> None:
    """Claiming for several users, and reading several batches' turns and the context
    before them, each in one statement, touch the partitions of those users only."""
    users = [f"user-{n}" for n in range(12)]
    ids = _plant(tenant, users, per_user=4)
    chosen = ["user-2", "user-7"]
    batches = {user: uuid.uuid4() for user in chosen}
    with unit_of_work(tenant) as session:
        theirs = {_partition_of(session, user) for user in chosen}
    with unit_of_work(tenant) as session:
        before = _scans(session)
        claimed = claims.claim_users_turns(
            session=session,
            tenant_id=tenant,
            batches=[(user, batches[user]) for user in chosen],
            limit=2,
        )
        claimed_scans = _scanned_since(session, before)
        session.execute(
            text(
                "INSERT INTO semantic.extraction_batches (id, tenant_id, user_id, trigger)"
                " SELECT b, :t, u, 'count' FROM unnest(CAST(:ids AS uuid[]),"
                " CAST(:users AS text[])) AS r(b, u)"
            ),
            {"t": tenant, "ids": [batches[u] for u in chosen], "users": chosen},
        )
    assert {b: sorted(t) for b, t in claimed.items()} == {
        batches[u]: sorted(ids[u][:2]) for u in chosen
    }
    with unit_of_work(tenant) as session:
        before = _scans(session)
        turns = claims.turns_of_batches(
            session=session, tenant_id=tenant, batches=[(batches[u], u) for u in chosen]
        )
        context = claims.contexts_before(
            session=session,
            tenant_id=tenant,
            points=[claims.Before(u, T0 + timedelta(minutes=3)) for u in chosen],
            limit=10,
        )
        read_scans = _scanned_since(session, before)
    assert {b: [r.id for r in rows] for b, rows in turns.items()} == {
        batches[u]: ids[u][:2] for u in chosen
    }
    assert [[r.id for r in rows] for rows in context] == [ids[u][2::-1] for u in chosen]
    assert claimed_scans <= theirs and read_scans <= theirs


def test_the_partition_count_is_the_migrations(tenant: str) -> None:
    with unit_of_work(tenant) as session:
        count = session.scalar(
            text("SELECT count(*) FROM pg_inherits WHERE inhparent = 'episodic.turns'::regclass")
        )
    assert count == TURN_PARTITIONS
