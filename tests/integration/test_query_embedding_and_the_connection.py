"""Where a search embeds its query (app/services/search.py): the local model beside the
lexical legs, a remote embedding service before any database connection is taken, so a slow
or hanging service (up to its timeout) never holds one."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import pytest

from app.config import Settings
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

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        started = time.monotonic()
        vectors = self.inner.embed(texts)
        self.calls.append((started, time.monotonic()))
        return vectors


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """When each statement started."""
    seen: list[float] = []
    driver_statements(monkeypatch, seen, lambda _: time.monotonic())
    return seen


def test_a_remote_service_is_asked_before_any_statement(
    settings: Settings, redis_client: Any, tenant: str, statements: list[float]
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
    _, embedded = recording.calls[0]
    assert embedded <= statements[0]  # done before the search's first statement
