"""The memories unit: memories ranked by their vectors and words, raw turns folding in.

Three rankings under one filter: dense (HNSW cosine on memories), BM25 on memories, BM25 on
raw turns. A turn that a current memory was extracted from folds into that memory (it adds
to the memory's score) instead of being listed twice; a turn no memory covers yet is listed
itself, which is what makes a turn findable before its extraction batch has run. Rankings are
fused (reciprocal rank by default, or weighted scores), then multiplied by a bounded prior of
importance, recency and consolidation strength. Every hit carries its score parts.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app.config import Settings
from app.embedding.background import QueryVector
from app.layers.episodic import search as turn_search
from app.layers.semantic import search as memory_search
from app.scoring.retrieval import (
    memory_prior,
    recency,
    reciprocal_rank_fusion,
    weighted_fusion,
)
from app.services.search_models import (
    SearchHit,
    SearchRequest,
    memory_hit,
    prior_weights,
    turn_hit,
)

Key = tuple[str, uuid.UUID]  # ("memory" | "turn", id)


@dataclass
class Rankings:
    """Raw candidate scores per ranking, before fusion (exposed for benchmarks)."""

    dense: dict[uuid.UUID, float]
    lexical: dict[uuid.UUID, float]
    turns: dict[uuid.UUID, float]
    covering: dict[uuid.UUID, list[uuid.UUID]]


def _ordered(scores: dict[uuid.UUID, float]) -> list[uuid.UUID]:
    return [k for k, _ in sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))]


def filters_of(tenant_id: str, request: SearchRequest) -> memory_search.MemoryFilter:
    return memory_search.MemoryFilter(
        tenant_id=tenant_id,
        user_id=request.user_id,
        channel=request.channel,
        tags=tuple(request.tags),
        kinds=tuple(request.kinds),
        since=request.since,
        until=request.until,
        min_importance=request.min_importance,
        include_superseded=request.include_superseded,
        include_archived=request.include_archived,
    )


def turns_searchable(request: SearchRequest, settings: Settings) -> bool:
    if request.filters_memories_only:
        return False
    if request.include_turns is not None:
        return request.include_turns
    return settings.search_turns != "never"


def gather(
    session: Any,
    tenant_id: str,
    request: SearchRequest,
    vector: QueryVector,
    settings: Settings,
    *,
    exact: bool = False,
) -> Rankings:
    """Candidates of every ranking, in the caller's (tenant-scoped) transaction; the
    lexical ones first, while the query's vector is being embedded."""
    memory_filter = filters_of(tenant_id, request)
    limit = max(settings.search_candidates, request.limit)
    lexical = memory_search.lexical_candidates(session, memory_filter, request.query, limit=limit)
    turns: dict[uuid.UUID, float] = {}
    covering: dict[uuid.UUID, list[uuid.UUID]] = {}
    if turns_searchable(request, settings):
        turn_filter = turn_search.TurnFilter(
            tenant_id=tenant_id,
            user_id=request.user_id,
            channel=request.channel,
            since=request.since,
            until=request.until,
        )
        turns = turn_search.lexical_candidates(session, turn_filter, request.query, limit=limit)
        if settings.search_turns != "always":
            covering = memory_search.covering_memories(session, memory_filter, list(turns))
    query = vector.get()
    dense = (
        memory_search.dense_candidates(
            session,
            memory_filter,
            query,
            limit=limit,
            ef_search=max(settings.search_ef_search, limit),
            exact=exact,
        )
        if query is not None
        else {}
    )
    return Rankings(dense=dense, lexical=lexical, turns=turns, covering=covering)


