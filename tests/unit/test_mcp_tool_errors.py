"""What an agent reads when the API refuses a tool call: the argument at fault, or what to
do next (tool_error is a pure mapping from the SDK's errors)."""

from __future__ import annotations

from engram_memory_client import NotFoundError, RateLimitedError, ValidationError

from app.mcp.clients import tool_error


def test_over_the_share_says_when_to_retry() -> None:
    refused = RateLimitedError(
        429,
        "over the tenant's share of searches (500/s)",
        detail={"message": "over the tenant's share of searches (500/s)", "retry_after_s": 2.5},
    )
    message = str(tool_error(refused))
    assert "retry in 2.5 s" in message
    assert "share of searches" in message


def test_over_the_share_without_a_wait_still_says_to_retry() -> None:
    message = str(tool_error(RateLimitedError(429, "over the tenant's share of calls")))
    assert "retry later" in message


def test_a_refused_argument_and_a_missing_thing_are_named() -> None:
    assert "invalid query" in str(tool_error(ValidationError(422, "too long", ["query"])))
    missing = tool_error(NotFoundError(404, "no such memory"), not_found="memory_id")
    assert str(missing).startswith("memory_id: not found")
