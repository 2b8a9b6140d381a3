"""Stream trimming only ever removes entries every consumer group has acknowledged."""

from __future__ import annotations

import pytest
import redis

from app.config import Settings
from app.keys import RedisKeys
from app.streams.trim import safe_trim_point, trim_partition, trim_partitions

ENTRIES = 2500
GROUP = "ingest"


@pytest.fixture
def stream(settings: Settings) -> str:
    return RedisKeys.from_settings(settings).partition(0)


def fill(client: redis.Redis, stream: str, count: int) -> list[str]:
    pipe = client.pipeline(transaction=False)
    for n in range(count):
        pipe.xadd(stream, {"n": n})
    return [i.decode() for i in pipe.execute()]


def read(client: redis.Redis, stream: str, count: int, group: str = GROUP) -> list[str]:
    reply = client.xreadgroup(group, "c1", {stream: ">"}, count=count)
    return [entry_id.decode() for entry_id, _ in reply[0][1]] if reply else []


def still_there(client: redis.Redis, stream: str, ids: list[str]) -> bool:
    present = {i.decode() for i, _ in client.xrange(stream, min=ids[0], max=ids[-1])}
    return present.issuperset(ids)


def test_trim_keeps_pending_and_undelivered_entries(redis_client: redis.Redis, stream: str) -> None:
    ids = fill(redis_client, stream, ENTRIES)
    redis_client.xgroup_create(stream, GROUP, id="0")
    delivered = read(redis_client, stream, 1000)
    assert delivered == ids[:1000]
    redis_client.xack(stream, GROUP, *delivered[:600])  # 600 acked, 400 pending, 1500 unread

    assert safe_trim_point(redis_client, stream) == ids[600]
    removed = trim_partition(redis_client, stream)

    assert removed > 0
    assert redis_client.xlen(stream) == ENTRIES - removed
    assert removed <= 600
    assert still_there(redis_client, stream, ids[600:])
    assert redis_client.xpending(stream, GROUP)["pending"] == 400


def test_trim_stops_at_the_oldest_pending_entry_even_after_later_acks(
    redis_client: redis.Redis, stream: str
) -> None:
    ids = fill(redis_client, stream, ENTRIES)
    redis_client.xgroup_create(stream, GROUP, id="0")
    delivered = read(redis_client, stream, 2000)
    redis_client.xack(stream, GROUP, *delivered[:50], *delivered[51:])  # only ids[50] pending

    trim_partition(redis_client, stream)
    assert still_there(redis_client, stream, ids[50:51])
    assert still_there(redis_client, stream, ids[2000:])


def test_trim_removes_acked_entries_once_everything_is_acked(
    redis_client: redis.Redis, stream: str
) -> None:
    ids = fill(redis_client, stream, ENTRIES)
    redis_client.xgroup_create(stream, GROUP, id="0")
    redis_client.xack(stream, GROUP, *read(redis_client, stream, ENTRIES))
    late = fill(redis_client, stream, 10)  # arrived after the last read: never delivered

    removed = trim_partition(redis_client, stream)

    assert removed >= ENTRIES // 2  # approximate trimming keeps at most a node's worth
    assert redis_client.xlen(stream) == ENTRIES + 10 - removed
    assert still_there(redis_client, stream, late)
    remaining = [i.decode() for i, _ in redis_client.xrange(stream)]
    assert remaining == (ids + late)[len(ids) + len(late) - len(remaining) :]


def test_every_group_must_have_acked(redis_client: redis.Redis, stream: str) -> None:
    ids = fill(redis_client, stream, ENTRIES)
    redis_client.xgroup_create(stream, GROUP, id="0")
    redis_client.xgroup_create(stream, "audit", id="0")
    redis_client.xack(stream, GROUP, *read(redis_client, stream, ENTRIES))

    assert trim_partition(redis_client, stream) == 0  # "audit" has read nothing
    assert redis_client.xlen(stream) == ENTRIES

    audit = read(redis_client, stream, 1000, group="audit")
    redis_client.xack(stream, "audit", *audit)
    assert trim_partition(redis_client, stream) > 0
    assert still_there(redis_client, stream, ids[1000:])


def test_without_a_group_nothing_is_trimmed(redis_client: redis.Redis, stream: str) -> None:
    fill(redis_client, stream, ENTRIES)
    assert safe_trim_point(redis_client, stream) is None
    assert trim_partition(redis_client, stream) == 0
    assert redis_client.xlen(stream) == ENTRIES


def test_missing_stream_is_left_alone(redis_client: redis.Redis, settings: Settings) -> None:
    streams = RedisKeys.from_settings(settings).partitions(3)
    assert trim_partitions(redis_client, streams) == 0
    assert redis_client.exists(*streams) == 0


def test_group_with_nothing_read_trims_nothing(redis_client: redis.Redis, stream: str) -> None:
    fill(redis_client, stream, ENTRIES)
    redis_client.xgroup_create(stream, GROUP, id="0")
    assert trim_partition(redis_client, stream) == 0
    assert redis_client.xlen(stream) == ENTRIES


def test_group_created_at_the_tail_keeps_later_entries(
    redis_client: redis.Redis, stream: str
) -> None:
    fill(redis_client, stream, ENTRIES)
    redis_client.xgroup_create(stream, GROUP, id="$")  # skips the backlog
    late = fill(redis_client, stream, 10)

    trim_partition(redis_client, stream)
    assert still_there(redis_client, stream, late)
    assert redis_client.xlen(stream) >= 10
