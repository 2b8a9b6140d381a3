"""The REST API in a thread of the benchmark's own process, on a free loopback port."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def serve(settings: Any) -> tuple[Any, str]:
    """(the uvicorn server, its base URL) once it answers; `server.should_exit = True` ends it."""
    import uvicorn

    from app.api.app import create_app

    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning")
    )
    threading.Thread(target=server.run, daemon=True).start()
    deadline = time.monotonic() + 60
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("API server did not start")
        time.sleep(0.05)
    return server, f"http://127.0.0.1:{port}"
