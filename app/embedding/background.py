"""A search query's vector, embedded in a background thread while the search reads words.

A search needs the query's vector only for its dense legs; its lexical legs wait on
Postgres. onnxruntime releases the GIL while it computes, and psycopg releases it while the
server works, so embedding the query beside the lexical legs takes the local model off the
search's critical path. A remote embedding service is asked first (`now`): its wait, up to
its timeout, must not hold a database connection.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from app.embedding.base import Embedder, EmbeddingError, Owner

# Searches running at once in one process (the API's worker threads) each hold one thread
# here while their query is embedded; more waiting searches queue.
MAX_THREADS = 16

_lock = threading.Lock()
_pools: dict[int, ThreadPoolExecutor] = {}


def _pool() -> ThreadPoolExecutor:
    """This process's pool: a forked child gets its own (its parent's threads are not
    there, and an executor that believes they are never runs a task)."""
    pid = os.getpid()
    with _lock:
        if pid not in _pools:
            _pools.clear()
            _pools[pid] = ThreadPoolExecutor(MAX_THREADS, thread_name_prefix="query-embedding")
        return _pools[pid]


class QueryVector:
    """The vector of one query, and optionally of a second wording embedded in the same model
    call (`also`): `get()` and `also()` wait for them; None when the backend failed, with
    `error` saying why (the search then ranks by words alone and says so)."""

    def __init__(
        self,
        future: Future[list[list[float]]] | None,
        vectors: Sequence[Sequence[float]] | None,
    ) -> None:
        self._future = future
        self._vectors = vectors
        self.error: EmbeddingError | None = None

    @classmethod
    def ready(cls, vector: Sequence[float] | None) -> QueryVector:
        """A vector already at hand (or none: a lexical-only ranking)."""
        return cls(None, None if vector is None else [vector])

    @classmethod
    def start(
        cls, embedder: Embedder, text: str, owner: Owner, *, also: str | None = None
    ) -> QueryVector:
        """Embedded in a background thread: `get()` waits for it."""
        texts = [text] if also is None else [text, also]
        return cls(_pool().submit(embedder.embed, texts, [owner] * len(texts)), None)

    @classmethod
    def now(
        cls, embedder: Embedder, text: str, owner: Owner, *, also: str | None = None
    ) -> QueryVector:
        """Embedded before the caller goes on: a remote service's wait (up to its timeout)
        must not hold the database connection the search's words are read on."""
        texts = [text] if also is None else [text, also]
        try:
            return cls(None, embedder.embed(texts, [owner] * len(texts)))
        except EmbeddingError as exc:
            vector = cls(None, None)
            vector.error = exc
            return vector

    def get(self) -> Sequence[float] | None:
        vectors = self._all()
        return vectors[0] if vectors else None

    def also(self) -> Sequence[float] | None:
        """The second wording's vector, if one was asked for."""
        vectors = self._all()
        return vectors[1] if vectors and len(vectors) > 1 else None

    def _all(self) -> Sequence[Sequence[float]] | None:
        if self._future is None:
            return self._vectors
        try:
            return self._future.result()
        except EmbeddingError as exc:
            self.error = exc
            return None
