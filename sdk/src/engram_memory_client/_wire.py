"""What travels between the clients and the API: request bodies out, replies in, the steps an
operation asks its driver for, and how long to wait before trying again."""

from __future__ import annotations

import email.utils
import uuid
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, TypeVar

import httpx
import pydantic

from engram_memory_client._version import __version__
from engram_memory_client.errors import EngramError

MAX_RETRY_AFTER_S = 20.0  # the longest pause a Retry-After header can impose
MAX_BACKOFF_S = 10.0
USER_AGENT = f"engram-memory-client/{__version__}"
JSON_CONTENT = {"Content-Type": "application/json"}

T = TypeVar("T")
M = TypeVar("M", bound=pydantic.BaseModel)


@dataclass(frozen=True)
class Send:
    """Step: send this request (the driver builds it with its own httpx client)."""

    method: str
    path: str
    params: dict[str, Any] | None
    content: bytes | None


@dataclass(frozen=True)
class Sleep:
    """Step: wait this long (between retries, or between polls)."""

    seconds: float


Outcome = httpx.Response | httpx.TransportError | None
# An operation: yields the steps it needs, is sent what happened, returns its result.
Op = Generator[Send | Sleep, Outcome, T]


def check_client_args(base_url: str, api_key: str) -> None:
    """Refuse, when the client is made, a URL or key no request could be sent with: they would
    otherwise fail at each call as "no answer from the Engram API" after every retry (or as a
    UnicodeEncodeError for a key that is not ASCII)."""
    try:
        url = httpx.URL(base_url)
    except (httpx.InvalidURL, TypeError) as exc:
        raise ValueError(f"base_url {base_url!r} is not a URL ({exc})") from None
    if url.scheme not in ("http", "https") or not url.host:
        raise ValueError(
            f"base_url must be the API's http(s) address, like http://127.0.0.1:8080, "
            f"not {base_url!r}"
        )
    if not isinstance(api_key, str) or not api_key or not api_key.isascii():
        raise ValueError("api_key must be a non-empty ASCII string (an Engram API key)")
    if not api_key.isprintable() or any(c.isspace() for c in api_key):
        raise ValueError("api_key must not hold spaces, newlines or control characters")


def client_headers(api_key: str) -> dict[str, str]:
    """The headers of every request: the key, JSON wanted, and who is asking."""
    return {
        "Authorization": f"Bearer {api_key}",
        "Accept": "application/json",
        "User-Agent": USER_AGENT,
    }


def jsonable(value: Any) -> Any:
    """Datetimes as ISO 8601 (naive ones taken as UTC, as the API does), UUIDs as text."""
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=timezone.utc)).isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


def read_reply(response: httpx.Response, into: type[M]) -> M:
    """The answer as its model; a reply that is not JSON, or not the expected shape, did not
    come from an Engram API this client understands, and says so."""
    try:
        body = response.json()
    except ValueError:
        raise EngramError(
            response.status_code,
            f"the reply is not JSON (is {response.url} the Engram API?): {response.text[:200]}",
        ) from None
    try:
        return into.model_validate(body)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "the body"
        raise EngramError(
            response.status_code,
            f"unexpected reply from {response.request.method} {response.url.path}: "
            f"{where}: {first['msg']} (is {response.url.host} an Engram API of this version?)",
            detail=body,
        ) from None


def retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or HTTP date, counted from `now`,
    the current time unless given); None if absent/bad."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return max(seconds, 0.0) if seconds == seconds else None  # NaN is no answer
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max((when - (now or datetime.now(timezone.utc))).total_seconds(), 0.0)
