"""`engram`: the operator's and developer's command line."""

from __future__ import annotations

import logging
import sys
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from app.cli.mcp import serve_mcp
from app.cli.output import console, refuse
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
from app.cli.tenants import key_cli, tenant_cli
from app.cli.trace import import_events, push, tail
from app.config import get_settings
from app.embedded import postgres as embedded_postgres
from app.embedded import redis as embedded_redis
from app.logs import configure_logging

cli = typer.Typer(
    help="Engram: long-term memory for LLM agents.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)
services_cli = typer.Typer(help="Embedded Postgres/Redis for machines without their own.")
cli.add_typer(services_cli, name="services")
cli.add_typer(tenant_cli, name="tenant")
cli.add_typer(key_cli, name="key")
cli.command("mcp")(serve_mcp)

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
        refuse(problem.what, problem.fix)
    ensure_services(settings)
    uvicorn.run("app.api.app:create_app", factory=True, host=host, port=port, workers=workers)


cli.command()(push)
cli.command("import")(import_events)
cli.command()(tail)


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
