"""The API-key cache's time rules, on a clock the test turns: fresh answers for CACHE_TTL_S,
last-known-good answers for `stale_s` while Postgres is down, revocations honoured in both.
(The same rules against a real stopped Postgres: tests/integration/test_api_during_outage.py.)
"""

from __future__ import annotations

import pytest
from sqlalchemy.exc import OperationalError, ProgrammingError

from app.api.auth import CACHE_TTL_S, MAX_ENTRIES, UNANSWERED, KeyCache, KeyRevokedError

KEY = "egk_0a1b2c3d_secret"
STALE_S = 900.0
DOWN = OperationalError("SELECT meta.api_key_tenant(...)", {}, Exception("connection refused"))


class World:
    """Postgres's answers and the time, as the test sets them."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.keys: dict[str, str | None] = {KEY: "t1"}
        self.database_up = True
        self.lookups = 0
        self.revoked: set[str] = set()

    def clock(self) -> float:
        return self.now

    def lookup(self, key: str) -> str | None:
        self.lookups += 1
        if not self.database_up:
            raise DOWN
        return self.keys.get(key)

    def is_revoked(self, tenant: str) -> bool:
        return tenant in self.revoked


@pytest.fixture
def world() -> World:
    return World()


@pytest.fixture
def cache(world: World) -> KeyCache:
    return KeyCache(world.lookup, clock=world.clock)


def get(cache: KeyCache, world: World, key: str = KEY) -> str | None:
    return cache.get(key, stale_s=STALE_S, revoked=world.is_revoked)


def test_an_answer_is_reused_until_the_ttl_and_then_asked_again(
    cache: KeyCache, world: World
) -> None:
    assert get(cache, world) == "t1"
    world.keys[KEY] = None  # revoked in Postgres
    world.now += CACHE_TTL_S - 0.01
    assert get(cache, world) == "t1"
    world.now += 0.02
    assert get(cache, world) is None
    assert world.lookups == 2


def test_a_key_confirmed_within_the_bound_rides_out_an_outage(
    cache: KeyCache, world: World
) -> None:
    assert get(cache, world) == "t1"
    world.database_up = False
    world.now += STALE_S - 1
    assert get(cache, world) == "t1"
    world.now += 2  # past the bound, counted from the last confirmation, not the last use
    with pytest.raises(OperationalError):
        get(cache, world)


def test_an_outage_is_probed_once_per_ttl_not_once_per_request(
    cache: KeyCache, world: World
) -> None:
    get(cache, world)
    world.database_up = False
    world.now += CACHE_TTL_S + 1
    for _ in range(50):
        assert get(cache, world) == "t1"
    assert world.lookups == 2
    world.now += CACHE_TTL_S + 1
    assert get(cache, world) == "t1"
    assert world.lookups == 3


def test_recovery_confirms_the_key_again_and_restarts_the_bound(
    cache: KeyCache, world: World
) -> None:
    get(cache, world)
    world.database_up = False
    world.now += STALE_S - 10
    assert get(cache, world) == "t1"
    world.database_up = True
    world.now += CACHE_TTL_S + 1
    assert get(cache, world) == "t1"
    world.database_up = False
    world.now += STALE_S - 10
    assert get(cache, world) == "t1"


def test_a_revocation_announced_before_the_outage_is_honoured_during_it(
    cache: KeyCache, world: World
) -> None:
    get(cache, world)
    world.revoked.add("t1")
    world.database_up = False
    world.now += CACHE_TTL_S + 1
    with pytest.raises(KeyRevokedError):
        get(cache, world)
    assert get(cache, world) is None  # refused, as any revoked key, for a TTL
    world.now += CACHE_TTL_S + 1
    with pytest.raises(OperationalError):  # then nothing good is known of it any more
        get(cache, world)


def test_a_key_seen_revoked_before_the_outage_stays_refused(cache: KeyCache, world: World) -> None:
    get(cache, world)
    world.keys[KEY] = None
    world.now += CACHE_TTL_S + 1
    assert get(cache, world) is None
    world.database_up = False
    world.now += CACHE_TTL_S + 1
    with pytest.raises(OperationalError):
        get(cache, world)


def test_a_key_never_confirmed_gets_the_outage_not_a_verdict(cache: KeyCache, world: World) -> None:
    world.database_up = False
    with pytest.raises(OperationalError):
        get(cache, world)


def test_errors_that_are_no_outage_never_use_the_fallback(cache: KeyCache, world: World) -> None:
    get(cache, world)
    world.now += CACHE_TTL_S + 1
    broken = KeyCache(_raise_programming_error, clock=world.clock)
    with pytest.raises(ProgrammingError):
        broken.get(KEY, stale_s=STALE_S, revoked=world.is_revoked)


def _raise_programming_error(key: str) -> str | None:
    raise ProgrammingError("SELECT", {}, Exception("no such function"))


def test_a_flood_of_unknown_keys_does_not_push_out_the_known_ones(
    cache: KeyCache, world: World
) -> None:
    get(cache, world)
    for n in range(MAX_ENTRIES + 10):
        assert get(cache, world, f"egk_{n:08x}_unknown") is None
    world.database_up = False
    world.now += CACHE_TTL_S + 1
    assert get(cache, world) == "t1"


def test_fresh_answers_only_from_what_is_held_and_never_asks(cache: KeyCache, world: World) -> None:
    assert cache.fresh(KEY) is UNANSWERED
    assert world.lookups == 0
    assert get(cache, world) == "t1"
    assert get(cache, world, "egk_ffffffff_unknown") is None
    lookups = world.lookups
    assert cache.fresh(KEY) == "t1"
    assert cache.fresh("egk_ffffffff_unknown") is None  # a held "no" is an answer too
    world.now += CACHE_TTL_S
    assert cache.fresh(KEY) is UNANSWERED  # stale: the event loop must not answer it
    assert world.lookups == lookups
