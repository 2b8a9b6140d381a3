"""Turns that arrive after later ones (a reclaimed entry, a backfill) still reach L1's summary,
once, and never push newer turns out of the window."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from app.config import Settings
from app.layers.working.store import WorkingMemoryStore, WorkingTurn

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def _turns(numbers: range) -> list[WorkingTurn]:
    return [
        WorkingTurn(
            id=f"turn-{n}",
            role="user",
            speaker="Dana",
            channel="web",
            content=f"Point {n}. More detail.",
            tokens=5,
            at=T0 + timedelta(seconds=n),
        )
        for n in numbers
    ]


def test_late_turns_are_summarised_once_and_the_window_keeps_the_newest(
    settings: Settings, redis_client, tenant: str
) -> None:
    store = WorkingMemoryStore(redis_client, settings)
    window = settings.working_turns
    store.push({(tenant, "dana"): _turns(range(10, 10 + window + 10))})
    before = store.read(tenant, "dana")
    assert before is not None and before.turns_summarised == 10

    store.push({(tenant, "dana"): _turns(range(10))})  # processed late, after newer turns
    store.push({(tenant, "dana"): _turns(range(10))})  # and replayed

    after = store.read(tenant, "dana")
    assert after is not None
    assert [t.id for t in after.turns] == [t.id for t in before.turns]
    assert after.token_count == before.token_count == 5 * window
    assert after.turns_summarised == 20
    for n in range(20):
        assert after.summary.count(f"Point {n}.") == 1


def test_turns_older_than_the_replay_horizon_are_left_to_l2(
    settings: Settings, redis_client, tenant: str
) -> None:
    settings = settings.model_copy(update={"working_replay_horizon_s": 60})
    store = WorkingMemoryStore(redis_client, settings)
    window = settings.working_turns
    store.push({(tenant, "eve"): _turns(range(1000, 1000 + window + 1))})
    store.push({(tenant, "eve"): _turns(range(5))})  # ~1000 s behind the watermark
    memory = store.read(tenant, "eve")
    assert memory is not None
    assert memory.turns_summarised == 1
    assert "Point 0." not in memory.summary
