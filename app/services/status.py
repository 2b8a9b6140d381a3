"""What an operator asks first: how deep are the streams, what is pending, what is dead, how
many rows does each layer hold."""

from __future__ import annotations

from dataclasses import dataclass

import redis
from sqlalchemy import Engine, text

from app.config import Settings
from app.keys import RedisKeys

LAYER_TABLES = (
    ("L1", "working.summaries"),
    ("L2", "episodic.sessions"),
    ("L2", "episodic.turns"),
    ("L2", "episodic.events"),
    ("L3", "semantic.memories"),
    ("L3", "semantic.extraction_batches"),
    ("L4", "conceptual.entities"),
    ("L4", "conceptual.relations"),
    ("L4", "conceptual.mentions"),
    ("L4", "conceptual.associations"),
    ("L5", "meta.access_patterns"),
    ("L5", "meta.procedures"),
)


@dataclass(frozen=True)
class PartitionStatus:
    stream: str
    length: int
    pending: int
    lag: int | None
    consumers: int


@dataclass(frozen=True)
class StreamStatus:
    partitions: list[PartitionStatus]
    dead_letters: int
    dead_tasks: int
    lost: int
    working_users: int
    consumers: list[dict[str, str]]

    @property
    def total_length(self) -> int:
        return sum(p.length for p in self.partitions)

    @property
    def total_pending(self) -> int:
        return sum(p.pending for p in self.partitions)


def stream_status(client: redis.Redis, settings: Settings) -> StreamStatus:
    keys = RedisKeys.from_settings(settings)
    parts = []
    for stream in keys.partitions(settings.stream_partitions):
        length = int(client.xlen(stream))
        pending, lag, consumers = 0, None, 0
        try:
            for group in client.xinfo_groups(stream):
                name = group["name"]
                name = name.decode() if isinstance(name, bytes) else name
                if name == settings.consumer_group:
                    pending = int(group["pending"])
                    lag = group.get("lag")
                    consumers = int(group["consumers"])
        except redis.ResponseError:
            pass
        parts.append(PartitionStatus(stream, length, pending, lag, consumers))
    consumers = []
    for key in sorted(client.scan_iter(match=keys.consumer_heartbeats(), count=1000)):
        fields = {k.decode(): v.decode() for k, v in client.hgetall(key).items()}
        if fields:
            consumers.append(fields)
    return StreamStatus(
        partitions=parts,
        dead_letters=int(client.xlen(keys.dead_letters())),
        dead_tasks=int(client.xlen(keys.dead_tasks())),
        lost=int(client.get(keys.lost_entries()) or 0),
        working_users=int(client.zcard(keys.working_active())),
        consumers=consumers,
    )


def layer_row_counts(engine: Engine) -> list[tuple[str, str, int]]:
    """Exact counts across tenants: an operator's view, so it runs on the owner's engine."""
    with engine.connect() as conn:
        return [
            (layer, table, int(conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one()))  # noqa: S608
            for layer, table in LAYER_TABLES
        ]


def extraction_states(engine: Engine) -> dict[str, int]:
    """Extraction batches per state across tenants (operator view, owner's engine)."""
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT state, count(*) FROM semantic.extraction_batches GROUP BY state")
        )
        return {state: int(n) for state, n in rows}
