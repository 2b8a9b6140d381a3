"""The errors the clients raise: one type per answer a caller may want to handle apart.

Every error carries the HTTP status (None when no answer came), the API's message, and the
request fields it named, so a caller can say what was wrong without reading a response body.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx

__all__ = [
    "AuthenticationError",
    "ConflictError",
    "EngramError",
    "NotFoundError",
    "PayloadTooLargeError",
    "RateLimitedError",
    "UnavailableError",
    "ValidationError",
    "error_from_response",
]


class EngramError(Exception):
    """An answer the API refused, or no answer at all (`status` is None then).

    `fields` names the offending request fields when the API said which ones (422);
    `detail` is the API's whole `detail` payload, for anything else it carried."""

    def __init__(
        self,
        status: int | None,
        message: str,
        fields: Sequence[str] | None = None,
        *,
        detail: Any = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.fields: list[str] = list(fields or [])
        self.detail = detail

    def __str__(self) -> str:
        where = f" ({', '.join(self.fields)})" if self.fields else ""
        prefix = f"HTTP {self.status}: " if self.status is not None else ""
        return f"{prefix}{self.message}{where}"


class AuthenticationError(EngramError):
    """401: the API key is missing, unknown or revoked."""


class NotFoundError(EngramError):
    """404: no such memory or entity for this key's tenant (another tenant's looks the same)."""


class ConflictError(EngramError):
    """409: the memory was replaced by a newer version (`current_id`), or another memory of
    the user already says what the edit would (`duplicate_of`)."""

    @property
    def current_id(self) -> str | None:
        return self.detail.get("current_id") if isinstance(self.detail, dict) else None

    @property
    def duplicate_of(self) -> str | None:
        return self.detail.get("duplicate_of") if isinstance(self.detail, dict) else None


class ValidationError(EngramError):
    """422: the request was malformed; `fields` lists the offending fields."""


class PayloadTooLargeError(EngramError):
    """413: the request body is over the server's limit; send fewer events per call."""


class RateLimitedError(EngramError):
    """429 after every retry: the tenant is over its share of the server (events, searches
    or other calls); `retry_after_s` says when this request would fit."""

    @property
    def retry_after_s(self) -> float | None:
        found = self.detail.get("retry_after_s") if isinstance(self.detail, dict) else None
        return float(found) if isinstance(found, int | float) else None


class UnavailableError(EngramError):
    """503 after every retry, or the server could not be reached at all (`status` None)."""


_ERRORS: dict[int, type[EngramError]] = {
    401: AuthenticationError,
    404: NotFoundError,
    409: ConflictError,
    413: PayloadTooLargeError,
    422: ValidationError,
    429: RateLimitedError,
    503: UnavailableError,
}


def error_from_response(response: httpx.Response) -> EngramError:
    """The typed error for a refused request, with the API's message and fields."""
    try:
        body = response.json()
    except ValueError:
        body = None
    detail = body.get("detail") if isinstance(body, dict) else None
    fields: list[str] = []
    if isinstance(detail, dict):
        message = str(detail.get("message") or detail)
        fields = [str(f) for f in detail.get("fields") or []]
    elif isinstance(detail, str):
        message = detail
    elif isinstance(detail, list):  # FastAPI's default shape, should a route ever use it
        message = "; ".join(str(e.get("msg", e)) for e in detail if isinstance(e, dict))
        fields = [
            ".".join(str(p) for p in e.get("loc", ())[1:]) for e in detail if isinstance(e, dict)
        ]
    else:
        message = response.text[:500] or response.reason_phrase
    kind = _ERRORS.get(response.status_code, EngramError)
    return kind(response.status_code, message, fields, detail=detail)
