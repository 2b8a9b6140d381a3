"""What bench/scale.py reads from the machine: CPU seconds of the processes doing the work,
WAL written, bytes held by Postgres relations and Redis keys, and a private Redis.

CPU is counted per process (user + system, psutil), so a busy neighbour on the machine slows
a run down without inflating its per-turn cost. The Postgres processes of a run are found
through a superuser connection to the embedded server (pg_stat_activity): the backends of
the run's database and application role, its autovacuum workers, and the server's shared
processes (WAL writer, I/O workers, checkpointer, background writer), which also serve any
other database on the server.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import psutil
import psycopg
import redis
from psycopg import sql

from app.config import Settings
from app.db.bootstrap import libpq_conninfo
from app.embedded import postgres as embedded_postgres

SERVER_PROCESSES = ("walwriter", "io worker", "checkpointer", "background writer")
BENCH = Path(__file__).resolve().parent


def bench_module(name: str) -> ModuleType:
    """Another benchmark's module (bench/<name>.py) as `bench_<name>`, to use its helpers."""
    if f"bench_{name}" in sys.modules:
        return sys.modules[f"bench_{name}"]
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being defined
    spec.loader.exec_module(module)
    return module


def cpu_seconds(pids: Iterable[int]) -> dict[int, float]:
    """User + system seconds of each live process, reaped children included."""
    out: dict[int, float] = {}
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue
        out[pid] = t.user + t.system + t.children_user + t.children_system
    return out


