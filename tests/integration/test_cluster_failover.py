"""Failover without loss: a Redis Cluster master is SIGKILLed while producers push turns and
consumers store them (staged by tests/failover.py on a local 3+3 cluster). With
ENGRAM_STREAM_WAIT_REPLICAS=1 a producer is told a turn was accepted only once the master's
replica has it, so the replica that takes over has every accepted turn: none is lost, and
every turn is stored exactly once however often it was resent or redelivered.
bench/failover.py runs the same scenario without the wait as well and reports both."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.config import Settings
from app.redis_client import get_redis
from app.streams.events import parse_event
from app.streams.producer import EventProducer, NotReplicatedError
from tests.cluster import local_cluster, missing_binaries, paused, replica_of, wait_for_replica
from tests.failover import Plan, run_failover
from tests.integration.helpers import turn

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ports(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[int]]:
    """A cluster of its own (one of its masters dies here), quick to fail over."""
    reason = missing_binaries()
    if reason:
        pytest.skip(f"no local Redis Cluster: {reason}")
    root: Path = tmp_path_factory.mktemp("redis-failover")
    with local_cluster(root, node_timeout_ms=1000) as started:
        yield started


def test_with_the_safe_mode_a_killed_master_loses_no_accepted_turn(
    base_settings: Settings, ports: list[int], tenant: str
) -> None:
    settings = base_settings.model_copy(
        update={
            "redis_prefix": f"test-failover-{uuid.uuid4().hex[:10]}",
            "stream_partitions": 8,
            "stream_wait_timeout_ms": 300,
            "claim_min_idle_ms": 500,
            "consumer_block_ms": 50,
        }
    )
    plan = Plan(pause_s=0.01)
    outcome = run_failover(settings, ports, tenant=tenant, wait_replicas=1, plan=plan)

    sent = plan.producers * plan.batches * plan.batch_size
    assert outcome.batches_on_victim > 0  # the dead master held partitions being written
    assert outcome.refusals > 0  # the producers met the failover and resent
    assert outcome.lost == 0, f"{outcome.lost} accepted turns were never stored"
    assert len(outcome.accepted) == sent  # resending got every turn accepted in the end
    assert outcome.stored == outcome.accepted  # nothing stored that was not sent
    assert outcome.stored_twice == 0
    assert outcome.dead_letters == 0  # the failover was waited out, never blamed on a turn


def test_a_replica_that_does_not_acknowledge_leaves_the_events_unaccepted(
    base_settings: Settings, ports: list[int], tenant: str
) -> None:
    """The WAIT must ride the XADDs' own connection: on any other it would answer at once
    that the replica has everything, and the events would be accepted with no copy."""
    settings = base_settings.model_copy(
        update={
            "redis_prefix": f"test-failover-{uuid.uuid4().hex[:10]}",
            "redis_url": f"redis+cluster://127.0.0.1:{ports[0]}",
            "stream_wait_replicas": 1,
            "stream_wait_timeout_ms": 200,
        }
    )
    client = get_redis(settings)
    safe = EventProducer(client, settings)
    event = turn(tenant, "quiet-replica", 1)
    master = client.get_node_from_key(safe.stream_for(parse_event(event))).port
    replica = replica_of(master, master)
    wait_for_replica(master)

    with paused(replica):
        with pytest.raises(NotReplicatedError) as refused:
            safe.send_many([event])
        unsafe = EventProducer(client, settings.model_copy(update={"stream_wait_replicas": 0}))
        assert len(unsafe.send_many([event])) == 1  # accepted with no copy anywhere else
    assert refused.value.sent == [] and len(refused.value.unsent) == 1
    message = str(refused.value)
    assert "ENGRAM_STREAM_WAIT_REPLICAS=1" in message, message
    assert "ENGRAM_STREAM_WAIT_TIMEOUT_MS=200" in message, message

    wait_for_replica(master)
    assert [r.event_id for r in safe.send_many([event])] == [str(parse_event(event).id)]
