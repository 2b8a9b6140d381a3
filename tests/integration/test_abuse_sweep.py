"""An abusive or careless client against the public REST API, on the real Redis and Postgres.

Each test pins one finding of an adversarial sweep of /v1 (the request that triggered it and
what the API must answer instead), or one area the sweep found sound and keeps that way:
no input gives a 5xx, bad input is a 4xx naming the field, nothing is half-written, an event
the door accepted is stored by a real worker, and no tenant, user or agent sees another's rows.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from app.api.app import create_app
from app.config import Settings
from app.db.session import unit_of_work
from app.keys import RedisKeys
from app.services.ingest import IngestService
from app.services.tenants import mint_key
from app.streams.consumer import StreamConsumer
from tests.integration.api_server import prefixed


@pytest.fixture(scope="module")
def api_settings(base_settings: Settings) -> Iterator[Settings]:
    with prefixed(base_settings, "abuse") as settings:
        yield settings


@pytest.fixture(scope="module")
def api(api_settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(api_settings), raise_server_exceptions=False) as test_client:
        yield test_client


def _caller(label: str) -> tuple[str, dict[str, str]]:
    """A tenant of its own and its key's headers."""
    tenant = f"t-abuse-{label}-{uuid.uuid4().hex[:8]}"
    return tenant, {"Authorization": f"Bearer {mint_key(tenant, name=label).key}"}


@pytest.fixture
def caller(api: TestClient) -> tuple[str, dict[str, str]]:
    return _caller("a")


def _post(api: TestClient, path: str, body: Any, headers: dict[str, str]) -> Any:
    """POST as a careless client would: Python's json, surrogates escaped, NaN as NaN."""
    raw = json.dumps(body).encode()
    return api.post(path, content=raw, headers={**headers, "Content-Type": "application/json"})


def _fields(response: Any) -> list[str]:
    assert response.status_code == 422, response.text[:500]
    return list(response.json()["detail"]["fields"])


def _consumer(api: TestClient, settings: Settings) -> StreamConsumer:
    client = api.app.state.engram.redis  # type: ignore[attr-defined]
    service = IngestService(client=client, settings=settings)
    found = StreamConsumer(client=client, settings=settings, handler=service, name="abuse")
    found.ensure_groups()
    return found


def _stream_length(api: TestClient, consumer: StreamConsumer) -> int:
    client = api.app.state.engram.redis  # type: ignore[attr-defined]
    return sum(client.xlen(key) for key in consumer.streams)


def _drain(consumer: StreamConsumer, expected: int) -> int:
    done = 0
    for _ in range(300):
        done += consumer.step(block_ms=10)
        if done >= expected:
            break
    return done


# -- bodies the JSON parser gives up on -----------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        b'{"events": [' + b"[" * 5000 + b"]" * 5000 + b"]}",
        b'{"events": [{"type": "x", "user_id": "u", "payload": {"n": ' + b"7" * 5000 + b"}}]}",
        b'{"user_id": "u", "memories": [{"content": "x", "metadata": '
        + b'{"a":' * 3000
        + b"1"
        + b"}" * 3000
        + b"}]}",
    ],
)
def test_json_the_parser_gives_up_on_is_a_422_naming_the_body(
    api: TestClient, caller: tuple[str, dict[str, str]], raw: bytes
) -> None:
    """Found: JSON nested thousands of levels deep, or holding an integer of over 4,300
    digits, was a bare 400 "There was an error parsing the body" (no `detail.message`, no
    field), unlike every other unreadable body (a 422 naming it)."""
    _, headers = caller
    path = "/v1/memories" if b"memories" in raw else "/v1/events"
    response = api.post(path, content=raw, headers={**headers, "Content-Type": "application/json"})
    assert _fields(response) == ["body"]
    assert response.json()["detail"]["message"].startswith("the body is JSON")


