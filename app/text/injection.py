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


def instruction_flags(text: str) -> list[str]:
    return [SUSPECTED_INSTRUCTION] if _PATTERNS.search(text) else []
