"""`engram`: the operator's and developer's command line."""

from __future__ import annotations

import logging
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from app.cli.mcp import serve_mcp
from app.cli.supervisor import (
    ProcessGroup,
    announce_deployment,
    api_command,
    beat_command,
    ensure_services,
    flower_command,
    sigterm_as_interrupt,
    with_services,
    worker_command,
)
from app.config import get_settings
from app.embedded import postgres as embedded_postgres
from app.embedded import redis as embedded_redis
from app.logs import configure_logging
from app.streams.events import EventValidationError, is_identifier, parse_event_json

cli = typer.Typer(
    help="Engram: long-term memory for LLM agents.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)
services_cli = typer.Typer(help="Embedded Postgres/Redis for machines without their own.")
cli.add_typer(services_cli, name="services")
tenant_cli = typer.Typer(help="Tenants.", no_args_is_help=True)
cli.add_typer(tenant_cli, name="tenant")
key_cli = typer.Typer(
    help="API keys: minted per tenant, shown once, revocable.", no_args_is_help=True
)
cli.add_typer(key_cli, name="key")
cli.command("mcp")(serve_mcp)
console = Console(width=None if Console().is_terminal else 140)

IMPORT_CHUNK = 500
_verbose = False


@cli.callback()
def _options(
    verbose: Annotated[
        bool,
        typer.Option("--verbose", "-v", envvar="ENGRAM_VERBOSE", help="Show tracebacks."),
    ] = False,
) -> None:
    """Engram: long-term memory for LLM agents."""
    global _verbose
    _verbose = verbose


def _refuse(what: str, fix: str, code: int = 2) -> NoReturn:
    """A mistake in the command's own arguments: one line on stderr, as main() prints the
    others (`engram: what; fix`), and a non-zero exit."""
    Console(stderr=True, width=console.width).print(
        f"[red]engram: {escape(what)}; {escape(fix)}[/red]", soft_wrap=True
    )
    raise typer.Exit(code)


def _logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    configure_logging(get_settings().log_format)


@services_cli.command("start")
def services_start() -> None:
    """Start (or find) the database and Redis, and migrate the schema."""
    from app.cli.supervisor import upgrade_and_announce as upgrade

    _logging(False)
    ensure_services(get_settings())
    upgrade()
    console.print("[green]services up, schema at head[/green]")


@services_cli.command("stop")
def services_stop() -> None:
    """Stop the embedded Postgres and Redis (if this project started them)."""
    settings = get_settings()
    pg = embedded_postgres.stop(settings.data_dir)
    rd = embedded_redis.stop(settings.data_dir)
    console.print(
        f"embedded postgres {'stopped' if pg else 'not running'}; "
        f"embedded redis {'stopped' if rd else 'not running'}"
    )


@cli.command()
@with_services
def migrate(
    revision: Annotated[
        str,
        typer.Option(help="head, base, -N / +N (steps back / on), or a revision id or prefix."),
    ] = "head",
    yes: Annotated[
        bool, typer.Option("--yes", help="Downgrade without asking (it drops data).")
    ] = False,
    list_revisions: Annotated[
        bool, typer.Option("--list", help="List the revisions, marking the database's.")
    ] = False,
) -> None:
    """Upgrade or downgrade the schema (Alembic) to `revision`, whichever way it lies."""
    from app.db.migrate import downgrades, history, migrate_to, schema_state

    _logging(_verbose)
    ensure_services(get_settings())
    state = schema_state()
    if list_revisions:
        for rev, doc in history():
            mark = "▶" if rev == state.current else " "
            console.print(f"{mark} {rev}  {doc.splitlines()[0] if doc else ''}")
        console.print(f"database: {state.describe()}")
        return
    if downgrades(revision, state.current) and not yes:
        question = f"downgrading to {revision} drops the tables (and rows) of the undone migrations"
        if not sys.stdin.isatty():
            console.print(f"[red]engram: {question}; add --yes to go ahead[/red]")
            raise typer.Exit(2)
        if not typer.confirm(f"{question}. Go ahead?"):
            raise typer.Exit(1)
    before, after = migrate_to(revision)
    announce_deployment()
    verb = "unchanged" if before.current == after.current else "migrated"
    console.print(f"[green]schema {verb}: {after.describe()}[/green]")


@cli.command()
@sigterm_as_interrupt()
def up(
    flower: Annotated[bool, typer.Option(help="Also run Flower.")] = True,
    api: Annotated[bool, typer.Option(help="Also serve the REST API.")] = True,
    concurrency: Annotated[int, typer.Option(min=1, help="Worker task threads.")] = 4,
) -> None:
    """Services + migrations + worker + beat + flower in the foreground; Ctrl-C stops all."""
    from app.cli.supervisor import upgrade_and_announce as upgrade

    _logging(True)
    settings = get_settings()
    services = ensure_services(settings)
    group = ProcessGroup()
    try:
        upgrade()
        group.start(worker_command(concurrency=concurrency))
        group.start(beat_command(settings))
        if api:
            group.start(api_command(settings))
            console.print(f"API on http://{settings.api_host}:{settings.api_port} (docs at /docs)")
        if flower:
            group.start(flower_command(settings))
            console.print(
                f"Flower on http://{settings.flower_address}:{settings.flower_port} "
                f"(user {settings.flower_user})"
            )
        code = group.wait_any()
        console.print(f"[red]a process exited ({code}); stopping the rest[/red]")
    except KeyboardInterrupt:
        console.print("stopping…")
    finally:
        group.stop()
        services.stop()


@cli.command("api")
@with_services
def serve_api(
    host: Annotated[str | None, typer.Option(help="Bind address (ENGRAM_API_HOST).")] = None,
    port: Annotated[
        int | None, typer.Option(min=0, max=65535, help="Port (ENGRAM_API_PORT).")
    ] = None,
    workers: Annotated[int, typer.Option(min=1, help="Server processes.")] = 1,
) -> None:
    """Serve the REST API (OpenAPI at /openapi.json, docs at /docs)."""
    import uvicorn

    from app.cli.errors import busy_port

    _logging(True)
    settings = get_settings()
    host, port = host or settings.api_host, port or settings.api_port
    if (problem := busy_port(host, port)) is not None:
        _refuse(problem.what, problem.fix)
    ensure_services(settings)
    uvicorn.run("app.api.app:create_app", factory=True, host=host, port=port, workers=workers)


@tenant_cli.command("create")
@with_services
def tenant_create(
    tenant: Annotated[str, typer.Argument(help="Tenant id.")],
    key_name: Annotated[str, typer.Option(help="Name of the first API key.")] = "default",
) -> None:
    """Register a tenant and mint its first API key (printed once)."""
    from app.services.tenants import TenantError, mint_key

    ensure_services(get_settings())
    try:
        minted = mint_key(tenant, key_name)
    except TenantError as exc:
        _refuse(str(exc), "choose a tenant id of that form")
    console.print(f"tenant {tenant} ready; API key {minted.id} (shown once):")
    typer.echo(minted.key)


@key_cli.command("create")
@with_services
def key_create(
    tenant: Annotated[str, typer.Option(help="Tenant id.")],
    name: Annotated[str, typer.Option(help="What the key is for.")] = "",
) -> None:
    """Mint an API key for a tenant; the key is printed once and stored only as a hash."""
    from app.services.tenants import TenantError, mint_key

    ensure_services(get_settings())
    try:
        minted = mint_key(tenant, name)
    except TenantError as exc:
        _refuse(str(exc), "choose a --tenant of that form")
    console.print(f"key {minted.id} for tenant {tenant} (shown once):")
    typer.echo(minted.key)


@key_cli.command("list")
@with_services
def key_list(tenant: Annotated[str | None, typer.Option(help="Only this tenant.")] = None) -> None:
    """Keys (ids, names, prefixes, state); never the secrets."""
    from app.services.tenants import list_keys

    ensure_services(get_settings())
    table = Table("id", "tenant", "name", "prefix", "created", "revoked")
    for row in list_keys(tenant):
        table.add_row(
            str(row.id),
            row.tenant_id,
            row.name,
            row.key_prefix,
            f"{row.created_at:%Y-%m-%d %H:%M}",
            f"{row.revoked_at:%Y-%m-%d %H:%M}" if row.revoked_at else "",
        )
    console.print(table)


@key_cli.command("revoke")
@with_services
def key_revoke(
    key_id: Annotated[str, typer.Argument(help="The key's id (from key list).")],
) -> None:
    """Revoke a key; API processes stop accepting it within a few seconds."""
    import uuid

    from app.services.tenants import revoke_key

    ensure_services(get_settings())
    try:
        parsed = uuid.UUID(key_id)
    except ValueError:
        _refuse(f"not a key id: {key_id!r}", "give the id `engram key list` shows")
    if not revoke_key(parsed):
        _refuse(f"no live key {key_id}", "see `engram key list` for the keys not revoked", 1)
    console.print(f"key {key_id} revoked")


def _producer() -> Any:
    from app.redis_client import get_redis
    from app.streams.producer import EventProducer

    settings = get_settings()
    return EventProducer(get_redis(settings), settings)


@cli.command()
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
        _refuse(f"cannot send: {str(exc).removeprefix('events[0]: ')}", "fix it and run it again")
    console.print(f"sent {receipt.event_id} → {receipt.stream} {receipt.entry_id}")


@cli.command("import")
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


@cli.command()
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
        _refuse(
            f"--tenant {tenant!r} is no tenant id (1-128 letters, digits and . _ : @ -,"
            " starting with a letter or digit)",
            "check the id",
        )
    with unit_of_work(tenant) as session:
        known = tenant in list_tenants(session=session)
    if not known:
        _refuse(
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


@cli.command()
@with_services
def status() -> None:
    """Stream lengths, pending entries, dead letters, rows per layer and recent job runs."""
    from app.cli.errors import require_schema
    from app.db.session import owner_engine
    from app.keys import RedisKeys
    from app.redis_client import get_redis
    from app.services.status import extraction_states, layer_row_counts, stream_status

    settings = get_settings()
    require_schema()
    streams = stream_status(get_redis(settings), settings)
    deployment = RedisKeys.from_settings(settings).deployment
    console.print(f"deployment {deployment} (Redis prefix {settings.redis_prefix})")
    table = Table("partition", "length", "pending", "lag", "consumers", title="L0 streams")
    for part in streams.partitions:
        table.add_row(
            part.stream, str(part.length), str(part.pending), str(part.lag), str(part.consumers)
        )
    console.print(table)
    console.print(
        f"dead letters: {streams.dead_letters}   dead tasks: {streams.dead_tasks}   "
        f"lost (deleted while pending): {streams.lost}   "
        f"users in working memory: {streams.working_users}"
    )
    live = Table(
        "consumer",
        "batches",
        "acked",
        "reclaimed",
        "dead-lettered",
        "last seen",
        title=f"Live stream consumers: {len(streams.consumers)}",
    )
    for c in streams.consumers:
        live.add_row(
            c.get("name", "?"),
            c.get("batches", ""),
            c.get("acked", ""),
            c.get("reclaimed", ""),
            c.get("dead_lettered", ""),
            c.get("seen_at", ""),
        )
    console.print(live)
    rows = Table("layer", "table", "rows", title="Rows per layer")
    for layer, name, count in layer_row_counts(owner_engine(settings)):
        rows.add_row(layer, name, str(count))
    console.print(rows)
    states = extraction_states(owner_engine(settings))
    console.print(
        "extraction batches: "
        + (", ".join(f"{state} {n}" for state, n in sorted(states.items())) or "none")
    )
    from app.services.jobs import recent_runs

    runs = Table(
        "job", "tenant", "scope", "status", "rows", "errors", "started", "took", title="Job runs"
    )
    for run in recent_runs(limit=20):
        took = (
            f"{(run.finished_at - run.started_at).total_seconds():.1f}s"
            if run.finished_at
            else "running"
        )
        runs.add_row(
            run.job,
            run.tenant_id,
            run.scope,
            run.status if not run.error else f"{run.status}: {run.error[:60]}",
            str(run.rows),
            str(run.errors),
            f"{run.started_at:%Y-%m-%d %H:%M:%S}",
            took,
        )
    console.print(runs)


@cli.command()
def demo(timeout: Annotated[float, typer.Option(help="Seconds to wait for ingest.")] = 90) -> None:
    """Set up, run a worker, push a sample conversation, and show it in L1 and L2."""
    from app.cli.demo import run_demo

    _logging(False)
    raise typer.Exit(run_demo(console, timeout=timeout))


def main() -> None:
    """Run the CLI; a user's mistake is one line naming the fix (the traceback with -v)."""
    from app.cli.errors import explain

    try:
        cli()
    except Exception as exc:
        if _verbose:
            raise
        problem = explain(exc)
        if problem is not None:
            line = problem.line()
        else:
            first = (str(exc).strip().splitlines() or [""])[0][:300]
            line = f"engram: unexpected error: {type(exc).__name__}: {first}"
        err = Console(stderr=True, width=console.width)
        err.print(
            f"[red]{escape(line)}[/red] [dim](--verbose shows the traceback)[/dim]", soft_wrap=True
        )
        sys.exit(1)
