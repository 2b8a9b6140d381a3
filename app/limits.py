"""What Engram accepts at the door: the one statement of what its workers and database can
store and read back, shared by the event model and the REST request models.

- **Timestamps** lie between `TIMESTAMP_MIN` (1970-01-01T00:00:00Z) and `TIMESTAMP_MAX`
  (2200-01-01T00:00:00Z), both included, once converted to UTC (a naive one is taken as UTC).
  No conversation predates the Unix epoch, and 2200 leaves any clock-skewed producer room,
  while every sum done on a stored time (session windows, decay, time references, millisecond
  scores in Redis) stays centuries inside Python's datetime (years 1 to 9999) — the range psycopg
  can read back. A time outside it would be accepted and then fail in a worker, or be stored
  and then fail every read of the user's rows.
- **Free-form JSON** (metadata, tool arguments, payloads, procedure steps) is plain JSON —
  objects with string keys, arrays, strings, finite numbers, booleans, null — nested at most
  `MAX_JSON_DEPTH` levels (the value itself is level 1) and under its field's byte cap.
  Recursive encoders (the stdlib's, FastAPI's) give up some hundreds of levels down; 32 is
  far beyond any real metadata and far below any of them.
- **Text** holds no NUL (Postgres text and jsonb refuse it) and no lone surrogate (not UTF-8:
  neither Redis nor Postgres can be sent it). A memory's content also holds something to
  read: whitespace and invisible format characters alone (zero-width spaces, direction
  marks) would be stored as an empty memory that every search and context then carries.
- **A request's times** are RFC 3339 text (an offset may be left out: UTC), or a number of
  seconds since 1970 (milliseconds above 2e10) up to `TIMESTAMP_MAX`; a string of digits,
  a bool or a number out of that range is refused rather than read as some other time.

The validators are code, which pydantic cannot print into a JSON Schema; app/declared.py
says the same in JSON Schema's words, so a client checking requests against the OpenAPI
document refuses what the door refuses, and accepts what it accepts.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Strict

from app.config import get_settings
from app.declared import (
    STORABLE,
    Declared,
    json_object_schema,
    step_schema,
    time_schema,
    visible_pattern,
)

TIMESTAMP_MIN = datetime(1970, 1, 1, tzinfo=UTC)
TIMESTAMP_MAX = datetime(2200, 1, 1, tzinfo=UTC)
MAX_JSON_DEPTH = 32
RANGE_MESSAGE = (
    f"must be between {TIMESTAMP_MIN:%Y-%m-%dT%H:%M:%SZ} and "
    f"{TIMESTAMP_MAX:%Y-%m-%dT%H:%M:%SZ} (UTC)"
)
REPAIRED_MARKER = "_repaired"

_BAD_TEXT = re.compile("[\x00\ud800-\udfff]")
# A request's time as text: RFC 3339, or the same without its offset (taken as UTC) or its
# seconds, on a day of the calendar: `{year}` is the years the field allows, `{leap}` those
# of them with a 29 February.
_TIME_SHAPE = (
    r"^({year}-((0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])|(0[13-9]|1[0-2])-(29|30)"
    r"|(0[13578]|1[02])-31)|{leap}-02-29)[Tt ]([01][0-9]|2[0-3]):[0-5][0-9]"
    r"(:[0-5][0-9](\.[0-9]+)?)?([Zz]|[+-]([01][0-9]|2[0-3]):?[0-5][0-9])?$"
)
_LEAP_ENDINGS = "(0[48]|[2468][048]|[13579][26])"
# Years 0001 to 9999 (Python's datetime has no year 0).
_RFC3339 = re.compile(
    _TIME_SHAPE.format(
        year="(000[1-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-9][0-9]{3})",
        leap=f"([0-9]{{2}}{_LEAP_ENDINGS}|{_LEAP_ENDINGS}00)",
    )
)
# The written years of TIMESTAMP_MIN to TIMESTAMP_MAX, as the schema's hint: an offset can
# still carry a time of 1970-01-01 or 2199-12-31 out of range, which the door then refuses.
_TIME_IN_RANGE = _TIME_SHAPE.format(
    year="(19[7-9][0-9]|2[01][0-9][0-9])",
    leap=f"(19(7[26]|8[048]|9[26])|20(00|{_LEAP_ENDINGS})|21{_LEAP_ENDINGS})",
)


def utc_in_range(value: datetime) -> datetime:
    """The time in UTC, or ValueError when it (or its conversion to UTC) is out of range."""
    try:
        at = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    except (OverflowError, ValueError):
        raise ValueError(RANGE_MESSAGE) from None
    if not TIMESTAMP_MIN <= at <= TIMESTAMP_MAX:
        raise ValueError(RANGE_MESSAGE)
    return at


def text_problem(value: str) -> str | None:
    """Why Postgres or Redis could not take this text, or None."""
    found = _BAD_TEXT.search(value)
    if found is None:
        return None
    if found.group() == "\x00":
        return "must not contain NUL characters"
    return "must be valid Unicode (it holds a lone surrogate)"


def blank_problem(value: str) -> str | None:
    """Why this text has nothing to read (only whitespace or invisible format characters),
    or None."""
    if any(not ch.isspace() and unicodedata.category(ch) != "Cf" for ch in value):
        return None
    return "must contain visible text, not only whitespace or invisible characters"


def refusing(problem_of: Callable[[str], str | None]) -> Callable[[str], str]:
    """A pydantic AfterValidator raising the problem `problem_of` finds in a value."""

    def check(value: str) -> str:
        problem = problem_of(value)
        if problem:
            raise ValueError(problem)
        return value

    return check


def json_problem(value: Any, *, max_bytes: int) -> str | None:
    """Why `value` is not storable JSON within `max_bytes` and MAX_JSON_DEPTH, or None.

    Walked with an explicit stack, so no input (however deep, even cyclic) can exhaust
    Python's recursion; a lower bound of the encoded size stops huge values early."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    floor = 0
    while stack:
        item, depth = stack.pop()
        problem = _item_problem(item, depth)
        if problem:
            return problem
        floor += _size_floor(item)
        if floor > max_bytes:
            return f"is larger than {max_bytes} bytes of JSON"
        if isinstance(item, dict):
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list | tuple):
            stack.extend((child, depth + 1) for child in item)
    try:
        size = json_size(value)
    except ValueError:  # an integer too long to print
        return "holds a number too large to store"
    if size > max_bytes:
        return f"is larger than {max_bytes} bytes of JSON"
    return None