def test_a_body_sent_without_the_json_content_type_is_told_so(
    api: TestClient, caller: tuple[str, dict[str, str]]
) -> None:
    """`curl -d '{...}'` sends form encoding; the 422 says to send JSON as JSON, naming what
    the request said, where pydantic alone only said "a valid dictionary"."""
    _, headers = caller
    body = json.dumps({"user_id": "u-ct", "query": "kayaks"}).encode()
    for kind in ("application/x-www-form-urlencoded", "text/plain"):
        response = api.post("/v1/search", content=body, headers={**headers, "Content-Type": kind})
        assert response.status_code == 422
        message = response.json()["detail"]["message"]
        assert "Content-Type: application/json" in message and kind in message, message
    wrong = _post(api, "/v1/search", {"user_id": "u-ct"}, headers)  # JSON, a field missing
    assert wrong.status_code == 422
    assert "Content-Type" not in wrong.json()["detail"]["message"]


# -- /v1/context: a query that is no procedure pattern ---------------------------------------


@pytest.mark.parametrize("query", [" ", "?!", "...", "x" * 8000, "a " * 2500])
def test_context_answers_a_query_that_is_no_procedure_pattern(
    api: TestClient, caller: tuple[str, dict[str, str]], query: str
) -> None:
    """Found: POST /v1/context with a query of only punctuation or spaces, or over 4,000
    characters (the context allows 8,000), was a 500: the procedural suggestion's own
    validation (a ValueError) escaped. Such a query simply has no suggestion."""
    _, headers = caller
    response = _post(api, "/v1/context", {"user_id": "u-ctx", "query": query}, headers)
    assert response.status_code == 200, response.text[:500]
    assert response.json()["parts"]["procedure"] is None


def test_context_still_suggests_a_procedure_for_a_normal_query(
    api: TestClient, caller: tuple[str, dict[str, str]]
) -> None:
    """The fix above only drops suggestions for queries that cannot be a pattern."""
    _, headers = caller
    procedure = {
        "user_id": "u-proc",
        "query": "book a flight to Rome",
        "tool_sequence": ["search_flights", "book"],
        "success": 1,
        "duration_ms": 10,
    }
    assert _post(api, "/v1/procedures", procedure, headers).status_code == 201
    body = {"user_id": "u-proc", "query": "book a flight to Rome"}
    response = _post(api, "/v1/context", body, headers)
    assert response.status_code == 200, response.text[:500]
    assert response.json()["parts"]["procedure"] is not None


# -- blank memory content -----------------------------------------------------------------


BLANK = [" ", "\t\n", "\u3000", "\u200b", "\u200b\u200e\u202e", "\ufeff "]


@pytest.mark.parametrize("content", BLANK)
def test_a_blank_memory_is_refused(
    api: TestClient, caller: tuple[str, dict[str, str]], content: str
) -> None:
    """Found: POST /v1/memories (and /v1/knowledge) with content " " or a zero-width space
    was a 201 that stored a memory whose content is "" (or invisible), which every search and
    context of the user then carried. It must be a 422 naming the content, nothing stored."""
    _, headers = caller
    good = {"content": "Maya keeps her bike in the garage."}
    body = {"user_id": "u-blank", "memories": [good, {"content": content}]}
    assert _fields(_post(api, "/v1/memories", body, headers)) == ["memories[1].content"]
    knowledge = {"memories": [{"content": content}]}
    assert _fields(_post(api, "/v1/knowledge", knowledge, headers)) == ["memories[0].content"]
    listed = api.get("/v1/memories?user_id=u-blank", headers=headers)
    assert listed.status_code == 200
    assert listed.json()["memories"] == []  # the good one of the batch neither
    assert api.get("/v1/knowledge", headers=headers).json()["memories"] == []


