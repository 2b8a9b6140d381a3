"""The clients' transport: one request with its retries, as an operation (see _core)."""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from typing import Any

import httpx

from engram_memory_client._args import url_part
from engram_memory_client._wire import (
    MAX_BACKOFF_S,
    MAX_RETRY_AFTER_S,
    M,
    Op,
    Outcome,
    Send,
    Sleep,
    jsonable,
    read_reply,
    retry_after,
)
from engram_memory_client.errors import UnavailableError, error_from_response


class Transport:
    """Sends a request and reads its reply, retrying what may be retried (see _core)."""

    def __init__(self, *, retries: int, backoff: float) -> None:
        if retries < 0 or backoff < 0:
            raise ValueError("retries and backoff must not be negative")
        self.retries = retries
        self.backoff = backoff

    def call(
        self,
        method: str,
        path: str,
        into: type[M],
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        idempotent: bool = True,
        answers: frozenset[int] = frozenset(),
    ) -> Op[M]:
        """Send with retries and return the reply as `into`, or raise a typed error.

        A request that is not idempotent is retried only when it surely did not reach the
        server (connect errors) or the server answered 5xx (it rolled its transaction back);
        a read timeout might hide a success, and repeating it could count it twice.
        `answers` are non-2xx statuses that are results, not errors (no retry either)."""
        query = {k: jsonable(v) for k, v in (params or {}).items() if v is not None}
        for name, value in query.items():
            url_part(value, name)
        content = None if body is None else json.dumps(jsonable(body)).encode()
        step = Send(method, path, query or None, content)
        attempt = 0
        while True:
            outcome = yield step
            if isinstance(outcome, httpx.Response) and (
                outcome.is_success or outcome.status_code in answers
            ):
                return read_reply(outcome, into)
            delay = self._retry_delay(outcome, attempt, idempotent)
            if delay is None or attempt >= self.retries:
                break
            attempt += 1
            yield Sleep(delay)
        if isinstance(outcome, httpx.Response):
            raise error_from_response(outcome)
        cause = f"{type(outcome).__name__}: {outcome}"
        if isinstance(outcome, httpx.ConnectError | httpx.ConnectTimeout):
            raise UnavailableError(None, f"could not reach the Engram API ({cause})") from outcome
        # The request may have reached the server: say so, a caller must not assume it failed.
        maybe = "" if idempotent else "; it may have been carried out, check before repeating it"
        raise UnavailableError(None, f"no answer from the Engram API ({cause}){maybe}") from outcome

    def _retry_delay(self, outcome: Outcome, attempt: int, idempotent: bool) -> float | None:
        """Seconds to wait before the next attempt, or None when retrying cannot help."""
        wait = min(self.backoff * 2**attempt, MAX_BACKOFF_S) * random.uniform(0.5, 1.0)
        if isinstance(outcome, httpx.TransportError):
            safe = isinstance(outcome, httpx.ConnectError | httpx.ConnectTimeout)
            return wait if idempotent or safe else None
        # 429: the server did nothing and says when to come back.
        if isinstance(outcome, httpx.Response) and (
            outcome.status_code >= 500 or outcome.status_code == 429
        ):
            asked = retry_after(outcome.headers.get("Retry-After"))
            if asked is not None:
                wait = max(wait, min(asked, MAX_RETRY_AFTER_S))
            return wait
        return None  # any other 4xx: the same request gets the same answer
