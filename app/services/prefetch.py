"""Speculative prefetch: when a user starts typing or switches channel, compute the memories
they are likely to need into Redis, so the context assembly that follows skips the database.

Likely = the user's hot memories (L5 view), plus what their recent searches on this channel
around this hour returned, plus what their live conversation (last user turns in L1) finds.
The entry carries each memory's vector, so the assembly ranks it against the real query.
"""

from __future__ import annotations

import base64
import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import redis

from app.config import Settings
from app.db.session import unit_of_work
from app.embedding.background import QueryVector
from app.embedding.base import Embedder, EmbeddingError, Owner
from app.keys import RedisKeys
from app.layers.conceptual.graph import facts_about, render_fact
from app.layers.episodic import search as turn_search
from app.layers.meta import access as access_sql
from app.layers.meta import procedures as procedure_sql
from app.layers.semantic import search as memory_search
from app.layers.working.store import WorkingMemoryStore
from app.services.search_memories import fuse, gather
from app.services.search_models import SearchRequest, memory_suspected

_log = logging.getLogger(__name__)

HOT = 50
PATTERN_HITS = 50
CONVERSATION_HITS = 30
PATTERN_WINDOW = timedelta(days=7)
FILL_TO = 150


@dataclass(frozen=True)
class PrefetchEntry:
    """Memories as columns (the hit path ranks them with one matrix product, no per-row
    parsing): `memories[i]` is described by row i of `vectors`, `importance`, `consolidation`
    and `occurred_at` (epoch seconds)."""

    computed_at: datetime
    memories: list[dict[str, Any]]
    vectors: np.ndarray
    importance: np.ndarray
    consolidation: np.ndarray
    occurred_at: np.ndarray
    facts: list[dict[str, Any]]
    # Whether the user had a procedure trusted enough to suggest: if not, the hit path skips
    # the procedure lookup (one database round trip) altogether.
    procedures: bool
    # The user's recent speakers: the hit path embeds the query without their names, as a
    # search does (app/text/speaker_names.py).
    speakers: list[str]


def _b64(array: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(array).tobytes()).decode()


def _array(text: str, dtype: type, shape: tuple[int, ...] | None = None) -> np.ndarray:
    array = np.frombuffer(base64.b64decode(text), dtype=dtype)
    return array.reshape(shape) if shape else array


def _conversation_query(store: WorkingMemoryStore, tenant_id: str, user_id: str) -> str | None:
    memory = store.read(tenant_id, user_id)
    if memory is None:
        return None
    said = [t.content for t in memory.turns if t.role == "user"][-3:]
    return " ".join(said)[:4000] or None


def prefetch(
    tenant_id: str,
    user_id: str,
    channel: str | None,
    *,
    settings: Settings,
    embedder: Embedder,
    client: redis.Redis,
    now: datetime | None = None,
) -> int:
    """Compute and cache the user's likely memories for `channel`; returns how many."""
    now = now or datetime.now(UTC)
    store = WorkingMemoryStore(client, settings)
    conversation = _conversation_query(store, tenant_id, user_id)
    vector = None
    if conversation:
        try:
            vector = embedder.embed([conversation], [Owner(tenant_id, user_id)])[0]
        except EmbeddingError as exc:
            _log.warning("prefetch without the conversation's vector: %s", exc)
    with unit_of_work(tenant_id) as session:
        ids: list[Any] = list(access_sql.hot_memories(session=session, user_id=user_id, limit=HOT))
        ids += [
            memory_id
            for memory_id, _ in access_sql.recent_hits(
                session=session,
                user_id=user_id,
                channel=channel,
                hour=now.hour,
                since=now - PATTERN_WINDOW,
                limit=PATTERN_HITS,
            )
        ]
        if conversation:
            request = SearchRequest(user_id=user_id, query=conversation, limit=CONVERSATION_HITS)
            rankings = gather(session, tenant_id, request, QueryVector.ready(vector), settings)
            fused, _ = fuse(rankings, settings)
            ranked = sorted(fused.items(), key=lambda kv: -kv[1])
            ids += [key[1] for key, _ in ranked if key[0] == "memory"][:CONVERSATION_HITS]
        unique = list(dict.fromkeys(ids))
        if len(unique) < FILL_TO:  # a small user's whole current memory fits: rank it all
            unique += memory_search.recent_memory_ids(
                session, user_id, limit=FILL_TO, exclude=unique
            )
        rows = memory_search.memories_by_id(session, user_id, unique, tenant_id=tenant_id)
        current = [i for i in unique if i in rows and rows[i].valid_to is None]
        current = [i for i in current if rows[i].archived_at is None]
        vectors = memory_search.memory_embeddings(session, user_id, current)
        edges = facts_about(session=session, user_id=user_id, memory_ids=current[:20], limit=20)
        trusted = procedure_sql.has_trusted(
            session, user_id, min_confidence=settings.procedure_min_confidence
        )
        speakers = turn_search.recent_speakers(session, tenant_id, user_id)
    kept = [i for i in current if i in vectors]
    memories = [
        {
            "id": str(i),
            "kind": rows[i].kind,
            "content": rows[i].content,
            "occurred_at": rows[i].occurred_at.isoformat(),
            "session_id": str(rows[i].session_id) if rows[i].session_id else None,
            "channel": rows[i].channel,
            "source_turn_ids": list(rows[i].source_external_ids or []),
            "event_ids": [str(t) for t in rows[i].source_ids or []],
            "suspected_instruction": memory_suspected(rows[i]),
        }
        for i in kept
    ]
    dim = settings.embedding_dim
    entry = {
        "computed_at": now.isoformat(),
        "memories": memories,
        "vectors": _b64(np.asarray([vectors[i] for i in kept], dtype=np.float32).reshape(-1, dim)),
        "importance": _b64(np.asarray([rows[i].importance for i in kept], dtype=np.float32)),
        "consolidation": _b64(
            np.asarray([rows[i].consolidation_strength for i in kept], dtype=np.float32)
        ),
        "occurred_at": _b64(
            np.asarray([rows[i].occurred_at.timestamp() for i in kept], dtype=np.float64)
        ),
        "facts": [
            {"line": render_fact(e), "memory_id": str(e.memory_id) if e.memory_id else None}
            for e in edges
        ],
        "procedures": trusted,
        "speakers": speakers,
    }
    key = RedisKeys.from_settings(settings).prefetch(tenant_id, user_id, channel or "")
    client.set(key, json.dumps(entry), ex=settings.prefetch_ttl_s)
    return len(memories)


def cached(
    client: redis.Redis, settings: Settings, tenant_id: str, user_id: str, channel: str | None
) -> PrefetchEntry | None:
    """The fresh entry (Redis expires it after the TTL), or None (also when it holds nothing:
    an empty guess must not hide what a search would find)."""
    raw = client.get(RedisKeys.from_settings(settings).prefetch(tenant_id, user_id, channel or ""))
    if raw is None:
        return None
    data = json.loads(raw)
    if not data["memories"]:
        return None
    count, dim = len(data["memories"]), settings.embedding_dim
    return PrefetchEntry(
        computed_at=datetime.fromisoformat(data["computed_at"]),
        memories=data["memories"],
        vectors=_array(data["vectors"], np.float32, (count, dim)),
        importance=_array(data["importance"], np.float32),
        consolidation=_array(data["consolidation"], np.float32),
        occurred_at=_array(data["occurred_at"], np.float64),
        facts=data["facts"],
        procedures=bool(data.get("procedures", True)),
        speakers=[str(name) for name in data.get("speakers", [])],
    )
