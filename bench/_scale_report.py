"""bench/scale.py's output: each phase's figures, then the block docs/scaling.md copies
(measured costs, the fleet for 1k / 100k / 10M active users, which node fills first), then
the last line."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field
from datetime import datetime

from _capacity import (
    Costs,
    Load,
    Nodes,
    fleet,
    fleet_table,
    gb_per_million_turns,
    saturation,
)
from _measure import Window
from _scale_search import SearchRun, size_label

from app.config import get_settings

NAN = float("nan")
PIPELINE = ("workers", "postgres", "pg_server", "redis")
PG = ("postgres", "pg_server")
SCENARIOS = (1_000, 100_000, 10_000_000)
TARGETS = {"ingest_vs_bare": 0.35, "extract_vs_model": 0.8, "search_1m_vs_100k": 2.0}


@dataclass
class Measured:
    args: argparse.Namespace
    cpus: int
    load_before: float
    load_after: float = NAN
    when: datetime | None = None
    capture: Window | None = None
    bare: Window | None = None
    ingest: dict[int, Window] = field(default_factory=dict)
    extraction: Window | None = None
    search: list[SearchRun] = field(default_factory=list)

    @property
    def main_ingest(self) -> Window | None:
        return self.ingest.get(self.args.partitions)

    def search_at(self, size: int) -> SearchRun | None:
        return next((s for s in self.search if s.memories == size), None)


def _per_turn(window: Window | None, *groups: str) -> float:
    return window.per_turn(*groups) if window else NAN


def _extra(window: Window | None, name: str) -> float:
    return window.extra.get(name, NAN) if window else NAN


def _beyond_ingest(m: Measured, *groups: str) -> float:
    """Extraction's CPU per turn less what ingesting the turn costs (measured in phase 3)."""
    beyond = _per_turn(m.extraction, *groups) - _per_turn(m.main_ingest, *groups)
    return beyond if math.isnan(beyond) else max(0.0, beyond)


def costs(m: Measured) -> Costs:
    ingest = m.main_ingest
    big = max(m.search, key=lambda s: s.memories, default=None)
    return Costs(
        capture_cpu_s=_per_turn(m.capture, "bench"),
        ingest_worker_cpu_s=_per_turn(ingest, "workers"),
        ingest_pg_cpu_s=_per_turn(ingest, *PG),
        ingest_redis_cpu_s=_per_turn(ingest, "redis"),
        extract_worker_cpu_s=_beyond_ingest(m, "workers"),
        extract_pg_cpu_s=_beyond_ingest(m, *PG),
        extract_redis_cpu_s=_beyond_ingest(m, "redis"),
        search_api_cpu_s=big.api_cpu_s + big.embed_cpu_s if big else NAN,
        search_pg_cpu_s=big.pg_cpu_s if big else NAN,
        wal_bytes_per_turn=(
            m.extraction.reading.wal_backends / m.extraction.turns
            if m.extraction
            else (ingest.reading.wal_backends / ingest.turns if ingest else NAN)
        ),
        pg_bytes_per_turn=(
            _extra(m.extraction, "pg_bytes_per_turn")
            if m.extraction
            else _extra(ingest, "turn_bytes")
        ),
        stream_bytes_per_event=_extra(m.capture, "stream_bytes_per_event"),
        l1_bytes_per_user=_extra(ingest, "l1_bytes_per_user"),
        cache_bytes_per_text=_extra(m.extraction, "cache_bytes_per_text"),
        embeds_per_turn=_extra(m.extraction, "embeds_per_turn"),
    )


@dataclass(frozen=True)
class Headline:
    ingest_per_core: float
    ingest_vs_bare: float
    extract_per_core: float
    model_bound_per_core: float
    extract_vs_model: float
    search_p95_1m_ms: float
    search_1m_vs_100k: float