@pytest.mark.parametrize("content", BLANK)
def test_a_blank_edit_is_refused(
    api: TestClient, caller: tuple[str, dict[str, str]], content: str
) -> None:
    """Found: PATCH /v1/memories/{id} with content " " wrote an empty new version (or, once
    one existed, answered 409 "already says this" about the empty memory). A 422 instead,
    and the memory keeps its wording."""
    _, headers = caller
    body = {"user_id": "u-edit", "memories": [{"content": "Omar's dentist is Dr. Lee."}]}
    stored = _post(api, "/v1/memories", body, headers)
    memory_id = stored.json()["memories"][0]["id"]
    edit = api.patch(f"/v1/memories/{memory_id}", json={"content": content}, headers=headers)
    assert _fields(edit) == ["content"]
    history = api.get(f"/v1/memories/{memory_id}/history", headers=headers).json()
    assert [v["content"] for v in history["versions"]] == ["Omar's dentist is Dr. Lee."]


def test_visible_text_around_invisible_characters_is_kept(
    api: TestClient, caller: tuple[str, dict[str, str]]
) -> None:
    """Only wholly blank content is refused: RTL text, emoji and a joiner inside are text."""
    _, headers = caller
    contents = [
        "\u05e9\u05dc\u05d5\u05dd \u202bRTL\u202c",
        "\U0001f468\u200d\U0001f373 cooks",
        "\u200bx",
    ]
    body = {"user_id": "u-visible", "memories": [{"content": c} for c in contents]}
    response = _post(api, "/v1/memories", body, headers)
    assert response.status_code == 201, response.text[:500]
    assert len({m["id"] for m in response.json()["memories"]}) == 3


@pytest.mark.parametrize("subject", [" ", "\u200b", "\t\u200e"])
def test_a_blank_subject_supersedes_nothing(
    api: TestClient, caller: tuple[str, dict[str, str]], subject: str
) -> None:
    """Found: two unrelated memories sent with subject " " and different values were taken
    as two values of one subject: the second superseded the first, which left every list,
    search and context (data lost to a careless client). A blank subject is no subject, as
    "" already was."""
    _, headers = caller
    user = f"u-subject-{uuid.uuid4().hex[:6]}"
    for content, value in (
        ("Nina's favourite colour is teal.", "teal"),
        ("Nina works at the harbour office.", "harbour"),
    ):
        body = {
            "user_id": user,
            "memories": [{"content": content, "subject": subject, "value": value}],
        }
        assert _post(api, "/v1/memories", body, headers).status_code == 201
    listed = api.get(f"/v1/memories?user_id={user}", headers=headers).json()["memories"]
    assert sorted(m["content"] for m in listed) == [
        "Nina works at the harbour office.",
        "Nina's favourite colour is teal.",
    ]


# -- /v1/search: since after until ----------------------------------------------------------


@pytest.mark.parametrize(
    ("since", "until"),
    [
        ("2027-01-01T00:00:00Z", "2026-01-01T00:00:00Z"),
        ("2026-01-01T00:00:01", "2026-01-01T00:00:00Z"),  # naive (UTC) against aware
        ("2026-01-01T00:00:00-01:00", "2026-01-01T00:30:00+00:00"),
    ],
)
def test_since_after_until_is_a_422(
    api: TestClient, caller: tuple[str, dict[str, str]], since: str, until: str
) -> None:
    """Found: POST /v1/search with `since` after `until` answered 200 with no hits, as if
    the user had nothing, instead of saying the window is empty by mistake."""
    _, headers = caller
    body = {"user_id": "u-window", "query": "garden", "since": since, "until": until}
    assert _fields(_post(api, "/v1/search", body, headers)) == ["since", "until"]


