"""Gems into L3: dedupe within the batch, reinforce near-duplicates, supersede contradictions.

All of one user's batch is decided with set-based reads (nearest memories per gem,
current memories per subject, the turns already cited by the memories it repeats) and
written with three statements, in the caller's transaction.

Two limits keep a repeated line from becoming one memory that cites dozens of turns:

- Lines that say nothing storable (app/extraction/smalltalk.says_nothing: "Thanks!",
  "Wow, so cool!") are never near-duplicates of anything: they neither fold into a twin in
  the batch nor reinforce a stored memory, and no gem reinforces such a memory. Their
  embeddings all sit close together, so near-duplicate merging is what glued them into one.
- A memory cites at most MAX_SOURCE_TURNS turns: the first ones that said it. A repeat
  beyond that still reinforces it (importance, access count) but adds no source turn. The
  repeat is the same memory, so making it a new one would only add a duplicate; and a
  search hit that points at forty turns points at none of them.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from app.config import Settings
from app.extraction.base import Gem, embedding_text
from app.extraction.smalltalk import says_nothing
from app.layers.semantic import repository

MAX_SOURCE_TURNS = 8


def content_hash(content: str, agent_id: str | None = None) -> str:
    """Exact-duplicate key: case and whitespace do not make a new memory; another agent's
    scope does (the same words in two agents' private maps are two memories)."""
    scope = f"agent:{agent_id}\x1f" if agent_id is not None else ""
    return hashlib.sha256((scope + " ".join(content.lower().split())).encode()).hexdigest()


# A number: an optional sign (not a hyphen inside a word, as in "COVID-19"), digits, and
# digit groups joined by . , : / - (decimals, thousands, times, dates, ranges).
_NUMBER = re.compile(r"(?:(?<![\w.])[-\u2212])?\d+(?:[.,:/-]\d+)*")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")


def numbers_in(text: str) -> list[str]:
    """The numbers a text states, normalised ("1,800" = "1800", "1,2,3" = "1, 2, 3"), sorted."""
    found: list[str] = []
    for match in _NUMBER.finditer(text):
        token = _THOUSANDS.sub("", match.group(0).replace("\u2212", "-"))
        found += token.split(",")
    return sorted(found)


def same_numbers(a: str, b: str) -> bool:
    """Whether two texts state the same numbers (amounts, counts, dates, versions).

    The embedding barely tells "a budget of 4,372 euros" from "a budget of 20,092 euros"
    (cosine ≥ 0.95 here), yet they are different memories: a near-duplicate must also agree
    on every number, or reinforcing would keep the first figure and lose the second. Numbers
    written as words ("twelve") are not compared."""
    return numbers_in(a) == numbers_in(b)


def _cosines(vectors: Sequence[Sequence[float]]) -> np.ndarray:
    if not vectors:
        return np.zeros((0, 0), dtype=np.float32)
    matrix = np.asarray(vectors, dtype=np.float32)
    return matrix @ matrix.T


@dataclass
class StoredGems:
    created: list[tuple[uuid.UUID, Gem]] = field(default_factory=list)
    reinforced: list[tuple[uuid.UUID, Gem]] = field(default_factory=list)
    superseded: int = 0


@dataclass
class GemScope:
    """One user's gems in one agent scope (`agent_id` None: the user's level), as a batch
    stores them: near-duplicates and contradictions are looked for in that scope only."""

    user_id: str
    batch_id: uuid.UUID
    extractor: str
    gems: Sequence[Gem]
    vectors: Sequence[Sequence[float]]
    turn_scores: dict[str, tuple[float, float]]
    session_of_turn: dict[str, Any]
    channel_of_turn: dict[str, str] | None = None
    agent_id: str | None = None
    shared: bool = False


@dataclass
class _Pending:
    gem: Gem
    vector: Sequence[float]
    sources: list[str]
    row: int  # its position in the batch's similarity matrix
    generic: bool = False  # says nothing storable: never a near-duplicate (module docstring)
    literal: str = ""  # the vector as pgvector text, formatted once for the read and the insert


@dataclass
class _Plan:
    """One scope's decisions before the writes."""

    scope: GemScope
    pending: list[_Pending]
    matches: list[tuple[_Pending, Any]] = field(default_factory=list)
    new_rows: list[dict[str, Any]] = field(default_factory=list)
    new_gems: list[Gem] = field(default_factory=list)
    supersede_rows: list[dict[str, Any]] = field(default_factory=list)
    by_match: dict[str, dict[str, Any]] = field(default_factory=dict)
    stored: StoredGems = field(default_factory=StoredGems)


def cite(cited: Sequence[str], more: Sequence[str], limit: int = MAX_SOURCE_TURNS) -> list[str]:
    """`cited` with the turns of `more` it lacks appended, up to `limit` turns in all (a
    list already at the limit is left as it is)."""
    out = list(cited)
    for turn in more:
        if len(out) >= limit:
            break
        if turn not in out:
            out.append(turn)
    return out


def store_gems(
    *,
    session: Session,
    settings: Settings,
    tenant_id: str,
    user_id: str,
    batch_id: uuid.UUID,
    extractor: str,
    gems: Sequence[Gem],
    vectors: Sequence[Sequence[float]],
    turn_scores: dict[str, tuple[float, float]],
    session_of_turn: dict[str, Any],
    channel_of_turn: dict[str, str] | None = None,
    agent_id: str | None = None,
    shared: bool = False,
) -> StoredGems:
    """Store one agent scope's gems (`agent_id` None: the user's level): near-duplicates and
    contradictions are looked for in that scope only, so scopes never merge."""
    scope = GemScope(
        user_id,
        batch_id,
        extractor,
        gems,
        vectors,
        turn_scores,
        session_of_turn,
        channel_of_turn,
        agent_id,
        shared,
    )
    return store_scopes(session=session, settings=settings, tenant_id=tenant_id, scopes=[scope])[0]


def store_scopes(
    *, session: Session, settings: Settings, tenant_id: str, scopes: Sequence[GemScope]
) -> list[StoredGems]:
    """Store many scopes' gems with one statement per kind of read and write, as if each were
    stored alone: scopes never see each other's rows (another user's, another agent's), so
    reading before any of them writes decides the same. No two scopes may hold the same user
    and agent (the second would miss the first's memories)."""
    plans = [_Plan(scope, _dedupe_batch(settings, scope)) for scope in scopes]
    items = [(plan, p) for plan in plans for p in plan.pending]

    # 2. Against stored memories: near-duplicates reinforce; same subject+value reinforces.
    nearest = repository.nearest_per_vector(
        session=session,
        tenant_id=tenant_id,
        scopes=[(plan.scope.user_id, plan.scope.agent_id) for plan, _ in items],
        vectors=[p.literal for _, p in items],
        texts=[p.gem.content for _, p in items],
    )
    keys = sorted(
        {
            (plan.scope.user_id, plan.scope.agent_id, p.gem.subject)
            for plan, p in items
            if p.gem.subject
        },
        key=lambda k: (k[0], k[1] or "", k[2]),
    )
    by_subject: dict[tuple[str, str | None, str], list[Any]] = {}
    for row in repository.current_by_subject(session=session, tenant_id=tenant_id, keys=keys):
        by_subject.setdefault((row.user_id, row.agent_id, row.subject), []).append(row)
    at = 0
    for plan in plans:
        found = nearest[at : at + len(plan.pending)]
        at += len(plan.pending)
        scope = plan.scope
        _decide(settings, tenant_id, plan, found, by_subject, (scope.user_id, scope.agent_id))

    # Reinforcing adds only the turns a memory can still cite (MAX_SOURCE_TURNS); so does an
    # exact twin of a stored memory, which the insert merges into it.
    cited_by_id, cited_by_hash = repository.cited_turns(
        session=session,
        tenant_id=tenant_id,
        ids=[(m, plan.scope.user_id) for plan in plans for _, m in plan.matches],
        hashes=[(plan.scope.user_id, r["content_hash"]) for plan in plans for r in plan.new_rows],
    )
    for plan in plans:
        _cite_repeats(plan, cited_by_id, cited_by_hash)
    repository.reinforce(
        session=session, rows=[row for plan in plans for row in plan.by_match.values()]
    )
    results = repository.insert_memories(
        session=session, rows=[row for plan in plans for row in plan.new_rows]
    )
    supersede_rows: list[dict[str, Any]] = []
    for plan in plans:
        stored = plan.stored
        for row, gem in zip(plan.new_rows, plan.new_gems, strict=True):
            memory_id, inserted = results[(plan.scope.user_id, row["content_hash"])]
            (stored.created if inserted else stored.reinforced).append((memory_id, gem))
        # Only rows actually inserted may supersede (an exact twin reinforced an old row).
        created_ids = {memory_id for memory_id, _ in stored.created}
        rows = [r for r in plan.supersede_rows if r["new_id"] in created_ids]
        stored.superseded = len({r["id"] for r in rows})
        supersede_rows += rows
    repository.supersede(session=session, rows=supersede_rows)
    return [plan.stored for plan in plans]


def _dedupe_batch(settings: Settings, scope: GemScope) -> list[_Pending]:
    """1. Within the batch: a gem close to an earlier one only adds its sources to it.
    All pairwise cosines in one product (vectors are unit length): the pure-Python pair loop
    was 14 % of a store worker's time at ~30 gems per batch."""
    similar = _cosines(scope.vectors) >= settings.dedup_cosine
    pending: list[_Pending] = []
    for row, (gem, vector) in enumerate(zip(scope.gems, scope.vectors, strict=True)):
        generic = says_nothing(gem.original or gem.content)
        twin = next(
            (
                p
                for p in pending
                if not generic
                and not p.generic
                and similar[p.row, row]
                and same_numbers(p.gem.content, gem.content)
                # One sentence said twice (by two speakers) gives one vector but two memories;
                # the very same content meets its twin by content hash below.
                and embedding_text(p.gem) != embedding_text(gem)
            ),
            None,
        )
        if twin is not None:
            twin.sources = cite(twin.sources, gem.source_turn_ids)
            continue
        sources = cite([], gem.source_turn_ids)
        pending.append(
            _Pending(gem, vector, sources, row, generic, repository.vector_literal(vector))
        )
    return pending


def _decide(
    settings: Settings,
    tenant_id: str,
    plan: _Plan,
    nearest: Sequence[Sequence[repository.Neighbour]],
    current: dict[tuple[str, str | None, str], list[Any]],
    scope_key: tuple[str, str | None],
) -> None:
    """Each pending gem of a scope: reinforces a match, merges into a twin, or is new (and
    supersedes the scope's current memories of its subject with another value)."""
    scope = plan.scope
    for item, neighbours in zip(plan.pending, nearest, strict=True):
        gem = item.gem
        of_subject = current.get((*scope_key, gem.subject), []) if gem.subject else []
        same_value = [r for r in of_subject if (r.value or "") == (gem.value or "")]
        match = next(
            (
                memory_id
                for memory_id, cosine, trigram, subject, value, content in neighbours
                if not item.generic
                and cosine >= settings.dedup_cosine
                and trigram >= settings.dedup_trigram
                and same_numbers(content, gem.content)
                # Memories about two different subjects are never one memory, however alike.
                and (not gem.subject or not subject or (subject, value) == (gem.subject, gem.value))
                and not says_nothing(content)
            ),
            same_value[0].id if same_value else None,
        )
        if match is not None:
            plan.matches.append((item, match))
            continue
        digest = content_hash(gem.content, scope.agent_id)
        twin_row = next((r for r in plan.new_rows if r["content_hash"] == digest), None)
        if twin_row is not None:  # same text twice in one batch (below the cosine cut-off)
            twin_row["source_turn_ids"] = cite(twin_row["source_turn_ids"], item.sources)
            continue
        memory_id = uuid.uuid4()
        for old in of_subject:
            if (old.value or "") != (gem.value or "") and old.occurred_at <= gem.occurred_at:
                plan.supersede_rows.append(
                    {"id": old.id, "new_id": memory_id, "valid_to": gem.occurred_at}
                )
        plan.new_rows.append(_memory_row(tenant_id, scope, item, memory_id, digest))
        plan.new_gems.append(gem)


def _memory_row(
    tenant_id: str, scope: GemScope, item: _Pending, memory_id: uuid.UUID, digest: str
) -> dict[str, Any]:
    gem = item.gem
    emotional, salience = max(
        (scope.turn_scores.get(t, (0.0, 0.0)) for t in item.sources), default=(0.0, 0.0)
    )
    first = item.sources[0] if item.sources else None
    return {
        "id": memory_id,
        "tenant_id": tenant_id,
        "user_id": scope.user_id,
        "agent_id": scope.agent_id,
        "shared": scope.shared,
        "kind": gem.kind,
        "content": gem.content,
        "summary": gem.summary,
        "topics": list(gem.topics),
        "tags": sorted({gem.kind, *gem.tags}),
        "importance": min(1.0, max(0.0, gem.importance)),
        "emotional_intensity": emotional,
        "salience": salience,
        "occurred_at": gem.occurred_at,
        "valid_from": gem.occurred_at,
        "session_id": scope.session_of_turn.get(first) if first else None,
        "source_turn_ids": item.sources,
        "content_hash": digest,
        "original": gem.original,
        "subject": gem.subject,
        "value": gem.value,
        "extractor": scope.extractor,
        "extraction_batch_id": scope.batch_id,
        "metadata": gem.metadata,
        "embedding": item.literal,
        "channel": gem.channel or (scope.channel_of_turn or {}).get(first or "", None),
    }


def _cite_repeats(
    plan: _Plan,
    cited_by_id: dict[str, list[str]],
    cited_by_hash: dict[tuple[str, str], list[str]],
) -> None:
    """One reinforce row per matched memory (an UPDATE … FROM applies only one of several
    rows for the same id); `cited` grows as rows are planned, shared by the id and hash views
    of a memory."""
    for item, match in plan.matches:
        cited = cited_by_id.setdefault(str(match), [])
        fresh = [s for s in cite(cited, item.sources) if s not in cited]
        cited += fresh
        row = plan.by_match.setdefault(
            str(match), {"id": match, "importance": 0.0, "source_turn_ids": []}
        )
        row["importance"] = max(row["importance"], item.gem.importance)
        row["source_turn_ids"] += fresh
        plan.stored.reinforced.append((match, item.gem))
    for row in plan.new_rows:
        cited = cited_by_hash.get((plan.scope.user_id, row["content_hash"]))
        if cited is not None:
            more = cite(cited, row["source_turn_ids"])
            row["source_turn_ids"] = [s for s in more if s not in cited]
