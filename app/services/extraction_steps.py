"""Extract and embed, the first two steps of claimed batches (store: extraction_store.py),
set-based over a call's batches, and what the three steps share.

Every step reads all the batches of one tenant it was given with one statement per kind of
row and writes them the same way, so a call's round trips do not grow with its batches. Each
step checks every batch's state before doing anything, so a redelivered or retried step is a
no-op for it. A batch failing alone (its extractor raised) records its error and attempts;
a set-based write that fails is done again one batch per transaction, so one bad batch never
stops the others either; beat retries it later.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.config import Settings
from app.db.session import unit_of_work
from app.embedding.base import Embedder, Owner
from app.extraction.base import (
    Extractor,
    Gem,
    SourceTurn,
    embedding_parts,
    gem_from_dict,
    gem_to_dict,
)
from app.layers.episodic import claims
from app.layers.semantic import batches as semantic
from app.streams.failures import is_transient

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


@dataclass
class Tally:
    """A step's counts while it runs."""

    done: int = 0
    skipped: int = 0
    failed: int = 0
    gems: int = 0

    def report(self) -> StepReport:
        return StepReport(self.done, self.skipped, self.failed, self.gems)


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


def by_tenant(refs: Sequence[BatchRef], tally: Tally) -> list[tuple[str, list[uuid.UUID]]]:
    """Batch ids per tenant, in the order given; a batch named twice counts as skipped the
    second time (as the step run twice would find it moved on)."""
    tenants: dict[str, list[uuid.UUID]] = {}
    for tenant_id, batch_id in refs:
        ids = tenants.setdefault(tenant_id, [])
        parsed = uuid.UUID(batch_id)
        if parsed in ids:
            tally.skipped += 1
        else:
            ids.append(parsed)
    return list(tenants.items())


def fail(settings: Settings, tenant_id: str, batch_id: uuid.UUID, exc: BaseException) -> None:
    """Count a failed attempt on the batch (beat retries it; parked after the maximum). An
    outage of the database or Redis is no attempt of the batch's: short outages one after
    another must not park it for an operator (`is_transient`)."""
    _log.exception("extraction batch %s failed", batch_id, exc_info=exc)
    with unit_of_work(tenant_id, all_agents=True) as session:
        semantic.record_failure(
            session=session,
            batch_id=batch_id,
            error=f"{type(exc).__name__}: {exc}",
            max_attempts=settings.extract_max_attempts,
            counted=not is_transient(exc),
        )


def _context(settings: Settings, rows: list[Any]) -> list[SourceTurn]:
    """Newest context first until the token cap, returned oldest first. A turn costs the
    tokens ingest counted (a turn is in the context of the next ten batches or so)."""
    kept: list[SourceTurn] = []
    budget = settings.extract_context_tokens
    for row in rows:
        cost = row.token_count
        if cost > budget:
            break
        budget -= cost
        kept.append(_source(row))
    return list(reversed(kept))


# -- extract -------------------------------------------------------------------------------


def extract(settings: Settings, extractor: Extractor, refs: Sequence[BatchRef]) -> StepReport:
    tally = Tally()
    for tenant_id, ids in by_tenant(refs, tally):
        try:
            inputs = _extract_inputs(settings, tenant_id, ids)
        except Exception as exc:  # nothing read: every batch of the tenant failed this time
            for batch_id in ids:
                tally.failed += 1
                fail(settings, tenant_id, batch_id, exc)
            continue
        tally.skipped += len(ids) - len(inputs)
        results: list[tuple[uuid.UUID, list[Gem]]] = []
        for batch_id, turns, context in inputs:
            try:
                found = extractor.extract(batch=turns, context=context)
            except Exception as exc:  # one user's batch must not stop the others
                tally.failed += 1
                fail(settings, tenant_id, batch_id, exc)
                continue
            for gem in found:
                gem.metadata.setdefault("extractor", extractor.name)
            results.append((batch_id, found))
        _save_gems(settings, tenant_id, results, tally)
    return tally.report()