def test_a_number_that_is_no_number_is_a_422(
    api: TestClient, caller: tuple[str, dict[str, str]]
) -> None:
    """NaN and Infinity are JSON Python reads. A bounded field refused them only through its
    range ("less than or equal to 1" for NaN, which is no number at all); every request model
    now says what they are."""
    _, headers = caller
    for value in ("NaN", "Infinity", "-Infinity"):
        raw = f'{{"user_id": "u-nan", "query": "kayaks", "min_importance": {value}}}'.encode()
        response = api.post(
            "/v1/search", content=raw, headers={**headers, "Content-Type": "application/json"}
        )
        assert response.status_code == 422, (value, response.text[:300])
        assert _fields(response) == ["min_importance"]
        assert "finite number" in response.json()["detail"]["message"]


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/search", {"user_id": "u-t", "query": "kayaks", "limit": "7"}, "limit"),
        ("/v1/search", {"user_id": "u-t", "query": "kayaks", "limit": True}, "limit"),
        ("/v1/search", {"user_id": "u-t", "query": "kayaks", "limit": 7.5}, "limit"),
        ("/v1/search", {"user_id": "u-t", "query": "kayaks", "record": 0}, "record"),
        (
            "/v1/search",
            {"user_id": "u-t", "query": "x", "include_knowledge": "no"},
            "include_knowledge",
        ),
        (
            "/v1/search",
            {"user_id": "u-t", "query": "kayaks", "min_importance": "0.5"},
            "min_importance",
        ),
        (
            "/v1/context",
            {"user_id": "u-t", "query": "kayaks", "token_budget": "900"},
            "token_budget",
        ),
        ("/v1/memories", {"user_id": "u-t", "memories": [{"content": "x"}], "shared": 1}, "shared"),
        (
            "/v1/memories",
            {"user_id": "u-t", "memories": [{"content": "Kayaks.", "importance": "1"}]},
            "memories[0].importance",
        ),
    ],
)
def test_a_value_of_another_json_type_is_a_422(
    api: TestClient, caller: tuple[str, dict[str, str]], path: str, body: Any, field: str
) -> None:
    """Found by fuzzing against the OpenAPI schema: lax parsing took "7" and true for an
    integer, 0 and "no" for a boolean, "0.5" for a number, where the schema the clients are
    generated from says integer, boolean and number. Each is now refused, naming the field;
    nothing was stored."""
    tenant, headers = caller
    assert _fields(_post(api, path, body, headers)) == [field]
    with unit_of_work(tenant) as session:
        assert session.scalar(text("SELECT count(*) FROM semantic.memories")) == 0


def test_an_integral_number_is_an_integer(
    api: TestClient, caller: tuple[str, dict[str, str]]
) -> None:
    """JSON Schema counts 7.0 as an integer, so a client may send it."""
    _, headers = caller
    found = _post(api, "/v1/search", {"user_id": "u-t", "query": "kayaks", "limit": 7.0}, headers)
    assert found.status_code == 200, found.text[:300]


def test_a_method_a_path_does_not_take_lists_every_one_it_does(
    api: TestClient, caller: tuple[str, dict[str, str]]
) -> None:
    """Found: a 405's Allow named the methods of the first route on the path only
    ("POST" for /v1/memories, which also answers GET)."""
    _, headers = caller
    memory = f"/v1/memories/{uuid.uuid4()}"
    for method, path, allowed in [
        ("OPTIONS", "/v1/memories", "GET, POST"),
        ("PUT", memory, "GET, PATCH, DELETE"),
        ("GET", "/v1/search", "POST"),
    ]:
        response = api.request(method, path, headers=headers)
        assert response.status_code == 405, (method, path)
        assert response.headers["allow"] == allowed, (method, path)


def test_a_user_id_in_the_path_is_refused_as_the_schema_says(
    api: TestClient, caller: tuple[str, dict[str, str]]
) -> None:
    """The path's user id was checked by hand after the schema had called it any string; the
    schema now states the pattern, and the answer names it."""
    _, headers = caller
    schema = api.get("/openapi.json").json()
    for path, method in [
        ("/v1/users/{user_id}", "delete"),
        ("/v1/users/{user_id}/extraction", "get"),
        ("/v1/users/{user_id}/extraction/flush", "post"),
    ]:
        (param,) = [p for p in schema["paths"][path][method]["parameters"] if p["in"] == "path"]
        assert param["schema"]["pattern"].startswith("^[A-Za-z0-9]")
    for method, path in [
        ("DELETE", "/v1/users/~knowledge"),
        ("GET", "/v1/users/~knowledge/extraction"),
        ("POST", "/v1/users/~knowledge/extraction/flush"),
    ]:
        response = api.request(method, path, headers=headers)
        assert _fields(response) == ["user_id"], (method, path)
        assert "should match pattern" in response.json()["detail"]["message"]