def headline(m: Measured) -> Headline:
    ingest = m.main_ingest
    ingest_cpu = _per_turn(ingest, *PIPELINE)
    extract_cpu = _beyond_ingest(m, *PIPELINE)
    embeds = _extra(m.extraction, "embeds_per_turn")
    model_bound = _extra(m.extraction, "model_per_cpu_s") / embeds if embeds else NAN
    at_1m, at_100k = m.search_at(1_000_000), m.search_at(100_000)
    return Headline(
        ingest_per_core=1 / ingest_cpu if ingest_cpu else NAN,
        ingest_vs_bare=ingest.rate / m.bare.rate if ingest and m.bare else NAN,
        extract_per_core=1 / extract_cpu if extract_cpu else NAN,
        model_bound_per_core=model_bound,
        extract_vs_model=(1 / extract_cpu) / model_bound if extract_cpu else NAN,
        search_p95_1m_ms=at_1m.p95_ms if at_1m else NAN,
        search_1m_vs_100k=at_1m.p95_ms / at_100k.p95_ms if at_1m and at_100k else NAN,
    )


def _us(seconds: float) -> str:
    return "n/a" if math.isnan(seconds) else f"{seconds * 1e6:,.0f}"


def _ms(seconds: float) -> str:
    return "n/a" if math.isnan(seconds) else f"{seconds * 1e3:.1f}"


def _n(value: float, digits: int = 0) -> str:
    return "n/a" if math.isnan(value) else f"{value:,.{digits}f}"


def _cpu_split(window: Window | None) -> str:
    return " / ".join(_us(_per_turn(window, *g)) for g in (("workers",), PG, ("redis",)))


def phase_lines(m: Measured) -> list[str]:
    """What each phase measured, for the log (the block below keeps what the model uses)."""
    lines = []
    if m.capture:
        lines.append(
            f"capture: {m.capture.rate:,.0f} events/s from one producer; CPU per event "
            f"{_us(_per_turn(m.capture, 'bench'))} us producer + "
            f"{_us(_per_turn(m.capture, 'redis'))} us Redis; stream entry "
            f"{_extra(m.capture, 'stream_bytes_per_event'):,.0f} B"
        )
    if m.bare:
        cpu = _per_turn(m.bare, "bench", *PG)
        lines.append(
            f"bare INSERT: {m.bare.rate:,.0f} rows/s in {m.bare.reading.wall_s:.1f}s; CPU per "
            f"row {_us(_per_turn(m.bare, 'bench'))} us client + "
            f"{_us(_per_turn(m.bare, *PG))} us Postgres = {1 / cpu:,.0f} rows per CPU "
            f"second; WAL {m.bare.reading.wal_backends / m.bare.turns:,.0f} B per row "
            f"(server-wide {m.bare.reading.wal_server / m.bare.turns:,.0f})"
        )
    for partitions, window in sorted(m.ingest.items(), reverse=True):
        lines.append(
            f"ingest, {partitions} partitions: {window.rate:,.0f} turns/s "
            f"({window.rate / partitions:,.0f} per partition), "
            f"{1 / _per_turn(window, *PIPELINE):,.0f} turns per CPU second; CPU per turn "
            f"workers / Postgres / Redis {_cpu_split(window)} us (this process polling: "
            f"{_us(_per_turn(window, 'bench'))}); WAL "
            f"{window.reading.wal_backends / window.turns:,.0f} B per turn (server-wide "
            f"{window.reading.wal_server / window.turns:,.0f}); lag p50 "
            f"{_extra(window, 'lag_p50_ms'):,.0f} ms, p99 {_extra(window, 'lag_p99_ms'):,.0f}; "
            f"episodic.turns {_extra(window, 'turn_bytes'):,.0f} B per turn; L1 "
            f"{_extra(window, 'l1_bytes_per_user'):,.0f} B per user"
        )
    x = m.extraction
    if x:
        h = headline(m)
        lines.append(
            f"extraction: {x.rate:,.0f} turns/s, {1 / _per_turn(x, *PIPELINE):,.0f} turns per "
            f"CPU second with their ingest, {h.extract_per_core:,.0f} beyond it; CPU per turn "
            f"workers / Postgres / Redis {_cpu_split(x)} us (with ingest); "
            f"{_extra(x, 'embeds_per_turn'):.2f} embeddings and "
            f"{_extra(x, 'memories_per_turn'):.2f} memories per turn; WAL "
            f"{x.reading.wal_backends / x.turns:,.0f} B per turn (server-wide "
            f"{x.reading.wal_server / x.turns:,.0f}); every layer "
            f"{_extra(x, 'pg_bytes_per_turn'):,.0f} B per turn, semantic.memories "
            f"{_extra(x, 'memory_bytes'):,.0f} B per memory; cached embedding "
            f"{_extra(x, 'cache_bytes_per_text'):,.0f} B"
        )
        lines.append(
            f"model alone: {_extra(x, 'model_per_cpu_s'):,.0f} sentences per CPU second "
            f"({_extra(x, 'model_per_s'):,.0f}/s) over {_extra(x, 'model_sentences'):,.0f} "
            f"turn and memory texts of the run; model-bound {h.model_bound_per_core:,.0f} "
            f"turns per CPU second; extraction reaches {h.extract_vs_model:.2f} of it "
            f"({1 / _per_turn(x, *PIPELINE) / h.model_bound_per_core:.2f} counting ingest)"
        )
    return lines


