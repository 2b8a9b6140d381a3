"""Any OpenAI-compatible `/embeddings` endpoint (OpenAI, vLLM, TEI, Ollama, llama.cpp server).

Stdlib HTTP only (urllib): one POST per batch, retried with exponential backoff when the server
is unreachable, slow or failing (5xx, 429); every reply is checked (count, dimension, numbers)
before a vector leaves this module, because a bad vector stored in L3 is silently wrong forever.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from typing import Any

from app.embedding.base import EmbeddingError, Owner
from app.http_json import (
    InvalidJSONReply,
    RefusedHTTPError,
    RetryableHTTPError,
    backoff_delay,
    endpoint,
    post_json,
)

_log = logging.getLogger(__name__)

MAX_INPUTS_PER_REQUEST = 256


class OpenAICompatibleEmbedder:
    """`dim` is learnt from the server (one probe on first access) so it can be checked.
    `dimensions`, when given, is sent with every request: OpenAI's text-embedding-3 models
    shorten their vectors to it, so a 3,072-dim model fits a schema an index can serve."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 30.0,
        retries: int = 3,
        backoff_s: float = 0.5,
        batch_size: int = MAX_INPUTS_PER_REQUEST,
        dimensions: int | None = None,
    ) -> None:
        self.url = endpoint(base_url, "/embeddings")
        self.model = model
        # Part of the cache key: the same model asked for fewer dimensions gives other vectors.
        self.name = f"openai:{model}" if dimensions is None else f"openai:{model}:{dimensions}"
        self.dimensions = dimensions
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.batch_size = batch_size
        self._api_key = api_key
        self._dim: int | None = None

    @property
    def dim(self) -> int:
        if self._dim is None:
            self.embed(["dimension probe"])
        assert self._dim is not None
        return self._dim

    def embed(
        self, texts: Sequence[str], owners: Sequence[Owner] | None = None
    ) -> list[list[float]]:
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of texts, not one string")
        out: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            out.extend(self._embed_batch(list(texts[start : start + self.batch_size])))
        return out

    def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        body: dict[str, Any] = {"model": self.model, "input": texts}
        if self.dimensions is not None:
            body["dimensions"] = self.dimensions
        reply = self._post_with_retries(body)
        return self._vectors_from(reply, len(texts))

    def _post_with_retries(self, body: dict[str, Any]) -> Any:
        attempts = self.retries + 1
        for attempt in range(attempts):
            try:
                return post_json(self.url, body, api_key=self._api_key, timeout_s=self.timeout_s)
            except RetryableHTTPError as exc:
                if attempt == attempts - 1:
                    raise EmbeddingError(
                        f"embedding server {self.url} failed {attempts} times; last: {exc}"
                    ) from exc
                delay = backoff_delay(attempt, self.backoff_s, exc.retry_after_s)
                _log.warning("embedding request failed (%s); retry in %.2fs", exc, delay)
                time.sleep(delay)
            except RefusedHTTPError as exc:
                raise EmbeddingError(f"embedding server {self.url} refused: {exc}") from exc
            except InvalidJSONReply as exc:
                raise EmbeddingError(
                    f"embedding server {self.url} sent invalid JSON: {exc}"
                ) from exc
        raise AssertionError("unreachable")

    def _vectors_from(self, reply: Any, expected: int) -> list[list[float]]:
        """Check the reply's shape and numbers, order it by index, normalise each vector."""
        data = reply.get("data") if isinstance(reply, dict) else None
        if not isinstance(data, list):
            raise EmbeddingError(f"embedding reply from {self.url} has no `data` list")
        if len(data) != expected:
            raise EmbeddingError(
                f"embedding reply from {self.url} has {len(data)} vectors for {expected} inputs"
            )
        ordered: list[list[float] | None] = [None] * expected
        for position, item in enumerate(data):
            if not isinstance(item, dict):
                raise EmbeddingError(f"embedding reply item {position} is not an object")
            index = item.get("index", position)
            if type(index) is not int or not 0 <= index < expected or ordered[index] is not None:
                raise EmbeddingError(f"embedding reply item {position} has a bad index {index!r}")
            ordered[index] = self._checked_vector(item.get("embedding"), position)
        return [vector for vector in ordered if vector is not None]

    def _checked_vector(self, values: Any, position: int) -> list[float]:
        if not isinstance(values, list) or not values:
            raise EmbeddingError(f"embedding reply item {position} has no `embedding` list")
        if not all(type(v) in (int, float) and math.isfinite(v) for v in values):
            raise EmbeddingError(f"embedding reply item {position} has non-numeric values")
        if self._dim is None:
            self._dim = len(values)
        elif len(values) != self._dim:
            raise EmbeddingError(
                f"embedding reply item {position} has {len(values)} dims, expected {self._dim}"
            )
        norm = math.sqrt(math.fsum(v * v for v in values))
        if norm == 0.0:
            raise EmbeddingError(f"embedding reply item {position} is the zero vector")
        return [float(v) / norm for v in values]
