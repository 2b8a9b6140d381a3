"""A Redis cache in front of any embedder: the same text under the same model is embedded once.

Turns are re-scored, gems are re-checked for duplicates, retries re-run whole batches: without
this every one of those re-embeds. Keys are sha256(model name, text), so two models never share
a vector; values are float32 bytes (1.5 KB for 384 dims) that expire after the configured TTL.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Sequence

import numpy as np
import redis

from app.config import Settings
from app.embedding.base import Embedder, EmbeddingError
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

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of texts, not one string")
        distinct = list(dict.fromkeys(texts))
        if not distinct:
            return []
        keys = [self.keys.embedding_cache(self.digest(text)) for text in distinct]
        found = self._load(keys)
        missing = [i for i, vector in enumerate(found) if vector is None]
        if missing:
            fresh = self.inner.embed([distinct[i] for i in missing])
            if len(fresh) != len(missing):
                raise EmbeddingError(
                    f"{self.name} returned {len(fresh)} vectors for {len(missing)} texts"
                )
            # Round to float32 before returning, so a hit and a miss give identical vectors.
            arrays = [np.asarray(vector, dtype=_FLOAT32) for vector in fresh]
            for i, array in zip(missing, arrays, strict=True):
                found[i] = array
            self._store([(keys[i], array) for i, array in zip(missing, arrays, strict=True)])
        with self._lock:
            self.hits += len(distinct) - len(missing)
            self.misses += len(missing)
        pairs = zip(distinct, found, strict=True)
        by_text = {text: v.tolist() for text, v in pairs if v is not None}
        return [by_text[text] for text in texts]

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

    def _store(self, items: list[tuple[str, np.ndarray]]) -> None:
        try:
            pipe = self.client.pipeline(transaction=False)
            for key, array in items:
                pipe.set(key, array.astype(_FLOAT32, copy=False).tobytes(), ex=self.ttl_s)
            # Fleet-wide count of texts the model really embedded (operators, benchmarks).
            pipe.incrby(self.keys.embedded_count(), len(items))
            pipe.expire(self.keys.embedded_count(), self.ttl_s)
            pipe.execute()
        except redis.RedisError as exc:
            _log.warning("embedding cache write failed (vectors still returned): %s", exc)


def _decode(value: bytes | str | None) -> np.ndarray | None:
    if not isinstance(value, bytes) or not value or len(value) % _FLOAT32.itemsize:
        return None  # absent, or written by something else: embed again
    return np.frombuffer(value, dtype=_FLOAT32)
