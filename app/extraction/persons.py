"""First and second person → the speakers' names, so a gem says who without its turn.

"I prefer aisle seats" said by Alice becomes "Alice prefers aisle seats"; in an assistant
turn "you" is the user ("you're flying Tuesday" → "Alice is flying Tuesday"). Verb agreement
covers what follows a subject pronoun in chat: am/are/have/do and their negations, modals
and past forms unchanged, a third-person -s for other verbs, adverbs in between skipped
("I now prefer" → "Alice now prefers"). Plural first person (we/us/our) is left as written:
who "we" are is not knowable from the text. Everything else is copied byte for byte.
"""

from __future__ import annotations

import re

from app.extraction.vocabulary import word_set

_TOKEN = re.compile(r"[^\W_]+(?:['\u2019][^\W_]+)*|\s+|.", re.DOTALL)

_ADVERBS = word_set(
    "also really now still just always never usually often sometimes only even mostly "
    "generally definitely totally actually already rarely seldom mainly certainly truly "
    "honestly probably absolutely strongly kinda personally currently normally typically "
    "occasionally frequently too myself yourself"
)
_LY_VERBS = word_set("reply apply rely supply comply imply multiply fly ally bully")
_UNCHANGED = word_set(
    "can could will would shall should may might must ought did didn't can't cannot couldn't "
    "won't wouldn't shouldn't mustn't mightn't"
)
_IRREGULAR_PAST = word_set(
    "was were had went met saw got came told said made took left felt knew ran wrote sent spent "
    "built paid lost kept began gave brought chose ate drove flew heard held meant sat slept "
    "spoke stood taught understood won broke forgot became fell grew hid led rode sang sold "
    "threw woke wore thought bought found caught did dealt fought hung lay lent lit put quit "
    "read set shut split spread stuck struck swam swore tore wept"
)
_AGREEMENT = {
    "am": "is",
    "are": "is",
    "were": "was",
    "have": "has",
    "do": "does",
    "don't": "doesn't",
    "haven't": "hasn't",
    "aren't": "isn't",
    "weren't": "wasn't",
    "be": "is",
}
# Auxiliaries before an inverted subject: "do you want" → "does Alice want".
_INVERTED = {
    **{k: v for k, v in _AGREEMENT.items() if k != "be"},
    # Modals and past forms stay as they are; listing them marks them as auxiliaries.
    **{
        word: word
        for word in [
            "did",
            "didn't",
            "can",
            "could",
            "will",
            "would",
            "should",
            "shall",
            "may",
            "might",
            "must",
            "can't",
            "won't",
            "wouldn't",
            "couldn't",
            "shouldn't",
        ]
    },
}
_NOT_SUBJECT_AFTER = frozenset({"and", "or", "nor"})
# "you" after these starts a clause, so it is the subject; elsewhere it is an object.
_CLAUSE_OPENERS = word_set(
    "that if when because since so and but or as while unless once until though although "
    "where whether then now maybe perhaps also what how why which who"
)
_PARTICIPLES = word_set("been had done gone seen made got gotten taken given known")


def third_person(verb: str) -> str:
    """The -s form of a base verb: prefer → prefers, go → goes, try → tries, have → has."""
    lower = verb.lower()
    if lower in _AGREEMENT:
        form = _AGREEMENT[lower]
    elif lower.endswith(("s", "sh", "ch", "x", "z", "o")):
        form = lower + "es"
    elif len(lower) > 1 and lower.endswith("y") and lower[-2] not in "aeiou":
        form = lower[:-1] + "ies"
    else:
        form = lower + "s"
    return form.upper() if verb.isupper() and len(verb) > 1 else form


def resolve_persons(text: str, *, speaker: str, listener: str | None = None) -> str:
    """`text` said by `speaker` to `listener`, with I/me/my (and you/your if listener) named."""
    speaker = speaker.strip()
    if not speaker or not text:
        return text
    tokens = _TOKEN.findall(text)
    out = list(tokens)
    listener = listener.strip() if listener else None
    for index, piece in enumerate(tokens):
        lower = _plain(piece).lower()
        if lower in _FIRST or (piece == "i" and _lower_i_is_pronoun(tokens, index)):
            _first_person(tokens, out, index, lower, speaker)
        elif listener and lower in _SECOND:
            _second_person(tokens, out, index, lower, listener)
    return "".join(out)


_FIRST = frozenset({"i", "i'm", "i've", "i'll", "i'd", "me", "my", "mine", "myself"})
_SECOND = frozenset({"you", "you're", "you've", "you'll", "you'd", "your", "yours", "yourself"})


def _plain(token: str) -> str:
    return token.replace("\u2019", "'")


