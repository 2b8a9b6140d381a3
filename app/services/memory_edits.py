"""Editing one memory with its history kept, deleting one memory everywhere, and reading a
memory's versions and its related memories.

An edit never overwrites: it writes the new wording as a new row (every other column copied,
re-embedded, re-indexed in full text and L4), closes the old row's validity and points it at
the new one. Only the current version of a chain can be edited; a repeated edit is a no-op.
Idempotency compares content (the content hash, case and whitespace aside) and the other
fields sent: the same PATCH sent twice — to the memory, or again to the version it replaced —
answers the current version with status `unchanged` and writes nothing. Any other edit of a
replaced version is a conflict naming the current one, so two clients editing one memory
cannot silently fork it.

Deleting a memory removes its whole version chain from every layer: rows, mentions (entity
counts follow), relations only it stated, associations, recorded search hits, and the Redis
copies (app/services/memory_caches.py). Its source turns stay unless `with_trace`, which also
deletes the turns no other memory cites (and takes them out of working memory).

Writes take the user's advisory lock, as remembering and extraction do, so an edit and a
store of the same user land one after the other.

Each call acts as an agent (`agent_id`) or as no agent, like reading a memory: an agent's
private memory exists only for that agent (404 for any other), and its new versions stay in
that agent's private map (every column, `agent_id` and `shared` among them, is copied).
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

import redis
from pydantic import BaseModel, ConfigDict, Field, StrictFloat
from sqlalchemy.exc import IntegrityError

from app.config import Settings
from app.db.session import unit_of_work
from app.embedding.base import Embedder, Owner
from app.extraction.base import Gem
from app.layers.conceptual.graph import related_memories
from app.layers.conceptual.service import record_entities
from app.layers.conceptual.unlink import hand_over_associations, unlink_memories
from app.layers.episodic import clear as episodic_clear
from app.layers.episodic import repository as episodic
from app.layers.meta.hits import drop_hits
from app.layers.semantic import removal, versions
from app.layers.semantic import search as memory_search
from app.layers.semantic.models import MEMORY_KINDS
from app.layers.semantic.repository import vector_literal
from app.layers.semantic.service import content_hash
from app.layers.working.prune import forget_summary, prune_turns
from app.limits import ContentText, Metadata
from app.services.ingest import user_lock_key
from app.services.memories import memory_view
from app.services.memory_caches import purge_memories
from app.streams.events import Identifier


class MemoryNotFoundError(LookupError):
    """No such memory for this tenant (and user, when one was named)."""


class VersionConflictError(Exception):
    """The edit cannot apply: the memory was replaced (`current_id`: by what), or another
    memory of the user already says the new content (`duplicate_of`)."""

    def __init__(
        self,
        message: str,
        *,
        current_id: uuid.UUID | None = None,
        duplicate_of: uuid.UUID | None = None,
        field: str | None = None,
    ) -> None:
        super().__init__(message)
        self.current_id = current_id
        self.duplicate_of = duplicate_of
        self.field = field or ("content" if duplicate_of else "memory_id")


class MemoryEdit(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    content: ContentText = Field(min_length=1, max_length=20_000)
    user_id: Identifier | None = Field(
        default=None, description="when given, the memory must be this user's (else 404)"
    )
    agent_id: Identifier | None = Field(
        default=None,
        description="the agent editing: its private memories besides the user's and the"
        " shared ones (none: those only)",
    )
    kind: Literal[MEMORY_KINDS] | None = None  # type: ignore[valid-type]
    importance: StrictFloat | None = Field(default=None, ge=0, le=1)
    metadata: Metadata | None = Field(
        default=None, description="replaces the old version's metadata when given"
    )


@dataclass(frozen=True)
class Edited:
    status: Literal["updated", "unchanged"]
    memory: dict[str, Any]
    previous_id: uuid.UUID | None


def _normalised(content: str) -> str:
    return " ".join(content.split())


def _metadata(row: Any, edit: MemoryEdit) -> dict[str, Any]:
    old = dict(row.metadata or {})
    if edit.metadata is None:
        return old
    kept = {"explicit": old["explicit"]} if "explicit" in old else {}
    return {**edit.metadata, **kept}


def _same(row: Any, edit: MemoryEdit) -> bool:
    """Whether the edit asks for exactly what this version already holds."""
    return (
        content_hash(row.content) == content_hash(_normalised(edit.content))
        and (edit.kind is None or edit.kind == row.kind)
        and (edit.importance is None or abs(edit.importance - row.importance) < 1e-9)
        and (edit.metadata is None or _metadata(row, edit) == dict(row.metadata or {}))
    )


def _view(session: Any, memory_id: uuid.UUID) -> dict[str, Any]:
    return memory_view(memory_search.memories_by_id(session, None, [memory_id])[memory_id])


def _locked(session: Any, tenant_id: str, memory_id: uuid.UUID, user_id: str | None) -> Any:
    """The memory locked for this transaction, its user's advisory lock taken first (the
    order every store of the user takes them in); raises MemoryNotFoundError."""
    found = memory_search.memories_by_id(session, user_id, [memory_id], sources=False)
    if memory_id not in found:
        raise MemoryNotFoundError(f"memory {memory_id} not found")
    owner = found[memory_id].user_id
    episodic.lock_users(session=session, keys=[user_lock_key(tenant_id, owner)])
    row = versions.lock_memory(session, memory_id, owner)
    if row is None:  # deleted while the lock was awaited
        raise MemoryNotFoundError(f"memory {memory_id} not found")
    return row


def update_memory(
    tenant_id: str,
    memory_id: uuid.UUID,
    edit: MemoryEdit,
    *,
    settings: Settings,
    embedder: Embedder,
    client: redis.Redis,
) -> Edited:
    """Write the edit as the memory's new version (module docstring); raises MemoryNotFoundError
    or VersionConflictError."""
    content = _normalised(edit.content)
    # Whose memory it is is known before the lock only when the edit names the user.
    owners = None if edit.user_id is None else [Owner(tenant_id, edit.user_id)]
    vector = embedder.embed([content], owners)[0]
    now = datetime.now(UTC)
    try:
        with unit_of_work(tenant_id, agent_id=edit.agent_id) as session:
            row = _locked(session, tenant_id, memory_id, edit.user_id)
            user_id = row.user_id
            if row.valid_to is not None:
                head = versions.chain_head(session, row.id, user_id)
                current = head if head is not None and head.valid_to is None else None
                if current is not None and _same(current, edit):
                    return Edited("unchanged", _view(session, current.id), None)
                raise VersionConflictError(
                    f"memory {memory_id} was replaced"
                    + (
                        f" by {current.id}: edit that one"
                        if current
                        else " and has no current version"
                    ),
                    current_id=current.id if current else None,
                )
            if _same(row, edit):
                return Edited("unchanged", _view(session, row.id), None)
            new_id = uuid.uuid4()
            digest = content_hash(content, row.agent_id)  # scoped like remembering's key
            holder = versions.holder_of_hash(session, tenant_id, user_id, digest)
            if holder is not None:
                if holder not in versions.chain_ids(session, row.id, user_id):
                    raise VersionConflictError(
                        f"memory {holder} already says this", duplicate_of=holder
                    )
                # The unique (user, content hash) key belongs to an earlier version of this very
                # memory (an edit back to old wording): this version's key is salted with its id.
                digest = hashlib.sha256(f"{digest}:{new_id}".encode()).hexdigest()
            kind = edit.kind or row.kind
            tags = sorted({kind, *(t for t in row.tags or [] if t != row.kind)})
            summary = content if len(content) <= 160 else content[:157] + "..."
            overrides: dict[str, Any] = {
                "id": new_id,
                "kind": kind,
                "content": content,
                "summary": summary,
                "original": edit.content,
                "content_hash": digest,
                "tags": tags,
                "metadata": _metadata(row, edit),
                "embedding": vector_literal(vector),
                "valid_from": now,
                "valid_to": None,
                "superseded_by": None,
                "archived_at": None,
                "extractor": "edit",
                "extraction_batch_id": None,
                "search_tsv": None,
                "created_at": now,
                "updated_at": now,
            }
            if edit.importance is not None:
                overrides.update(importance=edit.importance, decayed_at=now)
            versions.insert_version(session, old_id=row.id, overrides=overrides)
            versions.close_version(session, old_id=row.id, new_id=new_id, at=now)
            unlink_memories(session=session, user_id=user_id, memory_ids=[row.id])
            sources = [str(t) for t in row.source_turn_ids or []]
            gem = Gem(
                kind=kind,
                content=content,
                summary=summary,
                topics=list(row.topics or []),
                importance=edit.importance if edit.importance is not None else row.importance,
                source_turn_ids=sources,
                occurred_at=row.occurred_at,
                metadata=overrides["metadata"],
            )
            record_entities(
                session=session, tenant_id=tenant_id, user_id=user_id, memories=[(new_id, gem)]
            )
            hand_over_associations(session=session, user_id=user_id, old_id=row.id, new_id=new_id)
            view = _view(session, new_id)
    except IntegrityError:
        # The content's key is taken by a row this caller cannot see (another agent's private
        # memory) or by a concurrent edit: nothing was written.
        raise VersionConflictError(
            "another memory of the user already says this", field="content"
        ) from None
    purge_memories(client, settings, tenant_id=tenant_id, user_id=user_id, memory_ids=[row.id])
    return Edited("updated", view, row.id)


@dataclass
class Deleted:
    """What deleting a memory removed."""

    ids: list[uuid.UUID] = field(default_factory=list)  # the versions deleted
    rows: dict[str, int] = field(default_factory=dict)  # per kind of row
    redis_keys: int = 0  # Redis keys removed or rewritten


def delete_memory(
    tenant_id: str,
    memory_id: uuid.UUID,
    *,
    user_id: str | None,
    with_trace: bool,
    settings: Settings,
    client: redis.Redis,
    agent_id: str | None = None,
) -> Deleted:
    """Delete the memory and every version of it from every layer (module docstring)."""
    report = Deleted()
    with unit_of_work(
        tenant_id, agent_id=agent_id
    ) as session:  # what the caller may see decides the 404
        if memory_id not in memory_search.memories_by_id(session, user_id, [memory_id]):
            raise MemoryNotFoundError(f"memory {memory_id} not found")
    # Every agent's memories: a turn another agent's memory cites is not this memory's alone.
    with unit_of_work(tenant_id, all_agents=True) as session:
        found = _locked(session, tenant_id, memory_id, user_id)
        owner = found.user_id
        ids = versions.chain_ids(session, found.id, owner)
        turns = (
            removal.sole_source_turns(session=session, user_id=owner, memory_ids=ids)
            if with_trace
            else []
        )
        timed = episodic_clear.turn_times(session=session, user_id=owner, turn_ids=turns)
        associations = removal.count_associations(session=session, user_id=owner, memory_ids=ids)
        unlinked = unlink_memories(session=session, user_id=owner, memory_ids=ids)
        hits = drop_hits(session=session, user_id=owner, memory_ids=ids)
        deleted = removal.delete_memories(session=session, user_id=owner, memory_ids=ids)
        removed_turns = episodic_clear.delete_turns(
            session=session, tenant_id=tenant_id, user_id=owner, turn_ids=turns
        )
        if timed:
            forget_summary(session=session, user_id=owner, since=min(at for _, at in timed))
    report.ids = sorted(ids, key=str)
    report.rows = {
        "memories": deleted,
        "mentions": unlinked.mentions,
        "relations": unlinked.relations,
        "entities": unlinked.entities,
        "associations": associations,
        "access_records": hits,
        "turns": removed_turns,
    }
    report.redis_keys = purge_memories(
        client, settings, tenant_id=tenant_id, user_id=owner, memory_ids=ids
    )
    if timed:
        report.redis_keys += prune_turns(
            client,
            settings,
            tenant_id=tenant_id,
            user_id=owner,
            turns=[(str(t), at) for t, at in timed],
        ).turns
    return report


def memory_history(
    tenant_id: str, memory_id: uuid.UUID, *, user_id: str | None, agent_id: str | None = None
) -> dict[str, Any] | None:
    """The memory's version chain, oldest first, from any version of it; None if unknown."""
    with unit_of_work(tenant_id, agent_id=agent_id) as session:
        row = memory_search.memories_by_id(session, user_id, [memory_id], sources=False)
        found = row.get(memory_id)
        if found is None:
            return None
        ids = versions.chain_ids(session, memory_id, found.user_id)
        rows = versions.versions(session, ids)
    current = next((r.id for r in reversed(rows) if r.valid_to is None), None)
    return {
        "memory_id": memory_id,
        "current_id": current,
        "versions": [
            {**memory_view(r), "version": n, "supersedes": r.supersedes}
            for n, r in enumerate(rows, start=1)
        ],
    }


def related(
    tenant_id: str,
    memory_id: uuid.UUID,
    *,
    user_id: str | None,
    limit: int,
    agent_id: str | None = None,
) -> list[dict[str, Any]] | None:
    """Current memories associated with this one (Hebbian edges) or sharing its entities,
    strongest first (the agent's private ones besides the shared); None if unknown."""
    with unit_of_work(tenant_id, agent_id=agent_id) as session:
        row = memory_search.memories_by_id(session, user_id, [memory_id], sources=False)
        found = row.get(memory_id)
        if found is None:
            return None
        linked = related_memories(
            session=session, user_id=found.user_id, memory_ids=[memory_id], limit=limit
        )
    return [
        {
            "id": r.memory_id,
            "content": r.content,
            "score": r.score,
            "shared_entities": list(r.shared_entities),
            "association_weight": r.association_weight,
        }
        for r in linked
    ]
