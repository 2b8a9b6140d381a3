"""Speakers' names in a question: whether it names one, and the question without them.

Most questions about a conversation name who said it ("What hobbies does Nicolas have?").
Every dense key of a turn is led by its speaker's name (app/text/passages.py), and in a short
message the name is most of what the vector holds: "Nicolas: Yeah hes super cool" sat closer
to that question than "Nicolas: I like to rollerskate at the nearby rink". So the query is
embedded without the speakers' names (`without_speakers`), and which speaker a question is
about is left to the named-speaker boost of the fusion (app/services/search_turns.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from app.text.passages import ROLE_NAMES

MIN_WORD = 3  # a word of a several-word name shorter than this names no one alone ("Al")


def name_forms(speaker: str) -> list[str]:
    """The whole display name and, when it has several words, each of 3+ letters ("Fahim"
    names "Fahim Khan": people ask about each other by first name). A role in the name's
    place ("user", "assistant") is no name."""
    words = speaker.split()
    name = " ".join(words)
    if len(name) < 2 or name.casefold() in ROLE_NAMES:
        return []
    return [name, *(w for w in words if len(w) >= MIN_WORD)] if len(words) > 1 else [name]


def _pattern(form: str) -> str:
    """The form as a whole word, with a possessive ("Kate's", or with a typographic
    apostrophe) when it has one."""
    return rf"(?<!\w){re.escape(form)}(?:['\u2019]s)?(?!\w)"


def names_speaker(query: str, speaker: str) -> bool:
    """Whether the query names the speaker as a whole word ("Kate's" names Kate)."""
    return any(
        re.search(_pattern(form), query, re.IGNORECASE) is not None for form in name_forms(speaker)
    )


def without_speakers(query: str, speakers: Iterable[str]) -> str:
    """The query with every speaker's name taken out (longest forms first, so "Fahim Khan"
    goes whole), whitespace collapsed; the query itself when nothing else would be left."""
    forms = sorted({f for s in speakers for f in name_forms(s)}, key=lambda f: (-len(f), f))
    if not forms:
        return query
    stripped = re.sub("|".join(_pattern(f) for f in forms), " ", query, flags=re.IGNORECASE)
    kept = " ".join(stripped.split())
    return kept if any(c.isalnum() for c in kept) else query
