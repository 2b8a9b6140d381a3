"""Clearing one session of a user: its turns, the memories only it supports, its L1 turns.

A memory extracted from turns of several sessions is kept, citing only the turns of the other
sessions (its session becomes the one of its first remaining turn); a memory whose every
source turn is in the session goes from every layer, like a deleted memory
(app/services/memory_edits.py). Explicit memories cite no turn and are never touched.

Working memory (L1) is one window per user across sessions: the session's turns leave it and,
when some of them may already be folded into the rolling summary, the summary goes too (see
app/layers/working/prune.py). The database goes first in one transaction under the user's
advisory lock; Redis is cleared after the commit, so a failed transaction clears nothing.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import redis

from app.config import Settings
from app.db.session import unit_of_work
from app.layers.conceptual.unlink import unlink_memories
from app.layers.episodic import clear as episodic_clear
from app.layers.episodic import repository as episodic
from app.layers.meta.hits import drop_hits
from app.layers.semantic import removal
from app.layers.working.prune import forget_summary, prune_turns
from app.services.ingest import user_lock_key
from app.services.memory_caches import purge_memories


class SessionNotFoundError(LookupError):
    """No such session for this tenant and user."""


@dataclass
class Cleared:
    """What clearing a session removed (`rows` per kind) and what it kept."""

    session_id: uuid.UUID
    rows: dict[str, int] = field(default_factory=dict)
    deleted_memory_ids: list[uuid.UUID] = field(default_factory=list)
    kept_memory_ids: list[uuid.UUID] = field(default_factory=list)
    working_turns: int = 0
    summary_dropped: bool = False
    redis_keys: int = 0


def clear_session(
    tenant_id: str,
    user_id: str,
    session_id: uuid.UUID,
    *,
    settings: Settings,
    client: redis.Redis,
) -> Cleared:
    """Remove the session's turns and the memories only they support (module docstring)."""
    report = Cleared(session_id=session_id)
    # The raw archive is shared by the user's agents: their memories citing it are all seen.
    with unit_of_work(tenant_id, all_agents=True) as session:
        episodic.lock_users(session=session, keys=[user_lock_key(tenant_id, user_id)])
        if (
            episodic_clear.find_session(session=session, user_id=user_id, session_id=session_id)
            is None
        ):
            raise SessionNotFoundError(f"session {session_id} of user {user_id} not found")
        turns = episodic_clear.session_turns(
            session=session, user_id=user_id, session_id=session_id
        )
        turn_ids = [t.id for t in turns]
        citing = removal.citing_memories(session=session, user_id=user_id, turn_ids=turn_ids)
        doomed = [m.id for m in citing if not m.kept]
        kept = [
            (
                m.id,
                list(m.kept),
                m.kept_session if m.session_id in (None, session_id) else m.session_id,
            )
            for m in citing
            if m.kept
        ]
        associations = removal.count_associations(
            session=session, user_id=user_id, memory_ids=doomed
        )
        unlinked = unlink_memories(session=session, user_id=user_id, memory_ids=doomed)
        hits = drop_hits(session=session, user_id=user_id, memory_ids=doomed)
        deleted = removal.delete_memories(session=session, user_id=user_id, memory_ids=doomed)
        removal.keep_citations(session=session, rows=kept)
        removed_turns = episodic_clear.delete_turns(
            session=session, tenant_id=tenant_id, user_id=user_id, turn_ids=turn_ids
        )
        episodic_clear.delete_session(session=session, user_id=user_id, session_id=session_id)
        summaries = (
            forget_summary(session=session, user_id=user_id, since=turns[0].occurred_at)
            if turns
            else 0
        )
    report.rows = {
        "sessions": 1,  # found above; the last turn took it, or the delete did
        "turns": removed_turns,
        "memories": deleted,
        "mentions": unlinked.mentions,
        "relations": unlinked.relations,
        "entities": unlinked.entities,
        "associations": associations,
        "access_records": hits,
        "summaries": summaries,
    }
    report.deleted_memory_ids = sorted(doomed, key=str)
    report.kept_memory_ids = sorted((m for m, _, _ in kept), key=str)
    report.redis_keys = purge_memories(
        client, settings, tenant_id=tenant_id, user_id=user_id, memory_ids=doomed
    )
    pruned = prune_turns(
        client,
        settings,
        tenant_id=tenant_id,
        user_id=user_id,
        turns=[(str(t.id), t.occurred_at) for t in turns],
    )
    report.working_turns = pruned.turns
    report.summary_dropped = pruned.summary_dropped or summaries > 0
    return report
