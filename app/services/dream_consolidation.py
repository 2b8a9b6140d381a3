"""Consolidation of one cycle's replays, inside the cycle's transaction: receipts and
strength, cross-links, merged clusters. All of it commits or none does, so a cycle whose
receipts exist has done all of it and a rerun only acks and analyses."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy.orm import Session

from app.config import Settings
from app.extraction.smalltalk import says_nothing
from app.layers.semantic import dream as dream_sql
from app.scoring.replay import CONSOLIDATION_GAIN, RankedReplay, plan_clusters
from app.services.dream_identity import CYCLE_NAMESPACE
from app.services.dream_reports import CycleReport, PlannedCluster, PlannedLink, PlannedReplay

ENTITY_LINKS_PER_MEMORY = 8
MEMBER_WEIGHT = 0.5


def consolidate(
    session: Session,
    settings: Settings,
    report: CycleReport,
    ranked: Sequence[RankedReplay],
    now: datetime,
) -> set[uuid.UUID]:
    """Receipts, strength, links and merged clusters (the caller's transaction)."""
    tenant_id, user_id = report.tenant_id, report.user_id
    by_id = {r.candidate.memory_id: r for r in ranked}
    replayed = dream_sql.replay(
        session=session,
        tenant_id=tenant_id,
        user_id=user_id,
        cycle_id=report.cycle_id,
        at=now,
        replays=[(r.candidate.memory_id, r.priority) for r in ranked],
        gain=CONSOLIDATION_GAIN,
    )
    report.replays = [
        PlannedReplay(m, by_id[m].priority, by_id[m].candidate.source) for m in replayed
    ]
    report.replays.sort(key=lambda r: (-r.priority, str(r.memory_id)))
    if len(replayed) < 2:
        return set(replayed)
    params = {"session": session, "tenant_id": tenant_id, "user_id": user_id}
    similar = dream_sql.similar_pairs(
        **params,
        memory_ids=replayed,
        min_cosine=min(settings.dream_link_cosine, settings.dream_cluster_cosine),
    )
    shared = dream_sql.shared_entity_pairs(
        **params, memory_ids=replayed, per_memory=ENTITY_LINKS_PER_MEMORY
    )
    links = [(a, b, "entity") for a, b, _ in shared]
    links += [(a, b, "embedding") for a, b, c in similar if c >= settings.dream_link_cosine]
    report.links = [
        PlannedLink(r.memory_a, r.memory_b, r.origin, r.weight, r.created)
        for r in dream_sql.link_replayed(
            **params,
            memory_ids=replayed,
            links=links,
            rate=settings.hebbian_rate,
            at=now,
        )
    ]
    info = dream_sql.replayed_info(**params, memory_ids=replayed)
    mergeable = {r.memory_id: r.content for r in info if r.kind != "consolidated" and not r.member}
    # Small talk is never consolidated ("Wow, Caroline! | Wow, fantastic, Caroline!").
    mergeable = {m: content for m, content in mergeable.items() if not says_nothing(content)}
    plans = plan_clusters(
        mergeable,
        similar,
        min_cosine=settings.dream_cluster_cosine,
        min_size=settings.dream_cluster_min,
    )
    rows = [
        {
            "id": uuid.uuid5(CYCLE_NAMESPACE, f"{tenant_id}\x1f{user_id}\x1f{p.key}"),
            "content_hash": p.key,
            "content": p.text.content,
            "summary": p.text.summary,
            "member_ids": [str(m) for m in p.members],
        }
        for p in plans
    ]
    created = dream_sql.insert_consolidated(
        **params,
        cycle_id=report.cycle_id,
        clusters=rows,
        member_weight=MEMBER_WEIGHT,
        at=now,
    )
    text_of = {r["id"]: r for r in rows}
    report.clusters = [
        PlannedCluster(
            c.memory_id,
            c.member_ids,
            text_of[c.memory_id]["content"],
            text_of[c.memory_id]["summary"],
        )
        for c in created
    ]
    return set(replayed)
