"""Settings → embedder: the backend, the Redis cache around it, and the dimension check."""

from __future__ import annotations

import threading

import redis

from app.config import MAX_EMBEDDING_DIM, Settings
from app.embedding.base import Embedder, EmbeddingDimensionError
from app.embedding.cache import CachedEmbedder
from app.embedding.local import DEFAULT_MODEL, LocalEmbedder
from app.embedding.openai import OpenAICompatibleEmbedder

_local_lock = threading.Lock()
_local_models: dict[tuple[str, int], LocalEmbedder] = {}


def local_embedder(threads: int = 1, model: str = DEFAULT_MODEL) -> LocalEmbedder:
    """One local model per process (per file and thread count): its session is loaded once."""
    with _local_lock:
        if (model, threads) not in _local_models:
            _local_models[model, threads] = LocalEmbedder(model=model, threads=threads)
        return _local_models[model, threads]


def get_embedder(settings: Settings, client: redis.Redis | None = None) -> Embedder:
    """The configured backend, behind the Redis cache when a client is given."""
    inner: Embedder
    if settings.embedding_backend == "local":
        inner = local_embedder(settings.embedding_threads, settings.embedding_local_model)
    else:
        key = settings.embedding_api_key
        inner = OpenAICompatibleEmbedder(
            settings.embedding_base_url,
            settings.embedding_model,
            api_key=key.get_secret_value() if key else None,
            timeout_s=settings.embedding_timeout_s,
            dimensions=settings.embedding_dim if settings.embedding_request_dim else None,
        )
    if client is not None:
        return CachedEmbedder(inner, client, settings)
    return inner


def check_dimension(embedder: Embedder, settings: Settings) -> None:
    """Fail at start-up, not at the first INSERT, when model and schema disagree."""
    dim = embedder.dim
    if dim != settings.embedding_dim:
        other = (
            f"set ENGRAM_EMBEDDING_DIM={dim} on a new database"
            if dim <= MAX_EMBEDDING_DIM
            else "ask it for fewer (ENGRAM_EMBEDDING_REQUEST_DIM=true, OpenAI's"
            " text-embedding-3 models)"
        )
        raise EmbeddingDimensionError(
            f"embedding model {embedder.name} gives {dim} dims, schema has "
            f"{settings.embedding_dim} (ENGRAM_EMBEDDING_DIM): choose a model with "
            f"{settings.embedding_dim} dims, or {other}"
        )
