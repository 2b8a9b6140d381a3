"""Per-user bound on batches in flight, the drain after each stored batch, and claims that
take a short remainder along; in process (the worker-driven import is in
test_backlog_drains_without_beat.py)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from app.config import Settings
from app.db.session import unit_of_work
from app.extraction.factory import get_extractor
from app.layers.semantic import batches as semantic
from app.services import extraction
from tests.integration.test_backlog_drains_without_beat import Ingest, batches, say, stored_turns


@pytest.fixture
def ingest(settings: Settings, redis_client: Any) -> Ingest:
    return Ingest(settings, redis_client)


def run_chain(settings: Settings, embedder: Any, refs: list[extraction.BatchRef]) -> None:
    extraction.extract(settings, get_extractor(settings), refs)
    extraction.embed(settings, embedder, refs)
    assert extraction.store(settings, embedder, refs).failed == 0


def test_a_busy_user_gets_two_batches_in_flight_and_each_stored_one_claims_the_next(
    settings: Settings, ingest, tenant: str
) -> None:
    small = settings.model_copy(update={"extract_max_batch_turns": 50})
    ingest([say(tenant, "ada", n) for n in range(160)])

    # Every ingest batch of an import fires the N-turn trigger; two claims, then none.
    first = [extraction.claim(small, tenant, {"ada": "turns"}, bounded=True) for _ in range(5)]
    assert [len(refs) for refs in first] == [1, 1, 0, 0, 0]
    assert extraction.drain(small, []).batches == []
    assert [b.turn_count for b in batches(tenant, "ada")] == [50, 50]

    one, two = first[0], first[1]
    run_chain(small, ingest.embedder, one)
    follow = extraction.drain(small, one)
    assert len(follow.batches) == 1 and follow.score == {}
    assert extraction.drain(small, one).batches == []  # a redelivered store: at the bound
    # 60 were left: a full batch, and the 10 after it later (10 ≥ N).
    run_chain(small, ingest.embedder, two)
    last = extraction.drain(small, two).batches
    assert [b.turn_count for b in batches(tenant, "ada")] == [50, 50, 50, 10]
    assert [b.trigger for b in batches(tenant, "ada")] == ["turns", "turns", "drain", "drain"]
    run_chain(small, ingest.embedder, follow.batches + last)
    assert extraction.drain(small, follow.batches + last) == extraction.Drain([], {})
    assert stored_turns(tenant, "ada") == 160


def test_a_failed_batch_does_not_hold_the_user_up(settings: Settings, ingest, tenant: str) -> None:
    small = settings.model_copy(update={"extract_max_batch_turns": 10})
    ingest([say(tenant, "bo", n) for n in range(40)])
    refs = extraction.claim(small, tenant, {"bo": "turns"}, bounded=True)
    refs += extraction.claim(small, tenant, {"bo": "turns"}, bounded=True)
    assert extraction.claim(small, tenant, {"bo": "turns"}, bounded=True) == []
    with unit_of_work(tenant) as session:
        semantic.record_failure(
            session=session, batch_id=uuid.UUID(refs[0][1]), error="boom", max_attempts=5
        )
    assert len(extraction.claim(small, tenant, {"bo": "turns"}, bounded=True)) == 1
    # Unbounded triggers (the idle sweep) are not held back at all.
    assert len(extraction.claim(small, tenant, {"bo": "idle"})) == 1


def test_a_claim_takes_a_remainder_below_the_trigger_along(
    settings: Settings, ingest, tenant: str
) -> None:
    small = settings.model_copy(update={"extract_max_batch_turns": 50})
    ingest([say(tenant, "cid", n) for n in range(54)])  # 50 + N - 1
    assert len(extraction.claim(small, tenant, {"cid": "turns"})) == 1
    assert [b.turn_count for b in batches(tenant, "cid")] == [54]
    ingest([say(tenant, "cid", n) for n in range(54, 109)])  # 55: 5 would be left, ≥ N
    extraction.claim(small, tenant, {"cid": "turns"})
    assert [b.turn_count for b in batches(tenant, "cid")] == [54, 50]


def test_unscored_turns_that_hold_the_drain_up_are_scored_again(
    settings: Settings, ingest, tenant: str
) -> None:
    ingest([say(tenant, "dot", n) for n in range(6)])
    refs = extraction.claim(settings, tenant, {"dot": "turns"}, bounded=True)
    ingest([say(tenant, "dot", n) for n in range(6, 9)], score=False)  # their task was lost
    run_chain(settings, ingest.embedder, refs)
    assert extraction.drain(settings, refs) == extraction.Drain([], {tenant: ["dot"]})
