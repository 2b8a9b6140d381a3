"""`engram push`, `engram import` and `engram tail`: events into the streams, and the trace
they become."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from app.cli.output import console, refuse
from app.cli.supervisor import with_services
from app.config import get_settings
from app.streams.events import EventValidationError, is_identifier, parse_event_json

IMPORT_CHUNK = 500


def _producer() -> Any:
    from app.redis_client import get_redis
    from app.streams.producer import EventProducer

    settings = get_settings()
    return EventProducer(get_redis(settings), settings)


@with_services
def push(
    content: Annotated[str, typer.Argument(help="What was said.")],
    tenant: Annotated[str, typer.Option(help="Tenant id.")],
    user: Annotated[str, typer.Option(help="User id.")],
    role: Annotated[str, typer.Option(help="user | assistant | system | tool")] = "user",
    channel: Annotated[str, typer.Option()] = "cli",
    external_id: Annotated[str | None, typer.Option(help="Your message id (idempotency).")] = None,
) -> None:
    """Send one turn to the streams."""
    event = {
        "type": "turn",
        "tenant_id": tenant,
        "user_id": user,
        "role": role,
        "content": content,
        "channel": channel,
        "external_id": external_id or f"cli-{time.time_ns()}",
    }
    try:
        receipt = _producer().send(event)
    except EventValidationError as exc:
        refuse(f"cannot send: {str(exc).removeprefix('events[0]: ')}", "fix it and run it again")
    console.print(f"sent {receipt.event_id} → {receipt.stream} {receipt.entry_id}")


@with_services
def import_events(
    path: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="JSONL of events.")],
) -> None:
    """Send every event of a JSONL file (each keeps its own timestamp); safe to re-run."""
    producer = _producer()
    with path.open("rb") as counted:
        total = sum(1 for _ in counted)
    sent, bad = 0, []
    chunk: list[Any] = []
    columns = (TextColumn("importing"), BarColumn(), MofNCompleteColumn())
    # Bytes, decoded line by line: a line that is not UTF-8 (a binary file, a Latin-1 export)
    # is one bad line reported with the others, not a UnicodeDecodeError ending the import.
    with Progress(*columns, console=console) as progress, path.open("rb") as handle:
        task = progress.add_task("import", total=total)
        for number, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                bad.append((number, f"not UTF-8 text (byte {raw[exc.start]:#04x} at {exc.start})"))
                line = ""
            if line.strip():
                try:
                    chunk.append(parse_event_json(line))
                except (ValueError, EventValidationError) as exc:
                    bad.append((number, str(exc)))
            if len(chunk) >= IMPORT_CHUNK:
                sent += len(producer.send_many(chunk))
                chunk = []
            progress.advance(task)
        if chunk:
            sent += len(producer.send_many(chunk))
    console.print(f"sent {sent} events from {path}")
    for number, error in bad[:20]:
        console.print(f"[red]line {number}: {error}[/red]")
    if bad:
        console.print(f"[red]{len(bad)} invalid line(s) skipped[/red]")
        raise typer.Exit(1)


@with_services
def tail(
    tenant: Annotated[str, typer.Option(help="Tenant whose trace to watch.")],
    follow: Annotated[bool, typer.Option(help="Keep watching.")] = True,
    last: Annotated[
        int, typer.Option(min=0, max=100_000, help="Show this many recent rows first.")
    ] = 10,
) -> None:
    """Watch turns and events as they are persisted in L2."""
    from app.db.session import unit_of_work
    from app.layers.episodic.repository import recent_trace
    from app.layers.meta.repository import list_tenants

    if not is_identifier(tenant):
        refuse(
            f"--tenant {tenant!r} is no tenant id (1-128 letters, digits and . _ : @ -,"
            " starting with a letter or digit)",
            "check the id",
        )
    with unit_of_work(tenant) as session:
        known = tenant in list_tenants(session=session)
    if not known:
        refuse(
            f"no tenant {tenant!r} here: none was created or sent anything under that id",
            "`engram key list` shows the tenants with keys",
        )
    since = datetime(1970, 1, 1, tzinfo=UTC)
    limit = last
    while True:
        with unit_of_work(tenant) as session:
            rows = recent_trace(session=session, since=since, limit=limit)
        for row in rows:
            console.print(
                f"[dim]{row.occurred_at:%Y-%m-%d %H:%M:%S}[/dim] {row.user_id}@{row.channel} "
                f"[bold]{row.kind}[/bold] {row.body[:160]}"
            )
            since = max(since, row.received_at)
        if not follow:
            return
        limit = 1000
        time.sleep(1)
