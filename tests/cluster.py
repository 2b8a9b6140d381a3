"""A real local Redis Cluster for tests: three masters and three replicas on loopback ports.

Started from the system's `redis-server` in a temporary directory, joined with
`redis-cli --cluster create`, and stopped by pid. Callers skip when the binaries are missing.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

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


@contextmanager
def local_cluster(root: Path) -> Iterator[list[int]]:
    """Run a 3+3 cluster under `root`; yields the node ports (any of them is an entry point)."""
    ports = _free_ports(NODES)
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for port in ports:
            node_dir = root / str(port)
            node_dir.mkdir(parents=True)
            processes.append(
                subprocess.Popen(
                    [
                        "redis-server",
                        "--port", str(port),
                        "--bind", "127.0.0.1",
                        "--dir", str(node_dir),
                        "--cluster-enabled", "yes",
                        "--cluster-config-file", "nodes.conf",
                        "--cluster-node-timeout", "2000",
                        "--appendonly", "no",
                        "--save", "",
                        "--protected-mode", "no",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )  # fmt: skip
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
        for process in processes:
            if process.poll() is None:
                process.terminate()
        for process in processes:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
