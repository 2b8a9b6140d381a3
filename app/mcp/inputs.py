"""The tools' argument types: each typed and described, so MCP clients see a JSON schema.

Bounds are left to the REST API, which owns them and names the field it refuses.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

UserId = Annotated[
    str,
    Field(
        description="the end user whose memory this is (1-128 of letters, digits, . _ : @ -; "
        "starting with a letter or digit)"
    ),
]
Query = Annotated[str, Field(description="what the agent is about to answer or look for")]
Channel = Annotated[
    str | None, Field(description="only this channel (e.g. 'slack', 'email'); default: all")
]
AgentId = Annotated[
    str | None,
    Field(
        description="the agent acting: sees the user's shared memories plus its own private "
        "ones, and what it stores is private to it (default: no agent, the shared map only)"
    ),
]
Knowledge = Annotated[
    bool, Field(description="also the tenant's knowledge (facts that belong to no one user)")
]
MemoryId = Annotated[uuid.UUID, Field(description="a memory's id, as search or remember gave it")]
MemoryOwner = Annotated[
    str | None, Field(description="when given, the memory must be this user's (else not found)")
]
SessionId = Annotated[
    uuid.UUID,
    Field(description="a conversation session's id, as search hits and memories give it"),
]
MemoryKind = Literal[
    "decision", "fact", "preference", "todo", "code", "goal", "event", "consolidated"
]


class TurnIn(BaseModel):
    """One message of a conversation."""

    model_config = ConfigDict(extra="forbid")

    content: str = Field(description="what was said")
    external_id: str = Field(
        description="your id for this message; sending it again is a no-op, not a duplicate"
    )
    role: Literal["user", "assistant", "system", "tool"] = Field(
        default="user", description="who said it"
    )
    speaker: str | None = Field(default=None, description="the speaker's name, if known")
    timestamp: datetime | None = Field(
        default=None, description="when it was said (ISO 8601; default: now)"
    )


class MemoryIn(BaseModel):
    """An explicit memory: a fact, preference, decision … the agent was told or decided."""

    model_config = ConfigDict(extra="forbid")

    content: str = Field(description="the memory, one self-contained statement")
    kind: MemoryKind = Field(default="fact", description="what sort of memory it is")
    importance: float = Field(default=0.5, description="0 (trivial) to 1 (essential)")
    tags: list[str] = Field(default_factory=list, description="labels to filter searches by")
    topics: list[str] = Field(default_factory=list, description="what it is about")
    subject: str | None = Field(
        default=None,
        description="what it states a value of; a later memory with this subject and another "
        "value supersedes this one (e.g. subject 'home city', value 'Lisbon')",
    )
    value: str | None = Field(default=None, description="the value stated for `subject`")
    occurred_at: datetime | None = Field(
        default=None, description="when it happened or was learnt (ISO 8601; default: now)"
    )
    channel: str | None = Field(default=None, description="where it was learnt")