@pytest.mark.parametrize(
    ("since", "until"),
    [
        ("2026-01-01T00:00:00", "2026-01-01T00:00:00Z"),  # equal, naive against aware
        ("0001-01-01T00:00:00+05:00", "9999-12-31T23:59:59-05:00"),  # past every range end
        ("2026-01-01T00:00:00+14:00", "2025-12-31T10:00:00Z"),  # the same instant
    ],
)
def test_windows_that_are_not_reversed_are_searched(
    api: TestClient, caller: tuple[str, dict[str, str]], since: str, until: str
) -> None:
    _, headers = caller
    body = {"user_id": "u-window", "query": "garden", "since": since, "until": until}
    for unit in ("turns", "memories"):
        response = _post(api, "/v1/search", {**body, "unit": unit}, headers)
        assert response.status_code == 200, response.text[:500]


# -- /v1/events: one external id, two events --------------------------------------------------


def _turn(external_id: str, content: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": "turn",
        "user_id": "u-dup",
        "role": "user",
        "content": content,
        "external_id": external_id,
        "timestamp": "2026-03-01T10:00:00Z",
        **extra,
    }


def test_two_different_events_under_one_external_id_are_refused(
    api: TestClient, api_settings: Settings, caller: tuple[str, dict[str, str]]
) -> None:
    """Found: a batch holding two turns with one external_id but different content answered
    202 `accepted: 2` with the same id twice; the worker stored the first and dropped the
    second, which the client had been told was accepted. The batch is refused instead, the
    later event named, and nothing is queued."""
    _, headers = caller
    consumer = _consumer(api, api_settings)
    before = _stream_length(api, consumer)
    batch = [
        _turn("dup-1", "We meet on Monday."),
        _turn("other", "Fine."),
        _turn("dup-1", "We meet on Tuesday."),
    ]
    later = _turn("other", "Fine.", timestamp="2026-03-01T10:05:00Z")
    response = _post(api, "/v1/events", {"events": batch}, headers)
    assert _fields(response) == ["events[2].external_id"]
    assert "events[0]" in response.json()["detail"]["message"]
    response = _post(api, "/v1/events", {"events": [batch[1], later]}, headers)
    assert _fields(response) == ["events[1].external_id"]  # same words, another time
    assert _stream_length(api, consumer) == before


@pytest.mark.parametrize(
    "change",
    [
        {},
        {"tenant_id": None},  # the key's tenant, said or not
        {"metadata": {}},  # no metadata, said or not
        {"timestamp": "2026-03-01T11:00:00+01:00"},  # the same instant
    ],
)
def test_a_resent_event_within_one_batch_is_still_accepted(
    api: TestClient,
    api_settings: Settings,
    caller: tuple[str, dict[str, str]],
    change: dict[str, Any],
) -> None:
    """The same event twice (a retry folded into one batch) stays harmless: one id, stored
    once, however it is spelt."""
    tenant, headers = caller
    consumer = _consumer(api, api_settings)
    same = _turn("dup-2", "Pack the tent.", tenant_id=tenant)
    response = _post(api, "/v1/events", {"events": [same, {**same, **change}]}, headers)
    assert response.status_code == 202, response.text[:500]
    ids = response.json()["ids"]
    assert len(ids) == 2 and ids[0] == ids[1]
    assert _drain(consumer, 2) >= 2
    with unit_of_work(tenant) as session:
        stored = session.execute(
            text("SELECT count(*) FROM episodic.turns WHERE external_id = 'dup-2'")
        ).scalar_one()
    assert stored == 1


