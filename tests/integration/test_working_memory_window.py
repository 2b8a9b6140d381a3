"""L1 working memory: a bounded, replay-safe window of turns whose summary reaches Postgres."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
import redis

from app.config import Settings
from app.db.session import unit_of_work
from app.keys import RedisKeys
from app.layers.working.repository import get_summary
from app.layers.working.service import flush_idle
from app.layers.working.store import WorkingMemoryStore, WorkingTurn
from app.layers.working.summary import first_sentence
from app.text.tokens import count_tokens

WINDOW = 5
T0 = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)


@pytest.fixture
def wm_settings(settings: Settings) -> Settings:
    return settings.model_copy(
        update={"working_turns": WINDOW, "working_idle_ttl_s": 3600, "working_flush_margin_s": 600}
    )


@pytest.fixture
def store(redis_client: redis.Redis, wm_settings: Settings) -> WorkingMemoryStore:
    return WorkingMemoryStore(redis_client, wm_settings)


def turns(count: int, *, start: int = 0) -> list[WorkingTurn]:
    made = []
    for n in range(start, start + count):
        content = f"Point {n} of the plan is settled. Details follow for item {n}."
        made.append(
            WorkingTurn(
                id=f"turn-{n}",
                role="user" if n % 2 == 0 else "assistant",
                speaker="user" if n % 2 == 0 else "assistant",
                channel="web",
                content=content,
                tokens=count_tokens(content),
                at=T0 + timedelta(seconds=n),
            )
        )
    return made


def test_window_keeps_the_newest_turns_in_time_order(
    store: WorkingMemoryStore, tenant: str
) -> None:
    batch = turns(12)
    evicted = store.push({(tenant, "alice"): list(reversed(batch))})
    assert evicted == {(tenant, "alice"): 12 - WINDOW}

    memory = store.read(tenant, "alice")
    assert memory is not None
    assert memory.turns == batch[-WINDOW:]
    assert memory.token_count == sum(t.tokens for t in batch[-WINDOW:])


def test_evicted_turns_are_folded_into_the_summary(store: WorkingMemoryStore, tenant: str) -> None:
    batch = turns(12)
    store.push({(tenant, "alice"): batch})
    memory = store.read(tenant, "alice")
    assert memory is not None
    assert memory.turns_summarised == 12 - WINDOW
    assert memory.summary.splitlines() == [
        f"{t.speaker}: {first_sentence(t.content)}" for t in batch[: 12 - WINDOW]
    ]
    assert memory.summary_tokens == count_tokens(memory.summary)


def test_window_slides_across_pushes(store: WorkingMemoryStore, tenant: str) -> None:
    store.push({(tenant, "alice"): turns(4)})
    store.push({(tenant, "alice"): turns(4, start=4)})
    memory = store.read(tenant, "alice")
    assert memory is not None
    assert [t.id for t in memory.turns] == [f"turn-{n}" for n in range(3, 8)]
    assert memory.turns_summarised == 3
    assert memory.token_count == sum(t.tokens for t in memory.turns)


def test_pushing_the_same_batch_again_changes_nothing(
    store: WorkingMemoryStore, tenant: str
) -> None:
    batch = turns(12)
    store.push({(tenant, "alice"): batch})
    before = store.read(tenant, "alice")

    assert store.push({(tenant, "alice"): batch}) == {(tenant, "alice"): 0}
    after = store.read(tenant, "alice")
    assert after == before


def test_replayed_turn_older_than_the_eviction_watermark_is_not_readded(
    store: WorkingMemoryStore, tenant: str
) -> None:
    batch = turns(12)
    store.push({(tenant, "alice"): batch})
    before = store.read(tenant, "alice")

    store.push({(tenant, "alice"): [batch[0]]})
    after = store.read(tenant, "alice")
    assert after is not None
    assert batch[0] not in after.turns
    assert after == before


def test_users_do_not_share_a_window(store: WorkingMemoryStore, tenant: str) -> None:
    store.push({(tenant, "alice"): turns(3), (tenant, "bob"): turns(2, start=100)})
    alice, bob = store.read(tenant, "alice"), store.read(tenant, "bob")
    assert alice is not None and bob is not None
    assert [t.id for t in alice.turns] == ["turn-0", "turn-1", "turn-2"]
    assert [t.id for t in bob.turns] == ["turn-100", "turn-101"]
    assert store.read(tenant, "carol") is None


def test_every_working_memory_key_expires(
    store: WorkingMemoryStore, redis_client: redis.Redis, wm_settings: Settings, tenant: str
) -> None:
    store.push({(tenant, "alice"): turns(WINDOW + 3)})  # leaves evicted turns waiting to fold
    keys = RedisKeys.from_settings(wm_settings)
    user_keys = [
        keys.working_turns(tenant, "alice"),
        keys.working_state(tenant, "alice"),
        keys.working_evicted(tenant, "alice"),
        keys.working_seen(tenant, "alice"),
    ]
    assert redis_client.exists(*user_keys) == 4
    for key in user_keys:
        assert 0 < redis_client.ttl(key) <= wm_settings.working_idle_ttl_s

    # Every per-user key under the working-memory namespace expires; only the active index
    # (kept small by flush_idle) lives on.
    found = {k.decode() for k in redis_client.scan_iter(match=f"{keys.prefix}:wm:*")}
    assert found == {*user_keys, keys.working_active()}

    store.read(tenant, "alice")  # folding the summary must not strip the TTL
    for key in user_keys[:2]:
        assert redis_client.ttl(key) > 0


def test_flush_idle_writes_the_summary_and_leaves_the_index(
    store: WorkingMemoryStore, redis_client: redis.Redis, wm_settings: Settings, tenant: str
) -> None:
    store.push({(tenant, "alice"): turns(12), (tenant, "bob"): turns(2)})
    keys = RedisKeys.from_settings(wm_settings)
    active = keys.working_active()
    idle_for = wm_settings.working_idle_ttl_s - wm_settings.working_flush_margin_s
    # Make alice look idle for longer than (TTL - margin) instead of waiting.
    redis_client.zadd(active, {f"{tenant}\x1falice": time.time() - idle_for - 60})

    assert flush_idle(store, wm_settings) == 1

    memory = store.read(tenant, "alice")
    assert memory is not None
    with unit_of_work(tenant) as db:
        row = get_summary(session=db, tenant_id=tenant, user_id="alice")
        assert row is not None
        assert (row.summary, row.summary_tokens, row.turns_summarised) == (
            memory.summary,
            memory.summary_tokens,
            12 - WINDOW,
        )
        assert row.last_turn_at == max(t.at for t in memory.turns)
        assert get_summary(session=db, tenant_id=tenant, user_id="bob") is None

    assert redis_client.zscore(active, f"{tenant}\x1falice") is None
    assert redis_client.zscore(active, f"{tenant}\x1fbob") is not None
    assert flush_idle(store, wm_settings) == 0  # nothing idle left


def test_flushed_summary_is_invisible_to_other_tenants(
    store: WorkingMemoryStore, redis_client: redis.Redis, wm_settings: Settings, tenant: str
) -> None:
    store.push({(tenant, "alice"): turns(8)})
    redis_client.zadd(
        RedisKeys.from_settings(wm_settings).working_active(), {f"{tenant}\x1falice": 1}
    )
    assert flush_idle(store, wm_settings) == 1
    with unit_of_work(f"{tenant}-other") as db:
        assert get_summary(session=db, tenant_id=tenant, user_id="alice") is None


def test_working_memory_is_not_shared_across_tenants(
    store: WorkingMemoryStore, tenant: str
) -> None:
    store.push({(f"{tenant}:x", "bob"): turns(2)})
    assert store.read(tenant, "x:bob") is None
