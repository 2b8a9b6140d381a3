"""Where a search embeds its query (app/services/search.py): the local model beside the
lexical legs, a remote embedding service while no database connection is held (after the
short read of the user's speakers, whose names the query is embedded without), so a slow or
hanging service (up to its timeout) never holds one."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import pytest

from app.config import Settings
from app.embedding.base import Owner
from app.embedding.factory import get_embedder
from app.services.memories import MemoryIn
from tests.integration.helpers import driver_statements
from tests.integration.test_hybrid_search import find, remember_all


class _Recording:
    """The real model, noting when each embed call started and ended."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self.calls: list[tuple[float, float]] = []

    def embed(
        self, texts: Sequence[str], owners: Sequence[Owner] | None = None
    ) -> list[list[float]]:
        started = time.monotonic()
        vectors = self.inner.embed(texts, owners)
        self.calls.append((started, time.monotonic()))
        return vectors


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> list[tuple[float, str]]:
    """When each statement started, and its text."""
    seen: list[tuple[float, str]] = []
    driver_statements(monkeypatch, seen, lambda statement: (time.monotonic(), statement))
    return seen


@pytest.fixture
def ends(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """When each transaction on a driver connection ended (commit or rollback)."""
    import psycopg

    seen: list[float] = []
    for name in ("commit", "rollback"):
        original = getattr(psycopg.Connection, name)

        def ending(connection: Any, *args: Any, _original: Any = original, **kw: Any) -> Any:
            result = _original(connection, *args, **kw)
            seen.append(time.monotonic())
            return result

        monkeypatch.setattr(psycopg.Connection, name, ending)
    return seen


def test_a_remote_service_is_asked_while_no_transaction_is_open(
    settings: Settings,
    redis_client: Any,
    tenant: str,
    statements: list[tuple[float, str]],
    ends: list[float],
) -> None:
    embedder = get_embedder(settings, redis_client)
    said = [MemoryIn(content="Noor keeps bees on her roof.")]
    remember_all(tenant, "noor", said, settings, embedder)
    recording = _Recording(embedder)
    statements.clear()
    remote = settings.model_copy(update={"embedding_backend": "openai"})
    result = find(tenant, remote, recording, user_id="noor", query="who keeps bees?")
    assert result.hits and not result.warnings
    assert len(recording.calls) == 1 and statements
    started, embedded = recording.calls[0]
    before = [(at, statement) for at, statement in statements if at < started]
    # Before it, the speakers' read alone, in a transaction that ended before the call.
    assert any("speaker" in statement for _, statement in before)
    assert not any("episodic.match_turns" in statement for _, statement in before)
    assert any(before[-1][0] < end < started for end in ends)
    assert min(at for at, _ in statements if at >= started) >= embedded
