"""Small helpers shared by integration tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any


def turn(tenant: str, user: str, n: int, **overrides: Any) -> dict[str, Any]:
    base = datetime(2026, 1, 1, tzinfo=UTC)
    event = {
        "type": "turn",
        "tenant_id": tenant,
        "user_id": user,
        "role": "user" if n % 2 == 0 else "assistant",
        "content": f"message number {n} about the quarterly plan",
        "external_id": f"m-{n}",
        "channel": "web",
        "timestamp": (base + timedelta(seconds=n)).isoformat(),
    }
    event.update(overrides)
    return event


def driver_statements(monkeypatch: Any, seen: list[Any], note: Callable[[str], Any]) -> None:
    """Note every statement any psycopg cursor runs (through SQLAlchemy or straight on the
    driver, as the search path's reads do: app/db/rows.py) into `seen`, as note(statement)."""
    import psycopg

    execute = psycopg.Cursor.execute

    def noting(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(note(str(query)))
        return execute(cursor, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", noting)


def wait_for(predicate: Callable[[], bool], timeout: float = 60, every: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(every)
    return predicate()


def ingest_consumer(client: Any, settings: Any, name: str = "c1") -> Any:
    """A real stream consumer storing turns through the ingest service, its groups made."""
    from app.services.ingest import IngestService
    from app.streams.consumer import StreamConsumer

    consumer = StreamConsumer(
        client=client,
        settings=settings,
        handler=IngestService(client=client, settings=settings),
        name=name,
    )
    consumer.ensure_groups()
    return consumer


def stop_process(process: Any, timeout: float = 30) -> None:
    """SIGTERM a child and wait; SIGKILL it if it has not gone within `timeout` seconds."""
    import subprocess

    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
