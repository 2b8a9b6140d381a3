"""The offline rolling summariser for turns pushed out of working memory.

Deterministic and cheap: each evicted turn contributes one line, "role: its first sentence"
(clipped), and the oldest lines fall off when the summary exceeds its token budget. An LLM
summariser can replace it behind the same function signature.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from app.text.tokens import count_tokens

_SENTENCE_END = re.compile(r"(?<=[.!?])\s")
MAX_LINE_CHARS = 200


def first_sentence(text: str) -> str:
    flat = " ".join(text.split())
    sentence = _SENTENCE_END.split(flat, maxsplit=1)[0]
    if len(sentence) > MAX_LINE_CHARS:
        sentence = sentence[: MAX_LINE_CHARS - 1].rstrip() + "…"
    return sentence


def fold_summary(summary: str, evicted: Sequence[tuple[str, str]], max_tokens: int) -> str:
    """Fold (speaker, content) pairs, oldest first, into the summary; keep it within budget."""
    lines = [line for line in summary.splitlines() if line.strip()]
    lines.extend(f"{speaker}: {first_sentence(content)}" for speaker, content in evicted)
    total = sum(count_tokens(line) for line in lines)
    while lines and total > max_tokens:
        total -= count_tokens(lines.pop(0))
    return "\n".join(lines)
