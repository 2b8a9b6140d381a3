"""The real local model: all-MiniLM-L6-v2, q8 (shipped) and int8 (site-packages), by onnxruntime."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

from app.config import Settings
from app.embedding.base import EmbeddingDimensionError, EmbeddingError
from app.embedding.factory import check_dimension, get_embedder, local_embedder
from app.embedding.local import (
    DIM,
    INT8,
    Q8,
    TOKENIZER_PATH,
    LocalEmbedder,
    sha256_of,
)
from app.embedding.quantize import quantize

SENTENCES = [
    "I prefer aisle seats on long flights.",
    "Meeting moved to 9:30 on Friday.",
    "Thanks, Caroline!",
    "We adopted a rescue dog named Biscuit last spring and she still hates the vacuum.",
    "ok",
    "",
    "Can you remind me which hotel we booked in Lisbon for the conference in June 2023?",
]


@pytest.fixture(scope="module")
def model() -> LocalEmbedder:
    embedder = local_embedder(1)
    embedder.load()
    return embedder


def cosine(a: list[float], b: list[float]) -> float:
    return float(np.dot(a, b))


@pytest.fixture(scope="module")
def int8_model() -> LocalEmbedder:
    return local_embedder(1, INT8.name)


def test_default_model_ships_with_engram_and_matches_its_pin(model: LocalEmbedder) -> None:
    path = Q8.locate()
    assert path.parent == TOKENIZER_PATH.parent and path.suffix == ".onnx"
    assert sha256_of(path) == Q8.sha256
    assert model.loaded and model.load_seconds is not None
    assert (model.name, model.dim, model.batch_size) == ("all-MiniLM-L6-v2-q8", 384, 1)


def test_int8_model_comes_from_site_packages_and_matches_its_pin(
    int8_model: LocalEmbedder,
) -> None:
    path = INT8.locate()
    assert "site-packages" in path.parts
    assert sha256_of(path) == INT8.sha256
    assert (int8_model.name, int8_model.dim) == ("all-MiniLM-L6-v2-int8", 384)


def test_settings_choose_the_local_model(settings: Settings) -> None:
    assert settings.embedding_local_model == Q8.name
    assert get_embedder(settings).name == Q8.name
    older = settings.model_copy(update={"embedding_local_model": INT8.name})
    assert get_embedder(older) is local_embedder(settings.embedding_threads, INT8.name)
    with pytest.raises(EmbeddingError, match="unknown local model 'minilm'"):
        LocalEmbedder(model="minilm")


def test_q8_agrees_with_the_model_it_is_made_from(
    model: LocalEmbedder, int8_model: LocalEmbedder
) -> None:
    q8 = np.array(model.embed(SENTENCES))
    int8 = np.array(int8_model.embed(SENTENCES))
    agreement = (q8 * int8).sum(axis=1)
    assert agreement.min() > 0.95 and agreement.mean() > 0.98
    # Each sentence is still nearest its own int8 vector, not a neighbour's.
    assert list((q8 @ int8.T).argmax(axis=1)) == list(range(len(SENTENCES)))


def test_a_texts_q8_vector_does_not_depend_on_the_other_texts_of_the_call(
    model: LocalEmbedder,
) -> None:
    # q8 quantises activations with one scale per call: batched with a longer text (padding
    # and all), the same sentence would come out with another vector.
    alone = np.array([model.embed([text])[0] for text in SENTENCES])
    together = np.array(model.embed(SENTENCES))
    reversed_ = np.array(model.embed(SENTENCES[::-1])[::-1])
    assert np.abs(together - alone).max() < 1e-6
    assert np.abs(reversed_ - alone).max() < 1e-6


def test_the_shipped_q8_file_is_what_the_recipe_makes(tmp_path: Path, model: LocalEmbedder) -> None:
    rebuilt = tmp_path / "q8.onnx"
    quantize(INT8.locate(), rebuilt)
    again = LocalEmbedder(rebuilt, model_sha256=sha256_of(rebuilt))
    assert np.abs(np.array(again.embed(SENTENCES)) - np.array(model.embed(SENTENCES))).max() < 1e-5


def test_vectors_are_384_dims_and_unit_length(model: LocalEmbedder) -> None:
    vectors = model.embed(["I prefer aisle seats.", "Meeting moved to 9:30 on Friday."])
    assert len(vectors) == 2
    for vector in vectors:
        assert len(vector) == DIM
        assert all(isinstance(v, float) for v in vector)
        assert np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-5)


def test_paraphrases_are_closer_than_unrelated_sentences(model: LocalEmbedder) -> None:
    cat, rug, revenue = model.embed(
        ["The cat sits on the mat", "A cat is sitting on a rug", "Quarterly revenue grew 5%"]
    )
    assert cosine(cat, rug) > 0.6
    assert cosine(cat, rug) > cosine(cat, revenue) + 0.4
    assert cosine(cat, rug) > cosine(rug, revenue) + 0.4


def test_int8_batching_gives_the_same_vectors_as_one_by_one(int8_model: LocalEmbedder) -> None:
    texts = [
        "short",
        "The flight to Lisbon leaves at 7:05 from gate B12.",
        "",
        "She said the deployment checklist must be reviewed by the on-call engineer before "
        "every Friday release, and that nobody should skip the database migration dry run.",
        "ok",
        "Allergic to penicillin.",
        "short",
    ]
    small_batches = LocalEmbedder(model=INT8.name, threads=1, batch_size=3)
    batched = np.array(small_batches.embed(texts))
    whole = np.array(int8_model.embed(texts))
    single = np.array([int8_model.embed([text])[0] for text in texts])
    assert np.abs(batched - single).max() < 1e-5
    assert np.abs(whole - single).max() < 1e-5
    assert np.abs(batched[0] - batched[6]).max() < 1e-6  # same text, same vector


def test_long_input_is_truncated_at_256_tokens(model: LocalEmbedder) -> None:
    long = "hello world " * 3000
    longer = long + "quarterly revenue grew five percent"
    first, second = model.embed([long, longer])
    assert len(first) == DIM
    assert np.linalg.norm(first) == pytest.approx(1.0, abs=1e-5)
    # Both are cut before their ends differ, so they are the same input to the model.
    assert np.abs(np.array(first) - np.array(second)).max() < 1e-6


def test_empty_string_and_empty_list(model: LocalEmbedder) -> None:
    (vector,) = model.embed([""])
    assert len(vector) == DIM and np.all(np.isfinite(vector))
    assert np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-5)
    assert model.embed([]) == []
    with pytest.raises(TypeError):
        model.embed("not a list")  # type: ignore[arg-type]


def test_a_tampered_model_file_is_refused(tmp_path: Path) -> None:
    copy = tmp_path / "model.onnx"
    shutil.copyfile(Q8.locate(), copy)
    data = bytearray(copy.read_bytes())
    data[len(data) // 2] ^= 0x01
    copy.write_bytes(bytes(data))
    embedder = LocalEmbedder(model_path=copy)
    with pytest.raises(EmbeddingError, match="sha256"):
        embedder.embed(["anything"])
    assert not embedder.loaded


def test_a_tampered_tokenizer_is_refused(tmp_path: Path) -> None:
    copy = tmp_path / "tokenizer.json"
    copy.write_bytes(TOKENIZER_PATH.read_bytes() + b" ")
    with pytest.raises(EmbeddingError, match=r"tokenizer .* sha256"):
        LocalEmbedder(tokenizer_path=copy).embed(["anything"])


def test_an_intact_copy_elsewhere_loads_once_under_concurrent_first_use(
    tmp_path: Path, model: LocalEmbedder
) -> None:
    copy = tmp_path / "model.onnx"
    shutil.copyfile(Q8.locate(), copy)
    embedder = LocalEmbedder(model_path=copy)
    results: list[list[list[float]]] = []
    sessions: list[object] = []
    start = threading.Barrier(4)

    def worker() -> None:
        start.wait()
        results.append(embedder.embed(["concurrent first use"]))
        sessions.append(embedder._session)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 4 and len({id(s) for s in sessions}) == 1
    reference = np.array(model.embed(["concurrent first use"]))
    for result in results:
        assert np.abs(np.array(result) - reference).max() < 1e-6


def test_factory_shares_one_local_model_and_checks_the_dimension(settings: Settings) -> None:
    assert settings.embedding_backend == "local"
    assert get_embedder(settings) is local_embedder(settings.embedding_threads)
    check_dimension(get_embedder(settings), settings)
    wrong = settings.model_copy(update={"embedding_dim": 768})
    with pytest.raises(EmbeddingDimensionError, match=r"gives 384 dims, schema has 768"):
        check_dimension(get_embedder(wrong), wrong)
