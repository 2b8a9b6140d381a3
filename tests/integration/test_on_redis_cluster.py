"""Capture, L1, prefetch, forget, the access and co-activation buffers and the dream streams
on a real Redis Cluster.

A local cluster of three masters and three replicas (tests/cluster.py) serves this module;
the `settings` fixture points REDIS_URL at it with the `redis+cluster://` scheme, so
get_redis hands every test a RedisCluster. The test bodies are the single-Redis ones,
imported from their modules (pytest collects them here, under these fixtures); the tests
written here check what only a cluster can get wrong: which node holds what.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.cluster import RedisCluster

from app.config import Settings
from app.keys import RedisKeys
from app.redis_client import get_redis, resolve_redis_url
from app.services.forget import forget_user
from app.streams.producer import EventProducer
from tests.cluster import local_cluster, missing_binaries
from tests.integration.helpers import ingest_consumer, turn
from tests.integration.test_api import (  # noqa: F401  (fixtures and tests run here)
    MAX_BODY,
    alice,
    client,
    context_user,
    state,
    test_context_reports_a_prefetch_hit,
)
from tests.integration.test_consumer_group_hygiene import (  # noqa: F401
    test_a_consumer_that_stops_cleanly_leaves_the_group,
    test_a_live_consumer_idle_on_a_quiet_partition_stays,
    test_a_live_slow_batch_is_touched_not_stolen,
    test_dead_consumer_is_removed_once_its_entries_were_reclaimed,
    test_touch_never_takes_back_an_entry_another_consumer_reclaimed,
)
from tests.integration.test_dream_cycle import (  # noqa: F401
    history,
    test_crash_and_rerun_equals_clean_run,
    test_cycle_replays_links_merges_once,
)
from tests.integration.test_embedding_cache import (  # noqa: F401
    counting,
    test_duplicates_in_one_call_are_embedded_once,
    test_second_call_is_served_from_redis,
)
from tests.integration.test_forget_user import (  # noqa: F401
    other_tenant,
    populate_redis,
    test_a_failed_transaction_deletes_nothing,
    test_forget_removes_one_user_everywhere_and_nobody_else,
)
from tests.integration.test_hebbian import (  # noqa: F401
    test_a_search_buffers_its_pairs_and_the_apply_strengthens_exactly_those_edges,
    test_forgetting_the_user_removes_their_buffer,
    test_two_appliers_at_once_apply_each_buffered_pair_once,
)
from tests.integration.test_ingest_exactly_once import (  # noqa: F401
    test_replayed_batch_changes_nothing,
    test_same_event_sent_twice_is_stored_once,
)
from tests.integration.test_worker_end_to_end import (
    test_pushed_turn_reaches_l1_and_l2_through_a_real_worker as through_a_real_worker,
)
from tests.integration.test_working_memory_window import (  # noqa: F401
    store,
    test_every_working_memory_key_expires,
    test_evicted_turns_are_folded_into_the_summary,
    test_flush_idle_writes_the_summary_and_leaves_the_index,
    test_pushing_the_same_batch_again_changes_nothing,
    test_replayed_turn_older_than_the_eviction_watermark_is_not_readded,
    test_users_do_not_share_a_window,
    test_window_keeps_the_newest_turns_in_time_order,
    test_window_slides_across_pushes,
    wm_settings,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A fresh 3+3 cluster for this module, named the way REDIS_URL names one."""
    reason = missing_binaries()
    if reason:
        pytest.skip(f"no local Redis Cluster: {reason}")
    root: Path = tmp_path_factory.mktemp("redis-cluster")
    with local_cluster(root) as ports:
        url = f"redis+cluster://127.0.0.1:{ports[0]}"
        yield url
        get_redis(Settings.model_construct(redis_url=url)).close()


@pytest.fixture
def settings(settings: Settings, cluster_url: str) -> Settings:
    return settings.model_copy(update={"redis_url": cluster_url})


