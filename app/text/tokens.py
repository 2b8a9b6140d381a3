"""Token counts from a real tokenizer that ships with Engram, or one the operator names.

Budgets are spent by a model, so they are counted in a model's tokens: a regex word count
undercounts Chinese ~8x and German ~3x. The default is the WordPiece vocabulary shipped with
the local embedding model (app/embedding/data): every CJK character, every sub-word piece
and every punctuation mark is a token, which tracks the BPE tokenizers of today's chat
models within a few percent on English and errs on the high side elsewhere. For an exact
count for one model family, point ENGRAM_TOKENIZER at that family's `tokenizer.json`
(Hugging Face format: Llama, Qwen, Mistral, ... ship one); nothing is downloaded.

No special tokens, no truncation, no padding: the count of a text is what it adds to a
prompt. Counting is in Rust, ~40 µs for a short turn; a loaded tokenizer is only read, so
threads share it. Every ingested turn is counted, so for a BERT-style tokenizer (the shipped
one) text is counted by its whitespace-separated chunks, each chunk tokenized once and
remembered (`_ChunkedWordPiece`): the same count for a few µs, and a context block holding
one emoji is not sent to the tokenizer whole.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from functools import lru_cache
from itertools import chain
from pathlib import Path
from typing import Any

import tokenizers

SHIPPED = "wordpiece"
_SHIPPED_PATH = (
    Path(__file__).resolve().parent.parent
    / "embedding"
    / "data"
    / "all-MiniLM-L6-v2.tokenizer.json"
)


class TokenizerError(ValueError):
    """The configured tokenizer cannot be loaded."""


@lru_cache(maxsize=4)
def load_tokenizer(name: str = SHIPPED) -> tokenizers.Tokenizer:
    """`wordpiece` (shipped) or the path of a Hugging Face `tokenizer.json`."""
    path = _SHIPPED_PATH if name == SHIPPED else Path(name).expanduser()
    try:
        tokenizer = tokenizers.Tokenizer.from_file(str(path))
    except Exception as exc:  # the library raises plain Exception for unreadable files
        raise TokenizerError(
            f"ENGRAM_TOKENIZER={name!r}: cannot load a tokenizer.json from {path} ({exc})"
        ) from None
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


# The ASCII controls BertNormalizer's clean_text drops (tab, newline and CR become spaces).
_CONTROLS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# Typographic punctuation common in chat (curly quotes and apostrophes, dashes, the
# ellipsis, bullets, guillemets): each is a Unicode punctuation mark (category P), which the
# pre-tokenizer isolates like an ASCII one and WordPiece counts as one token (its own or
# [UNK]), so it counts as an ASCII mark does; a no-break space is whitespace to the normalizer.
TYPOGRAPHIC = (
    "\u2018\u2019\u201a\u201b\u201c\u201d\u201e\u201f\u2013\u2014\u2015\u2026\u2022"
    "\u00a1\u00bf\u00ab\u00bb\u2039\u203a"
)
_AS_ASCII = str.maketrans(dict.fromkeys(TYPOGRAPHIC, "'") | {"\u00a0": " "})
# In a lowercased chunk: runs of letters and digits, and each punctuation mark alone.
_WORDS = re.compile(r"[a-z0-9]+|[^a-z0-9]")
# Whitespace-separated words as written, for cutting a text at a word boundary.
_CHUNKS = re.compile(r"\S+")
# The whitespace every BERT pre-tokenizer splits at, whatever surrounds it: a non-ASCII text
# is cut here only (Python's str.split also cuts at characters the normalizer drops).
_ASCII_SPACE = re.compile(r"[ \t\n\r]+")
# Chunks and words remembered (a bounded cache, started afresh when full); longer ones are
# counted each time they come.
KEPT = 65_536
LONGEST_KEPT = 64


def _remember(known: dict[str, int], fresh: dict[str, int]) -> dict[str, int] | None:
    """Add `fresh` to `known` in place, or return a new dict to use when `known` is full
    (never emptied in place: another thread may be reading it)."""
    kept = {key: n for key, n in fresh.items() if len(key) <= LONGEST_KEPT}
    if len(known) + len(kept) > KEPT:
        return kept
    known.update(kept)
    return None


class _ChunkedWordPiece:
    """Exact counts for a BertNormalizer (lowercasing) + BertPreTokenizer + WordPiece
    tokenizer, from counts of a text's whitespace-separated chunks.

    The normalizer works character by character (it drops controls, lowercases, strips
    accents, spaces out CJK) and the pre-tokenizer splits at whitespace, so a text counts the
    sum of its chunks, and chunks repeat: each is counted once and remembered. On ASCII the
    normalizer only drops controls and lowercases, and the pre-tokenizer isolates every
    punctuation mark, so an ASCII chunk counts the sum of its words, each tokenized by
    WordPiece alone; a chunk with other characters is counted by the whole tokenizer. A text
    holding an added token (`[MASK]`...), which the tokenizer matches before normalizing, is
    left to the tokenizer whole.
    """

    def __init__(self, tokenizer: tokenizers.Tokenizer) -> None:
        self.tokenizer = tokenizer
        self.model = tokenizer.model
        added = sorted({t.content.lower() for t in tokenizer.get_added_tokens_decoder().values()})
        self.added = re.compile("|".join(map(re.escape, added))) if added else None
        self.chunks: dict[str, int] = {}
        self.words: dict[str, int] = {}

    @staticmethod
    def fits(tokenizer: tokenizers.Tokenizer) -> bool:
        config: dict[str, Any] = json.loads(tokenizer.to_str())
        normalizer = config.get("normalizer") or {}
        return (
            normalizer.get("type") == "BertNormalizer"
            and normalizer.get("clean_text") is True
            and normalizer.get("lowercase") is True
            and (config.get("pre_tokenizer") or {}).get("type") == "BertPreTokenizer"
            and (config.get("model") or {}).get("type") == "WordPiece"
        )

    def chunks_of(self, text: str) -> list[str] | None:
        """The text's chunks, lowercased where ASCII (typographic punctuation counts as
        ASCII), or None when the tokenizer must see it whole."""
        if not text.isascii():
            text = text.translate(_AS_ASCII)
        if _CONTROLS.search(text):
            text = _CONTROLS.sub("", text)
        if self.added is not None and self.added.search(text.lower()):
            return None
        if text.isascii():
            return text.lower().split()
        return [c if not c.isascii() else c.lower() for c in _ASCII_SPACE.split(text) if c]

    def count(self, texts: Sequence[list[str]]) -> list[int]:
        """Counts of texts given as chunks (from `chunks_of`)."""
        known = self.chunks
        try:
            return [sum(map(known.__getitem__, chunks)) for chunks in texts]
        except KeyError:
            pass
        fresh = self._count_chunks(set(chain.from_iterable(texts)).difference(known))
        lookup = known
        if (started := _remember(known, fresh)) is not None:
            self.chunks = lookup = started
        counts = []
        for chunks in texts:
            try:
                counts.append(sum(map(lookup.__getitem__, chunks)))
            except KeyError:  # a chunk too long to keep, or one a restarted cache let go
                counts.append(sum(fresh[c] if c in fresh else known[c] for c in chunks))
        return counts

    def _count_chunks(self, chunks: set[str]) -> dict[str, int]:
        other = [chunk for chunk in chunks if not chunk.isascii()]
        whole = self.tokenizer.encode_batch(other, add_special_tokens=False) if other else []
        split = {chunk: _WORDS.findall(chunk) for chunk in chunks if chunk.isascii()}
        known = self.words
        # A word is normalized and split already: the model alone tokenizes it.
        tokenize = self.model.tokenize
        new = set(chain.from_iterable(split.values())).difference(known)
        fresh = {word: len(tokenize(word)) for word in new}
        if (started := _remember(known, fresh)) is not None:
            self.words = started
        counted = {
            chunk: sum(fresh[w] if w in fresh else known[w] for w in words)
            for chunk, words in split.items()
        }
        counted.update((chunk, len(e.ids)) for chunk, e in zip(other, whole, strict=True))
        return counted


@lru_cache(maxsize=4)
def _word_counter(name: str) -> _ChunkedWordPiece | None:
    tokenizer = load_tokenizer(name)
    return _ChunkedWordPiece(tokenizer) if _ChunkedWordPiece.fits(tokenizer) else None


def _configured_name() -> str:
    from app.config import get_settings

    return get_settings().tokenizer


def _configured() -> tokenizers.Tokenizer:
    return load_tokenizer(_configured_name())


def count_tokens(text: str) -> int:
    """Tokens `text` adds to a prompt under the configured tokenizer."""
    if not text:
        return 0
    return count_many([text])[0]


def count_many(texts: Sequence[str]) -> list[int]:
    """count_tokens for many texts in one call (by the chunk, from the cache where the
    tokenizer allows it; the rest whole, in parallel in Rust)."""
    if not texts:
        return []
    name = _configured_name()
    counter = _word_counter(name)
    counts: list[int] = [0] * len(texts)
    rest: list[int] = []
    if counter is None:
        rest = list(range(len(texts)))
    else:
        split: list[list[str]] = []
        split_at: list[int] = []
        for index, text in enumerate(texts):
            chunks = counter.chunks_of(text)
            if chunks is None:
                rest.append(index)
            else:
                split.append(chunks)
                split_at.append(index)
        for index, count in zip(split_at, counter.count(split), strict=True):
            counts[index] = count
    if rest:
        encodings = load_tokenizer(name).encode_batch(
            [texts[i] for i in rest], add_special_tokens=False
        )
        for index, encoding in zip(rest, encodings, strict=True):
            counts[index] = len(encoding.ids)
    return counts


def counts_add_up() -> bool:
    """Whether the configured tokenizer counts a text as the sum of its whitespace-separated
    pieces (the shipped WordPiece, any BERT-style tokenizer): then a text joined at whitespace
    from pieces counted one by one holds exactly their sum, and needs no second count."""
    return _word_counter(_configured_name()) is not None


def fit_to_tokens(text: str, budget: int) -> tuple[str, int]:
    """truncate_to_tokens and the result's token count, counting `text` once when it fits."""
    count = count_tokens(text)
    if count <= budget:
        return text, count
    fitted = truncate_to_tokens(text, budget)
    return fitted, count_tokens(fitted)


