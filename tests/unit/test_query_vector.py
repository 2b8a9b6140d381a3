"""The query's vector is embedded in a background thread while the search reads words
(app/embedding/background.py)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from app.embedding.background import QueryVector
from app.embedding.base import EmbeddingError, Owner

OWNER = Owner("t-one", "alice")


class _Embedder:
    name = "test"
    dim = 2

    def __init__(self, release: threading.Event | None = None, fail: Exception | None = None):
        self.release = release
        self.fail = fail
        self.calls: list[list[str]] = []
        self.owners: list[Sequence[Owner] | None] = []

    def embed(
        self, texts: Sequence[str], owners: Sequence[Owner] | None = None
    ) -> list[list[float]]:
        self.calls.append(list(texts))
        self.owners.append(owners)
        if self.release is not None and not self.release.wait(timeout=10):
            raise AssertionError("the caller never went on while the query was embedded")
        if self.fail is not None:
            raise self.fail
        return [[1.0, 0.0] for _ in texts]


def test_a_vector_at_hand_is_returned_as_is() -> None:
    assert QueryVector.ready([0.6, 0.8]).get() == [0.6, 0.8]
    assert QueryVector.ready(None).get() is None


def test_the_caller_goes_on_while_the_query_is_embedded() -> None:
    release = threading.Event()
    embedder = _Embedder(release)
    vector = QueryVector.start(embedder, "where does Alice like to sit?", OWNER)
    release.set()  # a synchronous embed would still be waiting for this
    assert vector.get() == [1.0, 0.0]
    assert embedder.calls == [["where does Alice like to sit?"]]
    assert embedder.owners == [[OWNER]]  # a cache keeps it under the asking user only


def test_several_readers_get_the_one_vector() -> None:
    embedder = _Embedder()
    vector = QueryVector.start(embedder, "q", OWNER)
    seen: list[Sequence[float] | None] = []
    readers = [threading.Thread(target=lambda: seen.append(vector.get())) for _ in range(4)]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join()
    assert seen == [[1.0, 0.0]] * 4
    assert len(embedder.calls) == 1


def test_a_failed_backend_means_no_vector_and_says_why() -> None:
    vector = QueryVector.start(_Embedder(fail=EmbeddingError("model server down")), "q", OWNER)
    assert vector.get() is None
    assert vector.error is not None and "model server down" in str(vector.error)


def test_a_bug_in_the_embedder_is_not_taken_for_an_outage() -> None:
    vector = QueryVector.start(_Embedder(fail=ValueError("bad shape")), "q", OWNER)
    with pytest.raises(ValueError, match="bad shape"):
        vector.get()


def test_now_embeds_before_returning_and_keeps_an_outage_as_no_vector() -> None:
    embedder = _Embedder()
    vector = QueryVector.now(embedder, "q", OWNER)
    assert embedder.calls == [["q"]]  # already asked, before any get()
    assert vector.get() == [1.0, 0.0]
    down = QueryVector.now(_Embedder(fail=EmbeddingError("timed out")), "q", OWNER)
    assert down.get() is None
    assert down.error is not None and "timed out" in str(down.error)


def test_a_second_wording_is_embedded_after_the_first() -> None:
    unnamed, named = "what pets does he have", "what pets does Nebraas have"
    release = threading.Event()
    embedder = _Embedder(release)
    vector = QueryVector.start(embedder, unnamed, OWNER, also=named)
    release.set()
    assert vector.get() == [1.0, 0.0] and vector.also() == [1.0, 0.0]
    assert embedder.calls == [[unnamed], [named]]  # the first wording first, alone
    assert embedder.owners == [[OWNER], [OWNER]]
    remote = _Embedder()
    vector = QueryVector.now(remote, unnamed, OWNER, also=named)
    assert vector.get() == [1.0, 0.0] and vector.also() == [1.0, 0.0]
    assert remote.calls == [[unnamed, named]]  # one request to a remote service
    alone = QueryVector.start(_Embedder(), "q", OWNER)
    assert alone.also() is None and QueryVector.ready([0.6, 0.8]).also() is None


def test_a_failed_backend_fails_both_wordings() -> None:
    down = QueryVector.start(_Embedder(fail=EmbeddingError("down")), "q", OWNER, also="q2")
    assert down.get() is None and down.also() is None
    assert down.error is not None and "down" in str(down.error)
    bug = QueryVector.start(_Embedder(fail=ValueError("bad shape")), "q", OWNER, also="q2")
    with pytest.raises(ValueError, match="bad shape"):
        bug.also()
