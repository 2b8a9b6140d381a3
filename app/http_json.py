"""POST JSON to an OpenAI-compatible endpoint: one place for headers, timeouts, error sorting
and backoff, shared by the embedding and the LLM extraction clients (stdlib only)."""

from __future__ import annotations

import json
import random
import urllib.error
import urllib.request
from typing import Any

RETRYABLE_STATUS = frozenset({408, 409, 425, 429})
MAX_BACKOFF_S = 30.0


class RetryableHTTPError(Exception):
    """Another attempt may succeed: network error, timeout, 5xx, 408/409/425/429."""

    def __init__(self, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class RefusedHTTPError(Exception):
    """The server refused the request (other 4xx): repeating it will not help."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.detail = detail


class InvalidJSONReply(ValueError):  # noqa: N818 - reads as what it is
    """The reply body is not JSON."""


def endpoint(base_url: str, path: str) -> str:
    """`base_url` + `path`, refusing anything but http(s) when the client is configured."""
    if not base_url.startswith(("http://", "https://")):
        raise ValueError(f"endpoint base URL must be http(s): {base_url!r}")
    return base_url.rstrip("/") + path


def post_json(url: str, payload: Any, *, api_key: str | None, timeout_s: float) -> Any:
    """POST `payload` as JSON and return the decoded reply; `url` must be http(s)."""
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"endpoint must be http(s): {url!r}")
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    body = json.dumps(payload).encode()
    request = urllib.request.Request(url, body, headers, method="POST")  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310
            raw = response.read()
    except urllib.error.HTTPError as exc:
        detail = _error_detail(exc)
        if exc.code >= 500 or exc.code in RETRYABLE_STATUS:
            raise RetryableHTTPError(f"HTTP {exc.code}: {detail}", _retry_after(exc)) from exc
        raise RefusedHTTPError(exc.code, detail) from exc
    except (TimeoutError, OSError) as exc:  # URLError, resets and timeouts are all OSError
        raise RetryableHTTPError(f"{type(exc).__name__}: {exc}") from exc
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise InvalidJSONReply(f"reply is not JSON: {raw[:200]!r}") from exc


def backoff_delay(attempt: int, base_s: float, retry_after_s: float | None = None) -> float:
    """Exponential backoff for attempt 0, 1, … honouring Retry-After, capped, with jitter so
    workers do not retry in step."""
    delay = min(MAX_BACKOFF_S, base_s * 2**attempt)
    if retry_after_s is not None:
        delay = min(MAX_BACKOFF_S, max(delay, retry_after_s))
    return delay * (1 + random.random() * 0.25)


def _error_detail(exc: urllib.error.HTTPError) -> str:
    try:
        return exc.read(500).decode("utf-8", "replace").strip() or str(exc.reason)
    except OSError:
        return str(exc.reason)


def _retry_after(exc: urllib.error.HTTPError) -> float | None:
    value = exc.headers.get("Retry-After") if exc.headers else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
