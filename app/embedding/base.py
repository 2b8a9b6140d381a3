"""What every embedding backend offers: a fixed dimension and batched, normalised vectors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class EmbeddingError(RuntimeError):
    """The backend failed (down, timeout, bad reply); the caller retries later."""


class EmbeddingDimensionError(EmbeddingError):
    """The backend's dimension differs from the schema's (ENGRAM_EMBEDDING_DIM)."""


class Embedder(Protocol):
    name: str  # stable id of the model, part of cache keys
    dim: int

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One L2-normalised vector per text, in order."""
        ...
