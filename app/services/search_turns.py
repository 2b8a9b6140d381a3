"""The turns unit: source turns ranked by every key that points at them.

The unit of evidence is what was said: a question is answered by a turn, and a memory is a
distilled key that points at the turns it came from. Legs, each under the request's filter:
the turns' own words (BM25) and vectors, the memories' words and vectors (each memory voting
for the turns it cites; when the question names a speaker, the memory vectors again for its
wording with the name, since memories say who did what), and, when the query names a time
("on 5 January", "last week"), the turns' words and vectors again inside that time; and the
memories reached through the entities the question names or the best memories mention (L4,
app/layers/conceptual/search.py: the second hop of a multi-hop question). They are fused by
rank (app/scoring/fusion.py), so no leg's score scale swamps another's; the turns of the
speaker a question names, and turns in which the speaker speaks of themselves, count more;
found turns a few messages from the best ones in the same session rank higher
(app/scoring/proximity.py: evidence clusters), and the fused score is multiplied by the same
bounded prior memories get (importance, recency, consolidation of the turn's memories).
Memories that cite no turn (told through the API) are ranked beside turns.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from app.config import Settings
from app.embedding.background import QueryVector
from app.extraction.entities import extract_entities
from app.layers.conceptual.search import entity_links
from app.layers.episodic import search as turn_search
from app.layers.semantic import search as memory_search
from app.scoring.fusion import Fused, Leg, fuse_turns
from app.scoring.proximity import boost_neighbours
from app.scoring.retrieval import memory_prior, recency
from app.scoring.spreading import first_hop, spread
from app.services.search_memories import filters_of
from app.services.search_models import (
    SearchHit,
    SearchRequest,
    memory_hit,
    prior_weights,
    turn_hit,
)
from app.text.speaker_names import subject_speaker
from app.text.time_window import TimeWindow

# The best turns whose neighbours are boosted, each two short index walks: 30 ranked the
# development conversations as well as 60 when tuned on the legs bench/conversations.py's
# searches gather (20 less well).
BOOSTING_TURNS = 30


def _turn_filter(tenant_id: str, request: SearchRequest) -> turn_search.TurnFilter:
    return turn_search.TurnFilter(
        tenant_id=tenant_id,
        user_id=request.user_id,
        channel=request.channel,
        since=request.since,
        until=request.until,
    )


def _inside(base: turn_search.TurnFilter, window: TimeWindow) -> turn_search.TurnFilter | None:
    since = max(filter(None, [base.since, window.start]))
    until = min(filter(None, [base.until, window.end]))
    return dataclasses.replace(base, since=since, until=until) if since < until else None


def legs(
    session: Any,
    tenant_id: str,
    request: SearchRequest,
    vector: QueryVector,
    settings: Settings,
    window: TimeWindow | None,
) -> tuple[list[Leg[uuid.UUID]], list[Leg[uuid.UUID]], dict[uuid.UUID, Any]]:
    """(turn legs, memory legs, every found memory's keys: its source turns and what its
    prior needs, semantic.search.memory_keys), in the caller's transaction.

    The lexical legs run first: the query's vector is being embedded meanwhile."""
    pool = max(settings.search_candidates, request.limit)
    ef = max(settings.search_ef_search, pool)
    scopes: list[tuple[str, turn_search.TurnFilter, float, float]] = []
    if not request.filters_memories_only:
        turn_scope = _turn_filter(tenant_id, request)
        scopes.append(
            (
                "turn",
                turn_scope,
                settings.search_weight_turn_lexical,
                settings.search_weight_turn_dense,
            )
        )
        inside = _inside(turn_scope, window) if window is not None else None
        if inside is not None and settings.search_weight_time > 0:
            scopes.append(
                ("time", inside, settings.search_weight_time, settings.search_weight_time)
            )
    memory_filter = filters_of(tenant_id, request)
    lexical = [
        turn_search.lexical_candidates(session, scope, request.query, limit=pool)
        for _, scope, _, _ in scopes
    ]
    memory_legs = [
        Leg(
            "memory_lexical",
            memory_search.lexical_candidates(session, memory_filter, request.query, limit=pool),
            settings.search_weight_lexical,
        )
    ]
    query = vector.get()
    turn_legs: list[Leg[uuid.UUID]] = []
    for (name, scope, lexical_weight, dense_weight), words in zip(scopes, lexical, strict=True):
        turn_legs.append(Leg(f"{name}_lexical", words, lexical_weight))
        if query is not None:
            dense = turn_search.dense_candidates(session, scope, query, limit=pool, ef_search=ef)
            turn_legs.append(Leg(f"{name}_dense", dense, dense_weight))
    if query is not None:
        memory_legs.append(
            Leg(
                "memory_dense",
                memory_search.dense_candidates(
                    session, memory_filter, query, limit=pool, ef_search=ef
                ),
                settings.search_weight_dense,
            )
        )
    named = vector.also()
    if named is not None:
        # Half the pool: the named wording's first ranks carry its votes (its best 50 ranked
        # the development conversations as well as its best 100, in less time).
        memory_legs.append(
            Leg(
                "memory_dense_named",
                memory_search.dense_candidates(
                    session, memory_filter, named, limit=max(pool // 2, request.limit), ef_search=ef
                ),
                settings.search_weight_dense_named,
            )
        )
    if query is not None and settings.search_weight_entity > 0:
        memory_legs.append(
            _entity_leg(session, memory_filter, request, query, memory_legs, settings)
        )
    cited = {m for leg in memory_legs for m in leg.scores}
    keys = memory_search.memory_keys(session, tenant_id, request.user_id, list(cited))
    return turn_legs, memory_legs, keys


def _entity_leg(
    session: Any,
    memory_filter: Any,
    request: SearchRequest,
    vector: Sequence[float],
    first: list[Leg[uuid.UUID]],
    settings: Settings,
) -> Leg[uuid.UUID]:
    """Memories sharing a (non-hub) entity with the question or the first hop's best."""
    found = first_hop(((leg.scores, leg.weight) for leg in first), k=settings.search_rrf_k)
    seeds = sorted(found, key=lambda m: (-found[m], m))[: settings.search_entity_seeds]
    mentions, _ = extract_entities(request.query)
    links = entity_links(
        session,
        memory_filter,
        names=[m.canonical for m in mentions],
        seed_memories=seeds,
        vector=vector,
        hub_share=settings.search_entity_hub_share,
    )
    activation = {m: found[m] for m in seeds}
    scores = spread(activation, links, limit=max(settings.search_candidates, request.limit))
    return Leg("memory_entity", scores, settings.search_weight_entity)


def rank_turns(
    session: Any,
    tenant_id: str,
    request: SearchRequest,
    vector: QueryVector,
    settings: Settings,
    now: datetime,
    window: TimeWindow | None,
) -> list[SearchHit]:
    """The turns unit, in the caller's (tenant-scoped) transaction."""
    turn_legs, memory_legs, keys = legs(session, tenant_id, request, vector, settings, window)
    fused = fuse_turns(
        turn_legs,
        memory_legs,
        {m: list(key.source_turn_ids or []) for m, key in keys.items()},
        k=settings.search_rrf_k,
        turns_per_memory=settings.search_turns_per_memory,
        power=settings.search_rrf_score_power,
    )
    facts = turn_search.turn_facts(session, tenant_id, request.user_id, list(fused.turns))
    _favour_the_named_speaker(request, fused, facts, settings.search_speaker_boost)
    _favour_self_disclosure(fused, facts, settings.search_first_person_boost)
    _boost_neighbours(session, tenant_id, request, fused, settings)
    items = [(("turn", t), s) for t, s in fused.turns.items()]
    items += [(("memory", m), s) for m, s in fused.memories.items()]
    pool = sorted(items, key=lambda kv: (-kv[1], kv[0][1]))[: request.limit * 3]
    turn_ids = [key[1] for key, _ in pool if key[0] == "turn"]
    memory_ids = {key[1] for key, _ in pool if key[0] == "memory"}
    memory_ids |= {m for t in turn_ids for m in fused.via.get(t, [])}
    # The pool is ranked on what the prior needs; whole rows are read for the hits alone.
    times = {t: facts[t].occurred_at for t in turn_ids if t in facts}
    priors = {m: keys[m] for m in memory_ids if m in keys}
    best = _best(pool, fused, times, priors, settings, now, request.limit)
    shown_turns = [item_id for _, item_id, layer, _ in best if layer == "turn"]
    shown_memories = {item_id for _, item_id, layer, _ in best if layer == "memory"}
    shown_memories |= {m for t in shown_turns for m in fused.via.get(t, []) if m in priors}
    turn_rows = turn_search.turns_by_id(session, tenant_id, request.user_id, shown_turns)
    # Memories ranked here cite no turn, and attached ones are shown without theirs.
    memory_rows = memory_search.memories_by_id(
        session, request.user_id, list(shown_memories), sources=False, tenant_id=tenant_id
    )
    hits: list[SearchHit] = []
    for score, item_id, layer, parts in best:
        if layer == "memory":
            if item_id in memory_rows:
                hits.append(memory_hit(memory_rows[item_id], score, parts, []))
        elif item_id in turn_rows:
            attached = [memory_rows[m] for m in fused.via.get(item_id, []) if m in memory_rows]
            hits.append(turn_hit(turn_rows[item_id], score, parts, attached))
    return hits


def _favour_the_named_speaker(
    request: SearchRequest,
    fused: Fused[uuid.UUID, uuid.UUID],
    facts: dict[uuid.UUID, Any],
    boost: float,
) -> None:
    """A question about one of the speakers ("What are Kate's hobbies?") is answered by what
    that speaker said: 94 % of such questions' evidence turns on the development
    conversations. Their turns' fused score is multiplied by 1 + `boost`; a question about
    several speakers together, or none, changes nothing (`subject_speaker`)."""
    if boost <= 0 or not fused.turns:
        return
    speakers = {t: f.speaker for t, f in facts.items() if f.speaker is not None}
    subject = subject_speaker(request.query, speakers.values())
    if subject is None:
        return
    for turn, speaker in speakers.items():
        if speaker == subject:
            fused.turns[turn] *= 1 + boost
            fused.parts.setdefault(turn, {})["speaker_named"] = 1.0


def _favour_self_disclosure(
    fused: Fused[uuid.UUID, uuid.UUID], facts: dict[uuid.UUID, Any], boost: float
) -> None:
    """What a person did, owns and likes is in what they say of themselves ("I went skiing",
    "my dog"): 89 % of the development conversations' evidence turns speak in the first
    person, 68 % of the turns ranked beside them. Such turns' fused score is multiplied by
    1 + `boost`."""
    if boost <= 0:
        return
    for turn, fact in facts.items():
        if fact.first_person and turn in fused.turns:
            fused.turns[turn] *= 1 + boost
            fused.parts.setdefault(turn, {})["first_person"] = 1.0


def _boost_neighbours(
    session: Any,
    tenant_id: str,
    request: SearchRequest,
    fused: Fused[uuid.UUID, uuid.UUID],
    settings: Settings,
) -> None:
    """Found turns near the best `BOOSTING_TURNS` rank higher (app/scoring/proximity.py);
    a boosted turn's parts show its nearness as `neighbours`."""
    if settings.search_neighbour_boost <= 0 or settings.search_neighbour_window <= 0:
        return
    best = sorted(fused.turns, key=lambda t: (-fused.turns[t], t))[:BOOSTING_TURNS]
    near = turn_search.neighbours_of(
        session,
        tenant_id,
        request.user_id,
        best,
        settings.search_neighbour_window,
        among=list(fused.turns),
    )
    nearness = boost_neighbours(
        fused.turns,
        near,
        boost=settings.search_neighbour_boost,
        decay=settings.search_neighbour_decay,
    )
    for turn, value in nearness.items():
        fused.parts.setdefault(turn, {})["neighbours"] = round(value, 6)


def _best(
    pool: list[tuple[tuple[str, uuid.UUID], float]],
    fused: Fused[uuid.UUID, uuid.UUID],
    times: dict[uuid.UUID, datetime],
    priors: dict[uuid.UUID, Any],
    settings: Settings,
    now: datetime,
    limit: int,
) -> list[tuple[float, uuid.UUID, str, dict[str, float]]]:
    """The best `limit` of the pool by relevance * prior, as (score, id, layer, parts); a
    turn's prior is its memories' (importance, consolidation) with its own recency. The
    whole pool is scored, and only the `limit` returned get their parts written out."""
    weights = prior_weights(settings)
    scored: list[tuple[float, uuid.UUID, str, float, float, float, float | None]] = []
    for (layer, item_id), relevance in pool:
        if layer == "turn":
            occurred_at = times.get(item_id)
            keys = [priors[m] for m in fused.via.get(item_id, []) if m in priors]
        else:
            memory = priors.get(item_id)
            occurred_at = memory.occurred_at if memory is not None else None
            keys = [memory]
        if occurred_at is None:
            continue
        age_days = (now - occurred_at).total_seconds() / 86_400
        fresh = float(recency(age_days, settings.search_recency_half_life_days))
        importance = max((m.importance for m in keys), default=None)
        prior = float(
            memory_prior(
                importance=0.5 if importance is None else importance,
                recency_score=fresh,
                consolidation=max((m.consolidation_strength for m in keys), default=0.0),
                weights=weights,
            )
        )
        scored.append((relevance * prior, item_id, layer, relevance, prior, fresh, importance))
    scored.sort(key=lambda item: (-item[0], item[1]))
    best = []
    for score, item_id, layer, relevance, prior, fresh, importance in scored[:limit]:
        parts = {
            **fused.parts.get(item_id, {}),
            "fused": round(relevance, 6),
            "prior": round(prior, 6),
            "recency": round(fresh, 6),
        }
        if importance is not None:
            parts["importance"] = round(importance, 6)
        best.append((score, item_id, layer, parts))
    return best
