"""Python client for the Engram REST API: `EngramClient` (blocking) and `AsyncEngramClient`.

    from engram_memory_client import EngramClient

    with EngramClient("http://127.0.0.1:8080", api_key) as engram:
        engram.add_turn("alice", "I moved to Lisbon", external_id="msg-1")
        hits = engram.search("alice", "where does Alice live?").hits

A distribution of its own (httpx and pydantic only), so an agent's project can talk to an
Engram server without installing the server, its database drivers or its models.
"""

from engram_memory_client._version import __version__
from engram_memory_client.aio import AsyncEngramClient
from engram_memory_client.client import EngramClient
from engram_memory_client.errors import (
    AuthenticationError,
    ConflictError,
    EngramError,
    NotFoundError,
    PayloadTooLargeError,
    RateLimitedError,
    UnavailableError,
    ValidationError,
)
from engram_memory_client.models import (
    AttachedMemory,
    Context,
    Entity,
    EntityGraph,
    EventsAccepted,
    ExtractionFlush,
    ExtractionStatus,
    ForgetReport,
    GraphEdge,
    Health,
    KnowledgeDeleted,
    Memory,
    MemoryDeleted,
    MemoryEdited,
    MemoryHistory,
    MemoryPage,
    MemoryVersion,
    Procedure,
    Receipt,
    RelatedMemory,
    SearchHit,
    SearchResults,
    SessionCleared,
    Stats,
    StoredMemory,
    Suggestion,
    Turn,
)

__all__ = [
    "AsyncEngramClient",
    "AttachedMemory",
    "AuthenticationError",
    "ConflictError",
    "Context",
    "EngramClient",
    "EngramError",
    "Entity",
    "EntityGraph",
    "EventsAccepted",
    "ExtractionFlush",
    "ExtractionStatus",
    "ForgetReport",
    "GraphEdge",
    "Health",
    "KnowledgeDeleted",
    "Memory",
    "MemoryDeleted",
    "MemoryEdited",
    "MemoryHistory",
    "MemoryPage",
    "MemoryVersion",
    "NotFoundError",
    "PayloadTooLargeError",
    "Procedure",
    "RateLimitedError",
    "Receipt",
    "RelatedMemory",
    "SearchHit",
    "SearchResults",
    "SessionCleared",
    "Stats",
    "StoredMemory",
    "Suggestion",
    "Turn",
    "UnavailableError",
    "ValidationError",
    "__version__",
]
