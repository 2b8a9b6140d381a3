"""Reading an entry never raises for what it holds; classifying a failure picks its fate."""

from __future__ import annotations

import json

import psycopg
import redis
from hypothesis import given
from hypothesis import strategies as st
from redis.exceptions import ClusterDownError, SlotNotCoveredError
from sqlalchemy.exc import DataError, IntegrityError, OperationalError

from app.streams.dead_letter import FIELD_PREFIX, dead_letter_fields
from app.streams.entries import StreamEntry, decode_entry
from app.streams.events import EventValidationError
from app.streams.failures import is_deterministic, is_transient

pairs = st.lists(st.tuples(st.binary(max_size=12), st.binary(max_size=24)), max_size=6)


@given(pairs)
def test_any_bytes_decode_to_fields_or_to_a_reason_never_to_an_exception(
    raw: list[tuple[bytes, bytes]],
) -> None:
    flat = [part for pair in raw for part in pair]

    entry = decode_entry("s", "1-0", flat)

    assert entry.raw == tuple(raw) and entry.raw_pairs() == tuple(raw)
    try:
        text = [(k.decode(), v.decode()) for k, v in raw]
    except UnicodeDecodeError:
        assert entry.undecodable and "not UTF-8" in entry.undecodable and entry.fields == {}
        return
    if len({k for k, _ in text}) < len(text):
        assert entry.undecodable and "repeated" in entry.undecodable
    else:
        assert entry.undecodable is None and entry.fields == dict(text)


def test_a_field_without_a_value_is_undecodable() -> None:
    entry = decode_entry("s", "1-0", [b"event", b"{}", b"dangling"])
    assert entry.undecodable == "odd number of fields"


def test_a_map_reply_decodes_like_a_flat_one() -> None:
    assert decode_entry("s", "1-0", {b"event": b"{}"}).fields == {"event": "{}"}


@given(pairs)
def test_the_dead_letter_carries_the_raw_fields_in_order(raw: list[tuple[bytes, bytes]]) -> None:
    entry = decode_entry("s", "7-1", [part for pair in raw for part in pair])
    flat = dead_letter_fields(entry, group="ingest", error="x" * 5000, deliveries=2)
    letter = list(zip(flat[::2], flat[1::2], strict=True))

    copied = [
        (k[len(FIELD_PREFIX) :], v)
        for k, v in letter
        if isinstance(k, bytes) and k.startswith(FIELD_PREFIX)
    ]
    assert copied == raw
    meta = {k: v for k, v in letter if isinstance(k, str)}
    assert meta["entry_id"] == "7-1" and meta["deliveries"] == 2 and len(meta["error"]) == 4000


def test_fields_built_in_code_are_encoded_for_the_dead_letter() -> None:
    entry = StreamEntry("s", "1-0", {"event": "é"})
    assert entry.raw_pairs() == ((b"event", "é".encode()),)


def _db_error(kind: type[Exception], cause: Exception) -> Exception:
    return kind("INSERT …", {}, cause)


def test_outages_are_transient() -> None:
    assert is_transient(redis.ConnectionError("down"))
    assert is_transient(ConnectionError("broker down"))
    assert is_transient(ClusterDownError("CLUSTERDOWN The cluster is down"))  # a failover
    assert is_transient(SlotNotCoveredError('Slot "12" is not covered by the cluster.'))
    assert is_transient(_db_error(OperationalError, psycopg.OperationalError("refused")))
    assert is_transient(_db_error(OperationalError, psycopg.errors.DeadlockDetected("x")))
    assert is_transient(_db_error(OperationalError, psycopg.errors.AdminShutdown("x")))


def test_what_the_entry_causes_is_not_transient() -> None:
    """psycopg files a too-large index row under OperationalError: still the entry's fault,
    and retrying it forever would hold its partition back."""
    too_large = psycopg.errors.ProgramLimitExceeded("index row size exceeds maximum")
    assert not is_transient(_db_error(OperationalError, too_large))
    assert not is_transient(_db_error(DataError, psycopg.DataError("NUL")))
    assert not is_transient(_db_error(IntegrityError, psycopg.errors.UniqueViolation("x")))
    assert not is_transient(ValueError("bad"))


def test_validation_and_decoding_failures_are_deterministic() -> None:
    assert is_deterministic(EventValidationError("invalid event", ["content"]))
    assert is_deterministic(json.JSONDecodeError("x", "{", 0))
    assert is_deterministic(UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"))
    assert not is_deterministic(_db_error(DataError, psycopg.DataError("division by zero")))
    assert not is_deterministic(RuntimeError("who knows"))