def test_a_resent_event_without_a_time_is_still_accepted(
    api: TestClient, caller: tuple[str, dict[str, str]]
) -> None:
    """Without a timestamp each copy is parsed at its own instant: still the same event."""
    _, headers = caller
    same = {k: v for k, v in _turn("dup-3", "Bring water.").items() if k != "timestamp"}
    response = _post(api, "/v1/events", {"events": [same, dict(same)]}, headers)
    assert response.status_code == 202, response.text[:500]


# -- what the door accepts, a worker stores ---------------------------------------------------


def test_odd_events_the_door_accepts_are_stored_by_a_worker(
    api: TestClient, api_settings: Settings, caller: tuple[str, dict[str, str]]
) -> None:
    """Whitespace-only and zero-width turns, empty and blank speakers, RTL channels, the
    range's end timestamps and huge finite numbers are accepted: a real consumer must then
    store every one of them, dead-letter none, and reads of the user must still answer."""
    tenant, headers = caller
    consumer = _consumer(api, api_settings)
    user = {"user_id": "u-odd"}
    batch: list[dict[str, Any]] = [
        _turn("odd-1", " ", **user),
        _turn("odd-2", "\u200b", **user),
        _turn("odd-3", "speaker empty", speaker="", **user),
        _turn("odd-4", "speaker blank", speaker=" ", **user),
        _turn("odd-5", "\u202eright to left\u202c \U0001f600", channel="\u202ertl", **user),
        _turn("odd-6", "at the start", timestamp="1970-01-01T00:00:00Z", **user),
        _turn("odd-7", "at the end", timestamp="2200-01-01T00:00:00Z", **user),
        _turn("odd-8", "offset end", timestamp="2199-12-31T19:00:00-05:00", **user),
        {"type": "tool_run", "tool": "t", "duration_ms": 1e308, **user},
        {"type": "iot_trigger", "device_id": "d", "trigger": "t", "value": -1e308, **user},
        {"type": "channel_switch", "channel": "\u2028x", "from_channel": " ", **user},
        {"type": "sensor.reading", "payload": {"": {"\u200b": [None, True, 1e308]}}, **user},
    ]
    response = _post(api, "/v1/events", {"events": batch}, headers)
    assert response.status_code == 202, response.text[:500]
    ids = response.json()["ids"]
    assert _drain(consumer, len(ids)) >= len(ids)
    client = api.app.state.engram.redis  # type: ignore[attr-defined]
    assert consumer.stats.entry_failures == 0, consumer.stats.last_error
    assert client.xlen(RedisKeys.from_settings(api_settings).dead_letters()) == 0
    with unit_of_work(tenant) as session:
        found = session.execute(
            text(
                "SELECT id::text FROM episodic.turns WHERE id = ANY(CAST(:ids AS uuid[]))"
                " UNION SELECT id::text FROM episodic.events"
                " WHERE id = ANY(CAST(:ids AS uuid[]))"
            ),
            {"ids": ids},
        ).scalars()
        assert set(found) == set(ids)
    for path in ("/v1/search", "/v1/context"):
        read = _post(api, path, {"user_id": "u-odd", "query": "speaker"}, headers)
        assert read.status_code == 200, read.text[:500]
    assert api.get("/v1/users/u-odd/extraction", headers=headers).status_code == 200


