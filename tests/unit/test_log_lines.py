"""JSON log lines and the ids bound to them (app/logs.py, app/api/log_ids.py), the quantile
behind the ingest delay metric, and the settings that switch both on."""

from __future__ import annotations

import json
import logging
import sys
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from app.api.log_ids import request_id, user_in_body
from app.config import Settings
from app.logs import (
    JsonFormatter,
    batch_log_ids,
    close_context,
    current_ids,
    log_context,
    open_context,
)
from app.metrics import quantile


def line(message: str = "hello", exc: bool = False) -> dict[str, object]:
    record = logging.LogRecord("engram.test", logging.INFO, __file__, 1, message, None, None)
    if exc:
        try:
            raise ValueError("boom")
        except ValueError:
            record.exc_info = sys.exc_info()
    return dict(json.loads(JsonFormatter().format(record)))


def test_a_line_has_the_fields_and_the_bound_ids() -> None:
    with log_context(tenant_id="acme", user_id="ann"):
        out = line("stored 3 turns")
    assert out["message"] == "stored 3 turns"
    assert out["level"] == "INFO" and out["logger"] == "engram.test"
    assert str(out["time"]).endswith("+00:00")
    assert (out["tenant_id"], out["user_id"]) == ("acme", "ann")
    assert "tenant_id" not in line()


def test_inner_contexts_add_and_restore() -> None:
    with log_context(tenant_id="acme", request_id="r1"):
        with log_context(user_id="ann", tenant_id=None):
            assert current_ids() == {"request_id": "r1", "tenant_id": "acme", "user_id": "ann"}
        assert current_ids() == {"request_id": "r1", "tenant_id": "acme"}
    assert current_ids() == {}


def test_callables_are_read_when_the_line_is_written() -> None:
    state: dict[str, str] = {}
    with log_context(tenant_id=lambda: state.get("tenant")):
        assert "tenant_id" not in line()
        state["tenant"] = "acme"
        assert line()["tenant_id"] == "acme"


def test_batches_name_one_tenant_once_and_every_batch() -> None:
    with batch_log_ids([["acme", "b2"], ["acme", "b1"]]):
        assert current_ids() == {"tenant_id": "acme", "extraction_batch_id": ["b1", "b2"]}
    with batch_log_ids([]):
        assert current_ids() == {}


def test_exceptions_travel_as_one_string() -> None:
    out = line(exc=True)
    assert "ValueError: boom" in str(out["exception"])


def test_threads_never_share_ids() -> None:
    seen: dict[str, dict[str, object]] = {}
    barrier = threading.Barrier(2)

    def work(name: str) -> None:
        with log_context(batch_id=name):
            barrier.wait()
            seen[name] = dict(current_ids())

    threads = [threading.Thread(target=work, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {"a": {"batch_id": "a"}, "b": {"batch_id": "b"}}


def test_a_context_opened_by_one_signal_is_closed_by_another() -> None:
    open_context("task-1", task_id="task-1", task_name="engram.x")
    assert current_ids() == {"task_id": "task-1", "task_name": "engram.x"}
    close_context("task-1")
    close_context("task-1")  # a second close (or one never opened) changes nothing
    assert current_ids() == {}


def test_request_ids_are_kept_only_when_plain() -> None:
    assert request_id({"headers": [(b"x-request-id", b"abc-1.2:3")]}) == "abc-1.2:3"
    fresh = request_id({"headers": [(b"x-request-id", b"bad id\n" + b"x" * 100)]})
    assert len(fresh) == 32 and fresh.isalnum()


def test_the_user_is_read_from_a_json_body() -> None:
    assert user_in_body(b'{"user_id": "ann", "query": "q"}') == "ann"
    assert user_in_body(b'{"user_id": "bad id"}') is None
    assert user_in_body(b'[{"user_id": "ann"}]') is None
    assert user_in_body(b'{"user_id": 3}') is None


@given(st.binary(max_size=300))
def test_no_body_breaks_the_user_lookup(body: bytes) -> None:
    user = user_in_body(body)
    assert user is None or isinstance(user, str)


@given(st.lists(st.floats(0, 1e6), min_size=1, max_size=200), st.floats(0.01, 1))
def test_quantile_is_the_nearest_rank(values: list[float], q: float) -> None:
    ordered = sorted(values)
    found = quantile(ordered, q)
    assert found in ordered
    assert sum(v <= found for v in ordered) >= q * len(ordered)
    assert sum(v < found for v in ordered) < q * len(ordered)


def test_a_short_metrics_token_is_refused() -> None:
    with pytest.raises(ValidationError, match="at least 16 characters"):
        Settings(metrics_token="short")
    assert Settings(metrics_token="x" * 16).metrics_token is not None
    assert Settings(metrics_token="").metrics_token is None


def test_log_format_is_text_or_json() -> None:
    assert Settings.model_fields["log_format"].default == "text"
    with pytest.raises(ValidationError, match="log_format"):
        Settings(log_format="xml")
