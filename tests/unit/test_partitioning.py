"""Partition choice and Redis key layout: stable partitions, per-user and partition hash tags."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from app.config import PROJECT_ROOT
from app.keys import RedisKeys, partition_of

identifiers = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,40}", fullmatch=True)
partition_counts = st.integers(min_value=1, max_value=1024)


def hash_tag(key: str) -> str:
    """The part of a key Redis Cluster hashes: the first non-empty `{...}`, else the whole key."""
    start = key.find("{")
    if start == -1:
        return key
    end = key.find("}", start + 1)
    if end in (-1, start + 1):
        return key
    return key[start + 1 : end]


# -- partition_of -------------------------------------------------------------------------------


@given(tenant=identifiers, user=identifiers, partitions=partition_counts)
def test_partition_is_within_range_and_repeatable(tenant: str, user: str, partitions: int) -> None:
    index = partition_of(tenant, user, partitions)
    assert 0 <= index < partitions
    assert partition_of(tenant, user, partitions) == index


@given(tenant=identifiers, user=identifiers)
def test_single_partition_takes_everyone(tenant: str, user: str) -> None:
    assert partition_of(tenant, user, 1) == 0


def test_partition_is_stable_across_processes_with_different_hash_seeds() -> None:
    users = [("acme", f"user-{i}") for i in range(50)]
    here = [partition_of(t, u, 8) for t, u in users]
    script = (
        "from app.keys import partition_of\n"
        f"users = {users!r}\n"
        "print([partition_of(t, u, 8) for t, u in users])\n"
    )
    for seed in ("1", "2"):
        out = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            check=True,
            cwd=PROJECT_ROOT,
            env={**os.environ, "PYTHONHASHSEED": seed},
        )
        assert out.stdout.strip() == str(here)


def test_users_spread_over_every_partition() -> None:
    counts = Counter(partition_of("acme", f"user-{i}", 8) for i in range(2000))
    assert set(counts) == set(range(8))
    assert min(counts.values()) > 2000 / 8 / 2  # no partition is starved


def test_tenant_and_user_are_not_simply_concatenated() -> None:
    # "ab" + "c" and "a" + "bc" are different users and must be hashed as such.
    pairs = [("ab", "c"), ("a", "bc")]
    spread = {partition_of(t, u, 1 << 20) for t, u in pairs}
    assert len(spread) == 2


# -- RedisKeys ------------------------------------------------------------------------------------


@given(tenant=identifiers, user=identifiers)
def test_working_memory_keys_name_tenant_and_user_in_one_hash_tag(tenant: str, user: str) -> None:
    keys = RedisKeys("engram")
    user_keys = [
        keys.working_turns(tenant, user),
        keys.working_state(tenant, user),
        keys.working_evicted(tenant, user),
    ]
    assert len(set(user_keys)) == 3
    for key in user_keys:
        assert key.startswith("engram:wm:")
        assert tenant in hash_tag(key)
        assert user in hash_tag(key)
    assert len({hash_tag(k) for k in user_keys}) == 1  # one cluster slot per user


def test_working_memory_keys_differ_between_users_and_tenants() -> None:
    keys = RedisKeys("engram")
    seen = {
        keys.working_turns("acme", "alice"),
        keys.working_turns("acme", "bob"),
        keys.working_turns("globex", "alice"),
    }
    assert len(seen) == 3


def test_working_memory_keys_never_collide_across_tenants() -> None:
    keys = RedisKeys("engram")
    assert keys.working_turns("acme:x", "bob") != keys.working_turns("acme", "x:bob")


@given(index=st.integers(min_value=0, max_value=1023))
def test_partition_key_carries_its_own_hash_tag(index: int) -> None:
    key = RedisKeys("engram").partition(index)
    assert key.startswith("engram:")
    assert hash_tag(key) == f"p{index}"


def test_every_partition_is_its_own_slot() -> None:
    streams = RedisKeys("engram").partitions(16)
    assert len(streams) == 16
    assert len({hash_tag(s) for s in streams}) == 16


def test_every_key_starts_with_the_prefix() -> None:
    keys = RedisKeys("my-prefix")
    produced = [
        keys.partition(0),
        keys.dead_letters(),
        keys.failures(),
        keys.lost_entries(),
        keys.working_turns("t", "u"),
        keys.working_state("t", "u"),
        keys.working_evicted("t", "u"),
        keys.working_active(),
        keys.task_deliveries("abc"),
    ]
    assert all(k.startswith("my-prefix:") for k in produced)
    assert len(set(produced)) == len(produced)
