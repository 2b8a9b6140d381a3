"""Ingest: a batch of stream entries → L2 (one transaction) → L1 → (the consumer acks).

The order is what makes at-least-once delivery safe: rows are committed with idempotent inserts
keyed on event ids, working memory is updated with an idempotent script, and only then does the
consumer XACK. A crash anywhere before the ack replays the batch with no visible effect.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
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
from app.layers.episodic.message_order import arrival_key
from app.layers.episodic.sessions import TurnRef, assign_sessions, session_window
from app.layers.meta import repository as meta
from app.layers.working.store import WorkingMemoryStore, WorkingTurn
from app.streams.consumer import StreamEntry
from app.streams.events import Event, EventValidationError, TurnEvent, parse_event_json
from app.text.injection import instruction_flags
from app.text.tokens import count_many

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


@dataclass(slots=True)
class _Turn:
    """A turn of the batch with what L2 and L1 both need, worked out once."""

    entry_id: str
    event: TurnEvent
    event_id: uuid.UUID
    id: str
    tokens: int


def _turns(decoded: Sequence[tuple[StreamEntry, Event]]) -> list[_Turn]:
    """The batch's turns, counted in one tokenizer call."""
    found = [(entry, event) for entry, event in decoded if isinstance(event, TurnEvent)]
    counts = count_many([event.content for _, event in found])
    return [
        _Turn(entry.entry_id, event, event.id, str(event.id), tokens)
        for (entry, event), tokens in zip(found, counts, strict=True)
    ]


def _turn_row(
    event: TurnEvent, session_id: Any, entry_id: str, tokens: int, turn_id: str | None = None
) -> dict[str, Any]:
    """One episodic.turns row (`turn_id`: the event id as text, when the caller has it)."""
    return {
        "id": event.id if turn_id is None else turn_id,
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

    def __call__(self, entries: Sequence[StreamEntry]) -> None:
        self.handle(entries)

    def handle(self, entries: Sequence[StreamEntry]) -> IngestResult:
        decoded = _decode_entries(entries)
        turns = _turns(decoded)
        others = [(entry, event) for entry, event in decoded if not isinstance(event, TurnEvent)]
        result = self.persist(turns, others)
        result.prefetch = {
            (event.tenant_id, event.user_id, event.channel)
            for _, event in others
            if event.type in PREFETCH_TRIGGERS
        }
        self.update_working_memory(turns)
        if self.on_committed is not None:
            self.on_committed(result)
        return result

    def persist(
        self, turns: Sequence[_Turn], others: Sequence[tuple[StreamEntry, Event]]
    ) -> IngestResult:
        """Write the whole batch to L2 in one transaction, one RLS scope per tenant."""
        turns_of: dict[str, list[_Turn]] = defaultdict(list)
        others_of: dict[str, list[tuple[StreamEntry, Event]]] = defaultdict(list)
        for turn in turns:
            turns_of[turn.event.tenant_id].append(turn)
        for entry, event in others:
            others_of[event.tenant_id].append((entry, event))
        users = {(t.event.tenant_id, t.event.user_id) for t in turns}
        users.update((event.tenant_id, event.user_id) for _, event in others)
        result = IngestResult()
        idle = timedelta(seconds=self.settings.session_idle_timeout_s)
        with unit_of_work(engine=self.engine) as session:
            episodic.lock_users(session=session, keys=[user_lock_key(*user) for user in users])
            fresh = (turns_of.keys() | others_of.keys()) - self._known_tenants
            if fresh:
                meta.register_tenants(session=session, tenant_ids=fresh)
            for tenant_id in sorted(turns_of.keys() | others_of.keys()):
                set_tenant(session, tenant_id)
                if tenant_id in turns_of:
                    self._persist_turns(session, tenant_id, turns_of[tenant_id], idle, result)
                if tenant_id in others_of:
                    rows = [_event_row(ev, en.entry_id) for en, ev in others_of[tenant_id]]
                    result.events_seen += len(rows)
                    result.events_inserted += episodic.insert_events(session=session, rows=rows)
        self._known_tenants |= fresh
        return result

    def _persist_turns(
        self,
        session: Any,
        tenant_id: str,
        turns: list[_Turn],
        idle: timedelta,
        result: IngestResult,
    ) -> None:
        users = sorted({t.event.user_id for t in turns})
        lo, hi = session_window([t.event.timestamp for t in turns], idle)
        existing = episodic.sessions_around(
            session=session,
            tenant_id=tenant_id,
            user_ids=users,
            lo=lo,
            hi=hi,
        )
        refs = [
            TurnRef(t.event_id, t.event.user_id, t.event.timestamp, t.event.channel) for t in turns
        ]
        assignment = assign_sessions(refs, existing, idle)
        mapping = assignment.mapping
        episodic.upsert_sessions(session=session, tenant_id=tenant_id, spans=assignment.touched)
        episodic.merge_sessions(session=session, merged=assignment.merged)
        # One batch may carry the same turn twice (a producer retry): keep the first.
        session_ids = {sid: str(sid) for sid in set(mapping.values())}
        rows: dict[str, dict[str, Any]] = {}
        for t in turns:
            if t.id not in rows:
                sid = session_ids[mapping[t.event_id]]
                rows[t.id] = _turn_row(t.event, sid, t.entry_id, t.tokens, t.id)
        inserted = episodic.insert_turns(session=session, rows=list(rows.values()))
        counts: dict[Any, int] = defaultdict(int)
        user_of = {t.id: t.event.user_id for t in turns}
        for turn_id, session_id in inserted:
            counts[session_id] += 1
            key = str(turn_id)
            result.new_turns.setdefault((tenant_id, user_of[key]), []).append(key)
        episodic.add_turn_counts(session=session, counts=dict(counts))
        result.turns_seen += len(turns)
        result.turn_users.setdefault(tenant_id, set()).update(users)
        result.turns_inserted += len(inserted)

    def update_working_memory(self, turns: Sequence[_Turn]) -> None:
        """Push every turn of the batch (replays included: the store ignores what it has)."""
        batches: dict[tuple[str, str], list[WorkingTurn]] = defaultdict(list)
        seen: set[str] = set()
        for turn in turns:
            if turn.id in seen:
                continue
            seen.add(turn.id)
            event = turn.event
            batches[(event.tenant_id, event.user_id)].append(
                WorkingTurn(
                    id=turn.id,
                    role=event.role,
                    speaker=event.speaker or event.role,
                    channel=event.channel,
                    content=event.content,
                    tokens=turn.tokens,
                    at=event.timestamp,
                    arrival=arrival_key(turn.entry_id),
                )
            )
        self.working.push(batches)
