"""Subject/value keys on preferences and decisions, so the store can see a contradiction.

Two gems with the same `subject` and different `value`s contradict (the newer supersedes).
Formed from the resolved content, every part lowercased and `canonicalize`d (aliases unify:
"Postgres" → "postgresql"), the head noun singular ("seats" → "seat"):

- "<holder>|prefers|<head>" = "<modifiers>": "Alice prefers aisle seats" →
  ("alice|prefers|seat", "aisle"); "Alice now prefers window seats" → same subject, "window";
  "hotels within walking distance of Alfama" → head "hotel", value "within walking distance
  of alfama"; a bare object ("prefers tea") → ("alice|prefers|tea", "tea"): no contradiction.
- comparisons "<a> over|than|instead of <b>" → ("<holder>|prefers|<a> vs <b>" sorted, "<a>").
- like/love/enjoy vs hate/dislike/don't like → ("<holder>|likes|<object>", "yes" | "no").
- decisions "the <slot> is <value>" → ("<holder>|decided|<slot>", value); "<value> for|as
  <slot>" ("go with Postgres for the database") → ("alice|decided|database", "postgresql").
- holder: the words before the verb; "I"/"we" are the speaker; he/she/they/it give None.
Anything else gets (None, None): a missing key costs a missed contradiction, a wrong key a
wrongly superseded memory, so the rules only fire on the clear shapes above.
"""

from __future__ import annotations

import re

from app.extraction.entities import canonicalize
from app.extraction.vocabulary import STOPWORDS, word_set

_I = re.IGNORECASE
_PREFERENCE = re.compile(
    r"\b(?P<verb>prefers|prefer|preferred|(?:would|['\u2019]d)\s+(?:much\s+)?rather(?:\s+have)?"
    r"|likes|like|loves|love|enjoys|enjoy|adores|adore|hates|hate|dislikes|dislike|detests"
    r"|detest|(?:doesn['\u2019]t|does not|don['\u2019]t|do not)\s+(?:like|enjoy|love)"
    r"|(?:can['\u2019]t|cannot)\s+stand)\s+(?P<object>[^.;!?\n]+)",
    _I,
)
_DECISION = re.compile(
    r"\b(?:decided|agreed|settled|chose|picked|opted|will go with|['\u2019]ll go with|going with"
    r"|let['\u2019]?s (?:go with|use|pick|choose|stick with|switch to))\b"
    r"(?:\s+(?:on|upon|to|that|for))?\s+(?P<rest>[^.;!?\n]+)",
    _I,
)
_COPULA_SLOT = re.compile(
    r"^(?:(?:the|our|a|an|my|this|that)\s+)?(?P<slot>(?:[\w'-]+\s+){0,2}?[\w'-]+)\s+"
    r"(?:is|are|will be|should be|would be|=)\s+(?P<value>.+)$",
    _I,
)
_FOR_SLOT = re.compile(
    r"^(?:to\s+)?(?:(?:use|go with|switch to|adopt|pick|choose|move to|migrate to|book|hire)\s+)?"
    r"(?P<value>.+?)\s+(?:for|as)\s+(?:(?:the|our|a|an|my)\s+)?(?P<slot>.+)$",
    _I,
)
_COMPARISON = re.compile(r"^(?P<a>.+?)\s+(?:over|rather than|instead of|than)\s+(?P<b>.+)$", _I)
_CLAUSE_END = re.compile(
    r",(?!\d)|\s+[-\u2013\u2014]\s+|\s+(?:because|but|since|as long as|when|while|so|unless"
    r"|although|though|if|and then|which|who)\s+",
    _I,
)
_TRAILING = re.compile(
    r"(?:\s+(?:now|these days|nowadays|anymore|any more|instead|too|also|lately|in general"
    r"|generally|always|usually|mostly|please|then))+$",
    _I,
)
_DETERMINERS = word_set("a an the my your his her our their its this that these those some")
_PREPOSITIONS = word_set(
    "within with near in on at for from of to by close without next around during under about "
    "like into onto"
)
_ADVERBS = word_set("now also really still actually definitely much strongly always usually")
_UNRESOLVED = frozenset({"he", "she", "they", "it", "this", "that", "you", "someone", "people"})
_NEGATIVE = ("hate", "dislike", "detest", "n't", "not", "cannot")
MAX_VALUE_WORDS = 8


def subject_value(kind: str, content: str, *, speaker: str) -> tuple[str | None, str | None]:
    """(subject, value) for a preference or decision gem; (None, None) when unclear."""
    if kind == "preference":
        return _preference(content, speaker)
    if kind == "decision":
        return _decision(content, speaker)
    return None, None


