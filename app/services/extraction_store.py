"""The store step of claimed batches: their gems into L3 memories and L4 entities.

A call's batches of one tenant are read and embedded together, then stored in rounds (at
most one batch per user in a round), each round one transaction with one statement per kind
of read and write. A round that fails is stored again one batch per transaction, so only
a bad batch fails (and records its attempt); beat retries it later.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from app.config import Settings
from app.db.session import unit_of_work
from app.embedding.base import Embedder, Owner
from app.extraction.base import Gem, gem_from_dict, gem_vectors
from app.layers.conceptual.service import record_entities_of
from app.layers.episodic import claims
from app.layers.episodic import repository as episodic
from app.layers.semantic import batches as semantic
from app.layers.semantic.service import GemScope, store_scopes
from app.services.extraction_steps import (
    STORABLE,
    BatchRef,
    StepReport,
    Tally,
    by_tenant,
    fail,
    gem_texts,
)
from app.services.ingest import user_lock_key

_log = logging.getLogger(__name__)

# Batches stored in one transaction at most (see _rounds).
ROUND_SIZE = 32


def store(settings: Settings, embedder: Embedder, refs: Sequence[BatchRef]) -> StepReport:
    """Gems → L3 (dedupe, reinforce, supersede) and L4 (entities): a transaction per round
    of the tenant's batches, a round holding at most one batch per user."""
    tally = Tally()
    for tenant_id, ids in by_tenant(refs, tally):
        try:
            with unit_of_work(tenant_id, all_agents=True) as session:
                rows = semantic.get_batches(session=session, batch_ids=ids)
        except Exception as exc:  # nothing read: every batch of the tenant failed this time
            for batch_id in ids:
                tally.failed += 1
                fail(settings, tenant_id, batch_id, exc)
            continue
        ahead = [b for b in rows if b.state in STORABLE]
        tally.skipped += len(ids) - len(ahead)
        # Vectors first, outside the locks below: a cache miss (an expired vector, a slow
        # remote model) must not hold up ingest for these users' batch-mates.
        vectors = _vectors_ahead(settings, embedder, tenant_id, ahead, tally)
        for part in _rounds([b for b in ahead if b.id in vectors]):
            _store_round(settings, tenant_id, part, vectors, tally)
    return tally.report()


def _vectors_ahead(
    settings: Settings, embedder: Embedder, tenant_id: str, ahead: list[Any], tally: Tally
) -> dict[uuid.UUID, list[list[float]]]:
    """Each batch's gem vectors, in one embedding call; a batch whose gems cannot be read
    fails alone, and all of them when the call fails."""
    texts: dict[uuid.UUID, list[list[str]]] = {}
    owners: list[Owner] = []
    for batch in ahead:
        try:
            texts[batch.id] = gem_texts(batch)
            owners.extend([Owner(tenant_id, batch.user_id)] * len(texts[batch.id]))
        except Exception as exc:
            tally.failed += 1
            fail(settings, tenant_id, batch.id, exc)
    try:
        flat = gem_vectors(embedder, [p for found in texts.values() for p in found], owners)
    except Exception as exc:
        for batch_id in texts:
            tally.failed += 1
            fail(settings, tenant_id, batch_id, exc)
        return {}
    vectors: dict[uuid.UUID, list[list[float]]] = {}
    at = 0
    for batch_id, found in texts.items():
        vectors[batch_id] = flat[at : at + len(found)]
        at += len(found)
    return vectors


def _rounds(batches: list[Any], size: int = ROUND_SIZE) -> list[list[Any]]:
    """At most one batch per user in a round: a user's two batches stored together would
    each miss the other's near-duplicates. At most `size` batches: a round holds its users'
    advisory locks, which ingest for those users waits on."""
    rounds: list[list[Any]] = []
    taken: dict[str, int] = {}
    for batch in batches:
        at = taken.get(batch.user_id, 0)
        taken[batch.user_id] = at + 1
        if at == len(rounds):
            rounds.append([])
        rounds[at].append(batch)
    return [r[start : start + size] for r in rounds for start in range(0, len(r), size)]


