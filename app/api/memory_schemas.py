"""Answers of the memory editing routes (app/api/memory_routes.py): edits, deletes, history,
related memories and cleared sessions."""

from __future__ import annotations

import uuid
from typing import Any, Literal

from pydantic import BaseModel, Field

from app.api.schemas import ErrorBody, Memory


class MemoryEdited(BaseModel):
    status: Literal["updated", "unchanged"] = Field(
        description="`unchanged`: the current version already held this (a repeated edit)"
    )
    memory: Memory = Field(description="the current version after the edit")
    previous_id: uuid.UUID | None = Field(
        description="the version this edit replaced (null when nothing was written)"
    )


class MemoryDeleted(BaseModel):
    ids: list[uuid.UUID] = Field(description="every version of the memory that was deleted")
    rows: dict[str, int] = Field(description="rows removed (or changed) per kind")
    redis_keys: int = Field(description="Redis keys removed or rewritten")


class MemoryVersion(Memory):
    version: int = Field(description="1 for the oldest version of the chain")
    supersedes: uuid.UUID | None = Field(default=None, description="the version it replaced")


class MemoryHistory(BaseModel):
    memory_id: uuid.UUID
    current_id: uuid.UUID | None = Field(description="the version in force (null: none is)")
    versions: list[MemoryVersion] = Field(description="oldest first")


class RelatedMemory(BaseModel):
    id: uuid.UUID
    content: str
    score: float = Field(description="shared-entity score plus association weight")
    shared_entities: list[str]
    association_weight: float


class RelatedMemories(BaseModel):
    memory_id: uuid.UUID
    related: list[RelatedMemory] = Field(description="strongest first")


class SessionCleared(BaseModel):
    session_id: uuid.UUID
    rows: dict[str, int] = Field(description="rows removed per kind")
    deleted_memory_ids: list[uuid.UUID] = Field(description="memories only this session supported")
    kept_memory_ids: list[uuid.UUID] = Field(
        description="memories other sessions support too: they now cite only those turns"
    )
    working_turns: int = Field(description="turns removed from working memory (L1)")
    summary_dropped: bool = Field(description="the rolling summary may have quoted the session")
    redis_keys: int


class ConflictDetail(BaseModel):
    message: str
    fields: list[str]
    current_id: uuid.UUID | None = None
    duplicate_of: uuid.UUID | None = None


class ConflictBody(BaseModel):
    """409: the memory was replaced by a newer version, or another memory says the same."""

    detail: ConflictDetail


NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": ErrorBody}}
CONFLICT: dict[int | str, dict[str, Any]] = {409: {"model": ConflictBody}}
