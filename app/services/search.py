"""Hybrid search: source turns by default (memories attached), or memories.

The unit of evidence is the source turn (app/services/search_turns.py): a question is
answered by what was said, and memories are the distilled keys pointing at it. Callers that
want memories ask for `unit="memories"` (app/services/search_memories.py). Both fuse their
rankings by rank, multiply by a bounded prior of importance, recency and consolidation, and
record the memories they returned in L5 (access patterns, Hebbian co-activation).
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime

import redis
from sqlalchemy.orm import Session

from app.config import Settings
from app.db.session import unit_of_work
from app.embedding.background import QueryVector
from app.embedding.base import Embedder, Owner
from app.layers.episodic.names import names_in
from app.services.access import record_retrieval
from app.services.knowledge import KNOWLEDGE_USER
from app.services.search_memories import rank_memories
from app.services.search_models import AttachedMemory, SearchHit, SearchRequest, SearchResult
from app.services.search_turns import rank_turns
from app.text.question_frame import without_frame
from app.text.speaker_names import Names
from app.text.time_window import time_window

__all__ = ["AttachedMemory", "SearchHit", "SearchRequest", "SearchResult", "search"]

_log = logging.getLogger(__name__)


def search(
    tenant_id: str,
    request: SearchRequest,
    *,
    settings: Settings,
    embedder: Embedder,
    client: redis.Redis | None = None,
    now: datetime | None = None,
    record: bool = True,
) -> SearchResult:
    started = time.perf_counter()
    now = now or datetime.now(UTC)
    warnings: list[str] = []
    # The query is read without its framing verbs of speech (app/text/question_frame.py) and
    # embedded without the speakers' names, called or misspelled ones too
    # (app/text/speaker_names.py). The local model is a bounded CPU cost, overlapped with the
    # lexical legs; a remote service is a network wait (up to its timeout), done while no
    # connection is held.
    local = settings.embedding_backend == "local"
    owner = Owner(tenant_id, request.user_id)
    asked_for = without_frame(request.query)
    unit = request.unit or settings.search_unit
    window = time_window(request.query, now) if unit == "turns" else None
    if not local:
        with unit_of_work(tenant_id, agent_id=request.agent_id) as session:
            names = names_in(session, tenant_id, request.user_id, request.query)
        text, spelled, also = _wordings(names, asked_for, unit, settings)
        vector = QueryVector.now(embedder, text, owner, also=also)
    with unit_of_work(
        tenant_id, agent_id=request.agent_id, generic_plans=True, text_ids=True
    ) as session:
        if local:
            names = names_in(session, tenant_id, request.user_id, request.query)
            text, spelled, also = _wordings(names, asked_for, unit, settings)
            vector = QueryVector.start(embedder, text, owner, also=also)
        # Ranked with the names it calls speakers by spelled as theirs ("Kate" → Emi).
        asked = request.model_copy(update={"query": spelled})
        if unit == "turns":
            hits = rank_turns(session, tenant_id, asked, vector, settings, now, window)
        else:
            hits = rank_memories(session, tenant_id, asked, vector, settings, now)
            hits = hits[: request.limit]
        if request.include_knowledge:
            hits = _with_knowledge(session, tenant_id, asked, hits, vector, settings, now)
    if vector.get() is None and vector.error is not None:
        _log.warning("search without dense ranking: %s", vector.error)
        warnings.append(f"embedding backend unavailable, lexical ranking only: {vector.error}")
    took_ms = (time.perf_counter() - started) * 1000
    if record and client is not None:
        _record(client, settings, tenant_id, request, hits)
    return SearchResult(
        hits=hits,
        fusion=settings.search_fusion if unit == "memories" else "rrf",
        took_ms=took_ms,
        unit=unit,
        time_window=(
            {"start": window.start, "end": window.end, "expression": window.expression}
            if window is not None
            else None
        ),
        warnings=warnings,
        names=dict(names.aliases),
    )


def _wordings(
    names: Names, asked_for: str, unit: str, settings: Settings
) -> tuple[str, str, str | None]:
    """(the query as embedded for every dense leg, without the speakers' names; as ranked by
    words, the names in the chat's own spelling; that spelling to embed as well, when it
    names one and the turns unit has a leg for it): memories say who did what ("Nebraas
    adopted a grey cat"), so the named wording finds the memories about the one asked of."""
    unnamed = names.for_embedding(asked_for)
    spelled = names.lexical(asked_for)
    wanted = unit == "turns" and settings.search_weight_dense_named > 0 and spelled != unnamed
    return unnamed, spelled, spelled if wanted else None


def _with_knowledge(
    session: Session,
    tenant_id: str,
    request: SearchRequest,
    hits: list[SearchHit],
    vector: QueryVector,
    settings: Settings,
    now: datetime,
) -> list[SearchHit]:
    """The user's hits and the tenant's knowledge ranked as memories, best `limit` of both.

    Knowledge is the memories of a user id no client can name (app/services/knowledge.py),
    so it is ranked by the very same code; one more ranking only when asked for."""
    asked = request.model_copy(
        update={
            "user_id": KNOWLEDGE_USER,
            "agent_id": None,
            "unit": "memories",
            "include_turns": False,
            "channel": None,
        }
    )
    found = rank_memories(session, tenant_id, asked, vector, settings, now)[: request.limit]
    for hit in found:
        hit.scope = "knowledge"
    merged = sorted([*hits, *found], key=lambda h: h.score, reverse=True)
    return merged[: request.limit]


def _record(
    client: redis.Redis,
    settings: Settings,
    tenant_id: str,
    request: SearchRequest,
    hits: list[SearchHit],
) -> None:
    """The memories the caller got back: memory hits and the memories attached to turn hits."""
    scored: dict = {}
    for hit in hits:
        if hit.scope == "knowledge":
            continue  # no user's retrieval: it strengthens nothing of theirs
        if hit.layer == "memory":
            scored.setdefault(hit.id, hit.score)
        for memory in hit.memories:
            scored.setdefault(memory.id, hit.score)
    record_retrieval(
        client,
        settings,
        tenant_id=tenant_id,
        user_id=request.user_id,
        channel=request.channel,
        query=request.query,
        memory_ids=list(scored),
        scores=list(scored.values()),
        source="search",
    )
