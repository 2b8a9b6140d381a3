"""The dead-letter stream: where an entry that cannot be stored goes, whole, with its error.

An entry is dead-lettered at once when its failure is deterministic — it cannot be decoded
(not UTF-8, repeated fields) or its payload is refused by validation (missing `event` field,
not JSON, a field out of bounds): every later delivery would fail the same way. Any other
failure (say, a value the database refuses) gets `max_deliveries` tries first, since an error
we cannot classify might be a passing one.

The dead letter keeps the entry losslessly: its fields are copied as raw bytes (Redis values
are binary-safe), in their order and with repeats, each under `field:<name>`, next to the
source stream, entry id, group, error, delivery count and time. It is written *before* the
entry is acked: a crash in between duplicates a dead letter, never loses one. With
`stream_wait_replicas` above 0 it must also be acknowledged by that many replicas before the
ack (app/streams/durable.py), or a failover could lose an entry that was never stored.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import redis

from app.streams.durable import require_replicated
from app.streams.entries import StreamEntry

ERROR_MAX_CHARS = 4000
FIELD_PREFIX = b"field:"


def dead_letter_fields(entry: StreamEntry, *, group: str, error: str, deliveries: int) -> list[Any]:
    """The dead letter as a flat field/value list (XADD keeps repeats that a dict would not)."""
    flat: list[Any] = [
        "stream",
        entry.stream,
        "entry_id",
        entry.entry_id,
        "group",
        group,
        "error",
        error[:ERROR_MAX_CHARS],
        "deliveries",
        deliveries,
        "dead_at",
        datetime.now(UTC).isoformat(),
    ]
    for name, value in entry.raw_pairs():
        flat += [FIELD_PREFIX + name, value]
    return flat


def write_dead_letter(
    client: redis.Redis,
    key: str,
    entry: StreamEntry,
    *,
    group: str,
    error: str,
    deliveries: int,
    replicas: int = 0,
    timeout_ms: int = 1000,
) -> str:
    """XADD the dead letter (acknowledged by `replicas` replicas, else ReplicationShortfall,
    a transient error); returns its id."""
    fields = dead_letter_fields(entry, group=group, error=error, deliveries=deliveries)
    if replicas:
        return require_replicated(client, key, fields, replicas=replicas, timeout_ms=timeout_ms)
    entry_id = client.execute_command("XADD", key, "*", *fields)
    return entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
