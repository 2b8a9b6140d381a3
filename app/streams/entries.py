"""Stream entries as Redis holds them: raw bytes first, text only when they decode.

A consumer must be able to hold an entry it cannot read. If replies were decoded while they
are read (redis-py's decode_responses, or decoding a whole reply at once), one field that is
not UTF-8 would raise out of XREADGROUP or XAUTOCLAIM with every other entry of the reply,
before any dead-letter logic could see it, and the same reply would come back at each claim.
So replies are read undecoded whatever the client's settings, and each entry is decoded
alone: one that fails keeps its raw bytes and says why (`undecodable`), and the consumer
dead-letters it while its neighbours go on.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import redis
from redis.client import NEVER_DECODE
from redis.cluster import RedisCluster

from app.redis_client import is_cluster

RawPairs = tuple[tuple[bytes, bytes], ...]


@dataclass(frozen=True)
class StreamEntry:
    stream: str
    entry_id: str
    fields: dict[str, str]
    deliveries: int = 1
    # The fields exactly as stored (order and duplicates kept); empty when built in code.
    raw: RawPairs = ()
    # Why `fields` could not be decoded (then `fields` is empty and only `raw` holds data).
    undecodable: str | None = None

    def raw_pairs(self) -> RawPairs:
        """The entry's fields as bytes: as stored, or encoded from `fields`."""
        if self.raw:
            return self.raw
        return tuple((k.encode(), v.encode()) for k, v in self.fields.items())

    def with_deliveries(self, deliveries: int) -> StreamEntry:
        return StreamEntry(
            self.stream, self.entry_id, self.fields, deliveries, self.raw, self.undecodable
        )


def _bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return str(value).encode()


def _text(value: Any) -> str:
    """Stream keys and entry ids are ASCII (ours and Redis'); decoding them cannot fail."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _pairs(raw_fields: Any) -> RawPairs:
    """Field/value pairs from a flat RESP array (or a map, as RESP3 may give)."""
    if isinstance(raw_fields, Mapping):
        return tuple((_bytes(k), _bytes(v)) for k, v in raw_fields.items())
    flat = [v if type(v) is bytes else _bytes(v) for v in raw_fields]
    return tuple(zip(flat[::2], flat[1::2], strict=False))


def decode_entry(stream: str, entry_id: str, raw_fields: Any) -> StreamEntry:
    """Decode one entry's fields as strict UTF-8; never raises for what the entry holds."""
    pairs = _pairs(raw_fields)
    if isinstance(raw_fields, list | tuple) and len(raw_fields) % 2:
        return StreamEntry(stream, entry_id, {}, raw=pairs, undecodable="odd number of fields")
    try:
        fields = {k.decode(): v.decode() for k, v in pairs}
    except UnicodeDecodeError as exc:
        problem = f"not UTF-8 ({exc.reason} at byte {exc.start})"
        return StreamEntry(stream, entry_id, {}, raw=pairs, undecodable=problem)
    if len(fields) != len(pairs):
        names = [k.decode() for k, _ in pairs]
        twice = sorted({k for k in names if names.count(k) > 1})
        return StreamEntry(
            stream, entry_id, {}, raw=pairs, undecodable=f"field(s) repeated: {twice}"
        )
    return StreamEntry(stream, entry_id, fields, raw=pairs)


def _as_sent(response: Any, **_: Any) -> Any:
    return response


def _raw_client(pool: redis.ConnectionPool) -> redis.Redis:
    client = redis.Redis(connection_pool=pool)
    for command in ("XREADGROUP", "XAUTOCLAIM"):
        client.set_response_callback(command, _as_sent)
    return client


def _rows(reply: Any) -> list[StreamEntry]:
    rows = reply.items() if isinstance(reply, Mapping) else (reply or [])
    return [
        decode_entry(name, _text(entry_id), fields)
        for stream, items in rows
        for name in [_text(stream)]
        for entry_id, fields in items or []
    ]


# On a cluster, how often an idle consumer looks again while its read "blocks".
CLUSTER_POLL_S = 0.05


