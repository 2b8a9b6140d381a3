"""The pure parts of bench/scale.py: percentiles, new vectors recombined from real sentence
embeddings, and the arithmetic that turns measured per-turn costs into a fleet.

No I/O and no Engram imports, so tests load it alone (tests/unit/test_capacity_model.py).
docs/scaling.md explains the model; every formula it states is a function here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields

import numpy as np

DAY_S = 86_400.0
GB = 1e9
MB = 1e6


def percentile(values: Sequence[float], q: float) -> float:
    """The value at rank int(q * n) of the sorted values (as bench/search.py reports, so the
    figures compare), nan for no values."""
    if not values:
        return float("nan")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must be within [0, 1], got {q}")
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, int(q * len(ordered)))])


def unit_rows(matrix: np.ndarray) -> np.ndarray:
    """Each row scaled to length 1."""
    return matrix / np.linalg.norm(matrix, axis=-1, keepdims=True)


class VectorPool:
    """Many distinct unit vectors from a few real ones per topic.

    A new vector is a random convex mix of two different pool vectors of its topic plus a
    little isotropic noise, normalised: a continuous draw, so no two rows repeat, that stays
    in the neighbourhoods real sentence embeddings occupy (a million real embeddings would
    take hours of the model on two cores). Same interface as bench/search.py's `Space`
    (`dim`, `sample(topics, rng)`), so its loader takes either."""

    def __init__(self, pool: np.ndarray, noise: float = 0.1) -> None:
        if pool.ndim != 3 or pool.shape[1] < 2:
            raise ValueError(f"pool must be (topics, >= 2 per topic, dim), got {pool.shape}")
        if noise < 0:
            raise ValueError(f"noise must be >= 0, got {noise}")
        self.pool = unit_rows(pool.astype(np.float64))
        self.topics, self.per_topic, self.dim = pool.shape
        self.noise = noise

    def sample(self, topics: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One new float32 unit vector per topic index."""
        topics = np.asarray(topics, dtype=np.int64)
        count, k = len(topics), self.per_topic
        first = rng.integers(0, k, size=count)
        second = (first + rng.integers(1, k, size=count)) % k  # never the same pool vector
        weight = rng.uniform(0.2, 0.8, size=(count, 1))
        mixed = weight * self.pool[topics, first] + (1 - weight) * self.pool[topics, second]
        noise = rng.standard_normal((count, self.dim)) * (self.noise / math.sqrt(self.dim))
        return unit_rows(mixed + noise).astype(np.float32)


# -- the capacity model ----------------------------------------------------------------------


@dataclass(frozen=True)
class Costs:
    """What one event, turn, search and active user cost, as bench/scale.py measured them.
    CPU is in core-seconds (user + system time of the processes doing the work)."""

    capture_cpu_s: float  # producer side, per event: validation + pipelined XADD (no HTTP)
    ingest_worker_cpu_s: float  # per turn: stream consumer, L2 write, L1 update, ack
    ingest_pg_cpu_s: float
    ingest_redis_cpu_s: float
    extract_worker_cpu_s: float  # per turn: salience, extraction, embedding, L3/L4
    extract_pg_cpu_s: float
    extract_redis_cpu_s: float
    search_api_cpu_s: float  # per search, embedding the query included
    search_pg_cpu_s: float
    wal_bytes_per_turn: float  # ingest and extraction together
    pg_bytes_per_turn: float  # every layer after extraction, indexes included
    stream_bytes_per_event: float  # a stream entry waiting in Redis
    l1_bytes_per_user: float  # a full working-memory window
    cache_bytes_per_text: float  # one cached embedding
    embeds_per_turn: float  # distinct texts the model embeds per turn


@dataclass(frozen=True)
class Load:
    """Assumptions about the users: stated in docs/scaling.md, flags of bench/scale.py."""

    turns_per_user_day: float = 100.0
    searches_per_user_day: float = 50.0
    peak_factor: float = 3.0  # busiest hour over the day's mean
    live_share: float = 0.25  # of the day's active users holding L1 in the busiest hour
    backlog_s: float = 600.0  # of peak traffic the streams must hold (workers or Postgres down)
    cache_ttl_days: float = 7.0  # ENGRAM_EMBEDDING_CACHE_TTL_S

    def __post_init__(self) -> None:
        for item in fields(self):
            if getattr(self, item.name) < 0:
                raise ValueError(f"{item.name} must be >= 0")


@dataclass(frozen=True)
class Fleet:
    users: int
    turns_per_s_mean: float
    turns_per_s_peak: float
    searches_per_s_peak: float
    capture_cores: float
    ingest_cores: float  # worker side
    extract_cores: float  # worker side
    search_cores: float  # API side
    postgres_cores: float
    redis_cores: float
    redis_gb: float
    l1_gb: float
    stream_gb: float
    cache_gb: float
    wal_mb_s: float  # at the peak
    storage_gb_day: float

    @property
    def cores(self) -> float:
        return (
            self.capture_cores
            + self.ingest_cores
            + self.extract_cores
            + self.search_cores
            + self.postgres_cores
            + self.redis_cores
        )