def _apostrophe(token: str) -> str:
    return "\u2019" if "\u2019" in token else "'"


def _word_at(tokens: list[str], index: int, step: int) -> int | None:
    """Index of the neighbouring word across spaces only; None at punctuation or the end."""
    position = index + step
    while 0 <= position < len(tokens):
        token = tokens[position]
        if token.isspace():
            position += step
            continue
        return position if token[0].isalpha() else None
    return None


def _lower_i_is_pronoun(tokens: list[str], index: int) -> bool:
    """Chat's lowercase "i", but not "i.e." or a list marker "(i)"."""
    return _word_at(tokens, index, +1) is not None


def _first_person(tokens: list[str], out: list[str], index: int, lower: str, name: str) -> None:
    token = tokens[index]
    if lower in ("me", "myself"):
        out[index] = name
    elif lower in ("my", "mine"):
        out[index] = f"{name}{_apostrophe(token)}s"
    elif lower == "i":
        if tokens[index] == "I" and _is_roman_numeral(tokens, index):
            return
        out[index] = name
        if not _invert(tokens, out, index):
            _agree(tokens, out, index)
    else:
        out[index] = _contraction(tokens, index, lower[2:], name)


def _second_person(tokens: list[str], out: list[str], index: int, lower: str, name: str) -> None:
    token = tokens[index]
    if lower == "yourself":
        out[index] = name
    elif lower in ("your", "yours"):
        out[index] = f"{name}{_apostrophe(token)}s"
    elif lower == "you":
        before = _word_at(tokens, index, -1)
        previous = _plain(tokens[before]).lower() if before is not None else ""
        if previous == "thank":
            return  # "thank you" stays an idiom
        out[index] = name
        if not _invert(tokens, out, index) and (not previous or previous in _CLAUSE_OPENERS):
            _agree(tokens, out, index)
    else:
        out[index] = _contraction(tokens, index, lower[4:], name)


def _invert(tokens: list[str], out: list[str], subject: int) -> bool:
    """In a question ("do you …", "am I …") the auxiliary before the subject agrees."""
    before = _word_at(tokens, subject, -1)
    if before is None:
        return False
    auxiliary = _plain(tokens[before]).lower()
    if auxiliary not in _INVERTED:
        return False
    out[before] = _cased(tokens[before], _INVERTED[auxiliary])
    return True


def _contraction(tokens: list[str], index: int, tail: str, name: str) -> str:
    """I'm / you're → "is", 've → "has", 'll → "will", 'd → "would" or "had"."""
    if tail in ("m", "re"):
        return f"{name} is"
    if tail == "ve":
        return f"{name} has"
    if tail == "ll":
        return f"{name} will"
    following = _word_at(tokens, index, +1)
    word = tokens[following].lower() if following is not None else ""
    had = word in _PARTICIPLES or (word.endswith("ed") and word not in ("need", "feed"))
    return f"{name} {'had' if had else 'would'}"


def _is_roman_numeral(tokens: list[str], index: int) -> bool:
    """True for "World War I", "Part I.": a capitalised word before and no word after."""
    before = _word_at(tokens, index, -1)
    after = _word_at(tokens, index, +1)
    return before is not None and tokens[before][:1].isupper() and after is None


def _agree(tokens: list[str], out: list[str], subject: int) -> None:
    """Make the verb after a now-third-person subject agree, skipping up to two adverbs."""
    before = _word_at(tokens, subject, -1)
    if before is not None and tokens[before].lower() in _NOT_SUBJECT_AFTER:
        return  # "Bob and I are" keeps its plural verb
    position = subject
    for _ in range(3):
        following = _word_at(tokens, position, +1)
        if following is None:
            return
        word = _plain(tokens[following]).lower()
        if word in _ADVERBS or (word.endswith("ly") and len(word) > 4 and word not in _LY_VERBS):
            position = following
            continue
        out[following] = _cased(tokens[following], _agreed(word))
        return


def _agreed(word: str) -> str:
    if word in _AGREEMENT:
        return _AGREEMENT[word]
    if word in _UNCHANGED or word in _IRREGULAR_PAST or word.endswith("ed") or "'" in word:
        return word
    if word.endswith("s") and not word.endswith(("ss", "us")):
        return word  # not a base verb: a plural or a verb already inflected
    return third_person(word)


def _cased(original: str, replacement: str) -> str:
    """`replacement` in the case of `original`, with the original's apostrophe style."""
    if "\u2019" in original:
        replacement = replacement.replace("'", "\u2019")
    if original.isupper() and len(original) > 1:
        return replacement.upper()
    if original[:1].isupper():
        return replacement[:1].upper() + replacement[1:]
    return replacement
