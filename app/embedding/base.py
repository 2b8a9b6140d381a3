"""What every embedding backend offers: a fixed dimension and batched, normalised vectors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol


class EmbeddingError(RuntimeError):
    """The backend failed (down, timeout, bad reply); the caller retries later."""


class EmbeddingDimensionError(EmbeddingError):
    """The backend's dimension differs from the schema's (ENGRAM_EMBEDDING_DIM)."""


class Owner(NamedTuple):
    """Whose text is embedded: the cache keeps a text's vector under its owner only, so no
    tenant or user can tell from a search's speed what another one has written."""

    tenant_id: str
    user_id: str


class Embedder(Protocol):
    name: str  # stable id of the model, part of cache keys
    dim: int

    def embed(
        self, texts: Sequence[str], owners: Sequence[Owner] | None = None
    ) -> list[list[float]]:
        """One L2-normalised vector per text, in order. `owners` (one per text) lets a cache
        keep the vectors; a model ignores them, and a cache given none keeps nothing."""
        ...
