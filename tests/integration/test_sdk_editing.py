"""The SDK's editing methods (update, delete, history, related, clear a session) against the
real API under uvicorn, real Postgres and Redis; blocking and asyncio clients alike."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest
from engram_memory_client import (
    AsyncEngramClient,
    ConflictError,
    EngramClient,
    MemoryEdited,
    MemoryHistory,
    NotFoundError,
    SessionCleared,
    ValidationError,
)

from app.config import Settings
from app.embedding.factory import get_embedder
from app.redis_client import get_redis
from app.services.tenants import mint_key
from tests.integration.api_server import prefixed, serve
from tests.integration.test_clear_session import build_trace


@pytest.fixture(scope="module")
def sdk_settings(base_settings: Settings) -> Iterator[Settings]:
    with prefixed(base_settings, "sdk-edit") as settings:
        yield settings


@pytest.fixture(scope="module")
def url(database: None, sdk_settings: Settings) -> Iterator[str]:
    with serve(sdk_settings) as base_url:
        yield base_url


def test_blocking_client_edits_and_reads_history(url: str) -> None:
    tenant = f"t-sdk-edit-{uuid.uuid4().hex[:8]}"
    user = "sdk-editor"
    with EngramClient(url, mint_key(tenant).key, retries=0) as engram:
        (stored,) = engram.remember(user, ["The garage code is 4411."])
        edited = engram.update_memory(stored.id, "The garage code is 9027.", user_id=user)
        assert isinstance(edited, MemoryEdited)
        assert edited.status == "updated" and edited.previous_id == stored.id
        again = engram.update_memory(stored.id, "The garage code is 9027.")
        assert again.status == "unchanged" and again.memory.id == edited.memory.id
        with pytest.raises(ConflictError) as conflict:
            engram.update_memory(stored.id, "The garage code is 1234.")
        assert conflict.value.status == 409
        assert conflict.value.current_id == str(edited.memory.id)
        third = engram.update_memory(edited.memory.id, "The garage code is 5550.", importance=0.8)
        history = engram.memory_history(stored.id)
        assert isinstance(history, MemoryHistory)
        assert [v.id for v in history.versions] == [stored.id, edited.memory.id, third.memory.id]
        assert history.current_id == third.memory.id
        with pytest.raises(ValidationError) as invalid:
            engram.update_memory(stored.id, "")
        assert "content" in " ".join(invalid.value.fields)
        assert engram.related_memories(third.memory.id, limit=5) == []
        deleted = engram.delete_memory(third.memory.id, user_id=user)
        assert len(deleted.ids) == 3 and deleted.rows["memories"] == 3
        with pytest.raises(NotFoundError):
            engram.memory_history(stored.id)
        with pytest.raises(NotFoundError):
            engram.delete_memory(uuid.uuid4())


def test_async_client_clears_a_session(url: str, sdk_settings: Settings) -> None:
    trace = build_trace(get_redis(sdk_settings), get_embedder(sdk_settings), sdk_settings)
    key = trace.headers["Authorization"].removeprefix("Bearer ")

    async def run() -> tuple[SessionCleared, list[str]]:
        async with AsyncEngramClient(url, key, retries=0) as engram:
            memory = await engram.get_memory(trace.memories["only_a"])
            assert memory.session_id == trace.sessions["a"]
            related = await engram.related_memories(trace.memories["both"], user_id=trace.user)
            cleared = await engram.clear_session(trace.user, memory.session_id)
            history = await engram.memory_history(trace.memories["both"])
            with pytest.raises(NotFoundError):
                await engram.clear_session(trace.user, memory.session_id)
            with pytest.raises(NotFoundError):
                await engram.delete_memory(trace.memories["only_a"])
            return cleared, [str(r.id) for r in related] + [str(history.current_id)]

    cleared, seen = asyncio.run(run())
    assert cleared.deleted_memory_ids == [trace.memories["only_a"]]
    assert cleared.kept_memory_ids == [trace.memories["both"]]
    assert cleared.rows["turns"] == 2 and cleared.working_turns == 2
    # `only_b` names Bergen, as `both` does: related to it.
    assert str(trace.memories["only_b"]) in seen
    assert seen[-1] == str(trace.memories["both"])


def test_blocking_client_edits_as_an_agent(url: str) -> None:
    tenant = f"t-sdk-agent-{uuid.uuid4().hex[:8]}"
    user = "sdk-agent"
    with EngramClient(url, mint_key(tenant).key, retries=0) as engram:
        (stored,) = engram.remember(user, ["The sprint ends on Friday."], agent_id="planner")
        for agent in ("coder", None):
            with pytest.raises(NotFoundError):
                engram.update_memory(stored.id, "The sprint ends on Monday.", agent_id=agent)
            with pytest.raises(NotFoundError):
                engram.memory_history(stored.id, agent_id=agent)
            with pytest.raises(NotFoundError):
                engram.related_memories(stored.id, agent_id=agent)
            with pytest.raises(NotFoundError):
                engram.delete_memory(stored.id, agent_id=agent)
        edited = engram.update_memory(
            stored.id, "The sprint ends on Thursday.", agent_id="planner", user_id=user
        )
        assert edited.memory.agent_id == "planner" and not edited.memory.shared
        history = engram.memory_history(stored.id, agent_id="planner")
        assert [v.id for v in history.versions] == [stored.id, edited.memory.id]
        assert engram.related_memories(edited.memory.id, agent_id="planner") == []
        deleted = engram.delete_memory(edited.memory.id, agent_id="planner")
        assert len(deleted.ids) == 2
