"""A turn's full-text key holds its session neighbours' words (app/layers/episodic/
context_words.py), over real Postgres and Redis: set when turns are claimed for extraction,
reset when a turn arrives between two others (also one that merges two sessions) or is
deleted (a deletion waits for a claim that read the deleted turn), never across a session, a
user or a tenant; a turn's own words outrank borrowed ones."""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from app.config import Settings
from app.db.session import unit_of_work
from app.embedding.factory import get_embedder
from app.layers.episodic import claims, context_words
from app.layers.episodic import clear as episodic_clear
from app.layers.episodic.search import TurnFilter, lexical_candidates
from app.services.attention import score_users
from tests.integration.test_hybrid_search import ingest, say

T0 = datetime(2024, 3, 4, 18, 0, tzinfo=UTC)


@pytest.fixture
def embedder(settings: Settings, redis_client: Any) -> Any:
    return get_embedder(settings, redis_client)


def arrive(
    settings: Settings,
    client: Any,
    embedder: Any,
    tenant: str,
    user: str,
    lines: dict[int, tuple[datetime, str]],
) -> None:
    """Ingest turns `user-<n>`, score them and claim them for extraction, as the workers do."""
    ingest(settings, client, [say(tenant, user, n, line, at=at) for n, (at, line) in lines.items()])
    score_users(
        settings=settings, client=client, embedder=embedder, tenant_id=tenant, user_ids=[user]
    )
    with unit_of_work(tenant) as session:
        claims.claim_turns(
            session=session, tenant_id=tenant, user_id=user, batch_id=uuid.uuid4(), limit=100
        )


def keys(tenant: str, user: str) -> dict[str, tuple[set[str], set[str]]]:
    """external id → (own lexemes, borrowed lexemes) of the user's turns."""
    with unit_of_work(tenant) as session:
        rows = session.execute(
            text(
                "SELECT t.external_id, u.lexeme, u.weights FROM episodic.turns AS t,"
                " unnest(t.search_tsv) AS u WHERE t.user_id = :user"
            ),
            {"user": user},
        ).all()
    found: dict[str, tuple[set[str], set[str]]] = {}
    for external_id, lexeme, weights in rows:
        own, borrowed = found.setdefault(external_id, (set(), set()))
        if "D" in weights:
            own.add(lexeme)
        if "C" in weights:
            borrowed.add(lexeme)
    return found


def assert_sugar_stands_between(tenant: str) -> None:
    """alice-1 ("sugar") is the only neighbour of alice-0 ("citron") and of alice-2
    ("harbour"), which are no longer each other's."""
    found = keys(tenant, "alice")
    assert "sugar" in found["alice-0"][1] and "harbour" not in found["alice-0"][1]
    assert "sugar" in found["alice-2"][1] and "citron" not in found["alice-2"][1]
    assert {"citron", "harbour"} <= found["alice-1"][1]


LINES = {
    0: (T0, "Got some lemon citron tea I can make"),
    1: (T0 + timedelta(minutes=1), "I like it with lots of sugar"),
    2: (T0 + timedelta(minutes=2), "The quarterly report is due on Friday"),
}


def test_claimed_turns_borrow_the_words_of_the_turns_beside_them(
    settings: Settings, redis_client: Any, embedder: Any, tenant: str
) -> None:
    arrive(settings, redis_client, embedder, tenant, "alice", LINES)
    found = keys(tenant, "alice")
    assert {"lemon", "citron", "sugar"} <= found["alice-0"][0] | found["alice-0"][1]
    assert "sugar" in found["alice-0"][1] and "report" not in found["alice-0"][1]
    assert {"lemon", "citron", "report", "friday"} <= found["alice-1"][1]
    assert "sugar" in found["alice-2"][1] and "citron" not in found["alice-2"][1]
    # The speaker's name is the turn's own word; the neighbour's name is borrowed.
    assert "alic" in found["alice-0"][0] and "assist" in found["alice-0"][1]


def test_a_turn_is_found_by_its_neighbours_words_below_the_turn_that_says_them(
    settings: Settings, redis_client: Any, embedder: Any, tenant: str
) -> None:
    arrive(settings, redis_client, embedder, tenant, "alice", LINES)
    with unit_of_work(tenant) as session:
        scores = lexical_candidates(session, TurnFilter(tenant, "alice"), "citron tea", limit=10)
        ids = dict(
            session.execute(
                text("SELECT id, external_id FROM episodic.turns WHERE user_id = 'alice'")
            ).all()
        )
    by_name = {ids[turn]: score for turn, score in scores.items()}
    assert set(by_name) == {"alice-0", "alice-1"}
    assert by_name["alice-0"] > by_name["alice-1"] > 0