def test_a_blank_speaker_is_no_speaker(
    api: TestClient, api_settings: Settings, caller: tuple[str, dict[str, str]]
) -> None:
    """Found: a turn with speaker " " (or "", or a zero-width space) was stored with that
    speaker, and the context block showed it as `[…] : words`, a line naming no one. A blank
    speaker is no speaker: stored as null, and the turn shown by its role."""
    tenant, headers = caller
    consumer = _consumer(api, api_settings)
    batch = [
        _turn(f"blank-{n}", f"blank speaker {n} talks about kayaks", speaker=speaker)
        for n, speaker in enumerate([" ", "", "\u200b", "\t"])
    ]
    response = _post(api, "/v1/events", {"events": batch}, headers)
    assert response.status_code == 202, response.text[:500]
    assert _drain(consumer, len(batch)) >= len(batch)
    with unit_of_work(tenant) as session:
        speakers = session.execute(
            text("SELECT speaker FROM episodic.turns WHERE external_id LIKE 'blank-%'")
        ).scalars()
        assert list(speakers) == [None] * len(batch)
    body = {"user_id": "u-dup", "query": "kayaks"}
    block = _post(api, "/v1/context", body, headers).json()["text"]
    assert "blank speaker 0 talks" in block
    assert "] : " not in block and "- : " not in block, block


def test_a_blank_message_is_stored_but_not_shown(
    api: TestClient, api_settings: Settings, caller: tuple[str, dict[str, str]]
) -> None:
    """A chat can send an empty message (spaces, a zero-width space): it is stored as sent,
    but the context block shows no line without words for it."""
    _, headers = caller
    consumer = _consumer(api, api_settings)
    batch = [_turn(f"empty-{n}", content) for n, content in enumerate([" ", "\u200b\u200b"])]
    batch.append(_turn("empty-words", "the canoe trip starts at dawn"))
    response = _post(api, "/v1/events", {"events": batch}, headers)
    assert response.status_code == 202, response.text[:500]
    assert _drain(consumer, len(batch)) >= len(batch)
    block = _post(api, "/v1/context", {"user_id": "u-dup", "query": "canoe"}, headers)
    lines = block.json()["text"].splitlines()
    assert any("the canoe trip starts at dawn" in line for line in lines)
    assert not [line for line in lines if line.rstrip().endswith(":")], lines


# -- no 5xx from odd queries, cursors and ids ------------------------------------------------


ODD_QUERIES = [
    "?!.,;:",
    "the a of and",
    "12345 678",
    "on 31 February",
    "on 29 February 2023",
    "in the year 0",
    "last 99999999 days",
    "99999999 days ago",
    "next 99999999999999999999 weeks",
    "in 2201",
    "in 1969",
    "yesterday at 25:00",
    "' OR 1=1 --",
    "&|!():*<->",
    "%_\\",
    "\u200b\u200b",
    "\u202e\u202d",
    "\U0001f642\U0001f642",
]


@pytest.mark.parametrize("query", ODD_QUERIES)
def test_odd_queries_are_answered(
    api: TestClient, caller: tuple[str, dict[str, str]], query: str
) -> None:
    _, headers = caller
    for path, extra in (
        ("/v1/search", {}),
        ("/v1/search", {"unit": "memories", "include_knowledge": True}),
        ("/v1/context", {}),
    ):
        body = {"user_id": "u-query", "query": query, **extra}
        response = _post(api, path, body, headers)
        assert response.status_code == 200, (path, response.text[:500])


def _cursor(*parts: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(list(parts)).encode()).decode()


@pytest.mark.parametrize(
    "cursor",
    [
        _cursor("0001-01-01T00:00:00+14:00", str(uuid.uuid4())),
        _cursor("9999-12-31T23:59:59-14:00", str(uuid.uuid4())),
        _cursor("2026-01-01T00:00:00", str(uuid.uuid4())),  # naive
        _cursor("2026-01-01", "00000000-0000-0000-0000-000000000000"),
    ],
)
def test_crafted_cursors_page_or_are_refused(
    api: TestClient, caller: tuple[str, dict[str, str]], cursor: str
) -> None:
    _, headers = caller
    for path in (f"/v1/memories?user_id=u-page&cursor={cursor}", f"/v1/knowledge?cursor={cursor}"):
        response = api.get(path, headers=headers)
        assert response.status_code in (200, 422), response.text[:500]


# -- isolation: tenants, users, agents --------------------------------------------------------


