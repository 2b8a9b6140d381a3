"""app/limits.py: the checks every door shares — timestamps, JSON depth and size, text."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.limits import (
    MAX_JSON_DEPTH,
    REPAIRED_MARKER,
    TIMESTAMP_MAX,
    TIMESTAMP_MIN,
    json_problem,
    json_size,
    readable_json,
    text_problem,
    utc_in_range,
    within_depth,
)


def nested(depth: int) -> dict[str, Any]:
    value: Any = 0
    for level in range(depth - 1):
        value = [value] if level % 2 else {"n": value}
    return {"top": value}


def test_a_naive_time_is_utc_and_an_offset_is_converted() -> None:
    assert utc_in_range(datetime(2026, 1, 1)) == datetime(2026, 1, 1, tzinfo=UTC)
    plus_five = datetime(2026, 1, 1, 5, tzinfo=timezone(timedelta(hours=5)))
    assert utc_in_range(plus_five) == datetime(2026, 1, 1, tzinfo=UTC)


@given(st.datetimes(timezones=st.none() | st.just(UTC) | st.timezones()))
def test_utc_in_range_answers_with_a_time_in_range_or_a_value_error(at: datetime) -> None:
    try:
        found = utc_in_range(at)
    except ValueError as exc:
        assert "between" in str(exc)
        return
    assert TIMESTAMP_MIN <= found <= TIMESTAMP_MAX
    assert found.utcoffset() == timedelta(0)


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 10_000])
def test_depth_past_the_limit_is_named(depth: int) -> None:
    assert json_problem(nested(depth), max_bytes=10**9) == (
        f"must not be nested deeper than {MAX_JSON_DEPTH} levels"
    )
    assert not within_depth(nested(depth))


def test_depth_at_the_limit_passes() -> None:
    assert json_problem(nested(MAX_JSON_DEPTH), max_bytes=10**9) is None
    assert within_depth(nested(MAX_JSON_DEPTH))


def test_a_huge_value_is_refused_before_it_is_encoded() -> None:
    wide = list(range(5_000_000))
    assert json_problem({"n": wide}, max_bytes=1000) == "is larger than 1000 bytes of JSON"


def test_text_problems_are_named() -> None:
    assert text_problem("fine") is None
    assert text_problem("a\x00") == "must not contain NUL characters"
    assert text_problem("a\ud800") == "must be valid Unicode (it holds a lone surrogate)"


def test_read_side_withholds_only_what_is_too_deep() -> None:
    shallow = {"a": [1, {"b": 2}]}
    assert readable_json(shallow) is shallow
    assert set(readable_json(nested(MAX_JSON_DEPTH + 1))) == {REPAIRED_MARKER}


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=20,
)


@given(JSON, st.integers(min_value=2, max_value=400))
def test_accepted_json_is_within_its_cap_and_encodes(value: Any, cap: int) -> None:
    if json_problem(value, max_bytes=cap) is None:
        assert json_size(value) <= cap
        assert json.loads(json.dumps(value, allow_nan=False)) == value
