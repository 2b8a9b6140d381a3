"""The SDK's reading of the wire: what the server answers parses into the SDK's models with no
field left unknown, a newer server's extra fields and nulls do not break an older client, and
refusals become typed errors naming the fields."""

from __future__ import annotations

import dataclasses
import json
import uuid
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import httpx
import pydantic
import pytest
from engram_memory_client import (
    AttachedMemory,
    AuthenticationError,
    Context,
    EngramError,
    EntityGraph,
    ExtractionFlush,
    ExtractionStatus,
    Memory,
    NotFoundError,
    Procedure,
    SearchHit,
    SearchResults,
    Suggestion,
    Turn,
    UnavailableError,
    ValidationError,
)
from engram_memory_client._wire import jsonable, read_reply, retry_after
from engram_memory_client.errors import error_from_response
from engram_memory_client.models import WireModel
from fastapi.encoders import jsonable_encoder
from hypothesis import given
from hypothesis import strategies as st

from app.layers.conceptual.graph import GraphEdge
from app.services import extraction_status, procedures
from app.services import search_models as server
from app.services.context import ContextResult
from app.services.memories import memory_view, turn_view

NOW = datetime(2026, 3, 1, 9, 30, tzinfo=UTC)


def wire(value: Any) -> Any:
    """What the API puts on the wire for a route's return value (FastAPI's encoding, as JSON)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    return json.loads(json.dumps(jsonable_encoder(value)))


def unknown_fields(model: type[pydantic.BaseModel], body: dict[str, Any]) -> set[str]:
    return set(body) - set(model.model_fields)


def test_search_results_from_the_server_parse_with_every_field_known() -> None:
    attached = server.AttachedMemory(
        uuid.uuid4(), "fact", "Alice prefers aisle seats", 0.7, ["prefs"]
    )
    hit = server.SearchHit(
        id=uuid.uuid4(),
        layer="turn",
        kind="turn",
        content="I prefer aisle seats.",
        score=0.8,
        parts={"turn_lexical": 1.0, "fused": 0.03},
        source_turn_ids=["msg-1"],
        session_id=uuid.uuid4(),
        occurred_at=NOW,
        channel="web",
        role="user",
        speaker="Alice",
        event_ids=[str(uuid.uuid4())],
        memories=[attached],
        suspected_instruction=True,
    )
    body = wire(server.SearchResult([hit], "rank", 3.5, time_window=None))
    assert unknown_fields(SearchResults, body) == set()
    assert unknown_fields(SearchHit, body["hits"][0]) == set()
    assert unknown_fields(AttachedMemory, body["hits"][0]["memories"][0]) == set()

    parsed = SearchResults.model_validate(body)
    assert parsed.hits[0].id == hit.id
    assert parsed.hits[0].occurred_at == NOW
    assert parsed.hits[0].memories[0].tags == ["prefs"]
    assert parsed.hits[0].suspected_instruction is True


def test_memories_turns_and_context_from_the_server_parse_with_every_field_known() -> None:
    row = SimpleNamespace(
        id=uuid.uuid4(),
        user_id="alice",
        kind="preference",
        content="Alice prefers aisle seats",
        summary=None,
        original="I prefer aisle seats.",
        topics=["travel"],
        tags=["prefs"],
        importance=0.6,
        emotional_intensity=None,
        consolidation_strength=0.1,
        access_count=2,
        occurred_at=NOW,
        valid_from=NOW,
        valid_to=None,
        superseded_by=None,
        archived_at=None,
        session_id=None,
        channel="web",
        source_external_ids=["msg-1"],
        metadata={"source": "chat"},
        created_at=NOW,
        external_id="msg-1",
        role="user",
        speaker="Alice",
        is_source=True,
    )
    memory = wire({**memory_view(row), "recall": [turn_view(row)]})
    assert unknown_fields(Memory, memory) == set()
    assert unknown_fields(Turn, memory["recall"][0]) == set()
    parsed = Memory.model_validate(memory)
    assert parsed.recall is not None and parsed.recall[0].is_source

    context = wire(ContextResult("ctx", 12, 400, "hit", {"memories": []}, 4.0, ["w"]))
    assert unknown_fields(Context, context) == set()
    assert Context.model_validate(context).prefetch == "hit"


def test_procedures_graphs_and_extraction_status_parse_with_every_field_known() -> None:
    ids = [uuid.uuid4() for _ in range(3)]
    view = procedures.ProcedureView(ids[0], "deploy", ["build"], 2, 1.0, 900.0, 0.4, NOW, NOW)
    suggestion = procedures.Suggestion(ids[0], "deploy", ["build"], 0.4, 0.9, 2, 1.0, 900.0)
    edge = GraphEdge("Erin", "uses", "PostgreSQL", 0.5, 1, ids[1], ids[2], None)
    status = extraction_status.ExtractionStatus("alice", 9, 0, 2, 0, 0, 0, 0, 5)
    flushed = extraction_status.Flushed("alice", 1, 2)
    graph = {
        "entity": {"id": ids[1], "name": "Erin", "kind": "person", "mention_count": 3},
        "edges": [{**dataclasses.asdict(edge), "fact": "Erin —uses→ PostgreSQL"}],
    }
    cases: list[tuple[type[WireModel], Any]] = [
        (Procedure, view),
        (Suggestion, suggestion),
        (ExtractionStatus, status.as_dict()),
        (ExtractionFlush, flushed),
        (EntityGraph, graph),
    ]
    for model, answer in cases:
        body = wire(answer)
        assert unknown_fields(model, body) == set(), model.__name__
        model.model_validate(body)
    parsed = ExtractionStatus.model_validate(wire(status.as_dict()))
    assert (parsed.caught_up, parsed.waiting_for_idle) == (False, True)
    assert parsed.pending == ["2 unclaimed turn(s)"]
    assert EntityGraph.model_validate(wire(graph)).edges[0].fact == "Erin —uses→ PostgreSQL"


def test_a_newer_server_does_not_break_an_older_client() -> None:
    """Fields the client does not know are ignored; a null where a default exists means it."""
    body = {
        "hits": [
            {
                "id": str(uuid.uuid4()),
                "layer": "memory",
                "kind": "fact",
                "content": "x",
                "score": 1,
                "occurred_at": "2026-03-01T09:30:00Z",
                "tags": None,
                "parts": None,
                "a_field_from_the_future": {"nested": True},
            }
        ],
        "fusion": "rank",
        "also_new": 1,
    }
    # The result's one number field, null on the wire.
    number = next(n for n, f in SearchResults.model_fields.items() if f.annotation is float)
    body[number] = None
    parsed = SearchResults.model_validate(body)
    # Nulls read as each field's declared default (the result's number field included).
    nulls = {name for name, value in body.items() if value is None}
    declared = {name: SearchResults.model_fields[name].default for name in nulls}
    assert nulls and parsed.model_dump(include=nulls) == declared
    assert list(declared.values()) == [0.0]  # the one null top-level field: a number, read as 0
    assert parsed.hits[0].tags == []
    assert parsed.hits[0].parts == {}
    assert parsed.hits[0].score == 1.0
    with pytest.raises(pydantic.ValidationError):  # a required field stays required
        SearchResults.model_validate({"hits": [{**body["hits"][0], "content": None}]})
    with pytest.raises(pydantic.ValidationError):  # answers are values, not mutable records
        parsed.hits[0].content = "changed"  # type: ignore[misc]


def test_a_reply_of_the_wrong_shape_is_an_error_naming_the_field() -> None:
    request = httpx.Request("GET", "http://engram.test/v1/stats")
    with pytest.raises(EngramError, match=r"hits\.0\.id") as wrong:
        read_reply(
            httpx.Response(200, json={"hits": [{"id": "x"}]}, request=request), SearchResults
        )
    assert wrong.value.status == 200
    with pytest.raises(EngramError, match="not JSON"):
        read_reply(httpx.Response(200, text="<html>", request=request), SearchResults)


@pytest.mark.parametrize(
    ("status", "body", "kind", "message", "fields"),
    [
        (401, {"detail": "invalid API key"}, AuthenticationError, "invalid API key", []),
        (404, {"detail": "memory x not found"}, NotFoundError, "memory x not found", []),
        (
            422,
            {"detail": {"message": "bad", "fields": ["events[0].role"]}},
            ValidationError,
            "bad",
            ["events[0].role"],
        ),
        (
            422,
            {"detail": [{"loc": ["body", "query"], "msg": "too short"}, "odd"]},
            ValidationError,
            "too short",
            ["query"],
        ),
        (503, {"detail": {"message": "down"}}, UnavailableError, "down", []),
        (418, None, EngramError, "I'm a teapot", []),
    ],
)
def test_refusals_are_typed_errors(
    status: int, body: Any, kind: type[EngramError], message: str, fields: list[str]
) -> None:
    response = httpx.Response(status, json=body) if body is not None else httpx.Response(status)
    error = error_from_response(response)
    assert type(error) is kind
    assert (error.status, error.message, error.fields) == (status, message, fields)


def test_request_values_become_json_the_api_reads() -> None:
    memory_id = uuid.uuid4()
    naive = datetime(2026, 3, 1, 9, 30)
    assert jsonable({"at": naive, "ids": (memory_id,), "n": 1}) == {
        "at": "2026-03-01T09:30:00+00:00",
        "ids": [str(memory_id)],
        "n": 1,
    }
    later = NOW + timedelta(hours=1)
    assert jsonable(later.astimezone()) == later.astimezone().isoformat()


@given(st.text(max_size=60))
def test_any_retry_after_header_is_a_pause_or_nothing(value: str) -> None:
    pause = retry_after(value, now=NOW)  # a fixed clock: a date header is read against it
    assert pause is None or pause >= 0


def test_retry_after_reads_seconds_and_dates() -> None:
    assert retry_after("3") == 3.0
    assert retry_after("-1") == 0.0
    assert retry_after("nan") is None
    at = datetime(2015, 10, 21, 7, 28, tzinfo=UTC)
    assert retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=at + timedelta(hours=1)) == 0.0
    assert retry_after("Wed, 21 Oct 2015 07:28:30 GMT", now=at) == 30.0
    assert retry_after("soon") is None
    assert retry_after(None) is None