def _store_round(
    settings: Settings,
    tenant_id: str,
    batches: list[Any],
    vectors: dict[uuid.UUID, list[list[float]]],
    tally: Tally,
) -> None:
    try:
        stored, created = _store_together(settings, tenant_id, batches, vectors)
    except Exception as exc:  # one user's batch must not stop the others
        if len(batches) == 1:
            tally.failed += 1
            fail(settings, tenant_id, batches[0].id, exc)
            return
        _log.warning("storing %d batches together failed: one at a time", len(batches))
        for batch in batches:
            _store_round(settings, tenant_id, [batch], vectors, tally)
        return
    tally.done += stored
    tally.skipped += len(batches) - stored
    tally.gems += created


def _store_together(
    settings: Settings,
    tenant_id: str,
    batches: list[Any],
    vectors: dict[uuid.UUID, list[list[float]]],
) -> tuple[int, int]:
    """(batches stored, memories created) of one round, in one transaction."""
    with unit_of_work(tenant_id, all_agents=True) as session:
        # One store per user at a time, under the lock ingest and forget take (taken before
        # the batch rows, in their order): two batches of a user stored together each missed
        # the other's near-duplicates, and their inserts of the same texts deadlocked on the
        # unique index.
        episodic.lock_users(
            session=session, keys=[user_lock_key(tenant_id, b.user_id) for b in batches]
        )
        locked = [
            b
            for b in semantic.get_batches(
                session=session, batch_ids=[b.id for b in batches], lock=True
            )
            if b.state in STORABLE
        ]
        turns = claims.turns_of_batches(
            session=session, tenant_id=tenant_id, batches=[(b.id, b.user_id) for b in locked]
        )
        # Under the user lock a session clear takes too: what the gems cite is still there
        # until the commit (a clear between extract and store deleted some of it).
        alive = claims.existing_turns(
            session=session,
            tenant_id=tenant_id,
            cited=sorted(
                {
                    (b.user_id, str(t))
                    for b in locked
                    for g in b.gems or []
                    for t in g.get("source_turn_ids") or []
                }
            ),
        )
        scopes = [
            scope
            for batch in locked
            # As read ahead: a batch past 'claimed' keeps its gems.
            for scope in _scopes(batch, vectors[batch.id], turns[batch.id], alive)
        ]
        stored = store_scopes(
            session=session, settings=settings, tenant_id=tenant_id, scopes=scopes
        )
        record_entities_of(
            session=session,
            tenant_id=tenant_id,
            groups=[(s.user_id, done.created) for s, done in zip(scopes, stored, strict=True)],
        )
        semantic.advance_batches(session=session, batch_ids=[b.id for b in locked], state="stored")
    return len(locked), sum(len(done.created) for done in stored)


def _scopes(
    batch: Any, vectors: list[list[float]], turns: list[Any], alive: set[str]
) -> list[GemScope]:
    """A batch's gems by the agent of the turn that first said them: what an agent heard is
    its own private map; what was said with no agent is the user's. A gem cites only the
    turns still `alive`, and one whose every turn is gone (its session was cleared after it
    was extracted) is dropped: clearing promised its memories go."""
    found = [gem_from_dict(g) for g in batch.gems or []]
    by_agent: dict[str | None, list[tuple[Gem, list[float]]]] = {}
    agents = {str(r.id): r.agent_id for r in turns}
    for gem, vector in zip(found, vectors, strict=True):
        if gem.source_turn_ids:
            cited = [str(t) for t in gem.source_turn_ids if str(t) in alive]
            if not cited:
                continue
            gem = replace(gem, source_turn_ids=cited)
        first = gem.source_turn_ids[0] if gem.source_turn_ids else ""
        by_agent.setdefault(agents.get(first), []).append((gem, vector))
    if not by_agent:
        return []
    sessions = {str(r.id): r.session_id for r in turns}
    channels = {str(r.id): r.channel for r in turns}
    scores = {str(r.id): (float(r.emotional_intensity), float(r.salience)) for r in turns}
    extractor = str(found[0].metadata.get("extractor", ""))
    return [
        GemScope(
            user_id=batch.user_id,
            batch_id=batch.id,
            extractor=extractor,
            gems=[g for g, _ in scoped],
            vectors=[v for _, v in scoped],
            turn_scores=scores,
            session_of_turn=sessions,
            channel_of_turn=channels,
            agent_id=agent_id,
        )
        for agent_id, scoped in by_agent.items()
    ]