def test_a_turn_arriving_between_two_becomes_their_neighbour(
    settings: Settings, redis_client: Any, embedder: Any, tenant: str
) -> None:
    first = {0: LINES[0], 2: (T0 + timedelta(minutes=2), "The harbour lights at dusk")}
    arrive(settings, redis_client, embedder, tenant, "alice", first)
    assert "harbour" in keys(tenant, "alice")["alice-0"][1]
    late = {1: (T0 + timedelta(minutes=1), "I like it with lots of sugar")}
    arrive(settings, redis_client, embedder, tenant, "alice", late)
    assert_sugar_stands_between(tenant)


def test_a_deleted_turns_words_leave_its_neighbours(
    settings: Settings, redis_client: Any, embedder: Any, tenant: str
) -> None:
    arrive(settings, redis_client, embedder, tenant, "alice", LINES)
    with unit_of_work(tenant) as session:
        doomed = session.execute(
            text("SELECT id FROM episodic.turns WHERE external_id = 'alice-1'")
        ).scalar_one()
        episodic_clear.delete_turns(
            session=session, tenant_id=tenant, user_id="alice", turn_ids=[doomed]
        )
    found = keys(tenant, "alice")
    assert "alice-1" not in found
    for external_id in ("alice-0", "alice-2"):
        own, borrowed = found[external_id]
        assert "sugar" not in own | borrowed
    assert "report" in found["alice-0"][1] and "citron" in found["alice-2"][1]


def test_a_turn_that_bridges_two_sessions_joins_their_edges(
    settings: Settings, redis_client: Any, embedder: Any, tenant: str
) -> None:
    gap = timedelta(seconds=settings.session_idle_timeout_s)
    apart = {
        0: (T0, "Got some lemon citron tea I can make"),
        2: (T0 + gap * 1.6, "The harbour lights at dusk"),
    }
    arrive(settings, redis_client, embedder, tenant, "alice", apart)
    found = keys(tenant, "alice")
    assert not found["alice-0"][1] and not found["alice-2"][1]  # two sessions
    # A late turn within the idle time of both merges the sessions; its claim rekeys both edges.
    bridge = {1: (T0 + gap * 0.8, "I like it with lots of sugar")}
    arrive(settings, redis_client, embedder, tenant, "alice", bridge)
    with unit_of_work(tenant) as session:
        sessions = session.execute(
            text("SELECT count(DISTINCT session_id) FROM episodic.turns WHERE user_id = 'alice'")
        ).scalar_one()
    assert sessions == 1
    assert_sugar_stands_between(tenant)


def test_words_are_never_borrowed_across_sessions_users_or_tenants(
    settings: Settings, redis_client: Any, embedder: Any, tenant: str
) -> None:
    other_tenant = f"{tenant}-b"
    arrive(settings, redis_client, embedder, tenant, "alice", LINES)
    # Another user of the tenant, the same user id in another tenant, at the same times.
    for owner_tenant, user in ((tenant, "bob"), (other_tenant, "alice")):
        lines = {n: (at, f"secret walnut number {n}") for n, (at, _) in LINES.items()}
        arrive(settings, redis_client, embedder, owner_tenant, user, lines)
    # A day later: a new session of alice's, whose first turn borrows nothing from before.
    later = {3: (T0 + timedelta(days=1), "Morning swim at the lido")}
    arrive(settings, redis_client, embedder, tenant, "alice", later)
    found = keys(tenant, "alice")
    assert all("walnut" not in own | borrowed for own, borrowed in found.values())
    assert not found["alice-3"][1]
    assert "swim" not in found["alice-2"][1]
    assert "walnut" in keys(tenant, "bob")["bob-1"][1]


def test_a_deletion_waits_for_a_claim_that_read_the_deleted_turn(
    settings: Settings, redis_client: Any, embedder: Any, tenant: str
) -> None:
    arrive(settings, redis_client, embedder, tenant, "alice", LINES)
    with unit_of_work(tenant) as session:
        ids = dict(
            session.execute(
                text("SELECT external_id, id FROM episodic.turns WHERE user_id = 'alice'")
            ).all()
        )
    deleted = threading.Event()
    with unit_of_work(tenant) as claiming:
        # A claim rekeys alice-0 while alice-1 still stands, and has not committed yet.
        context_words.rekey(
            session=claiming,
            tenant_id=tenant,
            user_id="alice",
            turn_ids=[ids["alice-0"]],
            neighbours=False,
        )

        def delete() -> None:
            with unit_of_work(tenant) as session:
                episodic_clear.delete_turns(
                    session=session, tenant_id=tenant, user_id="alice", turn_ids=[ids["alice-1"]]
                )
            deleted.set()

        thread = threading.Thread(target=delete)
        thread.start()
        assert not deleted.wait(1.0)  # the deletion waits for the claim's lock on alice-0
    thread.join(30)
    assert deleted.is_set()
    own, borrowed = keys(tenant, "alice")["alice-0"]
    assert "sugar" not in own | borrowed and "report" in borrowed
