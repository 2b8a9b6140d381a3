"""Procedural memory (L5): learn which tool sequence answers which kind of query.

An agent reports an outcome — query, the tools it ran, how well it went, how long it took —
and the (query pattern → tool sequence) pair accumulates executions, mean success, mean
duration and a confidence (app.scoring.procedural). Later, for a query that means the same
thing (nearest query embeddings, not only the same words), the most trusted sequence is
suggested, so the agent can replay what worked instead of planning from scratch.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from app.config import Settings
from app.db.session import unit_of_work
from app.embedding.base import Embedder, EmbeddingDimensionError, Owner
from app.layers.meta import procedures as repository
from app.layers.meta.repository import register_tenants
from app.scoring.procedural import (
    canonical_json,
    canonical_sequence,
    normalise_pattern,
    pattern_hash,
    sequence_hash,
)

MAX_ID_CHARS = 128  # tenant_id / user_id columns
MAX_QUERY_CHARS = 4000  # a query pattern, not a document
MAX_STEPS = 100
MAX_SEQUENCE_BYTES = 64_000
NEAREST_K = 5


@dataclass(frozen=True)
class ProcedureView:
    """One procedure after an outcome was counted (`created`: this was its first execution)."""

    id: uuid.UUID
    query_pattern: str
    tool_sequence: list[Any]
    executions: int
    avg_success: float
    avg_duration_ms: float
    confidence: float
    last_executed_at: datetime | None
    created_at: datetime
    created: bool = False


@dataclass(frozen=True)
class Suggestion:
    """A tool sequence worth replaying for a query, with why it is trusted.

    `query_pattern` is the stored pattern the query matched, `similarity` the cosine between
    the two queries, `score` = similarity * confidence (what suggestions are ranked by)."""

    procedure_id: uuid.UUID
    query_pattern: str
    tool_sequence: list[Any]
    confidence: float
    similarity: float
    executions: int
    avg_success: float
    avg_duration_ms: float

    @property
    def score(self) -> float:
        return self.similarity * self.confidence


# -- validation ----------------------------------------------------------------------------


def _check_id(name: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name} must be a non-empty string")
    if len(value) > MAX_ID_CHARS:
        raise ValueError(f"{name} must be at most {MAX_ID_CHARS} characters")
    return value


def _check_query(query: object) -> str:
    """The normalised pattern; a query with no text left after normalising is refused."""
    if not isinstance(query, str):
        raise ValueError("query must be a string")
    if len(query) > MAX_QUERY_CHARS:
        raise ValueError(f"query must be at most {MAX_QUERY_CHARS} characters")
    pattern = normalise_pattern(query)
    if not pattern:
        raise ValueError("query must contain text, not only whitespace or punctuation")
    return pattern


def has_pattern(query: str) -> bool:
    """Whether `query` can be a procedure pattern (`_check_query`): a context query need not
    be one (too long, or nothing left once punctuation and spaces go), and has no suggestion."""
    try:
        _check_query(query)
    except ValueError:
        return False
    return True


def _check_number(name: str, value: object, low: float, high: float | None = None) -> float:
    if isinstance(value, str) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number, got {type(value).__name__}")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if number < low or (high is not None and number > high):
        bounds = f"in [{low:g}, {high:g}]" if high is not None else f">= {low:g}"
        raise ValueError(f"{name} must be {bounds}, got {value!r}")
    return number


def _check_sequence(tool_sequence: object) -> tuple[list[dict[str, Any]], str]:
    """The canonical steps and their canonical JSON; every problem names its step."""
    if isinstance(tool_sequence, str | bytes | Mapping) or not isinstance(tool_sequence, Sequence):
        raise ValueError("tool_sequence must be a list of steps")
    if not tool_sequence:
        raise ValueError("tool_sequence must not be empty")
    if len(tool_sequence) > MAX_STEPS:
        raise ValueError(f"tool_sequence must have at most {MAX_STEPS} steps")
    for i, step in enumerate(tool_sequence):
        where = f"tool_sequence[{i}]"
        if isinstance(step, str):
            if not step.strip():
                raise ValueError(f"{where} must be a non-empty tool name")
        elif isinstance(step, Mapping):
            tool = step.get("tool")
            if not isinstance(tool, str) or not tool.strip():
                raise ValueError(f'{where} must have a non-empty string "tool"')
            if not all(isinstance(key, str) for key in step):
                raise ValueError(f"{where} keys must be strings")
        else:
            raise ValueError(f'{where} must be a tool name or an object with a "tool" name')
    steps = canonical_sequence(tool_sequence)
    try:
        document = canonical_json(steps)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"tool_sequence must be JSON (finite numbers, strings...): {exc}") from exc
    if len(document.encode("utf-8", "surrogatepass")) > MAX_SEQUENCE_BYTES:
        raise ValueError(f"tool_sequence must be at most {MAX_SEQUENCE_BYTES} bytes of JSON")
    return steps, document


def _embed_one(embedder: Embedder, text: str, owner: Owner, settings: Settings) -> list[float]:
    """Embed outside any transaction, so no connection is held while the model runs; a
    model/schema dimension mismatch is named here rather than failing inside the INSERT."""
    vector = embedder.embed([text], [owner])[0]
    if len(vector) != settings.embedding_dim:
        raise EmbeddingDimensionError(
            f"embedding model {embedder.name} gave {len(vector)} dims, schema has "
            f"{settings.embedding_dim} (ENGRAM_EMBEDDING_DIM)"
        )
    return vector


# -- the two operations --------------------------------------------------------------------


def record(
    *,
    tenant_id: str,
    user_id: str,
    query: str,
    tool_sequence: Sequence[Mapping[str, Any] | str],
    success: float,
    duration_ms: float,
    embedder: Embedder,
    settings: Settings,
) -> ProcedureView:
    """Count one execution of `tool_sequence` for `query` (success in [0, 1], duration ≥ 0).

    The same pattern with the same steps (a bare name and {"tool": name} are the same step)
    reinforces one procedure; different steps for the same pattern compete as separate ones.
    Raises ValueError naming the offending field."""
    _check_id("tenant_id", tenant_id)
    _check_id("user_id", user_id)
    pattern = _check_query(query)
    steps, document = _check_sequence(tool_sequence)
    score = _check_number("success", success, 0.0, 1.0)
    duration = _check_number("duration_ms", duration_ms, 0.0)
    vector = _embed_one(embedder, pattern, Owner(tenant_id, user_id), settings)
    with unit_of_work(tenant_id) as session:
        register_tenants(session=session, tenant_ids=[tenant_id])
        row = repository.record_outcome(
            session=session,
            tenant_id=tenant_id,
            user_id=user_id,
            query_pattern=pattern,
            pattern_hash=pattern_hash(pattern),
            query_embedding=vector,
            tool_sequence_json=document,
            sequence_hash=sequence_hash(steps),
            success=score,
            duration_ms=duration,
        )
    return ProcedureView(
        id=row.id,
        query_pattern=row.query_pattern,
        tool_sequence=list(row.tool_sequence),
        executions=int(row.executions),
        avg_success=float(row.avg_success),
        avg_duration_ms=float(row.avg_duration_ms),
        confidence=float(row.confidence),
        last_executed_at=row.last_executed_at,
        created_at=row.created_at,
        created=bool(row.inserted),
    )


def worth_asking(session: Session, user_id: str, settings: Settings) -> bool:
    """Whether `suggest` could find anything for the user (a procedure trusted at the default
    confidence), asked in the caller's transaction: a context block asks it beside its
    other reads, and most users have no procedure to suggest."""
    return repository.any_trusted(
        session, user_id, min_confidence=settings.procedure_min_confidence
    )


def suggest(
    *,
    tenant_id: str,
    user_id: str,
    query: str,
    embedder: Embedder,
    settings: Settings,
    min_confidence: float | None = None,
) -> Suggestion | None:
    """The user's best procedure for a query like this one, or None.

    Among the 5 nearest stored patterns, only those at least `procedure_min_similarity` alike
    and `min_confidence` trusted (default `procedure_min_confidence`) qualify; the highest
    similarity * confidence wins, so a near-identical but shaky procedure does not beat a
    close, proven one."""
    _check_id("tenant_id", tenant_id)
    _check_id("user_id", user_id)
    pattern = _check_query(query)
    threshold = _check_number(
        "min_confidence",
        settings.procedure_min_confidence if min_confidence is None else min_confidence,
        0.0,
        1.0,
    )
    with unit_of_work(tenant_id) as session:
        if not repository.any_trusted(session, user_id, min_confidence=threshold):
            return None  # nothing to suggest: the query is not embedded for nothing
    vector = _embed_one(embedder, pattern, Owner(tenant_id, user_id), settings)
    with unit_of_work(tenant_id) as session:
        rows = repository.nearest(session, user_id, vector, NEAREST_K, min_confidence=threshold)
    candidates = [
        Suggestion(
            procedure_id=row.id,
            query_pattern=row.query_pattern,
            tool_sequence=list(row.tool_sequence),
            confidence=float(row.confidence),
            similarity=float(row.similarity),
            executions=int(row.executions),
            avg_success=float(row.avg_success),
            avg_duration_ms=float(row.avg_duration_ms),
        )
        for row in rows
        if float(row.similarity) >= settings.procedure_min_similarity
        and float(row.confidence) >= threshold
    ]
    if not candidates:
        return None
    return max(candidates, key=lambda s: (s.score, s.executions, -s.avg_duration_ms))
