"""Token counts from a real tokenizer that ships with Engram, or one the operator names.

Budgets are spent by a model, so they are counted in a model's tokens: a regex word count
undercounts Chinese ~8x and German ~3x. The default is the WordPiece vocabulary shipped with
the local embedding model (app/embedding/data): every CJK character, every sub-word piece
and every punctuation mark is a token, which tracks the BPE tokenizers of today's chat
models within a few percent on English and errs on the high side elsewhere. For an exact
count for one model family, point ENGRAM_TOKENIZER at that family's `tokenizer.json`
(Hugging Face format: Llama, Qwen, Mistral, ... ship one); nothing is downloaded.

No special tokens, no truncation, no padding: the count of a text is what it adds to a
prompt. Counting is in Rust, ~10 µs for a short turn; a loaded tokenizer is only read, so
threads share it.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

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


def _configured() -> tokenizers.Tokenizer:
    from app.config import get_settings

    return load_tokenizer(get_settings().tokenizer)


def count_tokens(text: str) -> int:
    """Tokens `text` adds to a prompt under the configured tokenizer."""
    if not text:
        return 0
    return len(_configured().encode(text, add_special_tokens=False).ids)


def count_many(texts: Sequence[str]) -> list[int]:
    """count_tokens for many texts in one call (parallel in Rust)."""
    if not texts:
        return []
    encodings = _configured().encode_batch(list(texts), add_special_tokens=False)
    return [len(e.ids) for e in encodings]


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
