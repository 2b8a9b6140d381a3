"""The Redis embedding cache in front of the real local model, against real Redis."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
import redis

from app.config import Settings
from app.embedding.cache import CachedEmbedder
from app.embedding.factory import get_embedder, local_embedder
from app.keys import RedisKeys


class CountingEmbedder:
    """The real local model, recording which texts actually reached it."""

    def __init__(self) -> None:
        self.inner = local_embedder(1)
        self.name = self.inner.name
        self.dim = self.inner.dim
        self.seen: list[str] = []

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.seen.extend(texts)
        return self.inner.embed(texts)


@pytest.fixture
def counting() -> CountingEmbedder:
    return CountingEmbedder()


def cache_keys(client: redis.Redis, settings: Settings) -> list[bytes]:
    pattern = RedisKeys.from_settings(settings).embedding_cache("*")
    return list(client.scan_iter(match=pattern, count=1000))


def test_second_call_is_served_from_redis(
    settings: Settings, redis_client: redis.Redis, counting: CountingEmbedder
) -> None:
    cached = CachedEmbedder(counting, redis_client, settings)
    texts = ["I prefer aisle seats.", "My daughter starts school in September.", "Call Bob."]
    first = cached.embed(texts)
    assert (cached.hits, cached.misses) == (0, 3)
    assert counting.seen == texts

    counting.seen.clear()
    cached.reset_stats()
    second = cached.embed(texts)
    assert (cached.hits, cached.misses) == (3, 0)
    assert counting.seen == []
    assert second == first
    # A fresh wrapper (another worker) finds the same vectors.
    other = CachedEmbedder(counting, redis_client, settings)
    assert other.embed(list(reversed(texts))) == list(reversed(first))
    assert other.misses == 0
    # And they are the model's vectors, to float32 precision.
    direct = np.array(local_embedder(1).embed(texts))
    assert np.abs(np.array(first) - direct).max() < 1e-6


def test_duplicates_in_one_call_are_embedded_once(
    settings: Settings, redis_client: redis.Redis, counting: CountingEmbedder
) -> None:
    cached = CachedEmbedder(counting, redis_client, settings)
    texts = ["hello", "world", "hello", "hello", "world", ""]
    vectors = cached.embed(texts)
    assert len(vectors) == len(texts)
    assert sorted(counting.seen) == ["", "hello", "world"]
    assert (cached.hits, cached.misses) == (0, 3)
    assert vectors[0] == vectors[2] == vectors[3]
    assert vectors[1] == vectors[4]
    assert vectors[0] != vectors[1]
    assert cached.embed([]) == []


def test_keys_expire_and_hold_float32_vectors(
    settings: Settings, redis_client: redis.Redis, counting: CountingEmbedder
) -> None:
    short = settings.model_copy(update={"embedding_cache_ttl_s": 120})
    cached = CachedEmbedder(counting, redis_client, short)
    (vector,) = cached.embed(["remember the milk"])
    keys = cache_keys(redis_client, short)
    assert len(keys) == 1
    assert keys[0].decode() == RedisKeys.from_settings(short).embedding_cache(
        cached.digest("remember the milk")
    )
    assert 0 < redis_client.ttl(keys[0]) <= 120
    raw = redis_client.get(keys[0])
    assert len(raw) == 384 * 4
    assert np.frombuffer(raw, dtype="<f4").tolist() == vector


def test_default_ttl_is_a_day_and_factory_wraps_with_a_client(
    settings: Settings, redis_client: redis.Redis
) -> None:
    assert settings.embedding_cache_ttl_s == 86_400
    embedder = get_embedder(settings, redis_client)
    assert isinstance(embedder, CachedEmbedder)
    assert embedder.inner is local_embedder(settings.embedding_threads)
    assert embedder.dim == 384
    embedder.embed(["a day from now this is gone"])
    (key,) = cache_keys(redis_client, settings)
    assert 86_400 - 60 < redis_client.ttl(key) <= 86_400


def test_model_name_is_part_of_the_key_and_bad_values_are_re_embedded(
    settings: Settings, redis_client: redis.Redis, counting: CountingEmbedder
) -> None:
    cached = CachedEmbedder(counting, redis_client, settings)
    renamed = CountingEmbedder()
    renamed.name = "another-model"
    other = CachedEmbedder(renamed, redis_client, settings)
    assert cached.digest("same text") != other.digest("same text")

    (good,) = cached.embed(["same text"])
    key = RedisKeys.from_settings(settings).embedding_cache(cached.digest("same text"))
    redis_client.set(key, b"abc")  # not float32 bytes: treated as a miss, then overwritten
    cached.reset_stats()
    assert cached.embed(["same text"]) == [good]
    assert cached.misses == 1
    assert len(redis_client.get(key)) == 384 * 4
