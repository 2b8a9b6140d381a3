"""Appends a failover cannot take back: XADD, then WAIT for replicas on the same connection.

Redis replicates asynchronously: XADD is answered as soon as the master holds the entry, so
a master killed a moment later can take with it entries its replica never received, and the
replica promoted in its place has never heard of them, though the producer was told they
were accepted. `WAIT n t` blocks a connection until n replicas have acknowledged every write
sent earlier on *that connection* (or t ms have passed) and answers how many did. So each
master's XADDs and their WAIT travel pipelined on one connection to that master: on a
cluster, one from the master's own pool. redis-py's cluster client would send a keyless WAIT
to every primary, on connections that carried none of the writes, and a cluster pipeline
redirected half-way re-sends commands on other connections; neither proves anything.

A master whose replicas acknowledge fewer than asked is a shortfall: its entries stay in the
stream (they may still be consumed), but the caller must not report them accepted; resending
them is harmless, since event ids are derived from the producer's own ids. WAIT is not
consensus: an acknowledged entry is still lost if the master and every replica that
acknowledged it fail together, and with several replicas the one promoted is usually, not
always, the most up to date; asking for as many acknowledgements as there are replicas closes
that gap at the price of availability.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

import redis
from redis.exceptions import RedisClusterException

from app.redis_client import is_cluster

_log = logging.getLogger(__name__)

# One entry to append: the stream and its flat field/value list (repeats kept, as XADD does).
Append = tuple[str, Sequence[Any]]


class ReplicationShortfall(redis.ConnectionError):
    """Too few replicas acknowledged a write that must survive a failover. A connection-class
    error on purpose: callers that wait out outages (the stream consumer) wait this out too."""


@dataclass(frozen=True)
class Shortfall:
    """A master whose replicas acknowledged fewer of its appends than asked, in time."""

    node: str
    acknowledged: int
    wanted: int
    entries: int
    # Replicas attached to the master just after (INFO), or None if it did not say.
    connected_replicas: int | None

    @property
    def has_too_few_replicas(self) -> bool:
        """Waiting longer cannot help: the master has fewer replicas than asked for."""
        return self.connected_replicas is not None and self.connected_replicas < self.wanted


def _address(client: redis.Redis) -> str:
    kwargs = client.connection_pool.connection_kwargs
    if kwargs.get("path"):
        return str(kwargs["path"])
    return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"


def _by_master(client: Any, streams: Sequence[str]) -> dict[str, tuple[redis.Redis, list[int]]]:
    """Master name → (a plain client on its pool, indexes of the streams it holds)."""
    if not is_cluster(client):
        return {_address(client): (client, list(range(len(streams))))}
    found: dict[str, tuple[redis.Redis, list[int]]] = {}
    for index, stream in enumerate(streams):
        node = client.get_node_from_key(stream)
        if node.name not in found:
            found[node.name] = (client.get_redis_connection(node), [])
        found[node.name][1].append(index)
    return found


def _connected_replicas(node: redis.Redis) -> int | None:
    """For the error message only: a master that does not answer says nothing."""
    with suppress(redis.RedisError):
        return int(node.info("replication").get("connected_slaves", 0))
    return None


def _refresh_slots(client: Any) -> None:
    """After a failed append on a cluster: learn the new masters before the caller retries.
    A refresh that fails too changes nothing: the append's own error is what goes up."""
    if is_cluster(client):
        try:
            client.nodes_manager.initialize()
        except (redis.RedisError, RedisClusterException) as exc:
            _log.debug("could not refresh the cluster's slot map: %s", exc)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def append_durably(
    client: Any, appends: Sequence[Append], *, replicas: int, timeout_ms: int
) -> tuple[list[str | None], list[Shortfall]]:
    """XADD every entry, each master's share pipelined with a WAIT behind it on one
    connection. Returns the entry ids in order (None where the master's replicas fell short)
    and the shortfalls. A Redis error propagates: then no entry may be reported accepted."""
    ids: list[str | None] = [None] * len(appends)
    shortfalls: list[Shortfall] = []
    try:
        for name, (node, indexes) in _by_master(client, [s for s, _ in appends]).items():
            pipe = node.pipeline(transaction=False)
            for index in indexes:
                stream, fields = appends[index]
                pipe.execute_command("XADD", stream, "*", *fields)
            pipe.execute_command("WAIT", replicas, timeout_ms)
            *added, acknowledged = pipe.execute()
            if int(acknowledged) >= replicas:
                for index, entry_id in zip(indexes, added, strict=True):
                    ids[index] = _text(entry_id)
            else:
                shortfalls.append(
                    Shortfall(
                        name, int(acknowledged), replicas, len(indexes), _connected_replicas(node)
                    )
                )
    except (redis.RedisError, RedisClusterException):
        _refresh_slots(client)
        raise
    return ids, shortfalls


def require_replicated(
    client: Any, stream: str, fields: Sequence[Any], *, replicas: int, timeout_ms: int
) -> str:
    """One append that must survive a failover before the caller goes on (a dead letter,
    written before its entry is acked); ReplicationShortfall when it may not."""
    ids, shortfalls = append_durably(
        client, [(stream, fields)], replicas=replicas, timeout_ms=timeout_ms
    )
    if shortfalls or ids[0] is None:
        short = shortfalls[0] if shortfalls else None
        got = short.acknowledged if short else 0
        raise ReplicationShortfall(
            f"{stream}: {got} of {replicas} replica acknowledgement(s) within {timeout_ms} ms"
        )
    return ids[0]
