"""Ingest: a batch of stream entries → L2 (one transaction) → L1 → (the consumer acks).

The order is what makes at-least-once delivery safe: rows are committed with idempotent inserts
keyed on event ids, working memory is updated with an idempotent script, and only then does the
consumer XACK. A crash anywhere before the ack replays the batch with no visible effect.
"""

from __future__ import annotations

import hashlib
import logging
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import redis
from sqlalchemy import Engine

from app.config import Settings
from app.db.session import app_engine, set_tenant, unit_of_work
from app.layers.episodic import repository as episodic
from app.layers.episodic.sessions import TurnRef, assign_sessions, session_window
from app.layers.meta import repository as meta
from app.layers.working.store import WorkingMemoryStore, WorkingTurn
from app.streams.consumer import StreamEntry
from app.streams.events import Event, EventValidationError, TurnEvent, parse_event_json
from app.text.injection import instruction_flags
from app.text.tokens import count_many, count_tokens

_log = logging.getLogger(__name__)

# The user is about to ask something, or has moved: guess what they will need.
PREFETCH_TRIGGERS = ("typing_start", "channel_switch")


@dataclass
class IngestResult:
    turns_seen: int = 0
    turns_inserted: int = 0
    events_seen: int = 0
    events_inserted: int = 0
    # (tenant, user) → ids of turns stored by this batch (not the replayed ones).
    new_turns: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    # tenant → every user with a turn in the batch, replays included: what follows (scoring)
    # picks the users' unscored turns itself, so a replay after a lost dispatch still counts.
    turn_users: dict[str, set[str]] = field(default_factory=dict)
    # (tenant, user, channel) of typing_start / channel_switch events: prefetch for them.
    prefetch: set[tuple[str, str, str | None]] = field(default_factory=set)