class RawStreamReader:
    """XREADGROUP and XAUTOCLAIM whose replies stay bytes, on the caller's connection pool.

    A second client object on the same pool (so no extra connections) whose callbacks for
    these two commands return the reply as Redis sent it; NEVER_DECODE keeps it bytes even
    when the pool's client was created with decode_responses=True.

    On Redis Cluster each partition is its own slot and one XREADGROUP may not name streams
    of several slots, so the reader sends one per stream, pipelined per master, through a
    raw client on that master's pool; a blocking read becomes polling every CLUSTER_POLL_S
    until the block time is over. A master that moved (failover, resharding) refreshes the
    slot map and the error goes up, to be retried like any outage."""

    def __init__(self, client: redis.Redis) -> None:
        self.cluster: RedisCluster | None = client if is_cluster(client) else None  # type: ignore[assignment]
        self.client = None if self.cluster else _raw_client(client.connection_pool)
        self._by_node: dict[str, redis.Redis] = {}

    def _for(self, stream: str) -> redis.Redis:
        """The raw client that reaches the master holding `stream`."""
        if self.cluster is None:
            assert self.client is not None
            return self.client
        node = self.cluster.get_node_from_key(stream)
        if node.redis_connection is None:
            self.cluster.nodes_manager.initialize()
            node = self.cluster.get_node_from_key(stream)
        pool = node.redis_connection.connection_pool
        raw = self._by_node.get(node.name)
        if raw is None or raw.connection_pool is not pool:
            raw = self._by_node[node.name] = _raw_client(pool)
        return raw

    def _refreshing(self, exc: redis.RedisError) -> redis.RedisError:
        if self.cluster is not None:
            self.cluster.nodes_manager.initialize()
        return exc

    def read_group(
        self, group: str, consumer: str, streams: Iterable[str], *, count: int, block: int | None
    ) -> list[StreamEntry]:
        """New entries (`>`) of every stream, each decoded on its own."""
        names = list(streams)
        if self.cluster is not None:
            return self._read_group_per_stream(group, consumer, names, count=count, block=block)
        args: list[Any] = ["XREADGROUP", "GROUP", group, consumer, "COUNT", count]
        if block is not None:
            args += ["BLOCK", block]
        args += ["STREAMS", *names, *([">"] * len(names))]
        assert self.client is not None
        return _rows(self.client.execute_command(*args, **{NEVER_DECODE: []}))

    def _read_group_per_stream(
        self, group: str, consumer: str, names: list[str], *, count: int, block: int | None
    ) -> list[StreamEntry]:
        deadline = time.monotonic() + (block or 0) / 1000
        while True:
            by_node: dict[int, tuple[redis.Redis, list[str]]] = {}
            try:
                for name in names:
                    raw = self._for(name)
                    by_node.setdefault(id(raw), (raw, []))[1].append(name)
                found: list[StreamEntry] = []
                for raw, streams in by_node.values():
                    pipe = raw.pipeline(transaction=False)
                    for name in streams:
                        pipe.execute_command(
                            "XREADGROUP", "GROUP", group, consumer, "COUNT", count,
                            "STREAMS", name, ">", **{NEVER_DECODE: []},
                        )  # fmt: skip
                    for reply in pipe.execute():
                        found.extend(_rows(reply))
            except (redis.ConnectionError, redis.exceptions.MovedError) as exc:
                raise self._refreshing(exc) from exc
            if found or block is None or time.monotonic() >= deadline:
                return found
            time.sleep(min(CLUSTER_POLL_S, max(0.0, deadline - time.monotonic())))

    def autoclaim(
        self, stream: str, group: str, consumer: str, min_idle_ms: int, cursor: str, count: int
    ) -> tuple[list[StreamEntry], str, list[str]]:
        """(claimed entries, next cursor, ids deleted while pending). The reply has two parts
        on Redis 6.2, which reports a deleted entry as nil in place, and three on 7+."""
        try:
            reply = self._for(stream).execute_command(
                "XAUTOCLAIM",
                stream,
                group,
                consumer,
                min_idle_ms,
                cursor,
                "COUNT",
                count,
                **{NEVER_DECODE: []},
            )
        except (redis.ConnectionError, redis.exceptions.MovedError) as exc:
            raise self._refreshing(exc) from exc
        claimed: list[StreamEntry] = []
        deleted: list[str] = []
        for item in reply[1] or []:
            if item is None:
                continue
            entry_id, fields = item[0], item[1] if len(item) > 1 else None
            if fields is None:
                if entry_id is not None:
                    deleted.append(_text(entry_id))
                continue
            claimed.append(decode_entry(stream, _text(entry_id), fields))
        if len(reply) > 2:
            deleted.extend(_text(d) for d in reply[2] or [])
        return claimed, _text(reply[0]), deleted
