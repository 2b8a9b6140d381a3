"""`engram demo`: the capture path end to end, on whatever machine this is.

The worker's banner, warnings and task log go to a file (named in the output), not between the
demo's tables; the API key the demo mints for its recall step is revoked before it ends.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from engram_memory_client import EngramClient
from rich.console import Console
from rich.table import Table
from sqlalchemy import func, select, text

from app.cli.sample import TENANT, sample_events, sample_turn_count
from app.cli.supervisor import (
    ProcessGroup,
    ensure_services,
    sigterm_as_interrupt,
    upgrade_and_announce,
    worker_command,
)
from app.config import Settings, get_settings
from app.db.session import unit_of_work
from app.layers.conceptual.models import Entity
from app.layers.episodic.models import RawEvent, Session, Turn
from app.layers.semantic.models import Memory
from app.layers.working.store import WorkingMemoryStore
from app.redis_client import get_redis
from app.services.extraction import claim
from app.streams.producer import EventProducer
from tasks.extract import run_chain


def _stored_turns() -> int:
    with unit_of_work(TENANT) as session:
        return int(
            session.scalar(
                select(func.count()).select_from(Turn).where(Turn.external_id.like("sample-%"))
            )
            or 0
        )


def _show_l2(console: Console) -> None:
    with unit_of_work(TENANT) as session:
        sessions = session.execute(
            select(Session).where(Session.tenant_id == TENANT).order_by(Session.started_at)
        ).scalars()
        table = Table(
            "session",
            "user",
            "started",
            "last turn",
            "turns",
            "channels",
            title="L2 episodic sessions (cut at 30 min of silence)",
        )
        for s in sessions:
            table.add_row(
                str(s.id)[:8],
                s.user_id,
                f"{s.started_at:%Y-%m-%d %H:%M}",
                f"{s.last_turn_at:%H:%M}",
                str(s.turn_count),
                ",".join(s.channels),
            )
        console.print(table)
        turns = session.execute(
            select(Turn).where(Turn.tenant_id == TENANT).order_by(Turn.occurred_at)
        ).scalars()
        table = Table(
            "when",
            "session",
            "user",
            "channel",
            "role",
            "content",
            title="L2 episodic turns (the raw trace)",
        )
        for t in turns:
            table.add_row(
                f"{t.occurred_at:%m-%d %H:%M}",
                str(t.session_id)[:8],
                t.user_id,
                t.channel,
                t.role,
                t.content[:70],
            )
        console.print(table)
        events = session.execute(
            select(RawEvent.type, func.count())
            .where(RawEvent.tenant_id == TENANT)
            .group_by(RawEvent.type)
            .order_by(RawEvent.type)
        ).all()
        console.print("L2 raw events: " + ", ".join(f"{kind}: {n}" for kind, n in events))


def _show_l1(console: Console, store: WorkingMemoryStore) -> None:
    for user in ("alice", "bob"):
        memory = store.read(TENANT, user)
        if memory is None:
            console.print(f"L1 working memory of {user}: (empty)")
            continue
        table = Table(
            "when",
            "channel",
            "speaker",
            "tokens",
            "content",
            title=f"L1 working memory of {user}: {len(memory.turns)} turns, "
            f"{memory.token_count} tokens",
        )
        for turn in memory.turns:
            table.add_row(
                f"{turn.at:%m-%d %H:%M}",
                turn.channel,
                turn.speaker,
                str(turn.tokens),
                turn.content[:70],
            )
        console.print(table)


def _open_batches() -> tuple[int, int]:
    with unit_of_work(TENANT) as session:
        pending = session.execute(
            text(
                "SELECT (SELECT count(*) FROM episodic.turns WHERE extraction_batch_id IS NULL),"
                " (SELECT count(*) FROM semantic.extraction_batches"
                "  WHERE state NOT IN ('stored', 'failed'))"
            )
        ).one()
    return int(pending[0]), int(pending[1])


def _wait_for_memories(settings: Settings, deadline: float) -> bool:
    """Until every sample turn is extracted; leftovers under the N-turn trigger are claimed
    by the idle trigger as soon as the worker has scored them."""
    while (pending := _open_batches()) != (0, 0):
        if time.monotonic() > deadline:
            return False
        unclaimed, open_batches = pending
        if unclaimed and not open_batches:
            run_chain(claim(settings, TENANT, {"alice": "idle", "bob": "idle"}))
        time.sleep(0.3)
    return True


def _show_l3_l4(console: Console) -> None:
    with unit_of_work(TENANT) as session:
        memories = session.execute(
            select(Memory).where(Memory.tenant_id == TENANT).order_by(Memory.occurred_at)
        ).scalars()
        table = Table(
            "user",
            "kind",
            "importance",
            "valid",
            "memory (self-contained)",
            title="L3 semantic memories (gems)",
        )
        for m in memories:
            table.add_row(
                m.user_id,
                m.kind,
                f"{m.importance:.2f}",
                "now" if m.valid_to is None else "superseded",
                m.content[:90],
            )
        console.print(table)
        entities = session.execute(
            select(Entity.user_id, Entity.name, Entity.kind, Entity.mention_count)
            .where(Entity.tenant_id == TENANT)
            .order_by(Entity.mention_count.desc(), Entity.name)
        ).all()
        console.print(
            "L4 entities: "
            + ", ".join(f"{name} ({kind}, {n})" for _, name, kind, n in entities[:20])
        )


def _show_recall(console: Console, settings: Settings) -> None:
    """Recall through the public surface: the REST API (served in this process) and the SDK."""
    import threading

    import uvicorn

    from app.api.app import create_app
    from app.services.tenants import mint_key, revoke_key

    server = uvicorn.Server(
        uvicorn.Config(create_app(settings), host="127.0.0.1", port=0, log_level="warning")
    )
    threading.Thread(target=server.run, daemon=True).start()
    deadline = time.monotonic() + 60
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    minted = mint_key(TENANT, "demo")
    console.print(
        f"   API on http://127.0.0.1:{port}, a key for tenant '{TENANT}' (revoked at the end)"
    )
    try:
        with EngramClient(f"http://127.0.0.1:{port}", minted.key) as engram:
            _recall_through(console, engram)
    finally:
        revoke_key(minted.id)
        server.should_exit = True


def _recall_through(console: Console, engram: EngramClient) -> None:
    query = "what did we decide about the offsite budget?"
    found = engram.search("alice", query, limit=3)
    table = Table("score", "layer", "when", "what", "turns", title=f"search: {query}")
    for hit in found.hits:
        table.add_row(
            f"{hit.score:.3f}",
            hit.layer,
            f"{hit.occurred_at:%Y-%m-%d}",
            hit.content[:70],
            ", ".join(hit.source_turn_ids),
        )
    console.print(table)
    top = found.hits[0] if found.hits else None
    if top is not None and (top.layer == "memory" or top.memories):
        memory = engram.get_memory(
            top.id if top.layer == "memory" else top.memories[0].id, recall=1
        )
        console.print(f"   total recall of “{memory.content[:70]}” (its turns ± 1):")
        for turn in memory.recall or []:
            mark = "▶" if turn.is_source else " "
            console.print(f"   {mark} [{turn.occurred_at:%H:%M}] {turn.role}: {turn.content}")
    question = "Which restaurants should I shortlist?"
    context = engram.context("alice", question, token_budget=160)
    console.print(
        f"   context for '{question}' "
        f"({context.tokens}/{context.token_budget} tokens, prefetch {context.prefetch}):"
    )
    console.print(context.text, markup=False, highlight=False)


def _start_worker(group: ProcessGroup, log: Path) -> None:
    """A worker whose banner, warnings and log go to `log`, not between the demo's tables;
    the group stops it like any other process."""
    log.parent.mkdir(parents=True, exist_ok=True)
    command = worker_command(queues=("ingest", "extract", "embed"), concurrency=2, consumers=1)
    with log.open("ab") as sink:
        process = subprocess.Popen(
            command, stdout=sink, stderr=subprocess.STDOUT, env={**os.environ}
        )
    group.processes.append(process)


@sigterm_as_interrupt()
def run_demo(console: Console, *, timeout: float) -> int:
    settings = get_settings()
    console.rule("Engram demo: from turns to memories")
    console.print("1. services (embedded Postgres/Redis unless DATABASE_URL/REDIS_URL are set)")
    services = ensure_services(settings)
    group = ProcessGroup()
    try:
        console.print("2. migrations: alembic upgrade head")
        upgrade_and_announce()
        log = settings.data_dir / "demo-worker.log"
        console.print(
            f"3. a Celery worker: stream consumer + extraction and embedding tasks (its log: {log})"
        )
        _start_worker(group, log)
        console.print("4. pushing the sample conversation through the streams")
        client = get_redis(settings)
        events = sample_events()
        started = time.perf_counter()
        receipts = EventProducer(client, settings).send_many(events)
        console.print(
            f"   {len(receipts)} events sent in {(time.perf_counter() - started) * 1000:.1f} ms"
        )
        deadline = time.monotonic() + timeout
        while _stored_turns() < sample_turn_count():
            if time.monotonic() > deadline:
                console.print("[red]the sample did not arrive in L2 in time[/red]")
                return 1
            time.sleep(0.2)
        console.print(
            f"   all {sample_turn_count()} turns committed after "
            f"{time.perf_counter() - started:.2f} s\n"
        )
        _show_l2(console)
        _show_l1(console, WorkingMemoryStore(client, settings))
        console.print("5. extraction: N-turn trigger already fired; firing the idle trigger now")
        if not _wait_for_memories(settings, time.monotonic() + timeout):
            console.print("[red]extraction did not finish in time[/red]")
            return 1
        _show_l3_l4(console)
        console.print("6. recall through the REST API and the Python SDK")
        _show_recall(console, settings)
        console.print("\nRe-running the demo re-sends the same events; nothing is stored twice.")
        return 0
    finally:
        group.stop()
        services.stop()