def _extract_inputs(
    settings: Settings, tenant_id: str, ids: list[uuid.UUID]
) -> list[tuple[uuid.UUID, list[SourceTurn], list[SourceTurn]]]:
    """(batch, its turns, the context before them) of the claimed batches among `ids`."""
    with unit_of_work(tenant_id, all_agents=True) as session:
        batches = [
            b for b in semantic.get_batches(session=session, batch_ids=ids) if b.state == "claimed"
        ]
        turns = claims.turns_of_batches(
            session=session, tenant_id=tenant_id, batches=[(b.id, b.user_id) for b in batches]
        )
        started = [b for b in batches if turns[b.id]]
        contexts = claims.contexts_before(
            session=session,
            tenant_id=tenant_id,
            points=[
                claims.Before(first.user_id, first.occurred_at, first.arrival, first.id)
                for first in (turns[b.id][0] for b in started)
            ],
            limit=CONTEXT_TURNS,
        )
    context_of = {b.id: rows for b, rows in zip(started, contexts, strict=True)}
    return [
        (
            b.id,
            [_source(r) for r in turns[b.id]],
            _context(settings, context_of.get(b.id, [])),
        )
        for b in batches
    ]


def _save_gems(
    settings: Settings,
    tenant_id: str,
    results: list[tuple[uuid.UUID, list[Gem]]],
    tally: Tally,
) -> None:
    """Each still-claimed batch → 'extracted' with its gems; a batch another step holds or
    moved meanwhile is skipped."""
    if not results:
        return
    try:
        with unit_of_work(tenant_id, all_agents=True) as session:
            ready = _extracted(session, [b for b, _ in results], results)
        tally.done += len(ready)
        tally.skipped += len(results) - len(ready)
        tally.gems += sum(len(found) for _, found in ready)
        return
    except Exception:
        _log.warning("saving %d batches together failed: one at a time", len(results))
    for batch_id, found in results:
        try:
            with unit_of_work(tenant_id, all_agents=True) as session:
                ready = _extracted(session, [batch_id], [(batch_id, found)])
            tally.done += len(ready)
            tally.skipped += 1 - len(ready)
            tally.gems += len(found) if ready else 0
        except Exception as exc:
            tally.failed += 1
            fail(settings, tenant_id, batch_id, exc)


def _extracted(
    session: Any, ids: list[uuid.UUID], results: list[tuple[uuid.UUID, list[Gem]]]
) -> list[tuple[uuid.UUID, list[Gem]]]:
    locked = {
        b.id
        for b in semantic.get_batches(session=session, batch_ids=ids, lock=True)
        if b.state == "claimed"
    }
    ready = [(b, found) for b, found in results if b in locked]
    semantic.advance_batches(
        session=session,
        batch_ids=[b for b, _ in ready],
        state="extracted",
        gems=[[gem_to_dict(g) for g in found] for _, found in ready],
    )
    return ready


# -- embed ---------------------------------------------------------------------------------


def gem_texts(batch: Any) -> list[list[str]]:
    """What each gem of a batch is embedded from (base.embedding_parts; base.gem_vectors)."""
    return [embedding_parts(gem_from_dict(g)) for g in batch.gems or []]


def embed(settings: Settings, embedder: Embedder, refs: Sequence[BatchRef]) -> StepReport:
    """Embed the gems of every extracted batch in one call (the cache keeps the vectors)."""
    tally = Tally()
    ready: list[tuple[str, list[Any]]] = []
    for tenant_id, ids in by_tenant(refs, tally):
        with unit_of_work(tenant_id, all_agents=True) as session:
            rows = semantic.get_batches(session=session, batch_ids=ids)
        extracted = [r for r in rows if r.state == "extracted"]
        tally.skipped += len(ids) - len(extracted)
        ready.append((tenant_id, extracted))
    gems = [
        (Owner(tenant_id, r.user_id), parts)
        for tenant_id, rows in ready
        for r in rows
        for parts in gem_texts(r)
    ]
    texts = [(owner, t) for owner, parts in gems for t in parts]
    if texts:
        embedder.embed([t for _, t in texts], [owner for owner, _ in texts])
    for tenant_id, rows in ready:
        if rows:
            with unit_of_work(tenant_id, all_agents=True) as session:
                semantic.advance_batches(
                    session=session,
                    batch_ids=[r.id for r in rows],
                    state="embedded",
                    only_from=("extracted",),
                )
        tally.done += len(rows)
    return StepReport(done=tally.done, skipped=tally.skipped, gems=len(gems))
