"""A turn's dense retrieval keys: its sentences, each led by the speaker's name.

One vector of a whole chat message averages everything it says and sits close to none of it;
a question asks about one thing. So a message of several sentences is embedded sentence by
sentence (the turn scores its best), and a one-thing message whole. Fragments too short to
say anything alone ("Wow!", "Thanks.") are left out of a split — they are still in the turn's
words for the lexical leg. The speaker's name leads every key: most questions name who said
it ("What does Kate do on weekends?"). A long message gives at most MAX_PASSAGES keys, its
sentences grouped evenly, so one turn's embedding cost stays bounded.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from app.extraction.sentences import clean_turn, split_segments

MIN_WORDS = 4  # a sentence of fewer words is a fragment, not a key of its own
MAX_PASSAGES = 8
MAX_CHARS = 2000  # the model reads 256 tokens; more text only costs tokenizer time
ROLE_NAMES = frozenset({"user", "assistant", "system", "tool"})


def passages(content: str, speaker: str | None = None) -> list[str]:
    """The texts to embed for one turn, in order; one for a turn that says one thing."""
    cleaned, _ = clean_turn(content, MAX_CHARS)  # line breaks kept: they end list items
    whole = " ".join(cleaned.split())
    if not whole:
        return []
    sentences = [
        " ".join(segment.text.split())
        for segment in split_segments(cleaned)
        if len(segment.text.split()) >= MIN_WORDS
    ]
    if len(sentences) < 2:
        return [key_text(whole, speaker)]
    size = math.ceil(len(sentences) / MAX_PASSAGES)
    return [
        key_text(" ".join(sentences[i : i + size]), speaker) for i in range(0, len(sentences), size)
    ]


def key_text(text: str, speaker: str | None) -> str:
    """`text` led by the speaker's name ("Kate: …"); a role in the name's place ("user") or
    no name leads with nothing. The extractor embeds a gem's sentence the same way, so a gem
    and the passage it was said in share one vector (and one model call, through the cache)."""
    name = " ".join((speaker or "").split())
    if not name or name.casefold() in ROLE_NAMES:
        return text
    return f"{name}: {text}"


def mean_direction(vectors: Sequence[Sequence[float]]) -> list[float]:
    """The unit-length mean of a turn's passage vectors: the direction of the whole turn."""
    if len(vectors) == 1:
        return list(vectors[0])
    summed = np.asarray(vectors, dtype=np.float64).sum(axis=0)
    # Scaled by its largest component first: the norm of a vector this small (passages that
    # all but cancel out) squares into subnormals and comes back several percent off.
    largest = float(np.abs(summed).max())
    if largest == 0:
        return summed.tolist()
    scaled = summed / largest
    return (scaled / float(np.linalg.norm(scaled))).tolist()
