"""What the clients do with answers a healthy server does not give on demand: 503s, dropped
connections, read timeouts, Retry-After. The transport is httpx's mock; the requests the
clients build and the errors they raise are the real ones."""

from __future__ import annotations

import asyncio
import uuid

import httpx
import pytest
from engram_memory_client import (
    AsyncEngramClient,
    EngramClient,
    EngramError,
    NotFoundError,
    UnavailableError,
    ValidationError,
)
from engram_memory_client._core import Core
from engram_memory_client._wire import MAX_RETRY_AFTER_S, Send, Sleep

STATS = {"tenant_id": "t", "users": 1, "current_memories": 2, "rows": {"x.y": 3}}


def test_retry_policy() -> None:
    """503 twice then 200 succeeds; a 4xx is never retried; errors are typed."""
    answers: list[httpx.Response | Exception] = []
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.method} {request.url.path}")
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    stats = STATS
    client = EngramClient(
        "http://engram.test",
        "egk_k",
        retries=3,
        backoff=0.001,
        transport=httpx.MockTransport(handler),
    )
    with client:
        answers[:] = [httpx.Response(503), httpx.Response(503), httpx.Response(200, json=stats)]
        assert client.stats().current_memories == 2
        assert len(seen) == 3

        seen.clear()
        answers[:] = [httpx.Response(400, json={"detail": "bad"}), httpx.Response(200)]
        with pytest.raises(EngramError) as refused:
            client.stats()
        assert refused.value.status == 400
        assert refused.value.message == "bad"
        assert len(seen) == 1

        seen.clear()
        answers[:] = [httpx.Response(404, json={"detail": "memory x not found"})]
        with pytest.raises(NotFoundError):
            client.get_memory(uuid.uuid4())
        assert len(seen) == 1

        seen.clear()
        answers[:] = [httpx.Response(503, json={"detail": {"message": "down"}})] * 4
        with pytest.raises(UnavailableError) as down:
            client.stats()
        assert (down.value.status, down.value.message) == (503, "down")
        assert len(seen) == 4  # the first attempt and three retries

        seen.clear()
        answers[:] = [httpx.ConnectError("refused"), httpx.Response(200, json=stats)]
        assert client.stats().users == 1
        assert len(seen) == 2

        # Counting a procedure run is not idempotent: a read timeout may hide a success.
        seen.clear()
        answers[:] = [httpx.ReadTimeout("slow"), httpx.Response(201, json={})]
        with pytest.raises(UnavailableError) as lost:
            client.record_procedure("u", "q", ["a"], 1.0, 1.0)
        assert lost.value.status is None
        assert len(seen) == 1

        seen.clear()
        degraded = {"status": "degraded", "checks": {"database": "ok", "redis": "error: X"}}
        answers[:] = [httpx.Response(503, json=degraded)]
        health = client.health()
        assert (health.ok, health.checks["redis"]) == (False, "error: X")
        assert len(seen) == 1  # "degraded" is an answer, not a failure to retry

        seen.clear()
        answers[:] = [
            httpx.Response(
                422, json={"detail": {"message": "invalid", "fields": ["events[0].role"]}}
            )
        ]
        with pytest.raises(ValidationError) as invalid:
            client.send_events([{"type": "turn"}])
        assert invalid.value.fields == ["events[0].role"]
        assert len(seen) == 1


@pytest.mark.parametrize(("header", "at_least"), [("0.3", 0.3), ("3600", MAX_RETRY_AFTER_S)])
def test_retry_after_sets_the_pause_up_to_a_bound(header: str, at_least: float) -> None:
    """The pause is the operation's own step, so it is checked without waiting for it."""
    op = Core(retries=3, backoff=0.001).stats()
    assert isinstance(next(op), Send)
    pause = op.send(httpx.Response(502, headers={"Retry-After": header}))
    assert isinstance(pause, Sleep)
    assert pause.seconds == pytest.approx(at_least)
    assert isinstance(op.send(None), Send)  # then the same request again


def test_the_async_client_retries_the_same_way() -> None:
    answers = [httpx.Response(503), httpx.ConnectError("refused"), httpx.Response(200, json=STATS)]
    seen: list[str] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def scenario() -> int:
        transport = httpx.MockTransport(handler)
        async with AsyncEngramClient(
            "http://engram.test", "egk_k", backoff=0.001, transport=transport
        ) as client:
            return (await client.stats()).users

    assert asyncio.run(scenario()) == 1
    assert seen == ["/v1/stats"] * 3


def test_negative_retries_or_backoff_are_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        EngramClient("http://engram.test", "egk_k", retries=-1)
