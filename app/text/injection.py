"""Marks text that reads like instructions to the model, so it is stored as data and flagged.

Engram never executes or obeys stored text; the flag lets context assembly quote such turns
as untrusted content instead of splicing them into a prompt as if they were instructions.
"""

from __future__ import annotations

import re

SUSPECTED_INSTRUCTION = "suspected_instruction"

_PATTERNS = re.compile(
    r"ignore (all |any |the )?(previous|prior|above) (instructions|prompts?|messages)"
    r"|disregard (all |any |the )?(previous|prior|above)"
    r"|you are now (a|an|the) "
    r"|new (system )?instructions?:"
    r"|system prompt"
    r"|<\|?(system|im_start)\|?>"
    r"|\bact as (a|an) (?:unfiltered|jailbroken)",
    re.IGNORECASE,
)


# Every pattern holds one of these words: an ASCII text (where IGNORECASE is plain ASCII
# case) that holds none of them, lowercased, cannot match. Every ingested turn is checked.
_NEEDED = ("ignore", "disregard", "you are now", "instruction", "system", "im_start", "act as")


def _may_match(text: str) -> bool:
    if not text.isascii():
        return True
    lowered = text.lower()
    return any(word in lowered for word in _NEEDED)


def instruction_flags(text: str) -> list[str]:
    return [SUSPECTED_INSTRUCTION] if _may_match(text) and _PATTERNS.search(text) else []
