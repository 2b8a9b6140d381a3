"""One contract at the door: whatever a client sends is refused there — EventValidationError
from the producer, a 4xx naming the field from the API — or accepted and then stored by a real
consumer and readable afterwards. Never accepted and then dead-lettered, never a 5xx.

Random and abusive input (timestamps at and past the range ends and with offsets, JSON nested
past the depth limit, strings past every cap, odd identifiers, wrong shapes) goes through the
producer and through the FastAPI app on the real Redis and Postgres; an in-process
StreamConsumer with the real IngestService then drains what was accepted.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import event as tally
from hypothesis import strategies as st
from sqlalchemy import text

from app.api.app import create_app
from app.config import Settings
from app.db.session import unit_of_work
from app.keys import RedisKeys
from app.services.ingest import IngestService
from app.services.tenants import mint_key
from app.streams.consumer import StreamConsumer
from app.streams.events import EventValidationError, is_identifier
from app.streams.producer import EventProducer, Receipt
from tests.integration.api_server import prefixed

CONTENT_CAP = 64_000
GOOD_KINDS = ["turn", "tool_run", "iot_trigger", "typing_start", "channel_switch"]
GOOD_KINDS += ["presence_change", "sensor.reading"]
BAD_KINDS: list[Any] = ["Bad Type", "sensor\n", 7, "tool.run "]
ODD_IDS = ["u9\n", "\nu9", "", " ", "a" * 129, "é", "a b", "a\x00", "-x", "x/y", "ok\r", "x\u2028"]
VALID_IDS = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,20}", fullmatch=True)
EDGE_TIMES: list[Any] = [
    "0001-01-01T00:00:00Z",
    "0001-01-01T00:00:00+05:00",
    "9999-12-31T23:59:59Z",
    "9999-12-31T23:59:59-05:00",
    "1970-01-01T00:00:00Z",
    "1969-12-31T23:59:59.999999Z",
    "1970-01-01T04:00:00+05:00",
    "2200-01-01T00:00:00Z",
    "2200-01-01T00:00:00.000001Z",
    "2199-12-31T23:30:00-05:00",
    "yesterday",
    "",
    0,
    -1,
    1e12,
    10**20,
    None,
    [2026, 1, 1],
]
OFFSETS = st.integers(-1439, 1439).map(lambda m: timezone(timedelta(minutes=m)))
ANY_TIME = st.datetimes(
    min_value=datetime(1, 1, 1),
    max_value=datetime(9999, 12, 31, 23, 59, 59),
    timezones=st.one_of(st.none(), st.just(UTC), OFFSETS),
)
IN_RANGE = st.datetimes(
    min_value=datetime(1970, 1, 2),
    max_value=datetime(2199, 12, 31),
    timezones=st.one_of(st.none(), st.just(UTC), OFFSETS),
)
TIMESTAMPS = st.one_of(
    st.sampled_from(EDGE_TIMES),
    ANY_TIME.map(datetime.isoformat),
    IN_RANGE.map(datetime.isoformat),
    st.integers(-(10**12), 10**12),
)


def nested(depth: int) -> dict[str, Any]:
    """A JSON object nested exactly `depth` levels (the object itself is level 1)."""
    value: Any = "leaf"
    for level in range(depth - 1):
        value = [value] if level % 2 else {"n": value}
    return {"top": value}


SIZES = st.sampled_from([1, 100, CONTENT_CAP, CONTENT_CAP + 1, 3_000_000])
HUGE_TEXT = SIZES.map(lambda n: "x" * n)
ODD_TEXT = st.sampled_from(["", "a\x00b", "\ud800", "é" * 40_000, "\u2028", "line\n", " "])
TEXTS = st.one_of(st.text(max_size=40), HUGE_TEXT, ODD_TEXT)
JSON_LEAVES = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), TEXTS)
JSON_VALUES = st.one_of(
    st.sampled_from([1, 31, 32, 33, 200, 600, 950]).map(nested),
    st.dictionaries(st.text(max_size=8), JSON_LEAVES, max_size=4),
    SIZES.map(lambda n: {"blob": "y" * n}),
    st.lists(JSON_LEAVES, max_size=3),
    JSON_LEAVES,
)
ANYTHING = st.one_of(JSON_VALUES, TIMESTAMPS)


def _rarely(draw: st.DrawFn) -> bool:
    """True about one time in six (plain booleans would put abuse in half the examples)."""
    return draw(st.integers(0, 5)) == 5


@st.composite
def events(draw: st.DrawFn, tenant: str) -> Any:
    """A plausible event of a random type, then up to two fields replaced by abuse."""
    kind = draw(st.sampled_from(BAD_KINDS if _rarely(draw) else GOOD_KINDS))
    event: dict[str, Any] = {
        "type": kind,
        "tenant_id": tenant,
        "user_id": draw(st.sampled_from(ODD_IDS) if _rarely(draw) else VALID_IDS),
        "external_id": uuid.uuid4().hex,
    }
    fields = {
        "turn": {"role": "user", "content": "We moved the launch to Thursday.", "channel": "web"},
        "tool_run": {"tool": "grep", "arguments": {"pattern": "launch"}, "output": "2 hits"},
        "iot_trigger": {"device_id": "thermostat", "trigger": "temp", "value": 21.5},
        "channel_switch": {"channel": "sms", "from_channel": "web"},
        "presence_change": {"status": "away"},
        "sensor.reading": {"payload": {"celsius": 21.5}},
    }.get(kind, {})
    event.update(fields)
    if draw(st.booleans()):
        event["timestamp"] = draw(st.one_of(IN_RANGE.map(datetime.isoformat), TIMESTAMPS))
    if draw(st.booleans()):
        event["metadata"] = draw(JSON_VALUES)
    names = [*fields, "user_id", "channel", "speaker", "external_id", "event_id", "duration_ms"]
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 2]))):
        event[draw(st.sampled_from(names))] = draw(ANYTHING)
    return draw(st.sampled_from([["type", "turn"], "turn", 5, None])) if _rarely(draw) else event


def _drain(consumer: StreamConsumer, expected: int) -> int:
    done = 0
    for _ in range(200):
        done += consumer.step(block_ms=10)
        if done >= expected:
            break
    return done


def _stored_ids(tenant: str, ids: list[str]) -> set[str]:
    with unit_of_work(tenant) as session:
        rows = session.execute(
            text(
                "SELECT id::text FROM episodic.turns WHERE id = ANY(CAST(:ids AS uuid[]))"
                " UNION SELECT id::text FROM episodic.events WHERE id = ANY(CAST(:ids AS uuid[]))"
            ),
            {"ids": ids},
        ).scalars()
        return set(rows)


def _assert_stored(
    consumer: StreamConsumer, client: Any, settings_: Settings, tenant: str, receipts: list[str]
) -> None:
    """Every accepted event is acked by the real consumer, stored, and nothing dead-lettered."""
    assert _drain(consumer, len(receipts)) >= len(receipts)
    assert consumer.stats.entry_failures == 0, consumer.stats.last_error
    assert client.xlen(RedisKeys.from_settings(settings_).dead_letters()) == 0
    assert _stored_ids(tenant, receipts) == set(receipts)


@pytest.fixture
def consumer(settings: Settings, redis_client: Any) -> StreamConsumer:
    service = IngestService(client=redis_client, settings=settings)
    found = StreamConsumer(client=redis_client, settings=settings, handler=service, name="door")
    found.ensure_groups()
    return found


@settings(max_examples=120, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_the_producer_refuses_or_the_consumer_stores(
    data: st.DataObject,
    settings: Settings,
    redis_client: Any,
    tenant: str,
    consumer: StreamConsumer,
) -> None:
    batch = data.draw(st.lists(events(tenant), min_size=1, max_size=2))
    producer = EventProducer(redis_client, settings)
    before = sum(redis_client.xlen(k) for k in consumer.streams)
    try:
        receipts: list[Receipt] = producer.send_many(batch)
    except EventValidationError as exc:
        tally(f"refused {exc.fields[0]}")
        assert exc.fields, exc
        assert sum(redis_client.xlen(k) for k in consumer.streams) == before  # nothing written
        return
    tally("accepted")
    _assert_stored(consumer, redis_client, settings, tenant, [r.event_id for r in receipts])


# -- the REST API -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def api_settings(base_settings: Settings) -> Iterator[Settings]:
    with prefixed(base_settings, "door") as settings:
        yield settings


@pytest.fixture(scope="module")
def api(api_settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(api_settings), raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.fixture(scope="module")
def caller(api: TestClient) -> tuple[str, dict[str, str]]:
    tenant = f"t-door-{uuid.uuid4().hex[:8]}"
    return tenant, {"Authorization": f"Bearer {mint_key(tenant, name='door').key}"}


@pytest.fixture(scope="module")
def api_consumer(api: TestClient, api_settings: Settings) -> StreamConsumer:
    client = api.app.state.engram.redis  # type: ignore[attr-defined]
    service = IngestService(client=client, settings=api_settings)
    found = StreamConsumer(client=client, settings=api_settings, handler=service, name="door")
    found.ensure_groups()
    return found


def _post(api: TestClient, path: str, body: Any, headers: dict[str, str]) -> Any:
    """POST `body` as JSON a client could send: NaN as Python's json writes it, surrogates
    escaped (\\ud800), so the server sees exactly what a careless client produces."""
    raw = json.dumps(body).encode()
    return api.post(path, content=raw, headers={**headers, "Content-Type": "application/json"})


def _refused(response: Any) -> None:
    assert 400 <= response.status_code < 500, response.text[:500]
    if response.status_code == 422:
        detail = response.json()["detail"]
        assert detail["fields"], detail


API_LIMITS = settings(
    max_examples=80, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None
)


@API_LIMITS
@given(data=st.data())
def test_the_api_refuses_or_the_consumer_stores(
    data: st.DataObject,
    api: TestClient,
    caller: tuple[str, dict[str, str]],
    api_consumer: StreamConsumer,
    api_settings: Settings,
) -> None:
    tenant, headers = caller
    batch = data.draw(st.lists(events(tenant), min_size=1, max_size=2))
    if data.draw(st.booleans()):
        for event in batch:
            if isinstance(event, dict):
                event.pop("tenant_id", None)
    response = _post(api, "/v1/events", {"events": batch}, headers)
    tally(f"status {response.status_code}")
    if response.status_code != 202:
        _refused(response)
        return
    ids = response.json()["ids"]
    redis_client = api.app.state.engram.redis  # type: ignore[attr-defined]
    _assert_stored(api_consumer, redis_client, api_settings, tenant, ids)
    user = batch[0]["user_id"]
    for path in ("/v1/search", "/v1/context"):
        found = _post(api, path, {"user_id": user, "query": "launch"}, headers)
        assert found.status_code == 200, found.text[:500]


@st.composite
def memories(draw: st.DrawFn) -> dict[str, Any]:
    item: dict[str, Any] = {"content": f"The door contract note {uuid.uuid4().hex[:6]}"}
    if draw(st.booleans()):
        item["occurred_at"] = draw(TIMESTAMPS)
    if draw(st.booleans()):
        item["metadata"] = draw(JSON_VALUES)
    names = ["content", "subject", "value", "tags", "channel", "importance", "kind"]
    for _ in range(draw(st.integers(0, 1))):
        item[draw(st.sampled_from(names))] = draw(ANYTHING)
    return item


@API_LIMITS
@given(item=memories(), user=st.one_of(VALID_IDS, st.sampled_from(ODD_IDS)))
def test_a_stored_memory_never_breaks_a_read(
    item: dict[str, Any], user: str, api: TestClient, caller: tuple[str, dict[str, str]]
) -> None:
    _, headers = caller
    response = _post(api, "/v1/memories", {"user_id": user, "memories": [item]}, headers)
    tally(f"status {response.status_code}")
    if response.status_code != 201:
        _refused(response)
        return
    memory_id = response.json()["memories"][0]["id"]
    for read in (
        api.get(f"/v1/memories?user_id={user}", headers=headers),
        api.get(f"/v1/memories/{memory_id}?recall=2", headers=headers),
        _post(api, "/v1/search", {"user_id": user, "query": "door contract note"}, headers),
        _post(api, "/v1/context", {"user_id": user, "query": "door contract note"}, headers),
    ):
        assert read.status_code == 200, read.text[:500]


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(user=st.one_of(VALID_IDS, st.sampled_from(ODD_IDS), st.text(max_size=140)))
def test_identifiers_in_paths_and_queries_are_matched_whole(
    user: str, api: TestClient, caller: tuple[str, dict[str, str]]
) -> None:
    _, headers = caller
    quoted = quote(user, safe="")
    for response in (
        api.delete(f"/v1/users/{quoted}", headers=headers),
        api.get(f"/v1/users/{quoted}/extraction", headers=headers),
        api.get(f"/v1/memories?user_id={quoted}", headers=headers),
        api.get(f"/v1/entities/launch/graph?user_id={quoted}", headers=headers),
    ):
        assert response.status_code < 500, response.text[:500]
        if not is_identifier(user):
            assert 400 <= response.status_code < 500, (user, response.text[:300])
        else:
            assert response.status_code in (200, 404), response.text[:300]


def test_a_trailing_newline_is_no_identifier(
    api: TestClient, caller: tuple[str, dict[str, str]]
) -> None:
    _, headers = caller
    for response in (
        api.delete("/v1/users/u9%0A", headers=headers),
        api.get("/v1/users/u9%0A/extraction", headers=headers),
        api.get("/v1/memories?user_id=u9%0A", headers=headers),
    ):
        assert response.status_code == 422, response.text
        assert response.json()["detail"]["fields"] == ["user_id"]


def _deep_json(depth: int) -> str:
    return '{"top":' + "[" * (depth - 1) + "1" + "]" * (depth - 1) + "}"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"timestamp": "0001-01-01T00:00:00Z"}, "events[0].timestamp"),
        ({"timestamp": "9999-12-31T23:59:59Z"}, "events[0].timestamp"),
        ({"timestamp": "0001-01-01T00:00:00+05:00"}, "events[0].timestamp"),
        ({"user_id": "u9\n"}, "events[0].user_id"),
        (
            {"type": "tool_run", "tool": "grep", "arguments": {"b": "x" * 3_000_000}},
            "events[0].arguments",
        ),
        (
            {"type": "iot_trigger", "device_id": "d", "trigger": "t", "value": "v" * 3_000_000},
            "events[0].value",
        ),
    ],
)
def test_events_a_worker_could_not_store_are_a_422(
    api: TestClient, caller: tuple[str, dict[str, str]], change: dict[str, Any], field: str
) -> None:
    _, headers = caller
    event = {"type": "typing_start", "user_id": "u-door", **change}
    response = _post(api, "/v1/events", {"events": [event]}, headers)
    assert response.status_code == 422, response.text[:300]
    assert response.json()["detail"]["fields"] == [field]


@pytest.mark.parametrize(
    ("raw_item", "field"),
    [
        ('{"content": "x", "occurred_at": "0001-01-01T00:00:00+05:00"}', "occurred_at"),
        ('{"content": "x", "occurred_at": "9999-12-31T23:59:59-05:00"}', "occurred_at"),
        ('{"content": "x", "metadata": ' + _deep_json(33) + "}", "metadata"),
        ('{"content": "x", "metadata": ' + _deep_json(600) + "}", "metadata"),
        ('{"content": "x", "metadata": {"b": "' + "m" * 20_000 + '"}}', "metadata"),
        ('{"content": "lone \\ud800"}', "content"),
    ],
)
def test_memories_that_would_break_reads_are_a_422(
    api: TestClient, caller: tuple[str, dict[str, str]], raw_item: str, field: str
) -> None:
    _, headers = caller
    raw = '{"user_id": "u-door", "memories": [' + raw_item + "]}"
    response = api.post(
        "/v1/memories",
        content=raw.encode(),
        headers={**headers, "Content-Type": "application/json"},
    )
    assert response.status_code == 422, response.text[:300]
    assert response.json()["detail"]["fields"] == [f"memories[0].{field}"]
    assert api.get("/v1/memories?user_id=u-door", headers=headers).status_code == 200


def test_json_too_deep_to_parse_is_a_4xx(
    api: TestClient, caller: tuple[str, dict[str, str]]
) -> None:
    _, headers = caller
    raw = (
        '{"user_id": "u-door", "memories": [{"content": "x", "metadata": '
        + _deep_json(5000)
        + "}]}"
    )
    response = api.post(
        "/v1/memories",
        content=raw.encode(),
        headers={**headers, "Content-Type": "application/json"},
    )
    assert 400 <= response.status_code < 500, response.text[:300]


def test_procedure_steps_and_entity_names_keep_the_same_rules(
    api: TestClient, caller: tuple[str, dict[str, str]]
) -> None:
    _, headers = caller
    run = {"user_id": "u-door", "query": "find it", "success": 1, "duration_ms": 5}
    deep = json.loads(_deep_json(100))
    response = _post(api, "/v1/procedures", {**run, "tool_sequence": ["search", deep]}, headers)
    assert response.status_code == 422, response.text[:300]
    assert response.json()["detail"]["fields"] == ["tool_sequence[1]"]
    response = api.get("/v1/entities/a%00b/graph?user_id=u-door", headers=headers)
    assert response.status_code == 422, response.text[:300]
    response = api.get("/v1/procedures/suggest?user_id=u-door&query=%ED%A0%80", headers=headers)
    assert response.status_code < 500, response.text[:300]
