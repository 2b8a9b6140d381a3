"""The OpenAI-compatible client against a real local HTTP server that plays the endpoint."""

from __future__ import annotations

import hashlib
import json
import math
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from app.config import Settings
from app.embedding.base import EmbeddingDimensionError, EmbeddingError
from app.embedding.factory import check_dimension, get_embedder
from app.embedding.openai import OpenAICompatibleEmbedder


class FakeEndpoint:
    """Answers POST /v1/embeddings like OpenAI; `script` says what each request gets."""

    def __init__(self) -> None:
        self.script: list[str] = []
        self.dim = 384
        self.requests: list[dict[str, Any]] = []
        self.release = threading.Event()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                endpoint.requests.append(
                    {"path": self.path, "auth": self.headers.get("Authorization"), "body": body}
                )
                action = endpoint.script.pop(0) if endpoint.script else "ok"
                if action == "hang":
                    endpoint.release.wait(10)
                    return
                if action == "500":
                    self.reply(500, b'{"error": {"message": "overloaded"}}')
                elif action == "401":
                    self.reply(401, b'{"error": {"message": "bad key"}}')
                elif action == "badjson":
                    self.reply(200, b'{"data": [')
                elif action == "short":
                    self.reply(200, json.dumps({"data": []}).encode())
                elif action == "strings":
                    items = [{"index": 0, "embedding": ["0.1"] * endpoint.dim}]
                    self.reply(200, json.dumps({"data": items}).encode())
                else:
                    self.reply(200, endpoint.answer(body["input"], body.get("dimensions")))

            def reply(self, status: int, payload: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def answer(self, texts: list[str], dimensions: int | None = None) -> bytes:
        """Deterministic, not normalised, listed in reverse (clients must follow `index`);
        `dimensions` asked for shortens the vectors, as OpenAI's text-embedding-3 models do."""
        dim = min(dimensions, self.dim) if dimensions else self.dim
        items = [
            {"object": "embedding", "index": i, "embedding": vector_of(text, dim)}
            for i, text in enumerate(texts)
        ]
        reply = {"object": "list", "data": items[::-1], "model": "fake", "usage": {}}
        return json.dumps(reply).encode()


def vector_of(text: str, dim: int) -> list[float]:
    seed = hashlib.sha256(text.encode()).digest()
    return [(seed[i % 32] - 128) / 10.0 + i / dim for i in range(dim)]


@pytest.fixture
def endpoint() -> Iterator[FakeEndpoint]:
    fake = FakeEndpoint()
    thread = threading.Thread(target=fake.server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield fake
    fake.release.set()
    fake.server.shutdown()
    fake.server.server_close()


def client(endpoint: FakeEndpoint, **kwargs: Any) -> OpenAICompatibleEmbedder:
    options: dict[str, Any] = {"timeout_s": 2.0, "retries": 2, "backoff_s": 0.01}
    options.update(kwargs)
    return OpenAICompatibleEmbedder(endpoint.url, "fake-embed", **options)


def test_success_sends_model_inputs_and_key_and_returns_ordered_unit_vectors(
    endpoint: FakeEndpoint,
) -> None:
    embedder = client(endpoint, api_key="sk-test")
    texts = ["first", "second", "third"]
    vectors = embedder.embed(texts)
    (request,) = endpoint.requests
    assert request["path"] == "/v1/embeddings"
    assert request["auth"] == "Bearer sk-test"
    assert request["body"] == {"model": "fake-embed", "input": texts}
    assert embedder.dim == 384 and embedder.name == "openai:fake-embed"
    for text, vector in zip(texts, vectors, strict=True):
        raw = vector_of(text, 384)
        norm = math.sqrt(sum(v * v for v in raw))
        assert vector == pytest.approx([v / norm for v in raw], abs=1e-12)
        assert math.fsum(v * v for v in vector) == pytest.approx(1.0)
    assert len(endpoint.requests) == 1  # dim came from the reply, no probe
    assert embedder.embed([]) == []


def test_no_key_no_header_and_large_inputs_are_split(endpoint: FakeEndpoint) -> None:
    embedder = client(endpoint, batch_size=2)
    vectors = embedder.embed(["a", "b", "c", "d", "e"])
    assert len(vectors) == 5
    assert [len(r["body"]["input"]) for r in endpoint.requests] == [2, 2, 1]
    assert all(r["auth"] is None for r in endpoint.requests)


def test_a_500_is_retried_then_succeeds(endpoint: FakeEndpoint) -> None:
    endpoint.script = ["500", "500"]
    vectors = client(endpoint).embed(["retry me"])
    assert len(vectors) == 1 and len(vectors[0]) == 384
    assert len(endpoint.requests) == 3


def test_a_hanging_server_gives_an_error_after_the_retries(endpoint: FakeEndpoint) -> None:
    endpoint.script = ["hang"] * 3
    embedder = client(endpoint, timeout_s=0.2, retries=2)
    started = time.monotonic()
    with pytest.raises(EmbeddingError, match=r"failed 3 times.*timed out"):
        embedder.embed(["anyone there?"])
    assert len(endpoint.requests) == 3
    assert time.monotonic() - started < 5


def test_an_unreachable_server_gives_an_error_after_the_retries() -> None:
    embedder = OpenAICompatibleEmbedder(
        "http://127.0.0.1:9/v1", "m", timeout_s=0.5, retries=1, backoff_s=0.01
    )
    with pytest.raises(EmbeddingError, match="failed 2 times"):
        embedder.embed(["hello"])


@pytest.mark.parametrize(
    ("action", "message"),
    [
        ("badjson", "invalid JSON"),
        ("401", "refused: HTTP 401"),
        ("short", "0 vectors for 1 inputs"),
        ("strings", "non-numeric"),
    ],
)
def test_bad_replies_are_errors_without_retry(
    endpoint: FakeEndpoint, action: str, message: str
) -> None:
    endpoint.script = [action]
    with pytest.raises(EmbeddingError, match=message):
        client(endpoint).embed(["x"])
    assert len(endpoint.requests) == 1


def served_by(endpoint: FakeEndpoint, settings: Settings, model: str) -> Settings:
    """Settings whose embedding backend is the fake endpoint serving `model`."""
    return settings.model_copy(
        update={
            "embedding_backend": "openai",
            "embedding_base_url": endpoint.url,
            "embedding_model": model,
            "embedding_timeout_s": 2.0,
        }
    )


def test_wrong_dimension_is_refused_by_check_dimension(
    endpoint: FakeEndpoint, settings: Settings
) -> None:
    endpoint.dim = 1536
    configured = served_by(endpoint, settings, "big-model")
    embedder = get_embedder(configured)
    assert isinstance(embedder, OpenAICompatibleEmbedder)
    with pytest.raises(
        EmbeddingDimensionError,
        match=r"model openai:big-model gives 1536 dims, schema has 384 \(ENGRAM_EMBEDDING_DIM\)",
    ):
        check_dimension(embedder, configured)
    assert endpoint.requests[0]["body"]["model"] == "big-model"


def test_a_changing_dimension_within_replies_is_an_error(endpoint: FakeEndpoint) -> None:
    embedder = client(endpoint)
    embedder.embed(["first"])
    endpoint.dim = 8
    with pytest.raises(EmbeddingError, match="8 dims, expected 384"):
        embedder.embed(["second"])


def test_a_bigger_model_is_asked_for_the_schema_dimension_when_configured(
    endpoint: FakeEndpoint, settings: Settings
) -> None:
    endpoint.dim = 3072
    configured = served_by(endpoint, settings, "large-model")
    unasked = get_embedder(configured)
    with pytest.raises(EmbeddingDimensionError, match="ENGRAM_EMBEDDING_REQUEST_DIM=true"):
        check_dimension(unasked, configured)
    assert "dimensions" not in endpoint.requests[-1]["body"]
    asked = get_embedder(configured.model_copy(update={"embedding_request_dim": True}))
    check_dimension(asked, configured)
    (vector,) = asked.embed(["a shortened vector"])
    assert len(vector) == 384
    assert endpoint.requests[-1]["body"]["dimensions"] == 384
    # Shortened vectors are other vectors: they are cached under another name.
    assert asked.name == "openai:large-model:384" != unasked.name
