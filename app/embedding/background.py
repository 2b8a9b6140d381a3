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
from typing import Any

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


def _in_turn(
    embedder: Embedder, texts: Sequence[str], owner: Owner, futures: Sequence[Future[Any]]
) -> None:
    """Embed the texts one after the other in this thread, each future resolved as soon as
    its own vector is ready: the first is waited for first."""
    for text, future in zip(texts, futures, strict=True):
        if not future.set_running_or_notify_cancel():
            continue
        try:
            future.set_result(embedder.embed([text], [owner])[0])
        except BaseException as exc:  # handed to whoever waits, like an executor does
            future.set_exception(exc)


class QueryVector:
    """The vector of one query, and optionally of a second wording (`also`): `get()` and
    `also()` wait for them; None when the backend failed, with `error` saying why (the search
    then ranks by words alone and says so)."""

    def __init__(
        self,
        futures: Sequence[Future[Any]],
        vectors: Sequence[Sequence[float]] | None,
    ) -> None:
        self._futures = futures
        self._vectors = vectors
        self.error: EmbeddingError | None = None

    @classmethod
    def ready(cls, vector: Sequence[float] | None) -> QueryVector:
        """A vector already at hand (or none: a lexical-only ranking)."""
        return cls([], None if vector is None else [vector])

    @classmethod
    def start(
        cls, embedder: Embedder, text: str, owner: Owner, *, also: str | None = None
    ) -> QueryVector:
        """Embedded in a background thread: `get()` waits for it. A second wording is
        embedded after the first, in the same thread: the search needs it last, and one
        model call of both (7 ms against 4 for one here) made every dense leg wait longer."""
        texts = [text] if also is None else [text, also]
        futures: list[Future[Any]] = [Future() for _ in texts]
        _pool().submit(_in_turn, embedder, texts, owner, futures)
        return cls(futures, None)

    @classmethod
    def now(
        cls, embedder: Embedder, text: str, owner: Owner, *, also: str | None = None
    ) -> QueryVector:
        """Embedded before the caller goes on, both wordings in one call: a remote service's
        wait (up to its timeout) must not hold the database connection the search's words
        are read on."""
        texts = [text] if also is None else [text, also]
        try:
            return cls([], embedder.embed(texts, [owner] * len(texts)))
        except EmbeddingError as exc:
            vector = cls([], None)
            vector.error = exc
            return vector

    def get(self) -> Sequence[float] | None:
        return self._vector(0)

    def also(self) -> Sequence[float] | None:
        """The second wording's vector, if one was asked for."""
        return self._vector(1)

    def _vector(self, index: int) -> Sequence[float] | None:
        if not self._futures:
            vectors = self._vectors
            return vectors[index] if vectors is not None and index < len(vectors) else None
        if index >= len(self._futures):
            return None
        try:
            vector: Sequence[float] = self._futures[index].result()
        except EmbeddingError as exc:
            self.error = exc
            return None
        return vector
