"""A stream consumer loop you can kill: read a batch, hand it over, ack only after commit.

One `StreamConsumer` reads every partition through the consumer group with one XREADGROUP.
Every quarter of `claim_min_idle_ms` it first reclaims entries that another (dead) consumer
left pending longer than that, then reads new ones. The handler persists a batch in one
transaction and returns; only then are the entries XACKed, so a SIGKILL at any point leaves
them pending for a reclaim, and idempotent writes make the replay harmless. While a batch is
in the handler (or waits out an outage) its claim is touched (app/streams/group.py), so a
live, slow consumer never looks dead; once a dead one's entries are reclaimed, it is removed
from the group.

Failures never hold a partition back. Replies are read as raw bytes and each entry is decoded
alone (app/streams/entries.py): one that cannot be decoded is dead-lettered at once. A
transient error (database or Redis unreachable) keeps the batch and retries it with backoff.
Any other error splits the batch in halves, down to the entry that fails, so the rest is
stored and acked; that entry is dead-lettered at once when the failure is deterministic
(validation), or after it failed `max_deliveries` times (counted by us for errors we see, and
by Redis' delivery counter for crashes we don't). See app/streams/dead_letter.py.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import redis

from app.config import Settings
from app.keys import RedisKeys
from app.logs import log_context, new_batch_id
from app.streams.dead_letter import write_dead_letter
from app.streams.deployment import refuse_foreign
from app.streams.entries import RawStreamReader, StreamEntry
from app.streams.failures import describe, is_deterministic, is_transient
from app.streams.group import GroupUpkeep, keep_touching, vanished

__all__ = ["BatchHandler", "ConsumerStats", "StreamConsumer", "StreamEntry", "is_transient"]

_log = logging.getLogger(__name__)

FAILURES_TTL_S = 7 * 24 * 3600
HEARTBEAT_EVERY_S = 5.0
HEARTBEAT_TTL_S = 30
LAG_SAMPLES = 100_000
LAG_TTL_S = 24 * 3600
MAX_BACKOFF_S = 10.0

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
    consumers_removed: int = 0
    last_error: str | None = field(default=None)


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
        self.reader = RawStreamReader(client)
        self.upkeep = GroupUpkeep(client, self.group)
        # Touch held entries 4 times per claim time: a live consumer's entries never get near it.
        self.touch_every_s = settings.claim_min_idle_ms / 4000
        self._last_reclaim = 0.0
        self._backoff_s = 0.0
        self._retry: list[StreamEntry] = []

    # -- group management -------------------------------------------------------------------

    def ensure_groups(self) -> None:
        """Create the group on every partition (from the start, MKSTREAM); idempotent."""
        self.upkeep.create(self.streams)

    def leave(self) -> None:
        """Remove this consumer from every group if it holds nothing pending."""
        self.client.delete(self.keys.consumer_heartbeat(self.name))
        for stream in self.streams:
            try:
                self.upkeep.remove(stream, [self.name])
            except redis.RedisError:
                _log.debug("could not leave %s cleanly", stream, exc_info=True)

    def remove_dead_consumers(self, stream: str) -> list[str]:
        """Drop consumers with nothing pending, silent for a claim time and without a live
        heartbeat: a dead worker's, once its entries were reclaimed."""
        bound = self.settings.claim_min_idle_ms
        idle = [n for n in self.upkeep.idle_consumers(stream, idle_ms=bound) if n != self.name]
        if not idle:
            return []
        pipe = self.client.pipeline(transaction=False)
        for name in idle:
            pipe.exists(self.keys.consumer_heartbeat(name))
        dead = [name for name, alive in zip(idle, pipe.execute(), strict=True) if not alive]
        removed = self.upkeep.remove(stream, dead, idle_ms=bound)
        if removed:
            self.stats.consumers_removed += len(removed)
            _log.info("removed dead consumers %s from %s", removed, stream)
        return removed

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
        """Back off; the batch kept for retry stays touched meanwhile, so it is not stolen."""
        self.stats.transient_errors += 1
        self.stats.last_error = repr(exc)
        self._backoff_s = min(max(self._backoff_s * 2, 0.2), MAX_BACKOFF_S)
        _log.warning("consumer %s backing off %.1fs: %s", self.name, self._backoff_s, exc)
        until = time.monotonic() + self._backoff_s
        while (left := until - time.monotonic()) > 0:
            if stop.wait(min(left, self.touch_every_s)):
                return
            self.upkeep.touch_held(self.name, self._retry)

    def step(self, *, block_ms: int | None = None) -> int:
        """One pass: retry a kept batch, reclaim if due, then read and process new entries.
        Returns entries acked."""
        done = 0
        if self._retry:
            entries, self._retry = self._retry, []
            done += self.process(entries)
        now = time.monotonic()
        if now - self._last_reclaim >= self.touch_every_s:
            self._last_reclaim = now
            done += self.reclaim()
        entries = self.read(block_ms=block_ms)
        if entries:
            done += self.process(entries)
        return done

    def read(self, *, block_ms: int | None) -> list[StreamEntry]:
        try:
            return self.reader.read_group(
                self.group,
                self.name,
                self.streams,
                count=self.settings.consumer_batch_size,
                block=block_ms,
            )
        except redis.ResponseError as exc:
            if not vanished(exc):
                raise
            _log.warning("consumer group vanished; recreating it")
            self.ensure_groups()
            return []

    # -- reclaiming -------------------------------------------------------------------------

    def reclaim(self) -> int:
        """Take over entries idle longer than the claim time, dead-letter the hopeless ones,
        then drop consumers left with nothing pending."""
        done = 0
        for stream in self.streams:
            cursor = "0-0"
            while True:
                try:
                    claimed, cursor, deleted = self.reader.autoclaim(
                        stream,
                        self.group,
                        self.name,
                        self.settings.claim_min_idle_ms,
                        cursor,
                        self.settings.consumer_batch_size,
                    )
                except redis.ResponseError as exc:
                    if not vanished(exc):  # else the reads of every partition would wait on it
                        raise
                    _log.warning("consumer group vanished from %s; recreating it", stream)
                    self.upkeep.create([stream])
                    break
                if deleted:
                    self._count_lost(stream, deleted)
                if claimed:
                    self.stats.reclaimed += len(claimed)
                    done += self._process_reclaimed(stream, claimed)
                if cursor == "0-0":
                    break
            self.remove_dead_consumers(stream)
        return done

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
        limit = self.settings.max_deliveries
        for entry in claimed:
            deliveries = counts.get(entry.entry_id, 1)
            failed = failures.get(entry.entry_id, 0)
            # Redis counts this claim as a delivery; more than max means crashes kept eating it.
            if not entry.undecodable and (failed >= limit or deliveries > limit):
                reason = "failed" if failed >= limit else "delivered"
                self._dead_letter(
                    entry,
                    f"{reason} {max(failed, deliveries - 1)} times without being committed",
                    deliveries,
                )
            else:
                keep.append(entry.with_deliveries(deliveries))
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
        """Hand the entries over in as few batches as their failures allow; ack what commits.

        Undecodable entries are dead-lettered first. A batch that fails for a reason other
        than an outage is split in halves until the failing entries stand alone. On an
        outage (or any error escaping here) the entries not yet acked are kept for the next
        pass and the error propagates."""
        entries = refuse_foreign(entries, self.keys.deployment, self._dead_letter)
        readable = [entry for entry in entries if not entry.undecodable]
        for entry in entries:
            if entry.undecodable:
                error = f"UndecodableEntry: {entry.undecodable}"
                self._dead_letter(entry, error, entry.deliveries)
        acked = 0
        todo = [readable] if readable else []
        # The whole set stays touched while any part of it is in the handler: halves waiting
        # their turn must not look abandoned either (acked ones are skipped by the script).
        with (
            log_context(batch_id=new_batch_id(), consumer=self.name),
            keep_touching(
                lambda: self.upkeep.touch_held(self.name, readable),
                every_s=self.touch_every_s,
                at_most_s=self.settings.task_time_limit_s,
            ),
        ):
            while todo:
                batch = todo.pop()
                try:
                    acked += self._handle(batch, todo)
                except Exception:
                    self._retry = [e for chunk in [batch, *reversed(todo)] for e in chunk]
                    raise
        return acked

    def _handle(self, batch: list[StreamEntry], todo: list[list[StreamEntry]]) -> int:
        """One handler call: ack on success; on failure split (pushing halves on `todo`) or,
        for a lone entry, count or dead-letter it. Transient errors propagate."""
        try:
            self.handler(batch)
        except Exception as exc:
            if is_transient(exc):
                raise
            if len(batch) == 1:
                self._entry_failed(batch[0], exc)
                return 0
            half = len(batch) // 2
            _log.warning("batch of %d failed (%s); splitting it", len(batch), exc)
            todo += [batch[half:], batch[:half]]  # popped first half first: order is kept
            return 0
        self._ack(batch)
        self.stats.batches += 1
        return len(batch)

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

    def _entry_failed(self, entry: StreamEntry, exc: BaseException) -> None:
        """A lone entry failed: dead-letter it now if it always will, else count the failure
        and leave it pending for a reclaim, dead-lettering it at the limit."""
        self.stats.entry_failures += 1
        self.stats.last_error = repr(exc)
        if is_deterministic(exc):
            self._dead_letter(entry, describe(exc), entry.deliveries)
            return
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
            self._dead_letter(entry, describe(exc), failures)

    def _dead_letter(self, entry: StreamEntry, error: str, deliveries: int) -> None:
        write_dead_letter(
            self.client,
            self.keys.dead_letters(),
            entry,
            group=self.group,
            error=error,
            deliveries=deliveries,
            replicas=self.settings.stream_wait_replicas,
            timeout_ms=self.settings.stream_wait_timeout_ms,
        )
        self._ack([entry])
        self.stats.dead_lettered += 1
        _log.error("dead-lettered %s %s: %s", entry.stream, entry.entry_id, error)
