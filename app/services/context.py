"""`assemble_context`: what an agent puts in front of its model for the next answer.

Parts are packed into the token budget in this priority order, each part taking what is left:
  1. the live conversation — newest L1 turns, up to 40 % of the budget;
  2. the summary of older working-memory turns, when it takes at most 25 % of the budget;
  3. turns and memories relevant to the query (hybrid search, or the prefetched set when
     fresh): ranked turns with their speaker, memories that cite no turn, under a header
     per day in the order they happened (app/services/context_block.py);
  4. a procedural suggestion, when one is confident enough for this query (and a longer
     summary, if it still fits);
  5. graph facts about the entities the chosen memories name.
An item that does not fit is skipped (a smaller one after it may still fit). Memories that
repeat a turn already in the block are dropped. The block is laid out in a fixed order
(summary, conversation, memories, facts, procedure), whatever the packing order was.

Stored text is untrusted: a turn, memory, summary line, fact or procedure that reads like
instructions (flagged at storage or now) goes in fenced as quoted user content
(app/text/untrusted.py), and its part says `suspected_instruction: true`, so the whole block
can be handed to a model as it is.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import numpy as np
import redis
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, Strict, StrictBool

from app.config import Settings
from app.db.session import unit_of_work
from app.embedding.base import Embedder, EmbeddingError, Owner
from app.layers.conceptual.graph import facts_about, render_fact
from app.layers.working.store import WorkingMemoryStore, WorkingTurn
from app.limits import blank_problem, integral
from app.scoring.retrieval import memory_prior, recency
from app.services import procedures
from app.services.access import record_retrieval
from app.services.context_block import (
    Packer,
    day_of,
    item_line,
    normalised,
    quoted,
    shortened,
    summary_text,
    turn_line,
)
from app.services.prefetch import PrefetchEntry, cached
from app.services.search import SearchRequest, search
from app.services.search_models import prior_weights
from app.streams.events import Channel, Identifier
from app.text.question_frame import without_frame
from app.text.speaker_names import without_speakers
from app.text.storable import StorableText
from app.text.tokens import count_many, count_tokens, counts_add_up, fit_to_tokens
from app.text.untrusted import suspected

CONVERSATION_SHARE = 0.4
SUMMARY_SHARE = 0.25
# Ranked turns are short: a 2,000-token budget holds about seventy when the conversation is
# short (long ones shortened to ITEM_SHARE), so more candidates than that are asked for: an item
# that does not fit is skipped and a shorter one after it may still fit. 100 instead held as
# much evidence on the held-out conversations (bench/conversations.py), at a dearer search.
MEMORY_CANDIDATES = 80
# One ranked item shows at most this share of the budget (its head, then "…"; the part keeps
# the whole text): one long message no longer crowds out several relevant ones
# (bench/conversations.py measures the evidence a 2,000-token block holds).
ITEM_SHARE = 0.03
MIN_ITEM_TOKENS = 32


class ContextRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    user_id: Identifier
    query: StorableText = Field(min_length=1, max_length=8000)
    channel: Channel | None = None
    # The bounds sit before the parsing step, so the schema states them (an Optional of a
    # validated WholeNumber printed pydantic's own `ge`/`le`, which JSON Schema ignores).
    token_budget: (
        Annotated[int, Field(ge=50, le=200_000), BeforeValidator(integral), Strict()] | None
    ) = None
    agent_id: Identifier | None = Field(
        default=None, description="the asking agent: its private map besides the shared"
    )
    include_knowledge: StrictBool = Field(default=False, description="also the tenant's knowledge")


@dataclass
class ContextResult:
    text: str
    tokens: int
    token_budget: int
    prefetch: Literal["hit", "miss"]
    parts: dict[str, Any]
    took_ms: float
    warnings: list[str] = field(default_factory=list)


class _Memo:
    """The request's embedder: the query is embedded once, however many parts ask for it."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self._vectors: dict[tuple[Owner | None, str], list[float]] = {}

    def embed(
        self, texts: Sequence[str], owners: Sequence[Owner] | None = None
    ) -> list[list[float]]:
        asked = list(zip(owners or [None] * len(texts), texts, strict=True))
        missing = [pair for pair in dict.fromkeys(asked) if pair not in self._vectors]
        if missing:
            whose = [owner for owner, _ in missing if owner is not None]
            fresh = self.inner.embed([text for _, text in missing], whose if owners else None)
            self._vectors.update(zip(missing, fresh, strict=True))
        return [self._vectors[pair] for pair in asked]