@pytest.fixture(scope="module")
def api_settings(base_settings: Settings, cluster_url: str) -> Iterator[Settings]:
    settings = base_settings.model_copy(
        update={
            "redis_prefix": f"test-api-{uuid.uuid4().hex[:10]}",
            "api_max_body_bytes": MAX_BODY,
            "redis_url": cluster_url,
        }
    )
    yield settings
    cluster = get_redis(settings)
    keys = list(cluster.scan_iter(match=f"{settings.redis_prefix}:*", count=1000))
    if keys:
        cluster.delete(*keys)


def _owners(cluster: RedisCluster, keys: list[str]) -> set[str]:
    return {cluster.get_node_from_key(key).name for key in keys}


def test_the_client_is_a_cluster_of_three_masters(redis_client: RedisCluster) -> None:
    assert isinstance(redis_client, RedisCluster)
    assert len(redis_client.get_primaries()) == 3
    info = redis_client.cluster_info()
    assert info["cluster_state"] == "ok"
    assert int(info["cluster_size"]) == 3
    assert int(info["cluster_known_nodes"]) == 6  # each master has its replica


def test_stream_partitions_spread_over_masters_and_are_all_read(
    settings: Settings, redis_client: RedisCluster, tenant: str
) -> None:
    """Partitions sit on several masters, so one XREADGROUP over all of them would be refused:
    the consumer reads each, and every turn reaches Postgres exactly once."""
    from sqlalchemy import select

    from app.db.session import unit_of_work
    from app.layers.episodic.models import Turn

    keys = RedisKeys.from_settings(settings)
    partitions = keys.partitions(settings.stream_partitions)
    assert len(_owners(redis_client, partitions)) > 1
    users = [f"u{n}" for n in range(12)]
    producer = EventProducer(redis_client, settings)
    receipts = [producer.send(turn(tenant, user, 1)) for user in users]
    assert len({r.stream for r in receipts}) > 1

    consumer = ingest_consumer(redis_client, settings)
    while consumer.step(block_ms=50):
        pass
    with unit_of_work(tenant) as session:
        stored = sorted(session.scalars(select(Turn.user_id)))
    assert stored == sorted(users)
    for stream in {r.stream for r in receipts}:
        assert redis_client.xpending(stream, settings.consumer_group)["pending"] == 0


def test_forget_walks_every_master(
    settings: Settings, redis_client: RedisCluster, tenant: str
) -> None:
    """Users' keys live on different masters; forgetting one removes their keys wherever
    they are, found by scanning each master, and leaves the others'."""
    users = [f"user-{n}" for n in range(9)]
    for user in users:
        populate_redis(redis_client, settings, tenant, user)
    keys = RedisKeys.from_settings(settings)
    tags = [keys.working_turns(tenant, user) for user in users]
    assert len(_owners(redis_client, tags)) > 1

    def on_each_master(user: str) -> dict[str, int]:
        pattern = keys.user_pattern(tenant, user)
        return {
            node.name: len(list(node.redis_connection.scan_iter(match=pattern, count=1000)))
            for node in redis_client.get_primaries()
        }

    for user in users:
        assert sum(on_each_master(user).values()) >= 5
    for user in users[:5]:
        forget_user(tenant_id=tenant, user_id=user, settings=settings, client=redis_client)
    for user in users[:5]:
        assert set(on_each_master(user).values()) == {0}
    for user in users[5:]:
        assert sum(on_each_master(user).values()) >= 5


def test_a_real_worker_reads_the_cluster_and_takes_tasks_from_its_own_broker(
    settings: Settings,
    base_settings: Settings,
    redis_client: RedisCluster,
    tenant: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker process gets the cluster as REDIS_URL and the plain test Redis as its
    broker (a cluster REDIS_URL without CELERY_BROKER_URL would not start)."""
    monkeypatch.setenv("REDIS_URL", settings.redis_url or "")
    monkeypatch.setenv("CELERY_BROKER_URL", resolve_redis_url(base_settings))
    through_a_real_worker(settings, redis_client, tenant)
