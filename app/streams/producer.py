"""Producers: validate events and XADD them to the user's partition. No Celery needed.

Capping: a partition is capped at `stream_max_len` entries, but never by `XADD … MAXLEN ~`,
which would silently drop entries no consumer has read yet. Instead the XADD runs in a small
Lua script that refuses the write (StreamFullError, the producer's backpressure signal) when
the partition is at its cap, and consumers trim only what every consumer group has acknowledged
(`XTRIM … MINID ~ <oldest pending or undelivered id>`, see app/streams/trim.py). The stream
therefore stays near the cap under load and never loses an unconsumed entry.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import redis

from app.config import Settings, get_settings
from app.keys import RedisKeys, partition_of
from app.streams.events import Event, EventBase, parse_event

_CAPPED_XADD = """
if redis.call('XLEN', KEYS[1]) >= tonumber(ARGV[1]) then
    return redis.error_reply('ENGRAM_STREAM_FULL ' .. KEYS[1])
end
return redis.call('XADD', KEYS[1], '*', 'id', ARGV[2], 'event', ARGV[3])
"""


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
        self.keys = RedisKeys.from_settings(self.settings)
        self._script = client.register_script(_CAPPED_XADD)

    def stream_for(self, event: EventBase) -> str:
        index = partition_of(event.tenant_id, event.user_id, self.settings.stream_partitions)
        return self.keys.partition(index)

    def send(self, event: Event | Mapping[str, Any]) -> Receipt:
        return self.send_many([event])[0]

    def send_many(self, events: Iterable[Event | Mapping[str, Any]]) -> list[Receipt]:
        """Validate every event first (one bad event → nothing written), then pipeline XADDs."""
        parsed = [parse_event(e if isinstance(e, EventBase) else dict(e)) for e in events]
        if not parsed:
            return []
        pipe = self.client.pipeline(transaction=False)
        streams = []
        for event in parsed:
            stream = self.stream_for(event)
            streams.append(stream)
            self._script(
                keys=[stream],
                args=[self.settings.stream_max_len, str(event.id), event.to_json()],
                client=pipe,
            )
        try:
            replies = pipe.execute(raise_on_error=False)
        except redis.RedisError as exc:
            raise ProducerError(f"could not send events to Redis: {exc}") from exc
        receipts: list[Receipt] = []
        unsent: list[Event] = []
        errors: list[str] = []
        for event, stream, reply in zip(parsed, streams, replies, strict=True):
            if isinstance(reply, Exception):
                unsent.append(event)
                errors.append(str(reply))
            else:
                entry = reply.decode() if isinstance(reply, bytes) else str(reply)
                receipts.append(Receipt(str(event.id), stream, entry))
        if unsent:
            if all("ENGRAM_STREAM_FULL" in err for err in errors):
                raise StreamFullError(
                    f"{len(unsent)} event(s) refused: partition at its cap of "
                    f"{self.settings.stream_max_len} entries (consumers are behind)",
                    receipts,
                    unsent,
                )
            raise ProducerError(f"{len(unsent)} event(s) not sent: {errors[0]}")
        return receipts
