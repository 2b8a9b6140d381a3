"""SQL for L3: extraction batches and memories. Set-based; never commits."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

# Re-exported: the layers' callers import it from here.
from app.db.nearest import vector_literal as vector_literal

# -- extraction batches --------------------------------------------------------------------


def create_batch(
    *, session: Session, batch_id: uuid.UUID, tenant_id: str, user_id: str, trigger: str
) -> None:
    session.execute(
        text(
            "INSERT INTO semantic.extraction_batches (id, tenant_id, user_id, trigger)"
            " VALUES (:id, :tenant, :user, :trigger)"
        ),
        {"id": batch_id, "tenant": tenant_id, "user": user_id, "trigger": trigger},
    )


def set_batch_turn_count(*, session: Session, batch_id: uuid.UUID, count: int) -> None:
    session.execute(
        text("UPDATE semantic.extraction_batches SET turn_count = :n WHERE id = :id"),
        {"id": batch_id, "n": count},
    )


def get_batch(*, session: Session, batch_id: uuid.UUID, lock: bool = False) -> Any | None:
    """The batch row; `lock` takes it for this transaction (skipping it if another has it)."""
    query = (
        "SELECT id, tenant_id, user_id, trigger, state, gems, attempts, error"
        " FROM semantic.extraction_batches WHERE id = :id"
    )
    if lock:
        query += " FOR UPDATE SKIP LOCKED"
    return session.execute(text(query), {"id": batch_id}).first()


def advance_batch(
    *,
    session: Session,
    batch_id: uuid.UUID,
    state: str,
    gems: list[dict[str, Any]] | None = None,
    error: str | None = None,
    only_from: Sequence[str] | None = None,
) -> None:
    """Move a batch to `state` (and store its gems or its error); with `only_from`, only a
    batch still in one of those states moves (a late duplicate step must not move a stored
    batch back)."""
    params: dict[str, Any] = {"id": batch_id, "state": state, "error": error}
    sets = "state = :state, error = :error, updated_at = now()"
    if gems is not None:
        sets += ", gems = CAST(:gems AS jsonb), gem_count = :count"
        params.update(gems=json.dumps(gems, default=str), count=len(gems))
    where = "id = :id"
    if only_from is not None:
        where += " AND state = ANY(:only_from)"
        params["only_from"] = list(only_from)
    session.execute(
        text(f"UPDATE semantic.extraction_batches SET {sets} WHERE {where}"),  # noqa: S608
        params,
    )


def record_failure(*, session: Session, batch_id: uuid.UUID, error: str, max_attempts: int) -> None:
    """Count a failed attempt; the batch keeps its state (beat retries it from there) until
    `max_attempts`, when it is parked as 'failed' with its error for an operator."""
    session.execute(
        text(
            "UPDATE semantic.extraction_batches SET attempts = attempts + 1, error = :error,"
            " updated_at = now(), state = CASE WHEN attempts + 1 >= :max THEN 'failed'"
            " ELSE state END WHERE id = :id"
        ),
        {"id": batch_id, "error": error[:4000], "max": max_attempts},
    )


def stale_batches(*, session: Session, older_than: datetime, max_attempts: int) -> list[Any]:
    """Batches stuck or failed before `older_than`, still worth retrying (this tenant)."""
    return list(
        session.execute(
            text(
                "SELECT id, state FROM semantic.extraction_batches"
                " WHERE state NOT IN ('stored', 'failed') AND updated_at < :before"
                " AND attempts < :max"
                " ORDER BY updated_at LIMIT 500"
            ),
            {"before": older_than, "max": max_attempts},
        )
    )


def fresh_in_flight_counts(
    *, session: Session, tenant_id: str, user_ids: Sequence[str], updated_after: datetime
) -> dict[str, int]:
    """user → batches on their way through the chain: not finished, no failed attempt, moved
    since `updated_after` (older ones are stale, beat's to retry)."""
    rows = session.execute(
        text(
            "SELECT user_id, count(*) FROM semantic.extraction_batches"
            " WHERE tenant_id = :tenant AND user_id = ANY(:users)"
            " AND state IN ('claimed', 'extracted', 'embedded') AND attempts = 0"
            " AND updated_at > :after GROUP BY user_id"
        ),
        {"tenant": tenant_id, "users": list(user_ids), "after": updated_after},
    )
    return {r[0]: int(r[1]) for r in rows}


def batch_counts(*, session: Session, tenant_id: str, user_id: str) -> tuple[int, int, int]:
    """(unfinished batches, of which retrying after a failed attempt, batches parked as
    'failed') of one user."""
    row = session.execute(
        text(
            "SELECT count(*) FILTER (WHERE state IN ('claimed', 'extracted', 'embedded')),"
            " count(*) FILTER (WHERE state IN ('claimed', 'extracted', 'embedded')"
            "  AND attempts > 0),"
            " count(*) FILTER (WHERE state = 'failed')"
            " FROM semantic.extraction_batches WHERE tenant_id = :tenant AND user_id = :user"
        ),
        {"tenant": tenant_id, "user": user_id},
    ).one()
    return int(row[0]), int(row[1]), int(row[2])


def users_of_batches(*, session: Session, batch_ids: Sequence[uuid.UUID]) -> list[str]:
    """The users these batches belong to (under the current tenant scope), sorted."""
    if not batch_ids:
        return []
    rows = session.execute(
        text(
            "SELECT DISTINCT user_id FROM semantic.extraction_batches"
            " WHERE id = ANY(CAST(:ids AS uuid[])) ORDER BY user_id"
        ),
        {"ids": list(batch_ids)},
    )
    return [r[0] for r in rows]


# -- memories ------------------------------------------------------------------------------


def cited_turns(
    *, session: Session, tenant_id: str, user_id: str, ids: Sequence[Any], hashes: Sequence[str]
) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Source turns of the memories these gems would reinforce: by id (near-duplicates) and
    by content hash (exact twins, merged by the insert)."""
    if not ids and not hashes:
        return {}, {}
    rows = session.execute(
        text(
            "SELECT id, content_hash, source_turn_ids FROM semantic.memories"
            " WHERE id = ANY(CAST(:ids AS uuid[])) AND tenant_id = :tenant AND user_id = :user"
            " UNION SELECT id, content_hash, source_turn_ids FROM semantic.memories"
            " WHERE tenant_id = :tenant AND user_id = :user AND content_hash = ANY(:hashes)"
        ),
        {"tenant": tenant_id, "user": user_id, "ids": [str(i) for i in ids], "hashes": hashes},
    )
    by_id: dict[str, list[str]] = {}
    by_hash: dict[str, list[str]] = {}
    for memory_id, digest, sources in rows:
        cited = [str(s) for s in sources or []]
        by_id[str(memory_id)] = by_hash[digest] = cited
    return by_id, by_hash


def nearest_per_vector(
    *,
    session: Session,
    tenant_id: str,
    user_id: str,
    vectors: Sequence[Sequence[float]],
    texts: Sequence[str] | None = None,
    k: int = 3,
    agent_id: str | None = None,
) -> list[list[tuple[uuid.UUID, float, float, str | None, str | None, str]]]:
    """For each vector: the k nearest current memories of the user in one agent scope (the
    user's level when `agent_id` is None), as
    (id, cosine similarity, trigram similarity to the matching text, subject, value, content).

    One statement for the whole batch (LATERAL over the HNSW index)."""
    if not vectors:
        return []
    result: list[list[tuple[uuid.UUID, float, float, str | None, str | None, str]]] = [
        [] for _ in vectors
    ]
    rows = session.execute(
        text(
            "SELECT g.n, m.id, 1 - (m.embedding <=> g.v) AS cosine,"
            " similarity(m.content, g.t) AS trigram, m.subject, m.value, m.content"
            " FROM unnest(CAST(:vectors AS vector[]), CAST(:texts AS text[]))"
            " WITH ORDINALITY AS g(v, t, n)"
            " CROSS JOIN LATERAL (SELECT id, embedding, content, subject, value"
            "  FROM semantic.memories WHERE tenant_id = :tenant AND user_id = :user"
            "  AND agent_id IS NOT DISTINCT FROM CAST(:agent AS text)"
            "  AND valid_to IS NULL AND archived_at IS NULL AND embedding IS NOT NULL"
            "  ORDER BY embedding <=> g.v LIMIT :k) AS m"
        ),
        {
            "vectors": [vector_literal(v) for v in vectors],
            "texts": list(texts) if texts is not None else [""] * len(vectors),
            "tenant": tenant_id,
            "user": user_id,
            "k": k,
            "agent": agent_id,
        },
    )
    for n, memory_id, cosine, trigram, subject, value, content in rows:
        result[int(n) - 1].append(
            (memory_id, float(cosine), float(trigram), subject, value, content)
        )
    return result


def current_by_subject(
    *,
    session: Session,
    tenant_id: str,
    user_id: str,
    subjects: Sequence[str],
    agent_id: str | None = None,
) -> list[Any]:
    """Current (not superseded) memories of the user holding these subjects, in one agent
    scope (a contradiction in one agent's map does not close another's memory)."""
    if not subjects:
        return []
    return list(
        session.execute(
            text(
                "SELECT id, subject, value, occurred_at FROM semantic.memories"
                " WHERE tenant_id = :tenant AND user_id = :user AND subject = ANY(:subjects)"
                " AND agent_id IS NOT DISTINCT FROM CAST(:agent AS text)"
                " AND valid_to IS NULL AND subject IS NOT NULL"
            ),
            {"tenant": tenant_id, "user": user_id, "subjects": list(subjects), "agent": agent_id},
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
    " RETURNING id, content_hash, (xmax = 0) AS inserted"
)


def insert_memories(
    *, session: Session, rows: Sequence[dict[str, Any]]
) -> dict[str, tuple[Any, bool]]:
    """Insert gems as memories; content hash → (id, inserted?) (False: reinforced a twin)."""
    if not rows:
        return {}
    document = json.dumps(list(rows), default=str, ensure_ascii=False)
    result = session.execute(_INSERT_MEMORIES, {"rows": document})
    return {r[1]: (r[0], bool(r[2])) for r in result}


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
    *, session: Session, tenant_id: str, user_ids: Sequence[str], vectors: Sequence[Sequence[float]]
) -> list[float | None]:
    """For each (user, vector): cosine similarity of the user's nearest memory, or None."""
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
            "vectors": [vector_literal(v) for v in vectors],
        },
    )
    found: list[float | None] = [None] * len(vectors)
    for n, similarity in rows:
        found[int(n) - 1] = None if similarity is None else float(similarity)
    return found