def _from_prefetch(
    entry: PrefetchEntry, vector: list[float] | None, settings: Settings, limit: int
) -> list[dict[str, Any]]:
    """Rank prefetched memories against the query: cosine times the same prior search uses."""
    weights = prior_weights(settings)
    similarity = (
        entry.vectors @ np.asarray(vector, dtype=np.float32)
        if vector is not None
        else np.zeros(len(entry.memories), dtype=np.float32)
    )
    age_days = (datetime.now(UTC).timestamp() - entry.occurred_at) / 86_400
    scores = similarity * memory_prior(
        importance=entry.importance,
        recency_score=recency(age_days, settings.search_recency_half_life_days),
        consolidation=entry.consolidation,
        weights=weights,
    )
    ranked = []
    for index in np.argsort(-scores, kind="stable")[:limit]:
        memory = entry.memories[int(index)]
        ranked.append(
            {
                "id": uuid.UUID(memory["id"]),
                "layer": "memory",
                "kind": memory["kind"],
                "content": memory["content"],
                "occurred_at": datetime.fromisoformat(memory["occurred_at"]),
                "score": float(scores[index]),
                "source_turn_ids": memory["source_turn_ids"],
                "event_ids": memory["event_ids"],
                "session_id": memory["session_id"],
                "suspected_instruction": bool(memory.get("suspected_instruction")),
            }
        )
    return ranked