def user_lock_key(tenant_id: str, user_id: str) -> int:
    digest = hashlib.blake2b(f"{tenant_id}\x1f{user_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def _decode_entries(entries: Sequence[StreamEntry]) -> list[tuple[StreamEntry, Event]]:
    decoded = []
    for entry in entries:
        raw = entry.fields.get("event")
        if raw is None:
            raise EventValidationError(f"stream entry {entry.entry_id} has no 'event' field", [])
        decoded.append((entry, parse_event_json(raw)))
    return decoded


def _turn_row(event: TurnEvent, session_id: Any, entry_id: str, tokens: int) -> dict[str, Any]:
    return {
        "id": event.id,
        "tenant_id": event.tenant_id,
        "user_id": event.user_id,
        "session_id": session_id,
        "external_id": event.external_id,
        "role": event.role,
        "speaker": event.speaker,
        "agent_id": event.agent_id,
        "content": event.content,
        "channel": event.channel,
        "occurred_at": event.timestamp,
        "token_count": tokens,
        "metadata": event.metadata,
        "flags": instruction_flags(event.content),
        "stream_entry_id": entry_id,
    }


def _event_row(event: Event, entry_id: str) -> dict[str, Any]:
    payload = event.model_dump(
        mode="json",
        exclude={"type", "tenant_id", "user_id", "event_id", "timestamp", "channel"},
    )
    return {
        "id": event.id,
        "tenant_id": event.tenant_id,
        "user_id": event.user_id,
        "type": event.type,
        "known_type": not hasattr(event, "payload"),
        "channel": event.channel,
        "occurred_at": event.timestamp,
        "payload": payload,
        "stream_entry_id": entry_id,
    }


class IngestService:
    """The consumer's batch handler for the `ingest` group."""

    def __init__(
        self,
        *,
        client: redis.Redis,
        settings: Settings,
        engine: Engine | None = None,
        on_committed: Callable[[IngestResult], None] | None = None,
    ) -> None:
        self.settings = settings
        self.engine = engine or app_engine(settings)
        self.working = WorkingMemoryStore(client, settings)
        self.on_committed = on_committed
        self._known_tenants: set[str] = set()
        self._token_counts: dict[Any, int] = {}

    def __call__(self, entries: Sequence[StreamEntry]) -> None:
        self.handle(entries)

    def handle(self, entries: Sequence[StreamEntry]) -> IngestResult:
        decoded = _decode_entries(entries)
        turns = [event for _, event in decoded if isinstance(event, TurnEvent)]
        # One tokenizer call for the batch (parallel in Rust): L2 and L1 both need the counts.
        self._token_counts = dict(
            zip([t.id for t in turns], count_many([t.content for t in turns]), strict=True)
        )
        result = self.persist(decoded)
        result.prefetch = {
            (event.tenant_id, event.user_id, event.channel)
            for _, event in decoded
            if event.type in PREFETCH_TRIGGERS
        }
        self.update_working_memory(decoded)
        if self.on_committed is not None:
            self.on_committed(result)
        return result

    def _tokens(self, event: TurnEvent) -> int:
        """Counted once per turn and batch: L2 and L1 both need it."""
        counts = self._token_counts
        if event.id not in counts:
            counts[event.id] = count_tokens(event.content)
        return counts[event.id]

    def persist(self, decoded: Sequence[tuple[StreamEntry, Event]]) -> IngestResult:
        """Write the whole batch to L2 in one transaction, one RLS scope per tenant."""
        by_tenant: dict[str, list[tuple[StreamEntry, Event]]] = defaultdict(list)
        for entry, event in decoded:
            by_tenant[event.tenant_id].append((entry, event))
        result = IngestResult()
        idle = timedelta(seconds=self.settings.session_idle_timeout_s)
        with unit_of_work(engine=self.engine) as session:
            episodic.lock_users(
                session=session,
                keys=[user_lock_key(e.tenant_id, e.user_id) for _, e in decoded],
            )
            fresh = set(by_tenant) - self._known_tenants
            if fresh:
                meta.register_tenants(session=session, tenant_ids=fresh)
            for tenant_id, items in sorted(by_tenant.items()):
                set_tenant(session, tenant_id)
                turns = [(en, ev) for en, ev in items if isinstance(ev, TurnEvent)]
                others = [(en, ev) for en, ev in items if not isinstance(ev, TurnEvent)]
                if turns:
                    self._persist_turns(session, tenant_id, turns, idle, result)
                if others:
                    result.events_seen += len(others)
                    result.events_inserted += episodic.insert_events(
                        session=session, rows=[_event_row(ev, en.entry_id) for en, ev in others]
                    )
        self._known_tenants |= fresh
        return result

    def _persist_turns(
        self,
        session: Any,
        tenant_id: str,
        turns: list[tuple[StreamEntry, TurnEvent]],
        idle: timedelta,
        result: IngestResult,
    ) -> None:
        times = [ev.timestamp for _, ev in turns]
        users = sorted({ev.user_id for _, ev in turns})
        lo, hi = session_window(times, idle)
        existing = episodic.sessions_around(
            session=session,
            tenant_id=tenant_id,
            user_ids=users,
            lo=lo,
            hi=hi,
        )
        refs = [TurnRef(ev.id, ev.user_id, ev.timestamp, ev.channel) for _, ev in turns]
        assignment = assign_sessions(refs, existing, idle)
        mapping = assignment.mapping
        episodic.upsert_sessions(session=session, tenant_id=tenant_id, spans=assignment.touched)
        episodic.merge_sessions(session=session, merged=assignment.merged)
        # One batch may carry the same turn twice (a producer retry): keep the first.
        rows: dict[Any, dict[str, Any]] = {}
        for entry, event in turns:
            if event.id not in rows:
                rows[event.id] = _turn_row(
                    event, mapping[event.id], entry.entry_id, self._tokens(event)
                )
        inserted = episodic.insert_turns(session=session, rows=list(rows.values()))
        counts: dict[Any, int] = defaultdict(int)
        for _turn_id, session_id in inserted:
            counts[session_id] += 1
        episodic.add_turn_counts(session=session, counts=dict(counts))
        result.turns_seen += len(turns)
        result.turn_users.setdefault(tenant_id, set()).update(users)
        result.turns_inserted += len(inserted)
        user_of = {ev.id: ev.user_id for _, ev in turns}
        for turn_id, _ in inserted:
            result.new_turns.setdefault((tenant_id, user_of[turn_id]), []).append(str(turn_id))

    def update_working_memory(self, decoded: Sequence[tuple[StreamEntry, Event]]) -> None:
        """Push every turn of the batch (replays included: the store ignores what it has)."""
        batches: dict[tuple[str, str], list[WorkingTurn]] = defaultdict(list)
        seen: set[str] = set()
        for _, event in decoded:
            if not isinstance(event, TurnEvent) or str(event.id) in seen:
                continue
            seen.add(str(event.id))
            batches[(event.tenant_id, event.user_id)].append(
                WorkingTurn(
                    id=str(event.id),
                    role=event.role,
                    speaker=event.speaker or event.role,
                    channel=event.channel,
                    content=event.content,
                    tokens=self._tokens(event),
                    at=event.timestamp,
                )
            )
        self.working.push(batches)
