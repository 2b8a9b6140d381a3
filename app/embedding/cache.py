"""A Redis cache in front of any embedder: the same text under the same model is embedded once.

Turns are re-scored, gems are re-checked for duplicates, retries re-run whole batches: without
this every one of those re-embeds. Keys are sha256(model name, text) under the text's owner
(tenant and user): two models never share a vector, and neither do two users, since a shared
vector would let one tenant learn, from how fast its search answers, whether another had
written a sentence. Text of no known owner is embedded and not kept. Values are float32 bytes
(1.5 KB for 384 dims) that expire after the configured TTL.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Sequence

import numpy as np
import redis

from app.config import Settings
from app.embedding.base import Embedder, EmbeddingError, Owner
from app.keys import RedisKeys
from app.redis_client import is_cluster

_log = logging.getLogger(__name__)
_FLOAT32 = np.dtype("<f4")


class CachedEmbedder:
    """Counts `hits` and `misses` per distinct text (misses = texts the inner model embedded)."""

    def __init__(self, inner: Embedder, client: redis.Redis, settings: Settings) -> None:
        self.inner = inner
        self.client = client
        self.keys = RedisKeys.from_settings(settings)
        self.ttl_s = settings.embedding_cache_ttl_s
        self.name = inner.name
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()

    @property
    def dim(self) -> int:
        return self.inner.dim

    def digest(self, text: str) -> str:
        payload = f"{self.name}\x1f{text}".encode("utf-8", "surrogatepass")
        return hashlib.sha256(payload).hexdigest()

    def reset_stats(self) -> None:
        with self._lock:
            self.hits = self.misses = 0

    def embed(
        self, texts: Sequence[str], owners: Sequence[Owner] | None = None
    ) -> list[list[float]]:
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of texts, not one string")
        if owners is None:
            return self._uncached(texts)
        if len(owners) != len(texts):
            raise ValueError(f"{len(owners)} owners for {len(texts)} texts")
        distinct = list(dict.fromkeys(zip(owners, texts, strict=True)))
        if not distinct:
            return []
        keys = [self.keys.embedding_cache(*owner, self.digest(text)) for owner, text in distinct]
        found = self._load(keys)
        missing = [i for i, vector in enumerate(found) if vector is None]
        if missing:
            # Two owners' same text is embedded once (this call is the workers' own, not a
            # client's) and kept under each owner.
            unknown = list(dict.fromkeys(distinct[i][1] for i in missing))
            fresh = dict(zip(unknown, self._model(unknown), strict=True))
            for i in missing:
                found[i] = fresh[distinct[i][1]]
            self._store([(keys[i], fresh[distinct[i][1]]) for i in missing], len(unknown))
        with self._lock:
            self.hits += len(distinct) - len(missing)
            self.misses += len(missing)
        by_pair = {
            pair: v.tolist() for pair, v in zip(distinct, found, strict=True) if v is not None
        }
        return [by_pair[pair] for pair in zip(owners, texts, strict=True)]

    def _uncached(self, texts: Sequence[str]) -> list[list[float]]:
        distinct = list(dict.fromkeys(texts))
        if not distinct:
            return []
        arrays = self._model(distinct)
        self._store([], len(distinct))
        with self._lock:
            self.misses += len(distinct)
        by_text = {text: v.tolist() for text, v in zip(distinct, arrays, strict=True)}
        return [by_text[text] for text in texts]

    def _model(self, texts: list[str]) -> list[np.ndarray]:
        fresh = self.inner.embed(texts)
        if len(fresh) != len(texts):
            raise EmbeddingError(
                f"{self.name} returned {len(fresh)} vectors for {len(texts)} texts"
            )
        # Rounded to float32 before returning, so a hit and a miss give identical vectors.
        return [np.asarray(vector, dtype=_FLOAT32) for vector in fresh]

    def _load(self, keys: list[str]) -> list[np.ndarray | None]:
        """Cached vectors (None where absent or unreadable); Redis trouble means no cache."""
        try:
            # On a cluster the digests fall in many slots: MGET per slot, in one pipeline.
            if is_cluster(self.client):
                values = self.client.mget_nonatomic(keys)  # type: ignore[attr-defined]
            else:
                values = self.client.mget(keys)
        except redis.RedisError as exc:
            _log.warning("embedding cache unavailable, embedding without it: %s", exc)
            return [None] * len(keys)
        return [_decode(value) for value in values]

    def _store(self, items: list[tuple[str, np.ndarray]], embedded: int) -> None:
        try:
            pipe = self.client.pipeline(transaction=False)
            for key, array in items:
                pipe.set(key, array.astype(_FLOAT32, copy=False).tobytes(), ex=self.ttl_s)
            # Fleet-wide count of texts the model really embedded (operators, benchmarks).
            pipe.incrby(self.keys.embedded_count(), embedded)
            pipe.expire(self.keys.embedded_count(), self.ttl_s)
            pipe.execute()
        except redis.RedisError as exc:
            _log.warning("embedding cache write failed (vectors still returned): %s", exc)


def _decode(value: bytes | str | None) -> np.ndarray | None:
    if not isinstance(value, bytes) or not value or len(value) % _FLOAT32.itemsize:
        return None  # absent, or written by something else: embed again
    return np.frombuffer(value, dtype=_FLOAT32)
