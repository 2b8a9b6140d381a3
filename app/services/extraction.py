"""From turns to memories: triggers claim batches; extract → embed → store runs per batch.

A batch is one user's claimed turns; a stored batch claims the user's next (`drain`), at most
MAX_IN_FLIGHT at once. Claiming marks the turns (episodic.turns.extraction_batch_id) with
`FOR UPDATE SKIP LOCKED`, so whichever triggers fire, and however many workers race, every
turn is extracted exactly once. Each step checks the batch's state before doing anything, so
a redelivered or retried step is a no-op; a failing batch records its error and attempts and
never stops the other users' batches; beat retries it later.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from app.config import Settings
from app.db.session import unit_of_work
from app.layers.episodic import claims
from app.layers.episodic import repository as episodic
from app.layers.meta.repository import list_tenants
from app.layers.semantic import batches as semantic
from app.layers.working.store import WorkingMemoryStore
from app.services.extraction_steps import (
    CONTEXT_TURNS,
    STORABLE,
    BatchRef,
    StepReport,
    embed,
    extract,
)
from app.services.extraction_store import store
from app.services.jobs import lock_key

__all__ = [
    "CONTEXT_TURNS",
    "STORABLE",
    "BatchRef",
    "Drain",
    "StepReport",
    "claim",
    "claim_batches",
    "claim_due",
    "drain",
    "due_triggers",
    "embed",
    "extract",
    "idle_batches",
    "stale_batches",
    "store",
    "tenants",
    "unscored_users",
]


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
            wanted = [
                (user_id, uuid.uuid4()) for user_id in chunk if busy.get(user_id, 0) < MAX_IN_FLIGHT
            ]
            turns = claims.claim_users_turns(
                session=session,
                tenant_id=tenant_id,
                batches=wanted,
                limit=settings.extract_max_batch_turns,
                tail=settings.extract_after_turns - 1,
            )
            made = [
                (batch_id, user_id, triggers[user_id], len(turns[batch_id]))
                for user_id, batch_id in wanted
                if batch_id in turns
            ]
            semantic.create_batches(session=session, tenant_id=tenant_id, batches=made)
            claimed += [((tenant_id, str(b)), count) for b, _, _, count in made]
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
            counts = claims.unextracted_counts(session=session, tenant_id=tenant_id, user_ids=users)
            unscored = claims.unscored_counts(session=session, tenant_id=tenant_id, user_ids=users)
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
        counts = claims.unextracted_counts(session=session, tenant_id=tenant_id, user_ids=user_ids)
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
            users = claims.idle_unextracted_users(
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
        return claims.users_with_unscored(
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
