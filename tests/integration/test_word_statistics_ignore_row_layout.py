"""BM25's word statistics for a big user come from a fixed sample (the user's newest rows),
so a user's scores do not change when its rows move on disk (an UPDATE, a VACUUM FULL, a
migration that rewrites rows)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from app.config import Settings
from app.db.session import unit_of_work
from app.layers.episodic.search import TurnFilter, lexical_candidates
from tests.integration.test_hybrid_search import ingest, say

T0 = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)


@pytest.mark.parametrize("minutes_apart", [1, 0], ids=["timed", "one-time"])
def test_a_big_users_scores_survive_rows_moving(
    settings: Settings, redis_client: Any, tenant: str, minutes_apart: int
) -> None:
    # 600 turns, more than the statistics sample: the older 300 talk about the kayak. An
    # import may stamp them all with one time: the sample's ties are then broken by id.
    lines = [f"Day {n}: we took the red kayak out on the lake again." for n in range(300)]
    lines += [f"Day {n}: a quiet evening with tea and a book at home." for n in range(300, 600)]
    events = [
        say(tenant, "uma", n, line, at=T0 + timedelta(minutes=n * minutes_apart))
        for n, line in enumerate(lines)
    ]
    ingest(settings, redis_client, events)
    scope = TurnFilter(tenant_id=tenant, user_id="uma")

    def scores() -> dict[Any, float]:
        with unit_of_work(tenant) as session:
            # Read in the order rows lie on disk, as a plan without the index would.
            session.execute(text("SET LOCAL enable_indexscan = off"))
            session.execute(text("SET LOCAL enable_bitmapscan = off"))
            return lexical_candidates(session, scope, "the red kayak on the lake", limit=50)

    before = scores()
    # Rewrite the older half: their new versions sit after the newer half on disk.
    with unit_of_work(tenant) as session:
        session.execute(
            text(
                "UPDATE episodic.turns SET speaker = speaker"
                " WHERE tenant_id = :t AND user_id = 'uma' AND content LIKE '%kayak%'"
            ),
            {"t": tenant},
        )
    assert before and scores() == before
