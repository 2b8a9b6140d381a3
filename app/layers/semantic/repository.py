"""SQL for L3 memories (extraction batches: batches.py). Set-based; never commits."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

# Re-exported: the layers' callers import it from here.
from app.db.nearest import vector_literal as vector_literal


def vector_array(literals: Sequence[str]) -> str:
    """Vector literals as one `vector[]` literal: one string to send, where a list param is
    scanned for quoting element by element (vector literals hold no quote or backslash)."""
    return "{" + ",".join(f'"{literal}"' for literal in literals) + "}"


# -- memories ------------------------------------------------------------------------------


def cited_turns(
    *,
    session: Session,
    tenant_id: str,
    ids: Sequence[tuple[Any, str]],
    hashes: Sequence[tuple[str, str]],
) -> tuple[dict[str, list[str]], dict[tuple[str, str], list[str]]]:
    """Source turns of the memories these gems would reinforce: by id (near-duplicates, as
    (memory id, its user)) and by (user, content hash) (exact twins, merged by the insert).
    A memory found both ways gives one list, shared by both views."""
    if not ids and not hashes:
        return {}, {}
    rows = session.execute(
        text(
            "SELECT m.* FROM unnest(CAST(:ids AS uuid[]), CAST(:id_users AS text[])) AS k(id, u)"
            " CROSS JOIN LATERAL (SELECT id, user_id, content_hash, source_turn_ids"
            "  FROM semantic.memories WHERE id = k.id AND tenant_id = :tenant AND user_id = k.u"
            "  OFFSET 0) AS m"
            " UNION SELECT m.* FROM unnest(CAST(:users AS text[]), CAST(:hashes AS text[]))"
            " AS k(u, h) CROSS JOIN LATERAL (SELECT id, user_id, content_hash, source_turn_ids"
            "  FROM semantic.memories WHERE tenant_id = :tenant AND user_id = k.u"
            "  AND content_hash = k.h OFFSET 0) AS m"
        ),
        {
            "tenant": tenant_id,
            "ids": [str(i) for i, _ in ids],
            "id_users": [u for _, u in ids],
            "users": [u for u, _ in hashes],
            "hashes": [h for _, h in hashes],
        },
    )
    by_id: dict[str, list[str]] = {}
    by_hash: dict[tuple[str, str], list[str]] = {}
    for memory_id, user_id, digest, sources in rows:
        cited = [str(s) for s in sources or []]
        by_id[str(memory_id)] = by_hash[(user_id, digest)] = cited
    return by_id, by_hash


Neighbour = tuple[uuid.UUID, float, float, str | None, str | None, str]


def nearest_per_vector(
    *,
    session: Session,
    tenant_id: str,
    scopes: Sequence[tuple[str, str | None]],
    vectors: Sequence[str],
    texts: Sequence[str],
    k: int = 3,
) -> list[list[Neighbour]]:
    """For each vector (a pgvector literal) and its (user, agent) scope: the k nearest current
    memories of that user in that agent scope (the user's level when the agent is None), as
    (id, cosine similarity, trigram similarity to the matching text, subject, value, content).

    One statement for every scope of a store (LATERAL over the HNSW index)."""
    if not vectors:
        return []
    result: list[list[Neighbour]] = [[] for _ in vectors]
    rows = session.execute(
        text(
            "SELECT g.n, m.id, 1 - (m.embedding <=> g.v) AS cosine,"
            " similarity(m.content, g.t) AS trigram, m.subject, m.value, m.content"
            " FROM unnest(CAST(:users AS text[]), CAST(:agents AS text[]),"
            "  CAST(:vectors AS vector[]), CAST(:texts AS text[]))"
            " WITH ORDINALITY AS g(u, a, v, t, n)"
            " CROSS JOIN LATERAL (SELECT id, embedding, content, subject, value"
            "  FROM semantic.memories WHERE tenant_id = :tenant AND user_id = g.u"
            "  AND agent_id IS NOT DISTINCT FROM g.a"
            "  AND valid_to IS NULL AND archived_at IS NULL AND embedding IS NOT NULL"
            "  ORDER BY embedding <=> g.v LIMIT :k) AS m"
        ),
        {
            "users": [u for u, _ in scopes],
            "agents": [a for _, a in scopes],
            "vectors": vector_array(vectors),
            "texts": list(texts),
            "tenant": tenant_id,
            "k": k,
        },
    )
    for n, memory_id, cosine, trigram, subject, value, content in rows:
        result[int(n) - 1].append(
            (memory_id, float(cosine), float(trigram), subject, value, content)
        )
    return result


def current_by_subject(
    *, session: Session, tenant_id: str, keys: Sequence[tuple[str, str | None, str]]
) -> list[Any]:
    """Current (not superseded) memories holding these (user, agent, subject) keys: one
    agent scope's contradiction does not close another's memory. Each key is looked up on
    its own (`OFFSET 0` keeps the LATERAL a subquery, never a join over the tenant)."""
    if not keys:
        return []
    return list(
        session.execute(
            text(
                "SELECT m.* FROM unnest(CAST(:users AS text[]), CAST(:agents AS text[]),"
                "  CAST(:subjects AS text[])) AS k(u, a, s)"
                " CROSS JOIN LATERAL (SELECT id, user_id, agent_id, subject, value, occurred_at"
                "  FROM semantic.memories WHERE tenant_id = :tenant AND user_id = k.u"
                "  AND subject = k.s AND agent_id IS NOT DISTINCT FROM k.a"
                "  AND valid_to IS NULL AND subject IS NOT NULL OFFSET 0) AS m"
                " ORDER BY m.occurred_at, m.id"
            ),
            {
                "tenant": tenant_id,
                "users": [u for u, _, _ in keys],
                "agents": [a for _, a, _ in keys],
                "subjects": [s for _, _, s in keys],
            },
        )
    )


_MEMORY_COLUMNS = (
    ("id", "uuid"),
    ("tenant_id", "text"),
    ("user_id", "text"),
    ("agent_id", "text"),
    ("shared", "boolean"),
    ("kind", "text"),
    ("content", "text"),
    ("summary", "text"),
    ("topics", "jsonb"),
    ("tags", "text[]"),
    ("importance", "float8"),
    ("emotional_intensity", "float8"),
    ("salience", "float8"),
    ("occurred_at", "timestamptz"),
    ("valid_from", "timestamptz"),
    ("session_id", "uuid"),
    ("source_turn_ids", "uuid[]"),
    ("content_hash", "text"),
    ("original", "text"),
    ("subject", "text"),
    ("value", "text"),
    ("extractor", "text"),
    ("extraction_batch_id", "uuid"),
    ("metadata", "jsonb"),
    ("embedding", "text"),
    ("channel", "text"),
)
_NAMES = ", ".join(name for name, _ in _MEMORY_COLUMNS)
_TYPES = ", ".join(f"{name} {kind}" for name, kind in _MEMORY_COLUMNS)
_SELECT = ", ".join(
    "CAST(r.embedding AS vector)" if name == "embedding" else f"r.{name}"
    for name, _ in _MEMORY_COLUMNS
)
# Built from the constant column list above, never from input. An exact duplicate (same
# content hash) reinforces the stored memory instead of adding a row.
_INSERT_MEMORIES = text(
    f"INSERT INTO semantic.memories ({_NAMES}) SELECT {_SELECT}"  # noqa: S608
    f" FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS r({_TYPES})"
    " ON CONFLICT (tenant_id, user_id, content_hash) DO UPDATE SET"
    " importance = LEAST(1.0, GREATEST(semantic.memories.importance, excluded.importance) + 0.05),"
    " source_turn_ids = ARRAY(SELECT DISTINCT unnest(semantic.memories.source_turn_ids"
    "  || excluded.source_turn_ids)),"
    " updated_at = now()"
    " RETURNING id, user_id, content_hash"
)


def insert_memories(
    *, session: Session, rows: Sequence[dict[str, Any]]
) -> dict[tuple[str, str], tuple[Any, bool]]:
    """Insert gems as memories; (user, content hash) → (id, inserted?) (False: reinforced a
    twin). `embedding` is the vector's pgvector literal."""
    if not rows:
        return {}
    document = json.dumps(list(rows), default=str, ensure_ascii=False)
    result = session.execute(_INSERT_MEMORIES, {"rows": document})
    # A reinforced twin keeps its own id, so a row came in when the id it was given is back
    # (a partitioned table's RETURNING has no xmax to tell).
    given = {(row["user_id"], row["content_hash"]): str(row["id"]) for row in rows}
    return {(r[1], r[2]): (r[0], str(r[0]) == given.get((r[1], r[2]))) for r in result}


_REINFORCE = text(
    "UPDATE semantic.memories AS m SET"
    " importance = LEAST(1.0, GREATEST(m.importance, r.importance) + 0.05),"
    " access_count = m.access_count + 1,"
    " source_turn_ids = ARRAY(SELECT DISTINCT unnest(m.source_turn_ids || r.source_turn_ids)),"
    " updated_at = now()"
    " FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS r(id uuid, importance float8,"
    " source_turn_ids uuid[]) WHERE m.id = r.id"
)


def reinforce(*, session: Session, rows: Sequence[dict[str, Any]]) -> None:
    """Near-duplicates strengthen the memory they repeat: importance, access, sources merged."""
    if rows:
        session.execute(_REINFORCE, {"rows": json.dumps(list(rows), default=str)})


_SUPERSEDE = text(
    "UPDATE semantic.memories AS m SET valid_to = r.valid_to, superseded_by = r.new_id,"
    " updated_at = now()"
    " FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS r(id uuid, new_id uuid,"
    " valid_to timestamptz) WHERE m.id = r.id AND m.valid_to IS NULL"
)


def supersede(*, session: Session, rows: Sequence[dict[str, Any]]) -> None:
    """Close the validity of contradicted memories and link them to what replaced them."""
    if rows:
        session.execute(_SUPERSEDE, {"rows": json.dumps(list(rows), default=str)})


def max_similarity_per_vector(
    *, session: Session, tenant_id: str, user_ids: Sequence[str], vectors: Sequence[str]
) -> list[float | None]:
    """For each (user, vector as a pgvector literal): cosine similarity of the user's
    nearest memory, or None."""
    if not vectors:
        return []
    rows = session.execute(
        text(
            "SELECT g.n, (SELECT 1 - (m.embedding <=> g.v) FROM semantic.memories AS m"
            "  WHERE m.tenant_id = :tenant AND m.user_id = g.u AND m.valid_to IS NULL"
            "  AND m.archived_at IS NULL AND m.embedding IS NOT NULL"
            "  ORDER BY m.embedding <=> g.v LIMIT 1)"
            " FROM unnest(CAST(:users AS text[]), CAST(:vectors AS vector[]))"
            " WITH ORDINALITY AS g(u, v, n)"
        ),
        {
            "tenant": tenant_id,
            "users": list(user_ids),
            "vectors": vector_array(vectors),
        },
    )
    found: list[float | None] = [None] * len(vectors)
    for n, similarity in rows:
        found[int(n) - 1] = None if similarity is None else float(similarity)
    return found