def _measured_table(m: Measured, c: Costs, h: Headline) -> list[str]:
    ingest, x, a = m.main_ingest, m.extraction, m.args
    one = m.ingest.get(1)
    p95 = " / ".join(f"{s.p95_ms:.1f} ({size_label(s.memories)})" for s in m.search)
    rows = [
        ("ingest, turns/s (wall)", _n(ingest.rate if ingest else NAN)),
        ("ingest, turns per CPU second (workers + Postgres + Redis)", _n(h.ingest_per_core)),
        (
            f"ingest, turns/s per partition (at {a.partitions}; through 1 alone)",
            f"{_n(ingest.rate / a.partitions if ingest else NAN)}; {_n(one.rate if one else NAN)}",
        ),
        ("ingest CPU per turn, workers / Postgres / Redis (us)", _cpu_split(ingest)),
        ("bare INSERT, rows/s (one process)", _n(m.bare.rate if m.bare else NAN)),
        ("ingest / bare INSERT", _n(h.ingest_vs_bare, 2)),
        ("capture CPU per event, producer side (us)", _us(c.capture_cpu_s)),
        ("extraction, turns/s (wall)", _n(x.rate if x else NAN)),
        ("extraction, turns per CPU second (beyond ingest)", _n(h.extract_per_core)),
        (
            "extraction CPU per turn beyond ingest, workers / Postgres / Redis (us)",
            " / ".join(
                _us(v) for v in (c.extract_worker_cpu_s, c.extract_pg_cpu_s, c.extract_redis_cpu_s)
            ),
        ),
        ("model alone, sentences per CPU second", _n(_extra(x, "model_per_cpu_s"))),
        ("embeddings per turn", _n(c.embeds_per_turn, 2)),
        ("model-bound turns per CPU second", _n(h.model_bound_per_core)),
        ("extraction / model-bound", _n(h.extract_vs_model, 2)),
        ("search p95, ms (memories)", p95 or "n/a"),
        (
            "search CPU per query, API incl. query embedding / Postgres (ms)",
            f"{_ms(c.search_api_cpu_s)} / {_ms(c.search_pg_cpu_s)}",
        ),
        ("WAL per turn, ingest + extraction (B)", _n(c.wal_bytes_per_turn)),
        ("Postgres per turn, every layer with indexes (B)", _n(c.pg_bytes_per_turn)),
        ("Postgres per million turns (GB)", _n(gb_per_million_turns(c), 2)),
        ("memories per turn", _n(_extra(x, "memories_per_turn"), 2)),
        (
            "semantic.memories per memory, indexes included (B, by size)",
            " / ".join(f"{s.bytes_per_memory:,.0f} ({size_label(s.memories)})" for s in m.search)
            or "n/a",
        ),
        (
            "Redis: stream entry / L1 per user / cached embedding (B)",
            f"{_n(c.stream_bytes_per_event)} / {_n(c.l1_bytes_per_user)} / "
            f"{_n(c.cache_bytes_per_text)}",
        ),
    ]
    return ["| figure | value |", "|---|---:|", *(f"| {k} | {v} |" for k, v in rows)]