def assemble_context(
    tenant_id: str,
    request: ContextRequest,
    *,
    settings: Settings,
    embedder: Embedder,
    client: redis.Redis,
) -> ContextResult:
    started = time.perf_counter()
    embedder = _Memo(embedder)
    budget = request.token_budget or settings.context_token_budget
    warnings: list[str] = []
    working = WorkingMemoryStore(client, settings).read(tenant_id, request.user_id)
    # The prefetch cache holds the user's level and shared memories only: an agent's own map
    # and the tenant's knowledge come from a search.
    scoped = request.agent_id is not None or request.include_knowledge
    entry = (
        None if scoped else cached(client, settings, tenant_id, request.user_id, request.channel)
    )
    facts: list[dict[str, Any]] = []
    if entry is not None:
        try:
            # Read as a search reads it (app/services/search.py): without framing words or
            # names (the names others call a speaker by need the trace: a search's work).
            asked = without_speakers(without_frame(request.query), entry.speakers)
            owner = Owner(tenant_id, request.user_id)
            vector: list[float] | None = embedder.embed([asked], [owner])[0]
        except EmbeddingError as exc:
            warnings.append(f"embedding backend unavailable: {exc}")
            vector = None
        candidates = _from_prefetch(entry, vector, settings, MEMORY_CANDIDATES)
        facts = entry.facts
    else:
        result = search(
            tenant_id,
            SearchRequest(
                user_id=request.user_id,
                query=request.query,
                channel=None,
                limit=MEMORY_CANDIDATES,
                agent_id=request.agent_id,
                include_knowledge=request.include_knowledge,
            ),
            settings=settings,
            embedder=embedder,
            client=None,
        )
        warnings += result.warnings
        candidates = [
            {
                "id": h.id,
                "layer": h.layer,
                "kind": h.kind,
                "content": h.content,
                "occurred_at": h.occurred_at,
                "score": h.score,
                "source_turn_ids": h.source_turn_ids,
                "event_ids": h.event_ids,
                "session_id": h.session_id,
                "speaker": h.speaker,
                "role": h.role,
                "memories": [m.id for m in h.memories],
                "suspected_instruction": h.suspected_instruction,
                "scope": h.scope,
            }
            for h in result.hits
        ]
    packer = Packer(budget)
    parts: dict[str, Any] = {
        "turns": [],
        "summary": None,
        "memories": [],
        "facts": [],
        "procedure": None,
    }
    # 1. Live conversation: newest first into at most CONVERSATION_SHARE of the budget.
    turns = working.turns if working is not None else []
    share = Packer(int(budget * CONVERSATION_SHARE))
    kept: list[tuple[WorkingTurn, bool, str]] = []
    for turn in reversed(turns):
        if blank_problem(turn.content):
            continue  # stored as sent (a blank message is no error), but nothing to show
        flagged = suspected(turn_line(turn))
        shown = quoted(turn_line(turn), flagged)
        if not share.add("turns", shown):
            break
        kept.append((turn, flagged, shown))
    kept.reverse()
    for _, _, shown in kept:
        packer.add("turns", shown)
    parts["turns"] = [
        {
            "id": t.id,
            "role": t.role,
            "speaker": t.speaker,
            "content": t.content,
            "at": t.at,
            "suspected_instruction": flagged,
        }
        for t, flagged, _ in kept
    ]
    in_block = {normalised(t.content) for t, *_ in kept} | {t.id for t, *_ in kept}
    # A short summary of older turns goes in before the memories, which would fill the rest.
    summary = working.summary if working is not None else None
    summary_block = summary_text(summary) if summary else ""
    if (
        summary
        and count_tokens(summary_block) <= budget * SUMMARY_SHARE
        and packer.add("summary", summary_block)
    ):
        parts["summary"] = summary
    # 2. Memories: every candidate's line counted in one batch, not per item; a line is
    # scanned for instructions only once it would fit (fenced, it is longer still).
    chosen: list[dict[str, Any]] = []
    limit = max(MIN_ITEM_TOKENS, int(budget * ITEM_SHARE))
    whole = ["\n" + item_line(item) for item in candidates]
    for item, counted_line, counted in zip(candidates, whole, count_many(whole), strict=True):
        sources = set(item.get("event_ids") or [])
        if blank_problem(item["content"]):
            continue
        if normalised(item["content"]) in in_block or (sources and sources <= in_block):
            continue  # it repeats what the conversation part already shows
        line = counted_line[1:]
        if counted > limit:
            line = shortened(line, limit)
            counted = count_tokens("\n" + line)
        day = day_of(item["occurred_at"])
        if not packer.fits("memories", counted, day):
            continue
        flagged = suspected(line, stored=bool(item.get("suspected_instruction")))
        if packer.add("memories", quoted(line, flagged), None if flagged else counted, day):
            chosen.append({**item, "suspected_instruction": flagged})
            in_block.add(normalised(item["content"]))
    parts["memories"] = chosen
    # The memories the block relies on: memory items, and those attached to turn items.
    recalled: dict[Any, float] = {}
    for item in chosen:
        for memory_id in [item["id"]] if item["layer"] == "memory" else item.get("memories", []):
            recalled.setdefault(memory_id, item["score"])
    # The graph facts about the chosen memories, and whether a procedure could be suggested,
    # in one transaction (each unit of work costs ~1 ms of the answer).
    procedures_held = entry is not None and entry.procedures
    if entry is None:
        with unit_of_work(tenant_id, agent_id=request.agent_id) as session:
            edges = facts_about(session=session, user_id=request.user_id, memory_ids=list(recalled))
            procedures_held = procedures.worth_asking(session, request.user_id, settings)
        facts = [
            {"line": render_fact(e), "memory_id": str(e.memory_id) if e.memory_id else None}
            for e in edges
        ]
    suggestion = None
    try:
        if procedures_held and procedures.has_pattern(request.query):
            suggestion = procedures.suggest(
                tenant_id=tenant_id,
                user_id=request.user_id,
                query=request.query,
                embedder=embedder,
                settings=settings,
            )
    except EmbeddingError as exc:
        warnings.append(f"no procedural suggestion: {exc}")
    # 3. Procedure.
    if suggestion is not None:
        steps = " → ".join(
            str(step.get("tool")) if isinstance(step, dict) else str(step)
            for step in suggestion.tool_sequence
        )
        line = f"{steps} (confidence {suggestion.confidence:.2f}, for “{suggestion.query_pattern}”)"
        flagged = suspected(line)
        if packer.add("procedure", quoted(" ".join(line.split()), flagged)):
            parts["procedure"] = {
                "id": suggestion.procedure_id,
                "tool_sequence": suggestion.tool_sequence,
                "confidence": suggestion.confidence,
                "similarity": suggestion.similarity,
                "suspected_instruction": flagged,
            }
    # 4. Summary of older turns.
    if summary and parts["summary"] is None and packer.add("summary", summary_block):
        parts["summary"] = summary
    # 5. Graph facts about the chosen memories.
    seen_facts: set[str] = set()
    for fact in facts:
        line = f"- {fact['line']}"
        if fact["line"] in seen_facts:
            continue
        counted = count_tokens("\n" + line)
        if not packer.fits("facts", counted):
            continue  # too long even unfenced: not scanned
        flagged = suspected(fact["line"])
        if packer.add("facts", quoted(line, flagged), None if flagged else counted):
            parts["facts"].append({**fact, "suspected_instruction": flagged})
            seen_facts.add(fact["line"])

    # Counted piece by piece, and pieces are joined at whitespace: with a tokenizer whose
    # counts add up over whitespace (the shipped one) that sum is the block's count. One that
    # merges across a separator could come out a token over, and the budget is a promise,
    # so then the total is counted again (~1.6 ms for a 2,000-token block).
    if counts_add_up():
        text, tokens = packer.text(), packer.used
    else:
        text, tokens = fit_to_tokens(packer.text(), budget)
    record_retrieval(
        client,
        settings,
        tenant_id=tenant_id,
        user_id=request.user_id,
        channel=request.channel,
        query=request.query,
        memory_ids=list(recalled),
        scores=list(recalled.values()),
        source="context",
    )
    return ContextResult(
        text=text,
        tokens=tokens,
        token_budget=budget,
        prefetch="hit" if entry is not None else "miss",
        parts=parts,
        took_ms=(time.perf_counter() - started) * 1000,
        warnings=warnings,
    )