def test_another_tenants_ids_are_not_found_on_every_memory_route(api: TestClient) -> None:
    """Every route naming a memory by id answers another tenant's memory, private memory or
    knowledge as unknown (404), and changes nothing."""
    _, owner = _caller("owner")
    _, stranger = _caller("stranger")
    ids = [
        _post(api, "/v1/memories", body, owner).json()["memories"][0]["id"]
        for body in (
            {"user_id": "alice", "memories": [{"content": "Alice's locker code is 4512."}]},
            {
                "user_id": "alice",
                "agent_id": "planner",
                "memories": [{"content": "Alice plans to move to Oslo."}],
            },
        )
    ]
    knowledge = {"memories": [{"content": "Refunds take 30 days."}]}
    ids.append(_post(api, "/v1/knowledge", knowledge, owner).json()["memories"][0]["id"])
    for memory_id in ids:
        for method, path in (
            ("GET", f"/v1/memories/{memory_id}"),
            ("GET", f"/v1/memories/{memory_id}/history"),
            ("GET", f"/v1/memories/{memory_id}/related"),
            ("GET", f"/v1/memories/{memory_id}/importance"),
            ("GET", f"/v1/memories/{memory_id}/entities"),
            ("POST", f"/v1/memories/{memory_id}/restore"),
            ("DELETE", f"/v1/memories/{memory_id}?with_trace=true"),
            ("DELETE", f"/v1/knowledge/{memory_id}"),
        ):
            response = api.request(method, path, headers=stranger)
            assert response.status_code == 404, (method, path, response.text[:300])
        edit = api.patch(
            f"/v1/memories/{memory_id}", json={"content": "B was here"}, headers=stranger
        )
        assert edit.status_code == 404, edit.text[:300]
    for memory_id in ids[::2]:  # the owner still reads them unchanged (not the private one)
        found = api.get(f"/v1/memories/{memory_id}", headers=owner)
        assert found.status_code == 200 and "B was here" not in found.text


def test_an_agents_private_entity_is_not_found_by_a_request_naming_no_agent(
    api: TestClient, caller: tuple[str, dict[str, str]]
) -> None:
    """Found: a planner's private memory "Alice plans to move to Oslo." makes the entity
    "Oslo" (with its mention count) answer 200 on GET /v1/entities/Oslo/graph for a request
    naming no agent or another agent: the graph's nodes reveal what a private memory said."""
    _, headers = caller
    body = {
        "user_id": "alice",
        "agent_id": "planner",
        "memories": [{"content": "Alice secretly plans to move to Oslo."}],
    }
    assert _post(api, "/v1/memories", body, headers).status_code == 201
    owner = api.get("/v1/entities/Oslo/graph?user_id=alice&agent_id=planner", headers=headers)
    assert owner.status_code == 200, owner.text[:300]
    for query in ("", "&agent_id=chef"):
        other = api.get(f"/v1/entities/Oslo/graph?user_id=alice{query}", headers=headers)
        assert other.status_code == 404, other.text[:300]
    # Once a memory every agent reads names it too, each reader counts what it may see.
    body = {"user_id": "alice", "memories": [{"content": "Alice loved the jazz festival in Oslo."}]}
    shared = _post(api, "/v1/memories", body, headers)
    assert shared.status_code == 201
    entities = api.get(
        f"/v1/memories/{shared.json()['memories'][0]['id']}/entities", headers=headers
    )
    assert [(e["name"], e["mention_count"]) for e in entities.json()["entities"]] == [("Oslo", 1)]
    counts = {
        query: api.get(f"/v1/entities/Oslo/graph?user_id=alice{query}", headers=headers)
        for query in ("", "&agent_id=chef", "&agent_id=planner")
    }
    assert {q: r.json()["entity"]["mention_count"] for q, r in counts.items()} == {
        "": 1,
        "&agent_id=chef": 1,
        "&agent_id=planner": 2,
    }
