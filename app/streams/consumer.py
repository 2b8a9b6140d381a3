"""A stream consumer loop you can kill: read a batch, hand it over, ack only after commit.

One `StreamConsumer` reads every partition through the consumer group with one XREADGROUP.
Each pass it first reclaims entries that another (dead) consumer left pending longer than
`claim_min_idle_ms`, then reads new ones. The handler persists a batch in one transaction and
returns; only then are the entries XACKed, so a SIGKILL at any point leaves them pending for a
reclaim, and idempotent writes make the replay harmless.

Failures: a transient error (database or Redis unreachable) retries the same batch with backoff.
Any other error splits the batch and retries each entry alone, so one poison entry cannot hold
back the rest; an entry that failed `max_deliveries` times (counted by us for errors we see, and
by Redis' delivery counter for crashes we don't) is written to the dead-letter stream with its
error *before* it is acked — a crash between the two duplicates a dead letter, never loses one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import redis
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from app.config import Settings
from app.keys import RedisKeys

_log = logging.getLogger(__name__)

FAILURES_TTL_S = 7 * 24 * 3600
HEARTBEAT_EVERY_S = 5.0
HEARTBEAT_TTL_S = 30
LAG_SAMPLES = 100_000
LAG_TTL_S = 24 * 3600


@dataclass(frozen=True)
class StreamEntry:
    stream: str
    entry_id: str
    fields: dict[str, str]
    deliveries: int = 1


BatchHandler = Callable[[Sequence[StreamEntry]], None]


@dataclass
class ConsumerStats:
    batches: int = 0
    acked: int = 0
    dead_lettered: int = 0
    reclaimed: int = 0
    lost: int = 0
    transient_errors: int = 0
    entry_failures: int = 0
    last_error: str | None = field(default=None)


def is_transient(exc: BaseException) -> bool:
    """Outages we wait out rather than blame on the entry."""
    if isinstance(exc, OperationalError | InterfaceError | redis.ConnectionError):
        return True
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    return isinstance(exc, redis.TimeoutError | ConnectionError | TimeoutError)


def _decode(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class StreamConsumer:
    def __init__(
        self,
        *,
        client: redis.Redis,
        settings: Settings,
        handler: BatchHandler,
        name: str,
        group: str | None = None,
    ) -> None:
        self.client = client
        self.settings = settings
        self.handler = handler
        self.name = name
        self.group = group or settings.consumer_group
        self.keys = RedisKeys.from_settings(settings)
        self.streams = self.keys.partitions(settings.stream_partitions)
        self.stats = ConsumerStats()
        self._last_reclaim = 0.0
        self._backoff_s = 0.0
        self._retry: list[StreamEntry] = []

    # -- group management -------------------------------------------------------------------

    def ensure_groups(self) -> None:
        """Create the group on every partition (from the start, MKSTREAM); idempotent."""
        for stream in self.streams:
            try:
                self.client.xgroup_create(stream, self.group, id="0", mkstream=True)
            except redis.ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise

    def leave(self) -> None:
        """Remove this consumer from every group if it holds nothing pending."""
        self.client.delete(self.keys.consumer_heartbeat(self.name))
        for stream in self.streams:
            try:
                pending = self.client.xpending_range(
                    stream, self.group, min="-", max="+", count=1, consumername=self.name
                )
                if not pending:
                    self.client.xgroup_delconsumer(stream, self.group, self.name)
            except redis.RedisError:
                _log.debug("could not leave %s cleanly", stream, exc_info=True)

    # -- the loop ---------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Consume until `stop` is set; each pass finishes (or safely abandons) its batch."""
        self.ensure_groups()
        _log.info("consumer %s reading %d partitions", self.name, len(self.streams))
        beat_at = 0.0
        while not stop.is_set():
            try:
                if time.monotonic() >= beat_at:
                    self.heartbeat()
                    beat_at = time.monotonic() + HEARTBEAT_EVERY_S
                self.step(block_ms=self.settings.consumer_block_ms)
                self._backoff_s = 0.0
            except Exception as exc:
                if not is_transient(exc):
                    _log.exception("consumer %s: unexpected error", self.name)
                self._pause(stop, exc)
        self.leave()

    def heartbeat(self) -> None:
        """Publish this consumer's counters; the key expires when the consumer dies."""
        key = self.keys.consumer_heartbeat(self.name)
        stats = {k: ("" if v is None else v) for k, v in vars(self.stats).items()}
        pipe = self.client.pipeline(transaction=False)
        pipe.hset(
            key, mapping={"name": self.name, **stats, "seen_at": datetime.now(UTC).isoformat()}
        )
        pipe.expire(key, HEARTBEAT_TTL_S)
        pipe.execute()

    def _pause(self, stop: threading.Event, exc: BaseException) -> None:
        self.stats.transient_errors += 1
        self.stats.last_error = repr(exc)
        self._backoff_s = min(max(self._backoff_s * 2, 0.2), 10.0)
        _log.warning("consumer %s backing off %.1fs: %s", self.name, self._backoff_s, exc)
        stop.wait(self._backoff_s)

    def step(self, *, block_ms: int | None = None) -> int:
        """One pass: reclaim if due, then read and process new entries. Returns entries acked."""
        done = 0
        if self._retry:
            entries, self._retry = self._retry, []
            done += self._process_or_keep(entries)
        now = time.monotonic()
        if now - self._last_reclaim >= self.settings.claim_min_idle_ms / 2000:
            self._last_reclaim = now
            done += self.reclaim()
        entries = self.read(block_ms=block_ms)
        if entries:
            done += self._process_or_keep(entries)
        return done

    def _process_or_keep(self, entries: list[StreamEntry]) -> int:
        """On an outage keep the batch for the next pass instead of waiting for a reclaim."""
        try:
            return self.process(entries)
        except Exception:
            self._retry = entries
            raise

    def read(self, *, block_ms: int | None) -> list[StreamEntry]:
        try:
            reply = self.client.xreadgroup(
                self.group,
                self.name,
                dict.fromkeys(self.streams, ">"),
                count=self.settings.consumer_batch_size,
                block=block_ms,
            )
        except redis.ResponseError as exc:
            if "NOGROUP" in str(exc):
                _log.warning("consumer group vanished; recreating it")
                self.ensure_groups()
                return []
            raise
        entries: list[StreamEntry] = []
        for stream, items in reply or []:
            name = _decode(stream)
            for entry_id, fields in items:
                entries.append(
                    StreamEntry(
                        name,
                        _decode(entry_id),
                        {_decode(k): _decode(v) for k, v in (fields or {}).items()},
                    )
                )
        return entries

    # -- reclaiming -------------------------------------------------------------------------

    def reclaim(self) -> int:
        """Take over entries idle longer than the claim time; dead-letter the hopeless ones."""
        done = 0
        for stream in self.streams:
            cursor = "0-0"
            while True:
                claimed, cursor, deleted = self._autoclaim(stream, cursor)
                if deleted:
                    self._count_lost(stream, deleted)
                if claimed:
                    self.stats.reclaimed += len(claimed)
                    done += self._process_reclaimed(stream, claimed)
                if cursor == "0-0":
                    break
        return done

    def _autoclaim(self, stream: str, cursor: str) -> tuple[list[StreamEntry], str, list[str]]:
        """XAUTOCLAIM once; the reply has 2 parts on Redis 6.2 and 3 (deleted ids) on 7+."""
        reply = self.client.execute_command(
            "XAUTOCLAIM",
            stream,
            self.group,
            self.name,
            self.settings.claim_min_idle_ms,
            cursor,
            "COUNT",
            self.settings.consumer_batch_size,
        )
        next_cursor = _decode(reply[0])
        claimed = []
        deleted: list[str] = []
        for item in reply[1]:
            # Redis 6.2 reports entries deleted while pending as nil; 7+ lists them apart.
            entry_id, raw = (item[0], item[1]) if item is not None else (None, None)
            if raw is None:
                if entry_id is not None:
                    deleted.append(_decode(entry_id))
                continue
            if isinstance(raw, dict):
                fields = {_decode(k): _decode(v) for k, v in raw.items()}
            else:
                flat = [_decode(v) for v in raw]
                fields = dict(zip(flat[::2], flat[1::2], strict=True))
            claimed.append(StreamEntry(stream, _decode(entry_id), fields))
        if len(reply) > 2:
            deleted.extend(_decode(d) for d in reply[2])
        return claimed, next_cursor, deleted

    def _count_lost(self, stream: str, deleted: list[str]) -> None:
        """Pending entries the stream no longer holds: data loss, loudly counted."""
        self.stats.lost += len(deleted)
        self.client.incrby(self.keys.lost_entries(), len(deleted))
        self.client.xack(stream, self.group, *deleted)
        _log.error(
            "%d pending entries of %s were deleted before being acked: %s",
            len(deleted),
            stream,
            deleted[:10],
        )

    def _process_reclaimed(self, stream: str, claimed: list[StreamEntry]) -> int:
        counts = self._delivery_counts(stream, claimed)
        failures = self._failure_counts(claimed)
        keep: list[StreamEntry] = []
        for entry in claimed:
            deliveries = counts.get(entry.entry_id, 1)
            failed = failures.get(entry.entry_id, 0)
            # Redis counts this claim as a delivery; more than max means crashes kept eating it.
            if failed >= self.settings.max_deliveries or deliveries > self.settings.max_deliveries:
                reason = "failed" if failed >= self.settings.max_deliveries else "delivered"
                self._dead_letter(
                    entry,
                    f"{reason} {max(failed, deliveries - 1)} times without being committed",
                    deliveries,
                )
            else:
                keep.append(StreamEntry(entry.stream, entry.entry_id, entry.fields, deliveries))
        return self.process(keep) if keep else 0

    def _delivery_counts(self, stream: str, entries: list[StreamEntry]) -> dict[str, int]:
        ids = sorted(entries, key=lambda e: tuple(int(p) for p in e.entry_id.split("-")))
        rows = self.client.xpending_range(
            stream,
            self.group,
            min=ids[0].entry_id,
            max=ids[-1].entry_id,
            count=len(entries) * 2 + 10,
            consumername=self.name,
        )
        return {_decode(r["message_id"]): int(r["times_delivered"]) for r in rows}

    def _failure_key(self, entry: StreamEntry) -> str:
        return f"{entry.stream}|{entry.entry_id}"

    def _failure_counts(self, entries: list[StreamEntry]) -> dict[str, int]:
        values = self.client.hmget(self.keys.failures(), [self._failure_key(e) for e in entries])
        return {e.entry_id: int(v) for e, v in zip(entries, values, strict=True) if v is not None}

    # -- processing -------------------------------------------------------------------------

    def process(self, entries: Sequence[StreamEntry]) -> int:
        """Hand the batch over; ack after it returns. Transient errors propagate (retry later)."""
        try:
            self.handler(entries)
        except Exception as exc:
            if is_transient(exc):
                raise
            if len(entries) == 1:
                self._record_failure(entries[0], exc)
                return 0
            _log.warning("batch of %d failed (%s); retrying entries one by one", len(entries), exc)
            return sum(self.process([entry]) for entry in entries)
        self._ack(entries)
        self.stats.batches += 1
        return len(entries)

    def _ack(self, entries: Sequence[StreamEntry]) -> None:
        by_stream: dict[str, list[str]] = {}
        for entry in entries:
            by_stream.setdefault(entry.stream, []).append(entry.entry_id)
        pipe = self.client.pipeline(transaction=False)
        for stream, ids in by_stream.items():
            pipe.xack(stream, self.group, *ids)
        pipe.hdel(self.keys.failures(), *[self._failure_key(e) for e in entries])
        # Lag from XADD (the id's millisecond part, Redis' clock) to now, after commit and L1.
        now_ms = int(time.time() * 1000)
        lags = [now_ms - int(e.entry_id.split("-", 1)[0]) for e in entries]
        pipe.rpush(self.keys.ingest_lag(), *lags)
        pipe.ltrim(self.keys.ingest_lag(), -LAG_SAMPLES, -1)
        pipe.expire(self.keys.ingest_lag(), LAG_TTL_S)
        pipe.execute()
        self.stats.acked += len(entries)

    def _record_failure(self, entry: StreamEntry, exc: BaseException) -> None:
        """Count a failure; at the limit dead-letter now, otherwise leave it for a reclaim."""
        self.stats.entry_failures += 1
        self.stats.last_error = repr(exc)
        key = self.keys.failures()
        pipe = self.client.pipeline(transaction=False)
        pipe.hincrby(key, self._failure_key(entry), 1)
        pipe.expire(key, FAILURES_TTL_S)
        failures = int(pipe.execute()[0])
        _log.warning(
            "entry %s %s failed (%d/%d): %s",
            entry.stream,
            entry.entry_id,
            failures,
            self.settings.max_deliveries,
            exc,
        )
        if failures >= self.settings.max_deliveries:
            self._dead_letter(entry, f"{type(exc).__name__}: {exc}", failures)

    def _dead_letter(self, entry: StreamEntry, error: str, deliveries: int) -> None:
        self.client.xadd(
            self.keys.dead_letters(),
            {
                "stream": entry.stream,
                "entry_id": entry.entry_id,
                "group": self.group,
                "error": error[:4000],
                "deliveries": deliveries,
                "dead_at": datetime.now(UTC).isoformat(),
                **{f"field:{k}": v for k, v in entry.fields.items()},
            },
        )
        self._ack([entry])
        self.stats.dead_lettered += 1
        _log.error("dead-lettered %s %s: %s", entry.stream, entry.entry_id, error)
