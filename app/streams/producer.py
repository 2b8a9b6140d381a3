"""Producers: validate events and XADD them to the user's partition. No Celery needed.

Capping: a partition is capped at about `stream_max_len` entries, but never by
`XADD … MAXLEN ~`, which would silently drop entries no consumer has read yet. Instead each
batch first reads the length of the partitions it writes to (one pipelined XLEN each) and
refuses the events that would take a partition past its cap (StreamFullError, the producer's
backpressure signal). The check is per batch, not atomic across producers, so a partition can
overshoot by what concurrent producers add in one batch — an approximate cap, like `MAXLEN ~`,
that errs on the side of keeping data. Consumers trim only what every consumer group has
acknowledged (`XTRIM … MINID ~ <oldest pending or undelivered id>`, see app/streams/trim.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import redis

from app.config import Settings, get_settings
from app.keys import RedisKeys, partition_of
from app.streams.deployment import stamped
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
        except redis.RedisError as exc:
            raise ProducerError(f"could not reach Redis: {exc}") from exc
        pipe = self.client.pipeline(transaction=False)
        accepted: list[tuple[Event, str]] = []
        unsent: list[Event] = []
        for event, stream in zip(parsed, streams, strict=True):
            if room[stream] <= 0:
                unsent.append(event)
                continue
            room[stream] -= 1
            accepted.append((event, stream))
            pipe.xadd(stream, stamped({"event": event.to_json()}, self.keys.deployment))
        try:
            replies = pipe.execute() if accepted else []
        except redis.RedisError as exc:
            raise ProducerError(f"could not send events to Redis: {exc}") from exc
        receipts = [
            Receipt(str(event.id), stream, reply.decode() if isinstance(reply, bytes) else reply)
            for (event, stream), reply in zip(accepted, replies, strict=True)
        ]
        if unsent:
            raise StreamFullError(
                f"{len(unsent)} event(s) refused: partition at its cap of "
                f"{self.settings.stream_max_len} entries (consumers are behind)",
                receipts,
                unsent,
            )
        return receipts

    def _room(self, streams: set[str]) -> dict[str, int]:
        ordered = sorted(streams)
        pipe = self.client.pipeline(transaction=False)
        for stream in ordered:
            pipe.xlen(stream)
        lengths = pipe.execute()
        return {
            s: self.settings.stream_max_len - int(n) for s, n in zip(ordered, lengths, strict=True)
        }