def fleet(users: int, costs: Costs, load: Load) -> Fleet:
    """Cores, Redis memory, WAL rate and storage for `users` active users, sized for the peak."""
    mean = users * load.turns_per_user_day / DAY_S
    peak = mean * load.peak_factor
    searches = users * load.searches_per_user_day / DAY_S * load.peak_factor
    l1 = users * load.live_share * costs.l1_bytes_per_user
    stream = peak * load.backlog_s * costs.stream_bytes_per_event
    cache = (
        users
        * load.turns_per_user_day
        * costs.embeds_per_turn
        * load.cache_ttl_days
        * costs.cache_bytes_per_text
    )
    return Fleet(
        users=users,
        turns_per_s_mean=mean,
        turns_per_s_peak=peak,
        searches_per_s_peak=searches,
        capture_cores=peak * costs.capture_cpu_s,
        ingest_cores=peak * costs.ingest_worker_cpu_s,
        extract_cores=peak * costs.extract_worker_cpu_s,
        search_cores=searches * costs.search_api_cpu_s,
        postgres_cores=peak * (costs.ingest_pg_cpu_s + costs.extract_pg_cpu_s)
        + searches * costs.search_pg_cpu_s,
        redis_cores=peak * (costs.ingest_redis_cpu_s + costs.extract_redis_cpu_s),
        redis_gb=(l1 + stream + cache) / GB,
        l1_gb=l1 / GB,
        stream_gb=stream / GB,
        cache_gb=cache / GB,
        wal_mb_s=peak * costs.wal_bytes_per_turn / MB,
        storage_gb_day=mean * DAY_S * costs.pg_bytes_per_turn / GB,
    )


@dataclass(frozen=True)
class Nodes:
    """One node of each part that does not grow by adding hosts alone."""

    redis_cores: float = 1.0  # Redis runs commands on one thread
    redis_gb: float = 32.0
    pg_cores: float = 32.0  # the Postgres primary
    pg_wal_mb_s: float = 100.0  # sustained WAL a primary and its replicas keep up with


def saturation(costs: Costs, load: Load, nodes: Nodes) -> list[tuple[str, float]]:
    """Active users at which each single node is full, fewest first. Workers and API
    processes are absent: they scale by adding hosts; so is a part that costs nothing or was
    not measured."""
    per_user = fleet(1, costs, load)

    def users(capacity: float, need: float) -> float:
        return capacity / need if need > 0 else math.inf

    limits = {
        "Redis memory (one node)": users(nodes.redis_gb, per_user.redis_gb),
        "Redis CPU (one node)": users(nodes.redis_cores, per_user.redis_cores),
        "Postgres primary CPU": users(nodes.pg_cores, per_user.postgres_cores),
        "Postgres WAL rate": users(nodes.pg_wal_mb_s, per_user.wal_mb_s),
    }
    return sorted(
        ((name, count) for name, count in limits.items() if math.isfinite(count)),
        key=lambda item: item[1],
    )


def gb_per_million_turns(costs: Costs) -> float:
    return 1e6 * costs.pg_bytes_per_turn / GB


def _number(value: float) -> str:
    if not math.isfinite(value):
        return "n/a"
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2g}" if value < 1 else f"{value:.2f}"


def fleet_table(fleets: Sequence[Fleet]) -> list[str]:
    """Two markdown tables: traffic and cores; memory, WAL and storage."""
    lines = [
        "| active users | turns/s mean | turns/s peak | searches/s peak | capture cores "
        "| ingest cores | extraction cores | search cores | Postgres cores | Redis cores "
        "| total cores |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for f in fleets:
        cells = (
            f.turns_per_s_mean,
            f.turns_per_s_peak,
            f.searches_per_s_peak,
            f.capture_cores,
            f.ingest_cores,
            f.extract_cores,
            f.search_cores,
            f.postgres_cores,
            f.redis_cores,
            f.cores,
        )
        lines.append(f"| {f.users:,} | " + " | ".join(_number(c) for c in cells) + " |")
    lines += [
        "",
        "| active users | Redis GB | of which L1 | streams | embedding cache "
        "| WAL MB/s peak | Postgres GB/day | Postgres TB/year |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for f in fleets:
        cells = (
            f.redis_gb,
            f.l1_gb,
            f.stream_gb,
            f.cache_gb,
            f.wal_mb_s,
            f.storage_gb_day,
            f.storage_gb_day * 365 / 1000,
        )
        lines.append(f"| {f.users:,} | " + " | ".join(_number(c) for c in cells) + " |")
    return lines
