"""Words that frame a question about a conversation, not what it asks for.

"What games are Nicolas and Nebraas discussing?" asks for games; "discussing" names the act
of talking, which every message is. Matched as a word, it ranks the messages that talk about
talking ("I think you mentioned it before") and pulls the question's vector towards them.
So the search reads a question without its framing verbs of speech, and without "kind of"
and "types of", which ask for instances of what follows (`without_frame`); a question made
only of them is read whole.
"""

from __future__ import annotations

import re

_FRAME = re.compile(
    r"(?<![\w'\u2019-])(?:mention(?:ed|ing|s)?|discuss(?:ed|es|ing)?|talk(?:ed|ing|s)?\s+about"
    r"|in\s+(?:their|the|our|this)\s+conversations?|conversations?|(?:kinds?|types?|sorts?)\s+of)"
    r"(?![\w'\u2019-])",
    re.IGNORECASE,
)


def without_frame(query: str) -> str:
    """The query without its framing words, whitespace collapsed; the query itself when no
    word of its own would be left."""
    stripped = " ".join(_FRAME.sub(" ", query).split())
    return stripped if re.search(r"[^\W_]{3,}", stripped) else query
