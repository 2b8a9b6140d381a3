"""Producers: validate events and XADD them to the user's partition. No Celery needed.

Capping: a partition is capped at about `stream_max_len` entries, but never by
`XADD … MAXLEN ~`, which would silently drop entries no consumer has read yet. Instead each
batch first reads the length of the partitions it writes to (one pipelined XLEN each) and
refuses the events that would take a partition past its cap (StreamFullError, the producer's
backpressure signal). The check is per batch, not atomic across producers, so a partition can
overshoot by what concurrent producers add in one batch — an approximate cap, like `MAXLEN ~`,
that errs on the side of keeping data. Consumers trim only what every consumer group has
acknowledged (`XTRIM … MINID ~ <oldest pending or undelivered id>`, see app/streams/trim.py).

Accepted means durable enough: with `stream_wait_replicas` at 0, an event is accepted once
its master holds it (a failover can lose what the master had not yet passed on); above 0,
only once that many replicas of the master acknowledged it (app/streams/durable.py). Events
on a master whose replicas fell short are refused with NotReplicatedError, never reported as
accepted, and the caller resends them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import redis
from redis.exceptions import RedisClusterException

from app.config import Settings, get_settings
from app.keys import RedisKeys, partition_of
from app.streams.deployment import stamped
from app.streams.durable import Shortfall, append_durably
from app.streams.events import Event, EventBase, EventValidationError, parse_event


def validate_all(events: Iterable[Event | Mapping[str, Any]]) -> list[Event]:
    """Parse a batch, refusing anything that is not an iterable of events (or mappings)."""
    if isinstance(events, str | bytes | Mapping | EventBase) or not isinstance(events, Iterable):
        raise EventValidationError(
            "invalid events: send_many takes a list of events (models or mappings)", ["<events>"]
        )
    parsed: list[Event] = []
    for index, event in enumerate(events):
        try:
            if isinstance(event, EventBase):
                parsed.append(parse_event(event))
            elif isinstance(event, Mapping):
                parsed.append(parse_event(dict(event)))
            else:
                raise EventValidationError(
                    f"invalid event: an event must be a mapping, not {type(event).__name__}",
                    ["<event>"],
                )
        except EventValidationError as exc:
            raise EventValidationError(f"events[{index}]: {exc}", exc.fields) from None
    return parsed


class ProducerError(RuntimeError):
    """Redis refused or could not take the events; nothing was acknowledged for them."""


class StreamFullError(ProducerError):
    """A partition is at its cap because consumers lag; retry later (backpressure)."""

    def __init__(self, message: str, sent: list[Receipt], unsent: list[Event]) -> None:
        super().__init__(message)
        self.sent = sent
        self.unsent = unsent


class NotReplicatedError(ProducerError):
    """Too few replicas acknowledged some events in time (ENGRAM_STREAM_WAIT_REPLICAS): they
    are not accepted, since a failover could lose them; resend them (a resend is harmless)."""

    def __init__(self, message: str, sent: list[Receipt], unsent: list[Event]) -> None:
        super().__init__(message)
        self.sent = sent
        self.unsent = unsent


@dataclass(frozen=True)
class Receipt:
    event_id: str
    stream: str
    entry_id: str


class EventProducer:
    """Validates events and appends them to partitioned streams; safe to share across threads."""

    def __init__(self, client: redis.Redis, settings: Settings | None = None) -> None:
        self.settings = settings or get_settings()
        self.client = client

    @cached_property
    def keys(self) -> RedisKeys:
        """Resolved at the first send, not at construction: learning the deployment may need
        the database (app/deployment.py), which an API starting during an outage lacks."""
        return RedisKeys.for_producer(self.settings, self.client)

    def stream_for(self, event: EventBase) -> str:
        index = partition_of(event.tenant_id, event.user_id, self.settings.stream_partitions)
        return self.keys.partition(index)

    def send(self, event: Event | Mapping[str, Any]) -> Receipt:
        return self.send_many([event])[0]

    def send_many(self, events: Iterable[Event | Mapping[str, Any]]) -> list[Receipt]:
        """Validate every event first (one bad event → nothing written), then pipeline XADDs.

        Bad input of any shape raises EventValidationError naming the field; nothing else."""
        parsed = validate_all(events)
        if not parsed:
            return []
        streams = [self.stream_for(event) for event in parsed]
        try:
            room = self._room(set(streams))
        except (redis.RedisError, RedisClusterException) as exc:
            raise ProducerError(f"could not reach Redis: {exc}") from exc
        accepted: list[tuple[Event, str]] = []
        unsent: list[Event] = []
        for event, stream in zip(parsed, streams, strict=True):
            if room[stream] <= 0:
                unsent.append(event)
                continue
            room[stream] -= 1
            accepted.append((event, stream))
        if self.settings.stream_wait_replicas:
            receipts = self._append_replicated(accepted, unsent)
        else:
            receipts = self._append(accepted)
        if unsent:
            raise StreamFullError(
                f"{len(unsent)} event(s) refused: partition at its cap of "
                f"{self.settings.stream_max_len} entries (consumers are behind)",
                receipts,
                unsent,
            )
        return receipts

    def _fields(self, event: Event) -> dict[str, str]:
        return stamped({"event": event.to_json()}, self.keys.deployment)

    def _append(self, accepted: list[tuple[Event, str]]) -> list[Receipt]:
        """Accepted once the masters hold them: one pipeline, routed by the client."""
        if not accepted:
            return []
        pipe = self.client.pipeline(transaction=False)
        for event, stream in accepted:
            pipe.xadd(stream, self._fields(event))
        try:
            replies = pipe.execute()
        except (redis.RedisError, RedisClusterException) as exc:
            raise ProducerError(f"could not send events to Redis: {exc}") from exc
        return [
            Receipt(str(event.id), stream, reply.decode() if isinstance(reply, bytes) else reply)
            for (event, stream), reply in zip(accepted, replies, strict=True)
        ]

    def _append_replicated(
        self, accepted: list[tuple[Event, str]], unsent: list[Event]
    ) -> list[Receipt]:
        """Accepted once `stream_wait_replicas` replicas acknowledged them; the events of a
        master that fell short raise NotReplicatedError (with those of full partitions)."""
        if not accepted:
            return []
        appends = [
            (stream, [x for pair in self._fields(event).items() for x in pair])
            for event, stream in accepted
        ]
        try:
            ids, shortfalls = append_durably(
                self.client,
                appends,
                replicas=self.settings.stream_wait_replicas,
                timeout_ms=self.settings.stream_wait_timeout_ms,
            )
        except (redis.RedisError, RedisClusterException) as exc:
            raise ProducerError(f"could not send events to Redis: {exc}") from exc
        receipts = [
            Receipt(str(event.id), stream, entry_id)
            for (event, stream), entry_id in zip(accepted, ids, strict=True)
            if entry_id is not None
        ]
        if shortfalls:
            refused = [e for (e, _), got in zip(accepted, ids, strict=True) if got is None]
            raise NotReplicatedError(
                self._shortfall_message(len(refused), shortfalls), receipts, refused + unsent
            )
        return receipts

    def _shortfall_message(self, refused: int, shortfalls: list[Shortfall]) -> str:
        """Names the setting and says whether waiting can help (a replica is slow or down)
        or not (a master has fewer replicas than the setting asks for)."""
        wanted = self.settings.stream_wait_replicas
        parts = []
        for short in shortfalls:
            if short.has_too_few_replicas:
                parts.append(
                    f"Redis {short.node} has {short.connected_replicas} connected replica(s) "
                    f"but ENGRAM_STREAM_WAIT_REPLICAS={wanted}: attach replicas to it or set "
                    "ENGRAM_STREAM_WAIT_REPLICAS=0"
                )
            else:
                parts.append(
                    f"only {short.acknowledged} of ENGRAM_STREAM_WAIT_REPLICAS={wanted} "
                    f"replica(s) of Redis {short.node} acknowledged them within "
                    f"ENGRAM_STREAM_WAIT_TIMEOUT_MS={self.settings.stream_wait_timeout_ms}"
                )
        return (
            f"{refused} event(s) not accepted, a failover could lose them: "
            + "; ".join(parts)
            + " (resending them is harmless)"
        )

    def _room(self, streams: set[str]) -> dict[str, int]:
        ordered = sorted(streams)
        pipe = self.client.pipeline(transaction=False)
        for stream in ordered:
            pipe.xlen(stream)
        lengths = pipe.execute()
        return {
            s: self.settings.stream_max_len - int(n) for s, n in zip(ordered, lengths, strict=True)
        }