def report(m: Measured) -> list[str]:
    a = m.args
    c, h = costs(m), headline(m)
    load = Load(
        turns_per_user_day=a.turns_per_user_day,
        searches_per_user_day=a.searches_per_user_day,
        peak_factor=a.peak_factor,
        live_share=a.live_share,
        backlog_s=a.backlog_s,
        cache_ttl_days=(
            a.cache_ttl_days
            if a.cache_ttl_days is not None
            else get_settings().embedding_cache_ttl_s / 86_400
        ),
    )
    nodes = Nodes(redis_gb=a.redis_gb, pg_cores=a.pg_cores, pg_wal_mb_s=a.pg_wal_mb_s)
    sizes = ", ".join(size_label(s.memories) for s in m.search) or "none"
    lines = phase_lines(m)
    lines += [
        "",
        f"=== capacity (bench/scale.py, {m.when:%Y-%m-%d %H:%M} UTC) ===" if m.when else "",
        f"Run: {m.cpus} CPUs, load average {m.load_before:.2f} before, {m.load_after:.2f} "
        f"after; ingest {a.turns:,} turns of {a.users} users, {a.partitions} partitions "
        f"(and {', '.join(map(str, a.sweep)) or 'no other'}), {a.workers} workers x "
        f"{a.consumers} consumers, batch {a.batch}; extraction {a.extract_turns:,} turns of "
        f"{a.extract_users} users, no sentence repeated, {a.workers} workers x "
        f"{a.extract_concurrency} threads; search at {sizes} memories, "
        f"{a.memories_per_user} per user on average (Zipf {a.skew}), {a.queries} queries each.",
        "",
        *_measured_table(m, c, h),
        "",
        f"Load: {a.turns_per_user_day:g} turns and {a.searches_per_user_day:g} searches per "
        f"active user per day, busiest hour {a.peak_factor:g}x the mean, "
        f"{a.live_share:.0%} of the day's users holding L1 then, streams holding "
        f"{a.backlog_s:g} s of peak traffic, embeddings cached {load.cache_ttl_days:g} days.",
        "",
        *fleet_table([fleet(users, c, load) for users in SCENARIOS]),
        "",
        f"Active users at which one node is full (Redis {a.redis_gb:g} GB and one core; "
        f"Postgres primary {a.pg_cores:g} cores, {a.pg_wal_mb_s:g} MB/s of WAL):",
        "",
        "| single node | full at (active users) |",
        "|---|---:|",
        *(f"| {name} | {users:,.0f} |" for name, users in saturation(c, load, nodes)),
        "",
        "Targets: "
        + "; ".join(
            f"{name} {value:.2f} (target {'>=' if name != 'search_1m_vs_100k' else '<='} "
            f"{TARGETS[name]})"
            for name, value in (
                ("ingest_vs_bare", h.ingest_vs_bare),
                ("extract_vs_model", h.extract_vs_model),
                ("search_1m_vs_100k", h.search_1m_vs_100k),
            )
        ),
        "=== end ===",
        f"scale ingest_per_core={h.ingest_per_core:.0f} ingest_vs_bare={h.ingest_vs_bare:.2f} "
        f"extract_vs_model={h.extract_vs_model:.2f} search_p95_1m_ms={h.search_p95_1m_ms:.1f}",
    ]
    return lines
