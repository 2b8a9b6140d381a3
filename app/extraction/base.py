"""What every extractor takes and gives: source turns in, self-contained gems out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from app.embedding.base import Embedder, Owner
from app.text.passages import mean_direction

GEM_KINDS = ("decision", "fact", "preference", "todo", "code", "goal", "event")


@dataclass(frozen=True)
class SourceTurn:
    """A turn as extraction sees it (read from L2)."""

    id: str  # L2 turn id (uuid, as text)
    external_id: str  # the producer's message id
    role: str  # user | assistant | system | tool
    speaker: str  # display name, e.g. "Alice" or "Engram assistant"
    content: str
    channel: str
    at: datetime  # timezone-aware, the producer's timestamp


@dataclass(frozen=True)
class Gem:
    """A memory that stands on its own when read months later."""

    kind: str  # one of GEM_KINDS
    content: str  # persons and relative times resolved ("Alice prefers …", "on 2026-03-09")
    summary: str  # one line
    topics: list[str]
    importance: float  # 0..1
    source_turn_ids: list[str]  # exact L2 turn ids it came from, most relevant first
    occurred_at: datetime  # time of its (first) source turn
    original: str = ""  # the source wording, kept beside the resolved content
    # For contradiction detection: a normalised subject ("alice|prefers|seat") and its value
    # ("aisle"); two gems with the same subject and different values contradict.
    subject: str | None = None
    value: str | None = None
    metadata: dict[str, object] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)  # caller's labels, beside the kind
    channel: str | None = None  # where it was said (default: its first source turn's channel)
    # The text its vector is computed from, when not `content`: the source sentence(s) as
    # said, from the offline extractor, or from the LLM when the cited turns contain it
    # verbatim.
    embed_text: str = ""
    # A joined run of sentences: their texts as embedded, when its vector is their mean
    # direction (gem_vectors) instead of a model call on embed_text.
    embed_parts: list[str] = field(default_factory=list)


class Extractor(Protocol):
    """Extracts gems from `batch` only; `context` (earlier turns, token-capped) is for reading."""

    name: str

    def extract(
        self, *, batch: Sequence[SourceTurn], context: Sequence[SourceTurn]
    ) -> list[Gem]: ...


def embedding_text(gem: Gem) -> str:
    """What a gem is embedded from: its source sentence where the extractor gave one, else its
    content. Dense search is filtered to one user, whose memories mostly carry the same
    resolved name, so the name adds little to tell them apart; the sentence as said is what
    its turn was already embedded as for novelty, so one model call serves both and novelty
    compares like with like. Gems sharing a sentence share a vector: store_gems never takes
    them for near-duplicates of each other."""
    return gem.embed_text or gem.content


def embedding_parts(gem: Gem) -> list[str]:
    """The texts whose mean direction is the gem's vector: its joined sentences, or its one
    embedding_text."""
    return gem.embed_parts or [embedding_text(gem)]


def gem_vectors(
    embedder: Embedder, parts: Sequence[Sequence[str]], owners: Sequence[Owner]
) -> list[list[float]]:
    """One vector per gem from its texts (`parts`, each gem's embedding_parts; `owners`, each
    gem's tenant and user), in one embedding call. A joined passage's sentences are its turn's
    passage keys, embedded (and cached, under the same owner) when the turn was scored, so its
    vector costs no model call: bench/conversations.py extracted its 8,944 turns in
    102.6-105.3 s instead of 119.7-126.0 s embedding runs whole, for ~0.006 of recall@10 there
    and on bench/quality.py --turns."""
    flat = embedder.embed(
        [text for texts in parts for text in texts],
        [owner for texts, owner in zip(parts, owners, strict=True) for _ in texts],
    )
    vectors: list[list[float]] = []
    at = 0
    for texts in parts:
        vectors.append(mean_direction(flat[at : at + len(texts)]))
        at += len(texts)
    return vectors


def gem_to_dict(gem: Gem) -> dict[str, object]:
    """JSON-ready form, for gems waiting in an extraction batch between pipeline steps."""
    data = dict(vars(gem))
    data["occurred_at"] = gem.occurred_at.isoformat()
    return data


def gem_from_dict(data: dict[str, object]) -> Gem:
    values = dict(data)
    values["occurred_at"] = datetime.fromisoformat(str(values["occurred_at"]))
    return Gem(**values)  # type: ignore[arg-type]
