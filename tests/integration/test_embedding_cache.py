"""The Redis embedding cache in front of the real local model, against real Redis."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
import redis

from app.config import Settings
from app.embedding.base import Owner
from app.embedding.cache import CachedEmbedder
from app.embedding.factory import get_embedder, local_embedder
from app.keys import RedisKeys
from app.services.forget import forget_user
from app.services.memories import MemoryIn, RememberRequest, remember
from app.services.search import SearchRequest, search


class CountingEmbedder:
    """The real local model, recording which texts actually reached it."""

    def __init__(self) -> None:
        self.inner = local_embedder(1)
        self.name = self.inner.name
        self.dim = self.inner.dim
        self.seen: list[str] = []

    def embed(
        self, texts: Sequence[str], owners: Sequence[Owner] | None = None
    ) -> list[list[float]]:
        self.seen.extend(texts)
        return self.inner.embed(texts)


@pytest.fixture
def counting() -> CountingEmbedder:
    return CountingEmbedder()


ALICE = Owner("t-one", "alice")


def cache_keys(client: redis.Redis, settings: Settings) -> list[bytes]:
    pattern = RedisKeys.from_settings(settings).embedding_cache("*", "*", "*")
    return list(client.scan_iter(match=pattern, count=1000))


def owned(texts: list[str], owner: Owner = ALICE) -> list[Owner]:
    return [owner] * len(texts)


def test_second_call_is_served_from_redis(
    settings: Settings, redis_client: redis.Redis, counting: CountingEmbedder
) -> None:
    cached = CachedEmbedder(counting, redis_client, settings)
    texts = ["I prefer aisle seats.", "My daughter starts school in September.", "Call Bob."]
    first = cached.embed(texts, owned(texts))
    assert (cached.hits, cached.misses) == (0, 3)
    assert counting.seen == texts

    counting.seen.clear()
    cached.reset_stats()
    second = cached.embed(texts, owned(texts))
    assert (cached.hits, cached.misses) == (3, 0)
    assert counting.seen == []
    assert second == first
    # A fresh wrapper (another worker) finds the same vectors.
    other = CachedEmbedder(counting, redis_client, settings)
    assert other.embed(list(reversed(texts)), owned(texts)) == list(reversed(first))
    assert other.misses == 0
    # And they are the model's vectors, to float32 precision.
    direct = np.array(local_embedder(1).embed(texts))
    assert np.abs(np.array(first) - direct).max() < 1e-6


def test_duplicates_in_one_call_are_embedded_once(
    settings: Settings, redis_client: redis.Redis, counting: CountingEmbedder
) -> None:
    cached = CachedEmbedder(counting, redis_client, settings)
    texts = ["hello", "world", "hello", "hello", "world", ""]
    vectors = cached.embed(texts, owned(texts))
    assert len(vectors) == len(texts)
    assert sorted(counting.seen) == ["", "hello", "world"]
    assert (cached.hits, cached.misses) == (0, 3)
    assert vectors[0] == vectors[2] == vectors[3]
    assert vectors[1] == vectors[4]
    assert vectors[0] != vectors[1]
    assert cached.embed([], []) == []


def test_keys_expire_and_hold_float32_vectors(
    settings: Settings, redis_client: redis.Redis, counting: CountingEmbedder
) -> None:
    short = settings.model_copy(update={"embedding_cache_ttl_s": 120})
    cached = CachedEmbedder(counting, redis_client, short)
    (vector,) = cached.embed(["remember the milk"], [ALICE])
    keys = cache_keys(redis_client, short)
    assert len(keys) == 1
    assert keys[0].decode() == RedisKeys.from_settings(short).embedding_cache(
        *ALICE, cached.digest("remember the milk")
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
    embedder.embed(["a day from now this is gone"], [ALICE])
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

    (good,) = cached.embed(["same text"], [ALICE])
    key = RedisKeys.from_settings(settings).embedding_cache(*ALICE, cached.digest("same text"))
    redis_client.set(key, b"abc")  # not float32 bytes: treated as a miss, then overwritten
    cached.reset_stats()
    assert cached.embed(["same text"], [ALICE]) == [good]
    assert cached.misses == 1
    assert len(redis_client.get(key)) == 384 * 4


def test_a_vector_is_found_only_by_the_user_whose_text_it_is(
    settings: Settings, redis_client: redis.Redis, counting: CountingEmbedder
) -> None:
    """A hit is observable (a search answers sooner), so a vector shared across owners would
    tell one tenant what another has written."""
    cached = CachedEmbedder(counting, redis_client, settings)
    secret = "Alice's locker code is 4411."
    bob, mallory = Owner("t-one", "bob"), Owner("t-two", "alice")
    (first,) = cached.embed([secret], [ALICE])
    for other in (bob, mallory):
        counting.seen.clear()
        cached.reset_stats()
        assert cached.embed([secret], [other]) == [first]
        assert counting.seen == [secret], f"{other} was served {ALICE}'s vector"
        assert (cached.hits, cached.misses) == (0, 1)
    cached.reset_stats()
    cached.embed([secret], [ALICE])
    assert (cached.hits, cached.misses) == (1, 0)
    tags = sorted(
        k.decode().split(":emb:")[1].split("}:")[0] for k in cache_keys(redis_client, settings)
    )
    assert tags == ["{t-one|alice", "{t-one|bob", "{t-two|alice"]


def test_owners_of_one_text_in_one_call_cost_one_model_call_and_a_key_each(
    settings: Settings, redis_client: redis.Redis, counting: CountingEmbedder
) -> None:
    cached = CachedEmbedder(counting, redis_client, settings)
    texts = ["see you at noon", "see you at noon", "bring the tent"]
    owners = [ALICE, Owner("t-two", "carol"), ALICE]
    vectors = cached.embed(texts, owners)
    assert vectors[0] == vectors[1] != vectors[2]
    assert sorted(counting.seen) == ["bring the tent", "see you at noon"]
    assert (cached.hits, cached.misses) == (0, 3)
    assert len(cache_keys(redis_client, settings)) == 3
    with pytest.raises(ValueError, match="2 owners for 3 texts"):
        cached.embed(texts, owners[:2])


def test_text_of_no_known_owner_is_embedded_and_not_kept(
    settings: Settings, redis_client: redis.Redis, counting: CountingEmbedder
) -> None:
    cached = CachedEmbedder(counting, redis_client, settings)
    first = cached.embed(["an edit of a memory whose user is not yet known"])
    second = cached.embed(["an edit of a memory whose user is not yet known"])
    assert first == second
    assert len(counting.seen) == 2
    assert cache_keys(redis_client, settings) == []
    assert (cached.hits, cached.misses) == (0, 2)
    assert int(redis_client.get(RedisKeys.from_settings(settings).embedded_count())) == 2


def test_forgetting_a_user_deletes_their_cached_vectors(
    settings: Settings, redis_client: redis.Redis, tenant: str
) -> None:
    embedder = get_embedder(settings, redis_client)
    gone, kept = Owner(tenant, "erased"), Owner(tenant, "stays")
    embedder.embed(["my diagnosis came back", "we moved to Porto"], [gone, gone])
    embedder.embed(["we moved to Porto"], [kept])
    forget_user(tenant_id=tenant, user_id="erased", settings=settings, client=redis_client)
    left = [k.decode() for k in cache_keys(redis_client, settings)]
    assert len(left) == 1 and f"{{{tenant}|stays}}" in left[0]


def test_search_keeps_the_query_vector_under_the_asking_user(
    settings: Settings, redis_client: redis.Redis, counting: CountingEmbedder, tenant: str
) -> None:
    """The whole path: remember, then the same question asked in two tenants."""
    cached = CachedEmbedder(counting, redis_client, settings)
    other = f"{tenant}-b"
    for who in (tenant, other):
        remember(
            who,
            RememberRequest(user_id="alice", memories=[MemoryIn(content="I prefer aisle seats.")]),
            settings=settings,
            embedder=cached,
        )
    asked = SearchRequest(user_id="alice", query="where does Alice like to sit?")
    search(tenant, asked, settings=settings, embedder=cached, record=False)
    counting.seen.clear()
    hits = search(other, asked, settings=settings, embedder=cached, record=False).hits
    assert hits and "aisle" in hits[0].content
    assert counting.seen, "the other tenant's query vector was served from the cache"
    counting.seen.clear()
    search(other, asked, settings=settings, embedder=cached, record=False)
    assert counting.seen == []
    tags = {k.decode().split(":emb:")[1].split("}:")[0] for k in cache_keys(redis_client, settings)}
    assert tags == {f"{{{tenant}|alice", f"{{{other}|alice"}
