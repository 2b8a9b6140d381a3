"""A real local Redis Cluster for tests: three masters and three replicas on loopback ports.

Started from the system's `redis-server` in a temporary directory, joined with
`redis-cli --cluster create`, and stopped by pid. Callers skip when the binaries are missing.
A failover test kills one master with SIGKILL (kill_node), waits for its replica to take over
(wait_for_promotion; a smaller `node_timeout_ms` makes that faster) and starts the dead node
again (restart_node), which rejoins as a replica; `paused` silences a node for a while.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path

import redis
from redis.crc import key_slot

from app.cli.supervisor import ProcessGroup

NODES = 6  # three masters, each with one replica


def missing_binaries() -> str | None:
    """Why a cluster cannot be started here, or None."""
    for name in ("redis-server", "redis-cli"):
        if shutil.which(name) is None:
            return f"{name} not found on PATH"
    return None


def _free_ports(count: int) -> list[int]:
    """Ports free now whose cluster bus port (port + 10000) is free too."""
    ports: list[int] = []
    while len(ports) < count:
        with closing(socket.socket()) as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if port + 10000 > 65535 or port in ports:
            continue
        with closing(socket.socket()) as bus:
            try:
                bus.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        ports.append(port)
    return ports


def _cli(port: int, *args: str, timeout: float = 30) -> str:
    done = subprocess.run(
        ["redis-cli", "-h", "127.0.0.1", "-p", str(port), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return done.stdout + done.stderr


def _wait(predicate, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise RuntimeError(f"local Redis Cluster: timed out waiting for {what}")


@dataclass
class _Started:
    """A node local_cluster started: how, its process now, and the list it stops at exit."""

    command: list[str]
    process: subprocess.Popen[bytes]
    processes: list[subprocess.Popen[bytes]]


# The nodes of running local clusters by port: kill_node and restart_node touch only these.
_STARTED: dict[int, _Started] = {}


def _node_command(port: int, node_dir: Path, node_timeout_ms: int) -> list[str]:
    return [
        "redis-server",
        "--port", str(port),
        "--bind", "127.0.0.1",
        "--dir", str(node_dir),
        "--cluster-enabled", "yes",
        "--cluster-config-file", "nodes.conf",
        "--cluster-node-timeout", str(node_timeout_ms),
        "--appendonly", "no",
        "--save", "",
        "--protected-mode", "no",
    ]  # fmt: skip


def _start(command: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@contextmanager
def local_cluster(root: Path, *, node_timeout_ms: int = 2000) -> Iterator[list[int]]:
    """Run a 3+3 cluster under `root`; yields the node ports (any of them is an entry point).
    `node_timeout_ms` is how long a silent master has before its replica may replace it."""
    ports = _free_ports(NODES)
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for port in ports:
            node_dir = root / str(port)
            node_dir.mkdir(parents=True)
            command = _node_command(port, node_dir, node_timeout_ms)
            processes.append(_start(command))
            _STARTED[port] = _Started(command, processes[-1], processes)
        for port in ports:
            _wait(lambda p=port: "PONG" in _cli(p, "ping", timeout=5), 20, f"node {port}")
        created = subprocess.run(
            [
                "redis-cli", "--cluster", "create",
                *[f"127.0.0.1:{port}" for port in ports],
                "--cluster-replicas", "1", "--cluster-yes",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )  # fmt: skip
        if created.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed: {created.stdout[-2000:]}")
        _wait(
            lambda: all("cluster_state:ok" in _cli(p, "cluster", "info") for p in ports),
            60,
            "cluster_state:ok on every node",
        )
        yield ports
    finally:
        for port in ports:
            _STARTED.pop(port, None)
        ProcessGroup(list(processes)).stop(timeout=15)


@dataclass(frozen=True)
class Node:
    id: str
    port: int
    flags: frozenset[str]
    master_id: str | None
    slot_ranges: tuple[tuple[int, int], ...]

    @property
    def slots(self) -> int:
        return sum(high - low + 1 for low, high in self.slot_ranges)


def nodes(port: int) -> list[Node]:
    """The cluster as the node on `port` sees it (CLUSTER NODES)."""
    found = []
    for line in _cli(port, "cluster", "nodes").splitlines():
        parts = line.split()
        if len(parts) < 8 or ":" not in parts[1]:
            continue
        address = parts[1].split("@")[0]
        ranges = []
        for part in parts[8:]:
            if not part.startswith("["):  # a slot being migrated
                low, _, high = part.partition("-")
                ranges.append((int(low), int(high or low)))
        found.append(
            Node(
                id=parts[0],
                port=int(address.rsplit(":", 1)[1]),
                flags=frozenset(parts[2].split(",")),
                master_id=None if parts[3] == "-" else parts[3],
                slot_ranges=tuple(ranges),
            )
        )
    return found


def replica_of(port: int, master_port: int) -> int:
    """The port of the replica of the master on `master_port`."""
    seen = nodes(port)
    master = next(n for n in seen if n.port == master_port)
    return next(n.port for n in seen if n.master_id == master.id)


def kill_node(port: int) -> None:
    """SIGKILL a node local_cluster started: a crash, with no chance to hand anything over."""
    started = _STARTED[port]
    os.kill(started.process.pid, signal.SIGKILL)
    started.process.wait(timeout=15)


@contextmanager
def paused(port: int) -> Iterator[None]:
    """SIGSTOP a node local_cluster started for the block, SIGCONT after: alive to the
    kernel, silent to the cluster (a replica that stops acknowledging)."""
    pid = _STARTED[port].process.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def restart_node(port: int) -> None:
    """Start a killed node again, as a supervisor would, from its nodes.conf: it learns that
    its replica replaced it and rejoins as that replica's replica, empty (no persistence)."""
    started = _STARTED[port]
    if started.process.poll() is None:
        raise RuntimeError(f"node {port} is still running")
    started.process = _start(started.command)
    started.processes.append(started.process)
    _wait(lambda: "PONG" in _cli(port, "ping", timeout=5), 20, f"node {port} restarted")


def _key_served_by(node: Node) -> str:
    """A key whose slot `node` serves."""
    n = 0
    while True:
        key = f"replica-probe:{{{n}}}"
        if any(low <= key_slot(key.encode()) <= high for low, high in node.slot_ranges):
            return key
        n += 1


def wait_for_replica(master: int, timeout: float = 30) -> None:
    """Wait until the master on `master` has a replica acknowledging its writes (WAIT 1).
    "online" in INFO is not enough: a freshly synced replica may take a second to stream."""
    key = _key_served_by(next(n for n in nodes(master) if n.port == master))
    client = redis.Redis(host="127.0.0.1", port=master, socket_timeout=5)

    def acknowledged() -> bool:
        try:
            client.set(key, "1", px=60_000)
            return int(client.execute_command("WAIT", 1, 200)) >= 1
        except redis.RedisError:
            return False

    try:
        _wait(acknowledged, timeout, f"a replica acknowledging the master on {master}")
        client.delete(key)
    finally:
        client.close()


def wait_for_promotion(ports: list[int], dead: int, replica: int, timeout: float = 30) -> None:
    """Wait until `replica` is a master holding slots and every live node reports the
    cluster ok again (the failover is asynchronous: each node learns it by gossip)."""
    live = [p for p in ports if p != dead]

    def promoted() -> bool:
        me = next((n for n in nodes(replica) if n.port == replica), None)
        if me is None or "master" not in me.flags or me.slots == 0:
            return False
        return all("cluster_state:ok" in _cli(p, "cluster", "info") for p in live)

    _wait(promoted, timeout, f"the replica on {replica} to replace the master on {dead}")