class PgProbe:
    """A superuser connection to the embedded server, outside the measured database."""

    def __init__(self, settings: Settings) -> None:
        self.server = embedded_postgres.ensure_running(settings.data_dir)
        url = self.server.url(user=embedded_postgres.SUPERUSER, database="postgres")
        self.conn = psycopg.connect(libpq_conninfo(url), autocommit=True)

    def close(self) -> None:
        self.conn.close()

    def backends(self, database: str, role: str) -> set[int]:
        """Backends of `role` in `database`, and autovacuum workers there."""
        rows = self.conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s"
            " AND (usename = %s OR backend_type = 'autovacuum worker')",
            (database, role),
        )
        return {int(r[0]) for r in rows}

    def server_processes(self) -> set[int]:
        rows = self.conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE backend_type = ANY(%s)",
            (list(SERVER_PROCESSES),),
        )
        return {int(r[0]) for r in rows}

    def wal_lsn(self) -> str:
        return str(self.conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0])  # type: ignore[index]

    def wal_since(self, lsn: str) -> int:
        row = self.conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", (lsn,))
        return int(row.fetchone()[0])  # type: ignore[index]

    def backend_wal(self, pids: Iterable[int]) -> dict[int, float]:
        """WAL bytes each backend wrote since it started (flushed statistics only)."""
        rows = self.conn.execute(
            "SELECT p, w.wal_bytes FROM unnest(%s::int[]) AS p,"
            " LATERAL pg_stat_get_backend_wal(p) AS w",
            (list(pids),),
        )
        return {int(p): float(b or 0) for p, b in rows}

    def prewarm(self, database: str, schemas: Iterable[str]) -> int:
        """Read the tables and indexes of `schemas` in `database` into the OS page cache
        (pg_prewarm's 'read' mode, as superuser: the extension needs one); blocks read."""
        url = self.server.url(user=embedded_postgres.SUPERUSER, database=database)
        with psycopg.connect(libpq_conninfo(url), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
            row = conn.execute(
                "SELECT coalesce(sum(pg_prewarm(c.oid, 'read')), 0) FROM pg_class AS c"
                " JOIN pg_namespace AS n ON n.oid = c.relnamespace"
                " WHERE n.nspname = ANY(%s) AND c.relkind IN ('r', 'i', 't')",
                (list(schemas),),
            ).fetchone()
        return int(row[0]) if row else 0

    def comment(self, database: str) -> str | None:
        row = self.conn.execute(
            "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s",
            (database,),
        ).fetchone()
        return None if row is None else row[0]

    def set_comment(self, database: str, comment: str) -> None:
        self.conn.execute(
            sql.SQL("COMMENT ON DATABASE {} IS {}").format(
                sql.Identifier(database), sql.Literal(comment)
            )
        )


@dataclass
class Reading:
    """Seconds of wall time, CPU seconds per group, WAL bytes (the run's backends; the
    whole server, neighbours included)."""

    wall_s: float
    cpu_s: dict[str, float]
    wal_backends: float
    wal_server: float

    def cpu(self, *groups: str) -> float:
        return sum(self.cpu_s.get(g, 0.0) for g in groups)


@dataclass
class Meter:
    """CPU and WAL of groups of processes between start() and stop(). A process that starts
    inside the window counts from zero; one that ends inside it is lost (pooled
    connections and workers live through a run)."""

    probe: PgProbe
    groups: dict[str, Callable[[], set[int]]]
    wal_group: str | None = "postgres"
    _cpu: dict[str, dict[int, float]] = field(default_factory=dict)
    _wal: dict[int, float] = field(default_factory=dict)
    _lsn: str = ""
    _started: float = 0.0

    def start(self) -> None:
        self._cpu = {name: cpu_seconds(pids()) for name, pids in self.groups.items()}
        self._wal = self._backend_wal()
        self._lsn = self.probe.wal_lsn()
        self._started = time.perf_counter()

    def stop(self, settle_s: float = 0.0) -> Reading:
        """CPU now; WAL after `settle_s`, once idle backends have flushed their statistics."""
        wall = time.perf_counter() - self._started
        cpu = {}
        for name, pids in self.groups.items():
            before = self._cpu[name]
            cpu[name] = sum(s - before.get(p, 0.0) for p, s in cpu_seconds(pids()).items())
        wal_server = self.probe.wal_since(self._lsn)
        time.sleep(settle_s)
        wal = sum(b - self._wal.get(p, 0.0) for p, b in self._backend_wal().items())
        return Reading(wall_s=wall, cpu_s=cpu, wal_backends=wal, wal_server=float(wal_server))

    def _backend_wal(self) -> dict[int, float]:
        if self.wal_group is None:
            return {}
        return self.probe.backend_wal(self.groups[self.wal_group]())


@dataclass
class Window:
    """A measured window and how many turns (or events) it processed."""

    turns: int
    reading: Reading
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.turns / self.reading.wall_s

    def per_turn(self, *groups: str) -> float:
        return self.reading.cpu(*groups) / self.turns


# -- sizes -----------------------------------------------------------------------------------

SCHEMAS = ("episodic", "semantic", "conceptual", "meta", "working")
# A table and, when it is partitioned, its partitions (the parent itself holds no bytes).
_TREE = (
    "(SELECT relid FROM pg_partition_tree(CAST(%(t)s AS regclass))"
    " UNION SELECT CAST(%(t)s AS regclass))"
)


def relation_bytes(conn: Any, table: str) -> int:
    """Heap, TOAST and indexes of a table, summed over its partitions if it has any."""
    return int(
        conn.exec_driver_sql(
            f"SELECT coalesce(sum(pg_total_relation_size(relid)), 0) FROM {_TREE} AS tree",
            {"t": table},
        ).scalar_one()
    )


def schema_bytes(conn: Any) -> dict[str, int]:
    """Bytes per Engram schema: tables (partitions, not their parents) and materialised views,
    with their indexes and TOAST."""
    rows = conn.exec_driver_sql(
        "SELECT n.nspname, sum(pg_total_relation_size(c.oid)) FROM pg_class AS c"
        " JOIN pg_namespace AS n ON n.oid = c.relnamespace"
        " WHERE c.relkind IN ('r', 'm') AND n.nspname = ANY(%(s)s) GROUP BY 1",
        {"s": list(SCHEMAS)},
    )
    return {str(name): int(size) for name, size in rows}


def hnsw_bytes(conn: Any, table: str) -> int:
    """Bytes of the HNSW indexes on a table (every partition's)."""
    return int(
        conn.exec_driver_sql(
            "SELECT coalesce(sum(pg_relation_size(i.indexrelid)), 0)"
            f" FROM {_TREE} AS p"
            " JOIN pg_index AS i ON i.indrelid = p.relid"
            " JOIN pg_class AS c ON c.oid = i.indexrelid"
            " JOIN pg_am AS a ON a.oid = c.relam WHERE a.amname = 'hnsw'",
            {"t": table},
        ).scalar_one()
    )


def redis_bytes(client: redis.Redis, keys: Iterable[str]) -> int:
    """MEMORY USAGE of the keys, every element counted (SAMPLES 0)."""
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.memory_usage(key, samples=0)
    return sum(int(n or 0) for n in pipe.execute())


# -- a Redis of the run's own ----------------------------------------------------------------


def use_database(database: str, prefix: str, **extra: str) -> Settings:
    """Point this process (and the workers it starts, which inherit the environment) at a
    database and a Redis prefix: app code that reads the global settings follows."""
    from app.config import get_settings

    os.environ["ENGRAM_DATABASE_NAME"] = database
    os.environ["ENGRAM_REDIS_PREFIX"] = prefix
    os.environ.update(extra)
    get_settings.cache_clear()
    return get_settings()
