"""The real API under uvicorn on a free localhost port, for tests that talk HTTP to it."""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import uvicorn

from app.api.app import create_app
from app.config import Settings


@contextmanager
def prefixed(base: Settings, label: str, **update: Any) -> Iterator[Settings]:
    """Settings under a Redis prefix of their own (`test-<label>-…`), whose keys are deleted
    when the block ends: a test module's API keeps its streams and caches to itself."""
    from app.redis_client import get_redis

    settings = base.model_copy(
        update={"redis_prefix": f"test-{label}-{uuid.uuid4().hex[:10]}", **update}
    )
    yield settings
    client = get_redis(settings)
    keys = list(client.scan_iter(match=f"{settings.redis_prefix}:*", count=1000))
    if keys:
        client.delete(*keys)


@contextmanager
def serve(settings: Settings) -> Iterator[str]:
    """Serve the app in a background thread until the block ends; yields its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    config = uvicorn.Config(
        create_app(settings), log_level="warning", lifespan="on", access_log=False
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError("the API server did not come up")
            time.sleep(0.1)
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