def _preference(content: str, speaker: str) -> tuple[str | None, str | None]:
    match = _PREFERENCE.search(content)
    if match is None:
        return None, None
    holder = _holder(content[: match.start()], speaker)
    phrase = _clause(match.group("object"))
    verb = match.group("verb").lower().replace("\u2019", "'")
    if holder is None or not phrase:
        return None, None
    if "prefer" in verb or "rather" in verb:
        comparison = _COMPARISON.match(phrase)
        if comparison:
            chosen, other = _words(comparison.group("a")), _words(comparison.group("b"))
            if chosen and other and len(chosen) <= 4 and len(other) <= 4:
                a, b = _key(chosen, singular=True), _key(other, singular=True)
                return f"{holder}|prefers|{' vs '.join(sorted((a, b)))}", a
        words = _words(phrase.removeprefix("to ").removeprefix("having "))
        if not words:
            return None, None
        head, modifiers = _head(words)
        value = _key(modifiers[:MAX_VALUE_WORDS]) if modifiers else _key([head])
        return f"{holder}|prefers|{_key([head], singular=True)}", value
    words = _words(phrase)[:4]
    if not words:
        return None, None
    polarity = "no" if any(mark in verb for mark in _NEGATIVE) else "yes"
    return f"{holder}|likes|{_key(words, singular=True)}", polarity


def _decision(content: str, speaker: str) -> tuple[str | None, str | None]:
    match = _DECISION.search(content)
    if match is None:
        return None, None
    said = match.group().lower()
    holder = (
        canonicalize(speaker)
        if said.startswith("let")
        else _holder(content[: match.start()], speaker)
    )
    rest = _clause(match.group("rest"))
    if holder is None or not rest:
        return None, None
    for pattern in (_COPULA_SLOT, _FOR_SLOT):
        slot_match = pattern.match(rest)
        if slot_match is None:
            continue
        slot = _words(slot_match.group("slot"))
        value = _words(slot_match.group("value"))
        if slot and value and len(slot) <= 3 and not (set(slot) & {"we", "i", "to"}):
            return f"{holder}|decided|{_key(slot, singular=True)}", _key(value[:MAX_VALUE_WORDS])
    return None, None


def _holder(prefix: str, speaker: str) -> str | None:
    """The subject before the verb: trailing words of the last clause, adverbs dropped."""
    clause = re.split(r"[,;:]|\b(?:and|but|so|because|that)\b", prefix, flags=_I)[-1]
    words = [w for w in clause.split() if w.lower() not in _ADVERBS]
    if not words:
        return None
    tail: list[str] = []
    for word in reversed(words):
        lower = word.lower()
        if tail and (lower in STOPWORDS or lower in _DETERMINERS) and not lower.endswith("'s"):
            break
        tail.insert(0, word)
        if len(tail) == 3:
            break
    holder = canonicalize(" ".join(tail))
    if holder in ("i", "we", "us", "me"):
        holder = canonicalize(speaker)
    if not holder or holder in _UNRESOLVED:
        return None
    return holder.replace("|", " ")


def _clause(text: str) -> str:
    return _TRAILING.sub("", _CLAUSE_END.split(text, maxsplit=1)[0].strip()).strip()


def _words(text: str) -> list[str]:
    words = [w.strip("\"'`*()[]") for w in text.split()]
    words = [w for w in words if w]
    while words and words[0].lower() in _DETERMINERS:
        words = words[1:]
    return words


def _head(words: list[str]) -> tuple[str, list[str]]:
    """Head noun and its modifiers: before the first preposition, else the last word."""
    for index, word in enumerate(words[1:], start=1):
        if word.lower() in _PREPOSITIONS:
            return words[index - 1], words[: index - 1] + words[index:]
    return words[-1], words[:-1]


def _key(words: list[str], *, singular: bool = False) -> str:
    if singular and words:
        words = [*words[:-1], singularize(words[-1])]
    return canonicalize(" ".join(words)).replace("|", " ")


def singularize(word: str) -> str:
    """seats → seat, cities → city, classes → class, boxes → box; leaves "bus", "analysis"."""
    lower = word.lower()
    if len(lower) <= 3 or not lower.endswith("s") or lower.endswith(("ss", "us", "is")):
        return word
    if lower.endswith("ies") and len(lower) > 4:
        return word[:-3] + "y"
    if lower.endswith(("sses", "xes", "ches", "shes", "zes")):
        return word[:-2]
    return word[:-1]
