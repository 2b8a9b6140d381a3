"""`engram demo`: the capture path end to end, on whatever machine this is."""

from __future__ import annotations

import time

from rich.console import Console
from rich.table import Table
from sqlalchemy import func, select, text

from app.cli.sample import TENANT, sample_events, sample_turn_count
from app.cli.supervisor import ProcessGroup, ensure_services, worker_command
from app.config import Settings, get_settings
from app.db.migrate import upgrade
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
    from app.client import EngramClient
    from app.services.tenants import mint_key

    server = uvicorn.Server(
        uvicorn.Config(create_app(settings), host="127.0.0.1", port=0, log_level="warning")
    )
    threading.Thread(target=server.run, daemon=True).start()
    deadline = time.monotonic() + 60
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    key = mint_key(TENANT, "demo").key
    console.print(f"   API on http://127.0.0.1:{port}, a fresh key for tenant '{TENANT}'")
    try:
        with EngramClient(f"http://127.0.0.1:{port}", key) as engram:
            query = "what did we decide about the offsite budget?"
            found = engram.search("alice", query, limit=3)
            table = Table(
                "score", "layer", "when", "memory", "from turns", title=f"search: {query}"
            )
            for hit in found.hits:
                table.add_row(
                    f"{hit.score:.3f}",
                    hit.layer,
                    f"{hit.occurred_at:%Y-%m-%d}",
                    hit.content[:70],
                    ", ".join(hit.source_turn_ids),
                )
            console.print(table)
            if found.hits and found.hits[0].layer == "memory":
                memory = engram.get_memory(found.hits[0].id, recall=1)
                console.print("   total recall of the top memory (its turns ± 1):")
                for turn in memory.recall or []:
                    mark = "▶" if turn.is_source else " "
                    console.print(
                        f"   {mark} [{turn.occurred_at:%H:%M}] {turn.role}: {turn.content}"
                    )
            context = engram.context(
                "alice", "Which restaurants should I shortlist?", token_budget=160
            )
            console.print(
                f"   context for 'Which restaurants should I shortlist?' "
                f"({context.tokens}/{context.token_budget} tokens, prefetch {context.prefetch}):"
            )
            console.print(context.text, markup=False, highlight=False)
    finally:
        server.should_exit = True


def run_demo(console: Console, *, timeout: float) -> int:
    settings = get_settings()
    console.rule("Engram demo: from turns to memories")
    console.print("1. services (embedded Postgres/Redis unless DATABASE_URL/REDIS_URL are set)")
    services = ensure_services(settings)
    group = ProcessGroup()
    try:
        console.print("2. migrations: alembic upgrade head")
        upgrade()
        console.print("3. a Celery worker: stream consumer + extraction and embedding tasks")
        group.start(
            worker_command(queues=("ingest", "extract", "embed"), concurrency=2, consumers=1)
        )
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
