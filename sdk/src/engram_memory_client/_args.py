"""Arguments checked before a request is built: what cannot travel in a URL, and what would
reach another route, is refused naming the argument, as the API's 422 would name it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from engram_memory_client.errors import ValidationError

# The longest escaped path segment or query value sent: httpx refuses a URL component over
# 64 KiB with an error of its own, and no id, name or cursor the API accepts comes near this.
MAX_URL_PART = 16_384


def _refused(field: str, problem: str) -> ValidationError:
    """The error for an argument refused before sending, shaped like the API's 422."""
    return ValidationError(None, f"{field}: {problem}", [field])


def url_part(value: object, field: str) -> str:
    """`value` escaped for a URL, or a ValidationError naming `field` when it cannot be sent:
    a lone surrogate has no UTF-8, and an over-long part would fail inside httpx."""
    try:
        escaped = quote(str(value), safe="")
    except UnicodeEncodeError:
        raise _refused(field, "not valid Unicode (it holds a lone surrogate)") from None
    if len(escaped) > MAX_URL_PART:
        raise _refused(field, f"too long for a URL ({len(escaped)} characters escaped)")
    return escaped


def segment(value: object, field: str) -> str:
    """One path segment, escaped so that no id or name can reach another route. Empty, `.`
    and `..` are refused: HTTP clients and proxies resolve dot segments, so
    `clear_session("alice", "..")` would otherwise become `DELETE /v1/users/alice`."""
    text = str(value)
    if text in ("", ".", ".."):
        raise _refused(field, f"{text!r} is not a valid id or name")
    return url_part(text, field)


def check_wait(timeout: float, interval: float) -> None:
    """Refuse a wait that could only fail late (a negative pause stops `time.sleep` after the
    first poll) or never end (NaN compares false with every deadline)."""
    for name, value in (("timeout", timeout), ("interval", interval)):
        if not value >= 0:
            raise ValueError(f"{name} must be a number of seconds >= 0, not {value!r}")


def items_of(memories: Sequence[Mapping[str, Any] | str], field: str) -> list[dict[str, Any]]:
    """Memories as the API takes them: a string is the content, a mapping the whole memory."""
    items: list[dict[str, Any]] = []
    for i, memory in enumerate(memories):
        if isinstance(memory, str):
            items.append({"content": memory})
        elif isinstance(memory, Mapping):
            items.append(dict(memory))
        else:
            raise TypeError(
                f"{field}[{i}]: expected a str or a mapping, got {type(memory).__name__}"
            )
    return items
