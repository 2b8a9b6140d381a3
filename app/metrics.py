"""The deployment's numbers for Prometheus, read when Prometheus asks.

Stream depth, pending entries, dead letters, the extraction backlog and job outcomes belong to
the whole deployment, not to the process that serves them: counting them in process memory
would give each API process its own partial view. So a custom collector reads them at scrape
time, through the same functions `engram status` prints (app/services/status.py): cheap Redis
reads in a few round trips, and index-backed counts on the owner's engine (an operator's view
across tenants, as `engram status` takes it).

A source that does not answer leaves its metrics out of the scrape and says so in
`engram_metrics_source_up{source=...}`: a scrape never fails because Redis or Postgres is
down, it shows that they are.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator

import redis
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy.exc import SQLAlchemyError

from app.config import Settings
from app.db.session import owner_engine
from app.keys import RedisKeys
from app.layers.semantic.models import BATCH_STATES
from app.redis_client import get_redis
from app.services.status import (
    extraction_backlog,
    extraction_states,
    ingest_lag_samples,
    job_run_counts,
    stream_status,
)

_log = logging.getLogger(__name__)

# Ingest delays (XADD to ack) summarised over this many of the latest acked entries.
INGEST_LAG_SAMPLES = 1000
INGEST_LAG_QUANTILES = (0.5, 0.9, 0.99)


def quantile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank quantile of an ascending list (not empty)."""
    rank = min(len(sorted_values), max(1, math.ceil(q * len(sorted_values))))
    return sorted_values[rank - 1]


class DeploymentCollector(Collector):
    """Stream, extraction and job metrics of one deployment, gathered per scrape."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def describe(self) -> list[Metric]:
        """Nothing up front: registering must not read Redis or Postgres."""
        return []

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "engram_metrics_source_up",
            "1 if the source answered this scrape; its metrics are missing while 0",
            labels=["source"],
        )
        for source, read in (("redis", self._redis), ("postgres", self._postgres)):
            try:
                families = read()
            except (redis.RedisError, OSError, SQLAlchemyError) as exc:
                _log.warning("metrics: %s did not answer: %s", source, exc)
                up.add_metric([source], 0)
                continue
            up.add_metric([source], 1)
            yield from families
        yield up

    def _redis(self) -> list[Metric]:
        client = get_redis(self.settings)
        status = stream_status(client, self.settings, consumers=False)
        label = ["partition"]
        length = GaugeMetricFamily(
            "engram_stream_length", "Entries held by each L0 stream partition", labels=label
        )
        pending = GaugeMetricFamily(
            "engram_stream_pending",
            "Entries delivered to the ingest group and not acked yet",
            labels=label,
        )
        oldest = GaugeMetricFamily(
            "engram_stream_oldest_pending_age_seconds",
            "Age (since XADD) of the oldest pending entry; 0 when none is pending",
            labels=label,
        )
        lag = GaugeMetricFamily(
            "engram_stream_lag", "Entries not yet delivered to the ingest group", labels=label
        )
        consumers = GaugeMetricFamily(
            "engram_stream_consumers", "Consumers registered in the ingest group", labels=label
        )
        for index, part in enumerate(status.partitions):
            name = [str(index)]
            length.add_metric(name, part.length)
            pending.add_metric(name, part.pending)
            oldest.add_metric(name, part.oldest_pending_s or 0.0)
            lag.add_metric(name, part.lag if part.lag is not None else part.length)
            consumers.add_metric(name, part.consumers)
        families: list[Metric] = [length, pending, oldest, lag, consumers]
        families += [
            GaugeMetricFamily(
                "engram_dead_letters",
                "Entries in the dead-letter stream (kept until an operator drains it)",
                value=status.dead_letters,
            ),
            GaugeMetricFamily(
                "engram_dead_tasks",
                "Tasks that kept killing their worker, in the dead-task stream",
                value=status.dead_tasks,
            ),
            CounterMetricFamily(
                "engram_stream_lost_entries",
                "Pending entries found deleted before being acked (must stay 0)",
                value=status.lost,
            ),
            GaugeMetricFamily(
                "engram_working_memory_users",
                "Users with live L1 working memory",
                value=status.working_users,
            ),
            CounterMetricFamily(
                "engram_embedding_texts_embedded",
                "Texts the embedding model embedded across the fleet (cache misses; the"
                " count expires with the cache)",
                value=int(client.get(RedisKeys.from_settings(self.settings).embedded_count()) or 0),
            ),
        ]
        samples = sorted(ingest_lag_samples(client, self.settings, INGEST_LAG_SAMPLES))
        delay = GaugeMetricFamily(
            "engram_ingest_delay_seconds",
            f"XADD-to-ack delay over the latest {INGEST_LAG_SAMPLES} acked entries",
            labels=["quantile"],
        )
        for q in INGEST_LAG_QUANTILES if samples else ():
            delay.add_metric([str(q)], quantile(samples, q))
        families.append(delay)
        return families

    def _postgres(self) -> list[Metric]:
        engine = owner_engine(self.settings)
        states = extraction_states(engine)
        batches = GaugeMetricFamily(
            "engram_extraction_batches", "Extraction batches by state", labels=["state"]
        )
        for state in sorted({*BATCH_STATES, *states}):
            batches.add_metric([state], states.get(state, 0))
        backlog = GaugeMetricFamily(
            "engram_extraction_backlog_turns",
            "Turns waiting for extraction: not scored yet, or scored and in no batch",
            labels=["stage"],
        )
        for stage, count in extraction_backlog(engine).items():
            backlog.add_metric([stage], count)
        runs = GaugeMetricFamily(
            "engram_job_runs",
            "Periodic job runs on record (meta.job_runs, pruned after the retention period)",
            labels=["job", "status"],
        )
        last = GaugeMetricFamily(
            "engram_job_last_started_timestamp_seconds",
            "When the latest run of each job and status started (Unix time)",
            labels=["job", "status"],
        )
        for row in job_run_counts(engine):
            runs.add_metric([row.job, row.status], row.runs)
            last.add_metric([row.job, row.status], row.last_started_at.timestamp())
        return [batches, backlog, runs, last]
