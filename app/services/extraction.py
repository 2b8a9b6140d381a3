"""From turns to memories: triggers claim batches; extract → embed → store runs per batch.

A batch is one user's claimed turns; a stored batch claims the user's next (`drain`), at most
MAX_IN_FLIGHT at once. Claiming marks the turns (episodic.turns.extraction_batch_id) with
`FOR UPDATE SKIP LOCKED`, so whichever triggers fire, and however many workers race, every
turn is extracted exactly once. Each step checks the batch's state before doing anything, so
a redelivered or retried step is a no-op; a failing batch records its error and attempts and
never stops the other users' batches; beat retries it later.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from app.config import Settings
from app.db.session import unit_of_work
from app.embedding.base import Embedder
from app.extraction.base import (
    Extractor,
    Gem,
    SourceTurn,
    embedding_text,
    gem_from_dict,
    gem_to_dict,
)
from app.layers.conceptual.service import record_entities
from app.layers.episodic import repository as episodic
from app.layers.meta.repository import list_tenants
from app.layers.semantic import repository as semantic
from app.layers.semantic.service import store_gems
from app.layers.working.store import WorkingMemoryStore
from app.services.ingest import user_lock_key
from app.services.jobs import lock_key
from app.text.tokens import count_tokens

_log = logging.getLogger(__name__)

BatchRef = tuple[str, str]  # (tenant id, batch id) — what tasks pass around
STORABLE = ("extracted", "embedded")
CONTEXT_TURNS = 50


@dataclass(frozen=True)
class StepReport:
    done: int = 0
    skipped: int = 0
    failed: int = 0
    gems: int = 0


def _source(row: Any) -> SourceTurn:
    return SourceTurn(
        id=str(row.id),
        external_id=row.external_id,
        role=row.role,
        speaker=row.speaker or row.role,
        content=row.content,
        channel=row.channel,
        at=row.occurred_at,
    )


# -- triggers ------------------------------------------------------------------------------

MAX_IN_FLIGHT = 2  # batches of one user on their way through the chain at once
CLAIM_CHUNK = 100  # users per claim transaction (each holds one advisory lock per user)


def claim(
    settings: Settings, tenant_id: str, triggers: dict[str, str], *, bounded: bool = False
) -> list[BatchRef]:
    """Claim a batch for each user → trigger; users with nothing left to claim get none."""
    return [ref for ref, _ in claim_batches(settings, tenant_id, triggers, bounded=bounded)]


def claim_batches(
    settings: Settings, tenant_id: str, triggers: dict[str, str], *, bounded: bool = False
) -> list[tuple[BatchRef, int]]:
    """(batch, turns) claimed, one batch per user; `bounded`: none for a user who already
    has MAX_IN_FLIGHT batches in flight.

    Bounded are the triggers that fire while a user is busy: N-turn and context (every ingest
    batch of an import), drain (every stored batch) and flush; else a backlog fans out into a
    chain per trigger. A user's batches are safe together (claims are exclusive, store takes
    the user's lock) but pointless beyond two: one extracting while the other is embedded or
    stored keeps the user's pipeline busy; more queue on the store lock and crowd out other
    users. A trigger at the bound loses nothing: the batch in flight claims the next when
    stored, reading what was scored meanwhile. The claim lock makes check and claim atomic.
    Batches after a failed attempt or stale (beat's to retry) do not count: one bad batch
    must not stop the user's other turns. The idle sweep is not bounded (nothing runs then).

    A batch takes up to `extract_max_batch_turns` turns, and the N - 1 after those too when
    that empties the user (fewer than N left over would wait for the idle timeout)."""
    users = sorted(triggers)
    fresh_after = datetime.now(UTC) - timedelta(seconds=settings.extract_retry_after_s)
    claimed: list[tuple[BatchRef, int]] = []
    for at in range(0, len(users), CLAIM_CHUNK):
        chunk = users[at : at + CLAIM_CHUNK]
        with unit_of_work(tenant_id, all_agents=True) as session:
            busy: dict[str, int] = {}
            if bounded:
                # Not the user lock store holds: claims never wait for a store.
                keys = [lock_key("extraction.claim", tenant_id, u) for u in chunk]
                episodic.lock_users(session=session, keys=keys)
                busy = semantic.fresh_in_flight_counts(
                    session=session, tenant_id=tenant_id, user_ids=chunk, updated_after=fresh_after
                )
            for user_id in chunk:
                if busy.get(user_id, 0) >= MAX_IN_FLIGHT:
                    continue
                batch_id = uuid.uuid4()
                turns = episodic.claim_turns(
                    session=session,
                    tenant_id=tenant_id,
                    user_id=user_id,
                    batch_id=batch_id,
                    limit=settings.extract_max_batch_turns,
                    tail=settings.extract_after_turns - 1,
                )
                if not turns:
                    continue
                semantic.create_batch(
                    session=session,
                    batch_id=batch_id,
                    tenant_id=tenant_id,
                    user_id=user_id,
                    trigger=triggers[user_id],
                )
                semantic.set_batch_turn_count(session=session, batch_id=batch_id, count=len(turns))
                claimed.append(((tenant_id, str(batch_id)), len(turns)))
    return claimed


@dataclass(frozen=True)
class Drain:
    """After a stored batch: the next batches, and tenant → users to score again."""

    batches: list[BatchRef]
    score: dict[str, list[str]]


def drain(settings: Settings, refs: Sequence[BatchRef]) -> Drain:
    """After these batches went through the chain, claim the next batch of each of their
    users still holding N scored, unclaimed turns (within MAX_IN_FLIGHT): a backlog drains as
    fast as the workers go. Claims take scored turns only; unscored ones block nothing: their
    scoring task claims once it committed (at the bound, the batch then in flight does when
    stored, its store committing after that check). Were that task lost (beat's sweep rescues
    such turns a minute later), users left with unscored turns and too few scored are scored
    again."""
    tenants: dict[str, list[uuid.UUID]] = {}
    for tenant_id, batch_id in refs:
        tenants.setdefault(tenant_id, []).append(uuid.UUID(batch_id))
    batches: list[BatchRef] = []
    score: dict[str, list[str]] = {}
    for tenant_id, batch_ids in sorted(tenants.items()):
        with unit_of_work(tenant_id, all_agents=True) as session:
            users = semantic.users_of_batches(session=session, batch_ids=batch_ids)
            if not users:
                continue
            counts = episodic.unextracted_counts(
                session=session, tenant_id=tenant_id, user_ids=users
            )
            unscored = episodic.unscored_counts(
                session=session, tenant_id=tenant_id, user_ids=users
            )
        due = {u: "drain" for u in users if counts.get(u, (0,))[0] >= settings.extract_after_turns}
        batches += claim(settings, tenant_id, due, bounded=True)
        waiting = [u for u in users if u not in due and unscored.get(u)]
        if waiting:
            score[tenant_id] = waiting
    return Drain(batches, score)


def due_triggers(
    settings: Settings, store: WorkingMemoryStore, tenant_id: str, user_ids: Sequence[str]
) -> dict[str, str]:
    """Users whose unclaimed turns reached N, or whose working memory is filling up."""
    with unit_of_work(tenant_id, all_agents=True) as session:
        counts = episodic.unextracted_counts(
            session=session, tenant_id=tenant_id, user_ids=user_ids
        )
    due: dict[str, str] = {}
    for user_id, (count, _) in counts.items():
        if count >= settings.extract_after_turns:
            due[user_id] = "turns"
            continue
        memory = store.token_count(tenant_id, user_id)
        if memory >= settings.extract_context_usage * settings.context_window_tokens:
            due[user_id] = "context"
    return due


def claim_due(
    settings: Settings, store: WorkingMemoryStore, tenant_id: str, user_ids: Sequence[str]
) -> list[BatchRef]:
    """The N-turn and context-usage triggers of these users, claimed within the bound."""
    due = due_triggers(settings, store, tenant_id, user_ids)
    return claim(settings, tenant_id, due, bounded=True)


def tenants() -> list[str]:
    with unit_of_work() as session:
        return list_tenants(session=session)


def idle_batches(settings: Settings, *, now: datetime | None = None) -> list[BatchRef]:
    """The idle-timeout trigger, for beat: users silent for `extract_idle_s` with leftovers."""
    before = (now or datetime.now(UTC)) - timedelta(seconds=settings.extract_idle_s)
    refs: list[BatchRef] = []
    for tenant_id in tenants():
        with unit_of_work(tenant_id, all_agents=True) as session:
            users = episodic.idle_unextracted_users(
                session=session, tenant_id=tenant_id, idle_before=before, limit=1000
            )
        if users:
            refs += claim(settings, tenant_id, dict.fromkeys(users, "idle"))
    return refs


def unscored_users(
    tenant_id: str, *, older_than_s: float = 60, now: datetime | None = None
) -> list[str]:
    """Users with turns still unscored a while after arrival (their scoring task was lost)."""
    before = (now or datetime.now(UTC)) - timedelta(seconds=older_than_s)
    with unit_of_work(tenant_id, all_agents=True) as session:
        return episodic.users_with_unscored(
            session=session, tenant_id=tenant_id, received_before=before, limit=1000
        )


def stale_batches(settings: Settings, *, now: datetime | None = None) -> list[BatchRef]:
    """Batches that failed or stalled, for beat to run through the chain again."""
    before = (now or datetime.now(UTC)) - timedelta(seconds=settings.extract_retry_after_s)
    refs: list[BatchRef] = []
    for tenant_id in tenants():
        with unit_of_work(tenant_id, all_agents=True) as session:
            rows = semantic.stale_batches(
                session=session, older_than=before, max_attempts=settings.extract_max_attempts
            )
        refs += [(tenant_id, str(r.id)) for r in rows]
    return refs


# -- the three steps -----------------------------------------------------------------------


def _fail(settings: Settings, ref: BatchRef, exc: BaseException) -> None:
    _log.exception("extraction batch %s failed", ref[1])
    with unit_of_work(ref[0], all_agents=True) as session:
        semantic.record_failure(
            session=session,
            batch_id=uuid.UUID(ref[1]),
            error=f"{type(exc).__name__}: {exc}",
            max_attempts=settings.extract_max_attempts,
        )


def _context(settings: Settings, rows: list[Any]) -> list[SourceTurn]:
    """Newest context first until the token cap, returned oldest first."""
    kept: list[SourceTurn] = []
    budget = settings.extract_context_tokens
    for row in rows:
        cost = count_tokens(row.content)
        if cost > budget:
            break
        budget -= cost
        kept.append(_source(row))
    return list(reversed(kept))


def extract(settings: Settings, extractor: Extractor, refs: Sequence[BatchRef]) -> StepReport:
    done = skipped = failed = gems = 0
    for ref in refs:
        try:
            batch_id = uuid.UUID(ref[1])
            with unit_of_work(ref[0], all_agents=True) as session:
                batch = semantic.get_batch(session=session, batch_id=batch_id)
                if batch is None or batch.state != "claimed":
                    skipped += 1
                    continue
                turns = [
                    _source(r) for r in episodic.batch_turns(session=session, batch_id=batch_id)
                ]
                context_rows = (
                    episodic.context_before(
                        session=session,
                        tenant_id=ref[0],
                        user_id=batch.user_id,
                        before=turns[0].at,
                        limit=CONTEXT_TURNS,
                    )
                    if turns
                    else []
                )
            found = extractor.extract(batch=turns, context=_context(settings, context_rows))
            for gem in found:
                gem.metadata.setdefault("extractor", extractor.name)
            with unit_of_work(ref[0], all_agents=True) as session:
                current = semantic.get_batch(session=session, batch_id=batch_id, lock=True)
                if current is None or current.state != "claimed":
                    skipped += 1
                    continue
                semantic.advance_batch(
                    session=session,
                    batch_id=batch_id,
                    state="extracted",
                    gems=[gem_to_dict(g) for g in found],
                )
            done += 1
            gems += len(found)
        except Exception as exc:  # one user's batch must not stop the others
            failed += 1
            _fail(settings, ref, exc)
    return StepReport(done, skipped, failed, gems)


def _gems(batch: Any) -> list[Gem]:
    return [gem_from_dict(g) for g in batch.gems]


def _vectors(embedder: Embedder, batch: Any) -> list[list[float]]:
    return embedder.embed([embedding_text(g) for g in _gems(batch)]) if batch.gems else []


def embed(settings: Settings, embedder: Embedder, refs: Sequence[BatchRef]) -> StepReport:
    """Embed the gems of every extracted batch in one call (the cache keeps the vectors)."""
    ready: list[tuple[BatchRef, list[Gem]]] = []
    skipped = 0
    for ref in refs:
        with unit_of_work(ref[0], all_agents=True) as session:
            batch = semantic.get_batch(session=session, batch_id=uuid.UUID(ref[1]))
        if batch is None or batch.state != "extracted":
            skipped += 1
            continue
        ready.append((ref, _gems(batch)))
    texts = [embedding_text(g) for _, gems in ready for g in gems]
    if texts:
        embedder.embed(texts)
    for ref, _ in ready:
        with unit_of_work(ref[0], all_agents=True) as session:
            semantic.advance_batch(
                session=session,
                batch_id=uuid.UUID(ref[1]),
                state="embedded",
                only_from=("extracted",),
            )
    return StepReport(done=len(ready), skipped=skipped, gems=len(texts))


def _by_agent(
    gems: Sequence[Gem], vectors: Sequence[list[float]], agent_of_turn: dict[str, str | None]
) -> dict[str | None, list[tuple[Gem, list[float]]]]:
    """Gems by the agent of the turn that first said them: what an agent heard is its own
    private map; what was said with no agent is the user's."""
    scopes: dict[str | None, list[tuple[Gem, list[float]]]] = {}
    for gem, vector in zip(gems, vectors, strict=True):
        first = gem.source_turn_ids[0] if gem.source_turn_ids else ""
        scopes.setdefault(agent_of_turn.get(first), []).append((gem, vector))
    return scopes


def store(settings: Settings, embedder: Embedder, refs: Sequence[BatchRef]) -> StepReport:
    """Gems → L3 (dedupe, reinforce, supersede) and L4 (entities), one transaction per batch."""
    done = skipped = failed = gems = 0
    for ref in refs:
        try:
            batch_id = uuid.UUID(ref[1])
            with unit_of_work(ref[0], all_agents=True) as session:
                ahead = semantic.get_batch(session=session, batch_id=batch_id)
            if ahead is None or ahead.state not in STORABLE:
                skipped += 1
                continue
            # Vectors first, outside the lock below: a cache miss (an expired vector, a slow
            # remote model) must not hold up ingest for this user's batch-mates.
            vectors = _vectors(embedder, ahead)
            with unit_of_work(ref[0], all_agents=True) as session:
                # One store per user at a time, under the lock ingest and forget take (taken
                # before the batch row, in their order): two batches of a user stored together
                # each missed the other's near-duplicates, and their inserts of the same texts
                # deadlocked on the unique index.
                episodic.lock_users(session=session, keys=[user_lock_key(ref[0], ahead.user_id)])
                batch = semantic.get_batch(session=session, batch_id=batch_id, lock=True)
                if batch is None or batch.state not in STORABLE:
                    skipped += 1
                    continue
                found = _gems(batch)  # as read ahead: a batch past 'claimed' keeps its gems
                turns = episodic.batch_turns(session=session, batch_id=batch_id)
                sessions = {str(r.id): r.session_id for r in turns}
                channels = {str(r.id): r.channel for r in turns}
                agents = {str(r.id): r.agent_id for r in turns}
                created = 0
                for agent_id, scoped in _by_agent(found, vectors, agents).items():
                    stored = store_gems(
                        session=session,
                        settings=settings,
                        tenant_id=ref[0],
                        user_id=batch.user_id,
                        batch_id=batch_id,
                        extractor=str(found[0].metadata.get("extractor", "")),
                        gems=[g for g, _ in scoped],
                        vectors=[v for _, v in scoped],
                        turn_scores={
                            str(r.id): (float(r.emotional_intensity), float(r.salience))
                            for r in turns
                        },
                        session_of_turn=sessions,
                        channel_of_turn=channels,
                        agent_id=agent_id,
                    )
                    record_entities(
                        session=session,
                        tenant_id=ref[0],
                        user_id=batch.user_id,
                        memories=stored.created,
                    )
                    created += len(stored.created)
                semantic.advance_batch(session=session, batch_id=batch_id, state="stored")
            done += 1
            gems += created
        except Exception as exc:  # one user's batch must not stop the others
            failed += 1
            _fail(settings, ref, exc)
    return StepReport(done, skipped, failed, gems)