def fuse(rankings: Rankings, settings: Settings) -> tuple[dict[Key, float], dict[Key, dict]]:
    """Fused relevance per item, and each item's raw parts."""
    parts: dict[Key, dict[str, float]] = {}
    for name, scores in (("dense", rankings.dense), ("lexical", rankings.lexical)):
        for memory_id, score in scores.items():
            parts.setdefault(("memory", memory_id), {})[name] = round(score, 6)
    turn_list: list[Key] = []
    turn_scores: dict[Key, float] = {}
    for turn_id in _ordered(rankings.turns):
        owners = rankings.covering.get(turn_id)
        targets = [("memory", m) for m in owners] if owners else [("turn", turn_id)]
        for key in targets:
            if key not in turn_scores:
                turn_list.append(key)
                turn_scores[key] = rankings.turns[turn_id]
                parts.setdefault(key, {})["turn"] = round(rankings.turns[turn_id], 6)
    dense_keys = {("memory", k): v for k, v in rankings.dense.items()}
    lexical_keys = {("memory", k): v for k, v in rankings.lexical.items()}
    weights = [settings.search_weight_dense, settings.search_weight_lexical]
    if settings.search_fusion == "rrf":
        fused = reciprocal_rank_fusion(
            [_ordered_keys(dense_keys), _ordered_keys(lexical_keys), turn_list],
            k=settings.search_rrf_k,
            weights=[*weights, settings.search_weight_lexical],
        )
    else:
        fused = weighted_fusion(
            [dense_keys, lexical_keys, turn_scores],
            weights=[*weights, settings.search_weight_lexical],
        )
    return fused, parts


def _ordered_keys(scores: dict[Key, float]) -> list[Key]:
    return [k for k, _ in sorted(scores.items(), key=lambda kv: (-kv[1], kv[0][1]))]


def _rank(
    pool: list[tuple[Key, float]],
    parts: dict[Key, dict[str, float]],
    memory_rows: dict[uuid.UUID, Any],
    turn_rows: dict[uuid.UUID, Any],
    rankings: Rankings,
    settings: Settings,
    now: datetime,
) -> list[SearchHit]:
    weights = prior_weights(settings)
    half_life = settings.search_recency_half_life_days
    hits: list[SearchHit] = []
    for key, relevance in pool:
        layer, item_id = key
        row = memory_rows.get(item_id) if layer == "memory" else turn_rows.get(item_id)
        if row is None:
            continue
        age_days = (now - row.occurred_at).total_seconds() / 86_400
        fresh = float(recency(age_days, half_life))
        if layer == "memory":
            prior = float(
                memory_prior(
                    importance=row.importance,
                    recency_score=fresh,
                    consolidation=row.consolidation_strength,
                    weights=weights,
                )
            )
        else:
            prior = float(
                memory_prior(
                    importance=0.5, recency_score=fresh, consolidation=0.0, weights=weights
                )
            )
        item_parts = {
            **parts.get(key, {}),
            "fused": round(relevance, 6),
            "prior": round(prior, 6),
            "recency": round(fresh, 6),
        }
        if layer == "memory":
            sources = _sources_by_relevance(row, rankings.turns)
            item_parts["importance"] = round(row.importance, 6)
            item_parts["consolidation"] = round(row.consolidation_strength, 6)
            hits.append(memory_hit(row, relevance * prior, item_parts, sources))
        else:
            hits.append(turn_hit(row, relevance * prior, item_parts))
    hits.sort(key=lambda h: (-h.score, h.id))
    return hits


def _sources_by_relevance(
    row: Any, turn_scores: dict[uuid.UUID, float]
) -> list[tuple[uuid.UUID, str]]:
    """(id, external id) of the memory's source turns: those matching the query best first,
    then the rest in the order the memory lists them."""
    pairs = list(zip(row.source_ids or [], row.source_external_ids or [], strict=False))
    ranked = sorted(enumerate(pairs), key=lambda item: (-turn_scores.get(item[1][0], 0.0), item[0]))
    return [pair for _, pair in ranked]


def rank_memories(
    session: Any,
    tenant_id: str,
    request: SearchRequest,
    vector: QueryVector,
    settings: Settings,
    now: datetime,
) -> list[SearchHit]:
    """The memories unit, in the caller's (tenant-scoped) transaction."""
    rankings = gather(session, tenant_id, request, vector, settings)
    fused, parts = fuse(rankings, settings)
    pool = sorted(fused.items(), key=lambda kv: (-kv[1], kv[0][1]))[: request.limit * 3]
    memory_rows = memory_search.memories_by_id(
        session,
        request.user_id,
        [k[1] for k, _ in pool if k[0] == "memory"],
        tenant_id=tenant_id,
    )
    turn_rows = turn_search.turns_by_id(
        session, tenant_id, request.user_id, [k[1] for k, _ in pool if k[0] == "turn"]
    )
    return _rank(pool, parts, memory_rows, turn_rows, rankings, settings, now)
