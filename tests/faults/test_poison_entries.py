"""Poison entries of every kind, written straight to the stream (a producer that skipped
validation, an old version, a bug) among good events sent through the API, consumed by a real
worker: each poison entry is dead-lettered once (or stored, if it turns out storable), every
good event is stored once, nothing stays pending — no entry loops — and the API never answers
5xx.

Here `sent` counts good and poison entries, `stored` the good events' rows plus the poison
entries accounted for (dead-lettered or stored), `lost` what is neither, and `duplicated`
extra rows plus poison entries dead-lettered twice or both stored and dead-lettered.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable

import redis

from app.config import Settings
from app.keys import RedisKeys, partition_of
from tests.faults.stack import private_env
from tests.faults.tally import Tally, dead_letters, pending, tally, turn_counts
from tests.faults.traffic import ApiClient
from tests.integration.helpers import turn, wait_for
from tests.integration.workers import celery_worker

USER = "poisoned"
GOOD = 200
DEPTH = 100_000


def _poison(tenant: str) -> dict[str, dict[bytes | str, bytes | str]]:
    """name → the raw stream entry fields; external ids p-<name> where there is an event."""

    def event(name: str, **overrides: object) -> str:
        return json.dumps(turn(tenant, USER, 0, external_id=f"p-{name}", **overrides))

    nested = "[" * DEPTH + "]" * DEPTH
    deep = event("overdeep_json")[:-1] + f', "metadata": {{"d": {nested}}}}}'
    return {
        "malformed_json": {"event": event("malformed_json")[:40]},
        "not_an_object": {"event": "[1, 2, 3]"},
        "missing_fields": {"event": json.dumps({"type": "turn", "tenant_id": tenant})},
        "no_event_field": {"payload": event("no_event_field")},
        "nul_character": {"event": event("nul_character", content="bad \u0000 byte")},
        "nan_in_metadata": {"event": event("nan_in_metadata", metadata={"x": math.nan})},
        "timestamp_year_1": {"event": event("timestamp_year_1", timestamp="0001-01-01T00:00:00Z")},
        "timestamp_year_9999": {
            "event": event("timestamp_year_9999", timestamp="9999-12-31T23:59:59Z")
        },
        "overdeep_json": {"event": deep},
    }


def _invalid_utf8(tenant: str) -> dict[str, dict[bytes | str, bytes | str]]:
    def event(name: str) -> bytes:
        return json.dumps(turn(tenant, USER, 0, external_id=f"p-{name}")).encode()

    return {
        "invalid_utf8_value": {
            "event": event("invalid_utf8_value").replace(b"message", b"m\xff\xfessage")
        },
        "invalid_utf8_field_name": {b"ev\xffent": event("invalid_utf8_field_name")},
    }


def _run(
    name: str,
    settings: Settings,
    client: redis.Redis,
    api_client: ApiClient,
    poison: dict[str, dict[bytes | str, bytes | str]],
) -> tuple[Tally, dict[str, int]]:
    """Interleave the poison with good events, consume with a real worker, account for all."""
    tenant = api_client.tenant
    stream = RedisKeys.from_settings(settings).partition(
        partition_of(tenant, USER, settings.stream_partitions)
    )
    good = [turn(tenant, USER, n) for n in range(1, GOOD + 1)]
    entry_of: dict[str, str] = {}
    per_poison = max(GOOD // len(poison), 1)
    for index, (kind, fields) in enumerate(poison.items()):
        assert api_client.send(good[index * per_poison : (index + 1) * per_poison])
        entry_of[kind] = client.xadd(stream, fields).decode()  # type: ignore[union-attr]
    rest = good[len(poison) * per_poison :]
    assert not rest or api_client.send(rest)

    def accounted() -> bool:
        rows = sum(turn_counts(settings, tenant)[0].values())
        return rows >= GOOD and len(dead_letters(client, settings)) >= len(poison) - (rows - GOOD)

    with celery_worker(settings, **private_env(settings), ENGRAM_CONSUMER_BATCH_SIZE="50"):
        wait_for(lambda: accounted() and pending(client, settings) == 0, timeout=60, every=0.2)
        api_client.search(USER)

    dead = {}
    for letter in dead_letters(client, settings):
        dead[letter["entry_id"]] = dead.get(letter["entry_id"], 0) + 1
    counts, _ = turn_counts(settings, tenant)
    outcome = {kind: dead.get(entry_of[kind], 0) + counts.get(f"p-{kind}", 0) for kind in poison}
    base = tally(name, settings, tenant, api_client.sent)
    good_rows = base.stored - sum(counts.get(f"p-{kind}", 0) for kind in poison)
    result = Tally(
        name,
        sent=base.sent + len(poison),
        stored=good_rows + sum(1 for n in outcome.values() if n >= 1),
        lost=base.lost + sum(1 for n in outcome.values() if n == 0),
        duplicated=base.duplicated + sum(n - 1 for n in outcome.values() if n > 1),
    )
    return result, outcome


def test_poison_entries_are_dead_lettered_once_while_the_rest_flows(
    fault_settings: Settings,
    private_redis: redis.Redis,
    api_client: ApiClient,
    report: Callable[[Tally], None],
) -> None:
    poison = _poison(api_client.tenant)
    result, outcome = _run("poison_entries", fault_settings, private_redis, api_client, poison)
    report(result)
    assert result.lost == 0 and result.duplicated == 0, (result, outcome)
    assert pending(private_redis, fault_settings) == 0
    assert api_client.server_errors() == []


def test_invalid_utf8_entries_are_dead_lettered_once_while_the_rest_flows(
    fault_settings: Settings,
    private_redis: redis.Redis,
    api_client: ApiClient,
    report: Callable[[Tally], None],
) -> None:
    poison = _invalid_utf8(api_client.tenant)
    result, outcome = _run("poison_invalid_utf8", fault_settings, private_redis, api_client, poison)
    report(result)
    assert result.lost == 0 and result.duplicated == 0, (result, outcome)
    assert pending(private_redis, fault_settings) == 0
    assert api_client.server_errors() == []