def truncate_to_tokens(text: str, budget: int) -> str:
    """The longest prefix of `text` (cut at a token boundary) that counts at most `budget`."""
    encoding = _configured().encode(text, add_special_tokens=False)
    if len(encoding.ids) <= budget:
        return text
    if budget <= 0:
        return ""
    end = encoding.offsets[budget - 1][1]
    prefix = text[:end]
    while prefix and count_tokens(prefix) > budget:
        prefix = prefix[:-1]
    return prefix


# A context cuts the same long turns for question after question: cuts of texts up to this
# long are remembered per tokenizer (4,096 of them, a few MB at most).
REMEMBERED_CUT_CHARS = 2_000


def words_within(text: str, budget: int) -> str | None:
    """The longest run of `text`'s leading whole words (whitespace-separated, as written)
    that counts at most `budget` tokens, without encoding the text: None when the configured
    tokenizer's counts do not add up word by word (not WordPiece) or no whole word fits."""
    name = _configured_name()
    if _word_counter(name) is None:
        return None
    if len(text) <= REMEMBERED_CUT_CHARS:
        return _remembered_words_within(name, text, budget)
    return _words_within(name, text, budget)


def _words_within(name: str, text: str, budget: int) -> str | None:
    """words_within, counted under the configured tokenizer; `name` (its name) keys the
    remembered cuts."""
    spans = [match.span() for match in _CHUNKS.finditer(text)]
    used, end = 0, None
    for (_, stop), count in zip(spans, count_many([text[a:b] for a, b in spans]), strict=True):
        used += count
        if used > budget:
            break
        end = stop
    return text[:end] if end is not None else None


_remembered_words_within = lru_cache(maxsize=4_096)(_words_within)