def _item_problem(item: Any, depth: int) -> str | None:
    if isinstance(item, str):
        return text_problem(item)
    if isinstance(item, dict | list | tuple):
        if depth > MAX_JSON_DEPTH:
            return f"must not be nested deeper than {MAX_JSON_DEPTH} levels"
        if isinstance(item, dict):
            for key in item:
                if not isinstance(key, str):
                    return "must have string keys only"
                problem = text_problem(key)
                if problem:
                    return problem
        return None
    if isinstance(item, float):
        return None if math.isfinite(item) else "must not hold NaN or Infinity"
    if item is None or isinstance(item, bool | int):
        return None
    return f"must be plain JSON (found {type(item).__name__})"


def _size_floor(item: Any) -> int:
    """A lower bound of the item's own encoded bytes (children are counted on their own)."""
    if isinstance(item, str):
        return len(item) + 2
    if isinstance(item, dict):
        return 2 + sum(len(key) + 3 for key in item)
    if isinstance(item, list | tuple):
        return 2 + len(item)
    return 1


def json_size(value: Any) -> int:
    """Bytes of the compact UTF-8 JSON encoding (call only on values json_problem accepts)."""
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def within_depth(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """True when `value` nests at most `limit` levels (read paths: cheap, never recursive)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            if depth > limit:
                return False
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list | tuple):
            if depth > limit:
                return False
            stack.extend((child, depth + 1) for child in item)
    return True


def readable_json(value: Any, what: str = "value") -> Any:
    """`value`, or a marker object when it nests too deeply for a response to carry it."""
    if within_depth(value):
        return value
    return {REPAIRED_MARKER: f"{what} nested deeper than {MAX_JSON_DEPTH} levels was withheld"}


def _storable_metadata(value: Any) -> Any:
    problem = json_problem(value, max_bytes=get_settings().max_metadata_bytes)
    if problem:
        raise ValueError(problem)
    return value


# A time may also be a number of seconds since 1970, or of milliseconds above 2e10 (how
# pydantic reads numbers): from the epoch to TIMESTAMP_MAX in either unit.
MS_ABOVE = 2e10
_MAX_S = TIMESTAMP_MAX.timestamp()


def _time_text(value: Any) -> Any:
    """A request's time is RFC 3339 text or a number of seconds (milliseconds above
    MS_ABOVE) since 1970 in range; lax parsing would also read a string of digits, a bool,
    or a number of any size."""
    if isinstance(value, str):
        if _RFC3339.fullmatch(value) is None:
            raise ValueError("must be an RFC 3339 date-time, e.g. 2024-05-01T12:00:00Z")
    elif isinstance(value, int | float) and not isinstance(value, bool):
        if not (0 <= value <= _MAX_S or MS_ABOVE < value <= _MAX_S * 1000):
            raise ValueError(
                "as a number, must be seconds since 1970 up to 2200-01-01"
                f" (milliseconds above {MS_ABOVE:.0e})"
            )
    elif not isinstance(value, datetime):
        raise ValueError("must be an RFC 3339 date-time string, e.g. 2024-05-01T12:00:00Z")
    return value


def integral(value: Any) -> Any:
    """JSON Schema counts 10.0 as an integer; a string, a bool or 10.5 stays refused."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# A request's integers take what the OpenAPI schema's "integer" takes, not what lax parsing
# could coerce ("10", true); booleans and numbers are pydantic's StrictBool and StrictFloat.
WholeNumber = Annotated[int, BeforeValidator(integral), Strict()]
# A time in a request body or an event: RFC 3339 text or epoch seconds (_time_text), in range.
RequestTimestamp = Annotated[
    datetime,
    BeforeValidator(_time_text),
    AfterValidator(utc_in_range),
    Declared(
        lambda: time_schema(_TIME_IN_RANGE, MS_ABOVE, _MAX_S),
        replace=True,
    ),
]
# A time a request filters by (its text of any year: a window may start before any row).
RequestTime = Annotated[
    datetime,
    BeforeValidator(_time_text),
    Declared(lambda: time_schema(_RFC3339.pattern, MS_ABOVE, _MAX_S), replace=True),
]
SafeText = Annotated[str, AfterValidator(refusing(text_problem)), STORABLE]
# A memory's content: storable, and not blank (see the module docstring).
ContentText = Annotated[
    str,
    AfterValidator(refusing(text_problem)),
    AfterValidator(refusing(blank_problem)),
    Declared(lambda: {"pattern": visible_pattern()}),
]
# Client metadata (and each procedure step): storable JSON within ENGRAM_MAX_METADATA_BYTES.
Metadata = Annotated[
    dict[str, Any],
    AfterValidator(_storable_metadata),
    json_object_schema(),
]


JsonStep = Annotated[str | dict[str, Any], AfterValidator(_storable_metadata), step_schema()]
