"""The capacity benchmark's pure parts: percentiles, recombined vectors, fleet arithmetic."""

from __future__ import annotations

import dataclasses
import math
import random

import numpy as np
import pytest

from tests.bench_modules import load_bench

capacity = load_bench("_capacity")


def test_percentile_ranks_sorted_values_whatever_their_order() -> None:
    values = list(range(1, 101))
    random.Random(3).shuffle(values)
    assert capacity.percentile(values, 0.5) == 51
    assert capacity.percentile(values, 0.95) == 96
    assert capacity.percentile(values, 0.0) == 1
    assert capacity.percentile(values, 1.0) == 100
    assert capacity.percentile([7.5], 0.99) == 7.5
    assert math.isnan(capacity.percentile([], 0.95))
    with pytest.raises(ValueError, match="q must be"):
        capacity.percentile(values, 95)


def _pool(topics: int = 6, per_topic: int = 4, dim: int = 48) -> np.ndarray:
    return np.random.default_rng(1).standard_normal((topics, per_topic, dim))


def test_recombined_vectors_are_distinct_unit_rows_near_their_topic() -> None:
    pool = capacity.VectorPool(_pool(), noise=0.1)
    topics = np.random.default_rng(2).integers(0, 6, size=3000)
    vectors = pool.sample(topics, np.random.default_rng(5))
    assert vectors.shape == (3000, 48) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert len(np.unique(vectors, axis=0)) == 3000
    # Closest to its own topic's pool: the recombination keeps the neighbourhoods.
    centres = capacity.unit_rows(pool.pool.mean(axis=1))
    assert (np.argmax(vectors @ centres.T, axis=1) == topics).mean() > 0.99
    # And never a pool vector itself (two different ones are mixed).
    nearest = np.max(vectors @ pool.pool.reshape(-1, 48).T, axis=1)
    assert nearest.max() < 0.999


def test_recombination_is_deterministic_for_a_seed() -> None:
    pool = capacity.VectorPool(_pool())
    topics = np.arange(6).repeat(10)
    first = pool.sample(topics, np.random.default_rng(9))
    again = pool.sample(topics, np.random.default_rng(9))
    other = pool.sample(topics, np.random.default_rng(10))
    assert np.array_equal(first, again)
    assert not np.array_equal(first, other)


@pytest.mark.parametrize("shape", [(6, 1, 48), (6, 48)])
def test_a_pool_needs_two_vectors_per_topic(shape: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match="pool must be"):
        capacity.VectorPool(np.ones(shape))


COSTS = dict(
    capture_cpu_s=50e-6,
    ingest_worker_cpu_s=200e-6,
    ingest_pg_cpu_s=60e-6,
    ingest_redis_cpu_s=20e-6,
    extract_worker_cpu_s=4e-3,
    extract_pg_cpu_s=1e-3,
    extract_redis_cpu_s=50e-6,
    search_api_cpu_s=8e-3,
    search_pg_cpu_s=3e-3,
    wal_bytes_per_turn=20_000.0,
    pg_bytes_per_turn=15_000.0,
    stream_bytes_per_event=450.0,
    l1_bytes_per_user=6_000.0,
    cache_bytes_per_text=2_000.0,
    embeds_per_turn=0.9,
)


def test_fleet_follows_the_stated_formulas() -> None:
    costs = capacity.Costs(**COSTS)
    load = capacity.Load(turns_per_user_day=86.4, searches_per_user_day=43.2, peak_factor=3)
    f = capacity.fleet(100_000, costs, load)
    assert f.turns_per_s_mean == pytest.approx(100.0)
    assert f.turns_per_s_peak == pytest.approx(300.0)
    assert f.searches_per_s_peak == pytest.approx(150.0)
    assert f.ingest_cores == pytest.approx(300 * 200e-6)
    assert f.extract_cores == pytest.approx(300 * 4e-3)
    assert f.search_cores == pytest.approx(150 * 8e-3)
    assert f.postgres_cores == pytest.approx(300 * (60e-6 + 1e-3) + 150 * 3e-3)
    assert f.redis_cores == pytest.approx(300 * 70e-6)
    assert f.l1_gb == pytest.approx(100_000 * 0.25 * 6_000 / 1e9)
    assert f.stream_gb == pytest.approx(300 * 600 * 450 / 1e9)
    assert f.cache_gb == pytest.approx(100_000 * 86.4 * 0.9 * 7 * 2_000 / 1e9)
    assert f.redis_gb == pytest.approx(f.l1_gb + f.stream_gb + f.cache_gb)
    assert f.wal_mb_s == pytest.approx(300 * 20_000 / 1e6)
    assert f.storage_gb_day == pytest.approx(100 * 86_400 * 15_000 / 1e9)
    assert capacity.gb_per_million_turns(costs) == pytest.approx(15.0)


def test_fleet_grows_in_proportion_to_users() -> None:
    costs, load = capacity.Costs(**COSTS), capacity.Load()
    small, large = capacity.fleet(1_000, costs, load), capacity.fleet(10_000_000, costs, load)
    for item in dataclasses.fields(small):
        assert getattr(large, item.name) == pytest.approx(10_000 * getattr(small, item.name))
    assert large.cores == pytest.approx(10_000 * small.cores)


def test_saturation_lists_single_nodes_fewest_users_first() -> None:
    costs, load = capacity.Costs(**COSTS), capacity.Load()
    nodes = capacity.Nodes(redis_gb=32, pg_cores=32, pg_wal_mb_s=100)
    limits = capacity.saturation(costs, load, nodes)
    users = [u for _, u in limits]
    assert users == sorted(users)
    per_user = capacity.fleet(1, costs, load)
    assert dict(limits)["Redis memory (one node)"] == pytest.approx(32 / per_user.redis_gb)
    # With these costs the embedding cache fills one Redis node long before anything else.
    assert limits[0][0] == "Redis memory (one node)"
    # A part that costs nothing never fills and is left out.
    free = capacity.Costs(**{**COSTS, "ingest_redis_cpu_s": 0.0, "extract_redis_cpu_s": 0.0})
    assert "Redis CPU (one node)" not in dict(capacity.saturation(free, load, nodes))


def test_load_refuses_negative_assumptions() -> None:
    with pytest.raises(ValueError, match="peak_factor"):
        capacity.Load(peak_factor=-1)


def test_fleet_table_has_a_row_per_scenario_in_both_tables() -> None:
    costs, load = capacity.Costs(**COSTS), capacity.Load()
    lines = capacity.fleet_table([capacity.fleet(u, costs, load) for u in (1_000, 100_000)])
    rows = [line for line in lines if line.startswith("| 1,000 |") or "| 100,000 |" in line]
    assert len(rows) == 4
    nan = capacity.Costs(**{**COSTS, "cache_bytes_per_text": float("nan")})
    assert "n/a" in "\n".join(capacity.fleet_table([capacity.fleet(1_000, nan, load)]))
