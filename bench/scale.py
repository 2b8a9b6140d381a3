"""Capacity from measurements: what one turn, one search and one active user cost on this
machine, and the fleet that follows for 1k, 100k and 10M active users (docs/scaling.md).

One run, one phase after the other (never two at once), each on its own database, with a
private redis-server (AOF every second) so Redis CPU and memory belong to the run:

1. capture: the producer alone (validation + pipelined XADD) over `--turns` turns of
   bench/ingest.py's workload: CPU per event, stream bytes per entry (MEMORY USAGE).
2. bare INSERT: the same rows (session ids, token counts and flags made beforehand) through
   the workers' own set-based statement (app/layers/episodic/repository.insert_turns), one
   transaction per `--batch` rows, one process, into episodic.turns with today's indexes and
   triggers: the local limit of the table.
3. ingest: `--workers` real `celery worker` processes (`--consumers` stream consumers each)
   take the same turns from the stream into L2 and L1, at `--partitions` partitions and again
   at each of `--partition-sweep`; CPU per turn of workers, Postgres and Redis, WAL, bytes per
   turn in episodic.turns and per user in L1.
4. extraction: `--extract-turns` turns that never repeat a sentence (bench/extract.py's
   workload, `--distinct`) through salience, extraction and embedding with real workers;
   CPU per turn beyond ingest, embeddings per turn, bytes per turn in every layer, bytes per
   cached embedding; then the model alone on a sample of the run's turn and memory texts,
   in this process, one thread: its sentences per CPU second.
5. search: search() through the service layer at each of `--sizes` memories (databases kept
   for `--reuse`; see bench/_scale_search.py for the vectors and how users are sized).

CPU is counted per process (user + system), so per-core figures are turns per CPU second.
Prints a block for docs/scaling.md, between `=== capacity` and `=== end`, then the last line
`scale ingest_per_core=<N> ingest_vs_bare=<N> extract_vs_model=<N> search_p95_1m_ms=<N>`:
turns per CPU second of the whole ingest (workers, Postgres, Redis); the ingest rate over the
bare INSERT rate; extraction turns per CPU second over the model-bound rate (model sentences
per CPU second / embeddings per turn); search p95 at 1,000,000 memories (nan if not run).

    python bench/scale.py                    # the full run (builds the 1M database once)
    python bench/scale.py --reuse            # keep the search databases of an earlier run
    python bench/scale.py --turns 5000 --extract-turns 1000 --sizes 10000,50000   # small
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _measure import PgProbe, use_database
from _scale_extract import extraction
from _scale_ingest import INGEST_DB, LAG_SAMPLES, TENANT, Bench, bare_insert, capture, ingest
from _scale_report import Measured, report
from _scale_search import run_size

from app.cli.supervisor import ensure_services, fresh_database
from app.config import get_settings
from tests.private_redis import PrivateRedis


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add = parser.add_argument
    add("--phases", default="ingest,extract,search", help="any of ingest, extract, search")
    add("--turns", type=int, default=50_000, help="capture, bare INSERT and ingest")
    add("--users", type=int, default=200, help="users of the ingest workload")
    add("--partitions", type=int, default=8)
    add("--partition-sweep", default="1", help="more partition counts to ingest at ('' none)")
    add("--workers", type=int, default=2, help="worker processes (ingest and extraction)")
    add("--consumers", type=int, default=2, help="stream consumers per ingest worker")
    add("--batch", type=int, default=500, help="consumer batch = bare INSERT batch")
    add("--extract-turns", type=int, default=10_000)
    add("--extract-users", type=int, default=100)
    add("--extract-concurrency", type=int, default=2, help="task threads per worker")
    add("--model-sentences", type=int, default=1000, help="texts the model alone embeds")
    add("--sizes", default="10000,100000,1000000", help="memories per search database")
    add("--memories-per-user", type=int, default=100, help="users = size / this (Zipf sizes)")
    add("--search-users", type=int, default=0, help="a fixed user count instead")
    add("--skew", type=float, default=1.0, help="Zipf exponent of user sizes")
    add("--queries", type=int, default=1000, help="timed search() calls per size")
    add("--warmup", type=int, default=50)
    add("--pool-per-topic", type=int, default=16, help="real embeddings per topic")
    add("--noise", type=float, default=0.1, help="noise norm of recombined vectors")
    add("--maintenance-work-mem", default="3GB", help="for the index builds (HNSW at 1M)")
    add("--reuse", action="store_true", help="keep search databases whose label matches")
    add("--seed", type=int, default=7)
    add("--settle", type=float, default=11.0, help="s for backends to flush WAL statistics")
    add("--turns-per-user-day", type=float, default=100.0)
    add("--searches-per-user-day", type=float, default=50.0)
    add("--peak-factor", type=float, default=3.0)
    add("--live-share", type=float, default=0.25, help="of daily users with L1 at the peak")
    add("--backlog-s", type=float, default=600.0, help="peak traffic the streams must hold")
    add("--cache-ttl-days", type=float, default=None, help="default ENGRAM_EMBEDDING_CACHE_TTL_S")
    add("--redis-gb", type=float, default=32.0, help="one Redis node's memory")
    add("--pg-cores", type=float, default=32.0, help="the Postgres primary's cores")
    add("--pg-wal-mb-s", type=float, default=100.0, help="WAL rate a primary sustains")
    args = parser.parse_args(argv)
    args.phases = {p.strip() for p in args.phases.split(",") if p.strip()}
    if args.phases - {"ingest", "extract", "search"}:
        parser.error(f"--phases: unknown {sorted(args.phases - {'ingest', 'extract', 'search'})}")
    args.sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    args.sweep = [int(p) for p in args.partition_sweep.split(",") if p.strip()]
    if not 1000 <= args.turns <= LAG_SAMPLES:
        parser.error(f"--turns must be within 1,000..{LAG_SAMPLES:,} (acks are counted by lag)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if get_settings().database_url:
        raise SystemExit("bench/scale.py measures the embedded server: unset DATABASE_URL")
    # AOF every second, as in production: the run's Redis CPU and memory are its own.
    folder = get_settings().data_dir / f"bench-scale-redis-{os.getpid()}"
    redis_server = PrivateRedis(folder, appendfsync="everysec")
    measured = Measured(args=args, cpus=os.cpu_count() or 0, load_before=os.getloadavg()[0])
    try:
        redis_server.start()
        os.environ["REDIS_URL"] = redis_server.url
        bench = Bench(args, redis_server)
        settings = use_database(INGEST_DB, f"bench-scale-{bench.run}")
        services = ensure_services(settings)
        try:
            bench.probe = PgProbe(settings)
            run_phases(bench, measured)
        finally:
            if bench.probe is not None:
                bench.probe.close()
            services.stop()
    finally:
        redis_server.stop()
        shutil.rmtree(folder, ignore_errors=True)
    measured.load_after = os.getloadavg()[0]
    measured.when = datetime.now(UTC)
    for line in report(measured):
        print(line)
    return 0


def run_phases(bench: Bench, measured: Measured) -> None:
    """One phase after the other, each printing its headline as it ends."""
    args = bench.args
    if "ingest" in args.phases:
        fresh_database(use_database(INGEST_DB, f"bench-scale-{bench.run}"))
        events = bench.ingest_bench.make_turns(TENANT, args.turns, args.users)
        measured.capture = capture(bench, events)
        print(f"capture: {measured.capture.rate:,.0f} events/s", flush=True)
        measured.bare = bare_insert(bench, events)
        print(f"bare INSERT: {measured.bare.rate:,.0f} rows/s", flush=True)
        for partitions in [args.partitions, *args.sweep]:
            measured.ingest[partitions] = ingest(bench, events, partitions)
            rate = measured.ingest[partitions].rate
            print(f"ingest at {partitions} partitions: {rate:,.0f} turns/s", flush=True)
    if "extract" in args.phases:
        measured.extraction = extraction(bench)
        print(f"extraction: {measured.extraction.rate:,.0f} turns/s", flush=True)
    if "search" in args.phases:
        pool: list[Any] = []
        measured.search = [run_size(size, args, bench.pg, pool) for size in args.sizes]


if __name__ == "__main__":
    raise SystemExit(main())
