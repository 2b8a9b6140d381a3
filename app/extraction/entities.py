"""Entities and typed relations from a gem's text, offline: names, tech terms, speakers.

Mentions: the speaker (a `person`); known technology words (one canonical per alias:
Postgres/PostgreSQL/postgresql → "postgresql"); CamelCase, snake_case and dotted names
(`technology`); capitalised word runs (`thing`), which at a sentence start count only when
the word is known (the speaker, the vocabulary, seen mid-sentence) or a relation verb follows
("Bruno is …"). Relations: "X uses|prefers|likes|manages Y", "X works at|for Y",
"X lives in Y", "X is a Y"; X must be a mention (or I/we, read as the speaker).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from app.extraction.vocabulary import (
    COMMON_WORDS,
    MONTHS_AND_DAYS,
    TECH_ALIASES,
    TECH_CASED,
    word_set,
)


@dataclass(frozen=True)
class EntityMention:
    name: str  # display form ("PostgreSQL")
    canonical: str  # the key every variant shares ("postgresql")
    kind: str  # person | technology | thing
    surface: str  # as written


@dataclass(frozen=True)
class RelationFact:
    source: str  # canonical names
    relation: str  # uses | prefers | likes | manages | works_at | lives_in | is_a
    target: str


_POSSESSIVE = re.compile(r"(?<=\w)['\u2019]s?$")
_SEPARATORS = re.compile(r"[\s_\-]+")
_EDGE_PUNCT = re.compile(r"^[^\w.+#]+|[^\w+#]+$")


@lru_cache(maxsize=65536)
def canonicalize(name: str) -> str:
    """One key per variant: case-folded, possessive dropped, separators and aliases unified.

    Applied until nothing changes, so a canonical name canonicalizes to itself. Remembered
    per name: the same names and words come back in every gem of a user."""
    current = name
    for _ in range(5):
        following = _canonical_step(current)
        if following == current:
            break
        current = following
    return current


def _canonical_step(name: str) -> str:
    visible = "".join(ch for ch in name if unicodedata.category(ch)[0] != "C")
    text = unicodedata.normalize("NFKC", visible).casefold().strip()
    text = _EDGE_PUNCT.sub("", text)
    text = _POSSESSIVE.sub("", text)
    text = _SEPARATORS.sub(" ", text).strip(" .")
    if not text:
        return ""
    squeezed = text.replace(" ", "").replace(".", "")
    return TECH_ALIASES.get(text) or TECH_ALIASES.get(squeezed) or text


_CAPITALISED = re.compile(
    r"(?<![\w.])(?:[A-Z][\w'\u2019\-]*|[A-Z]\.)(?:\s+(?:of|de|da|la|von|van|the)?\s*[A-Z][\w'\u2019\-]*)*"
)
_CAMEL = re.compile(r"\b(?:[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+|[a-z]+[A-Z][A-Za-z0-9]*)\b")
_SNAKE = re.compile(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b")
_DOTTED = re.compile(r"\b[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+(?:\(\))?")
_WORDS = re.compile(r"[\w+#][\w+#.\-']*[\w+#]|[\w+#]")
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_SENTENCE_START = re.compile(r"^[\s\"'(\[*\-•]*")
_NOT_DOTTED = frozenset({"e.g", "i.e", "etc", "vs", "a.m", "p.m"})

_VERBS = {
    "uses": "uses",
    "use": "uses",
    "used": "uses",
    "using": "uses",
    "prefers": "prefers",
    "prefer": "prefers",
    "preferred": "prefers",
    "likes": "likes",
    "like": "likes",
    "liked": "likes",
    "loves": "likes",
    "love": "likes",
    "loved": "likes",
    "manages": "manages",
    "manage": "manages",
    "managed": "manages",
    "leads": "manages",
    "lead": "manages",
}
# The subject starts a word and the object is bounded, so a long word or sentence costs one
# pass, not one per character (8,000 characters of one word took 0.44 s before, a search too).
_RELATION = re.compile(
    r"(?<![\w.+#'\u2019\-])(?P<subject>[\w.+#'\u2019\-]+)\s+"
    r"(?:(?:now|also|really|still|mainly|usually|already|"
    r"currently|actually|is|are|am|was|were)\s+)*"
    r"(?P<verb>uses|use|used|using|prefers|prefer|preferred|likes|like|liked|loves|love|loved"
    r"|manages|manage|managed|leads|lead"
    r"|works?\s+(?:at|for)|worked\s+(?:at|for)|working\s+(?:at|for)"
    r"|lives?\s+in|lived\s+in|living\s+in"
    r"|is\s+an?|was\s+an?|am\s+an?)\s+"
    r"(?P<object>[^.,;:!?()\n]{1,200})",
    re.IGNORECASE,
)
_OBJECT_STOP = word_set(
    "and or but because since so for to with without at in on by from of as than that which "
    "who when while if now instead too over within near into about across around under after "
    "before during per like except via is are was were"
)
_CONJUNCTION = re.compile(r"\s+(?:and|or|&)\s+|\s*,\s*", re.IGNORECASE)
_DETERMINERS = word_set("a an the my your his her our their its this that these those some")
_RELATION_VERBS_AFTER_NAME = word_set(
    "is was has had uses prefers likes loves manages leads works lives said wants needs will "
    "can should"
)


def extract_entities(
    text: str, *, speaker: str | None = None
) -> tuple[list[EntityMention], list[RelationFact]]:
    """Mentions in order of first appearance (one per canonical) and the relations found."""
    mentions: dict[str, EntityMention] = {}

    def add(surface: str, kind: str) -> None:
        canonical = canonicalize(surface)
        if not canonical or canonical in mentions or len(canonical) > 80:
            return
        mentions[canonical] = EntityMention(_display(surface, canonical), canonical, kind, surface)

    speaker_key = canonicalize(speaker) if speaker else ""
    if speaker and speaker_key:
        add(speaker.strip(), "person")
    known = {speaker_key} if speaker_key else set()
    mid_sentence = _mid_sentence_capitals(text)
    for sentence in _sentences(text):
        _scan(sentence, add, known | mid_sentence, speaker_key)
    relations = _relations(text, set(mentions), speaker_key)
    return list(mentions.values()), relations


def _sentences(text: str) -> list[str]:
    return [s for s in _SENTENCE.split(text) if s.strip()]


def _mid_sentence_capitals(text: str) -> set[str]:
    """Capitalised words seen away from a sentence start: names, so known at a start too."""
    seen: set[str] = set()
    for sentence in _sentences(text):
        lead = len(_SENTENCE_START.match(sentence).group())  # type: ignore[union-attr]
        for match in _CAPITALISED.finditer(sentence):
            if match.start() > lead:
                seen.add(canonicalize(match.group().split()[0]))
    return seen


def _scan(sentence: str, add: Callable[[str, str], None], known: set[str], speaker: str) -> None:
    """Code-like names first, then vocabulary words, then capitalised runs not yet taken."""
    lead = len(_SENTENCE_START.match(sentence).group())  # type: ignore[union-attr]
    taken: list[tuple[int, int]] = []
    for pattern in (_DOTTED, _CAMEL, _SNAKE):
        for match in pattern.finditer(sentence):
            surface = match.group().removesuffix("()")
            if pattern is _DOTTED and not _is_dotted_name(surface):
                continue
            taken.append(match.span())
            add(surface, "technology")
    for match in _WORDS.finditer(sentence):
        word = match.group().strip(".'-")
        key = word.casefold()
        if key not in TECH_ALIASES or _inside(match.span(), taken):
            continue
        if key in TECH_CASED and (not word[:1].isupper() or match.start() <= lead):
            continue  # "go", "rust", or "Go ahead" at a sentence start
        taken.append(match.span())
        add(word, "technology")
    for match in _CAPITALISED.finditer(sentence):
        if _inside(match.span(), taken):
            continue
        at_start = match.start() <= lead
        words = _trim_run(match.group().split(), at_start=at_start)
        if not words:
            continue
        if at_start and words[0] == match.group().split()[0]:
            after = sentence[match.end() :].split(None, 1)
            follows = after[0].lower() if after else ""
            if (
                canonicalize(words[0]) not in known
                and len(words) == 1
                and follows not in _RELATION_VERBS_AFTER_NAME
            ):
                continue
        surface = " ".join(words)
        add(surface, "person" if canonicalize(surface) == speaker else "thing")


def _is_dotted_name(surface: str) -> bool:
    """True for "app.config", "Node.js", "os.path.join"; not "e.g." nor "Alfama.Next"."""
    if surface.lower().rstrip(".") in _NOT_DOTTED:
        return False
    return canonicalize(surface) in TECH_ALIASES.values() or bool(
        re.search(r"[a-z_]\.[a-z_]", surface)
    )


# Capitalised after a speaker label ("Alice: Twelve people") or at a line start, these are
# counts, never names.
_NUMBER_WORDS = frozenset(
    [
        "zero",
        "one",
        "two",
        "three",
        "four",
        "five",
        "six",
        "seven",
        "eight",
        "nine",
        "ten",
        "eleven",
        "twelve",
        "thirteen",
        "fourteen",
        "fifteen",
        "sixteen",
        "seventeen",
        "eighteen",
        "nineteen",
        "twenty",
        "thirty",
        "forty",
        "fifty",
        "sixty",
        "seventy",
        "eighty",
        "ninety",
        "hundred",
        "thousand",
        "million",
        "billion",
        "first",
        "second",
        "third",
        "fourth",
        "fifth",
        "sixth",
        "seventh",
        "eighth",
        "ninth",
        "tenth",
        "dozen",
        "half",
    ]
)


def _trim_run(words: list[str], *, at_start: bool) -> list[str]:
    """Drop "I", weekdays, months and number words from a capitalised run, and common words
    at its start when the run opens the sentence ("The University of Lisbon", "In March
    Alice")."""

    def noise(word: str) -> bool:
        key = canonicalize(word)
        return (
            key in MONTHS_AND_DAYS
            or key in _NUMBER_WORDS
            or len(key) < 2
            or key in ("i", "i'm", "i've", "i'll")
        )

    while words and (noise(words[0]) or (at_start and canonicalize(words[0]) in COMMON_WORDS)):
        words = words[1:]
    while words and (noise(words[-1]) or words[-1].lower() in ("of", "de", "the")):
        words = words[:-1]
    if at_start and len(words) == 1 and canonicalize(words[0]) in COMMON_WORDS:
        return []
    return words


def _inside(span: tuple[int, int], taken: list[tuple[int, int]]) -> bool:
    return any(start <= span[0] and span[1] <= end for start, end in taken)


def _display(surface: str, canonical: str) -> str:
    if canonical in TECH_ALIASES.values():
        return _TECH_DISPLAY.get(canonical, surface)
    return _POSSESSIVE.sub("", surface.strip())


_TECH_DISPLAY = {
    "postgresql": "PostgreSQL",
    "kubernetes": "Kubernetes",
    "javascript": "JavaScript",
    "typescript": "TypeScript",
    "node.js": "Node.js",
    "mongodb": "MongoDB",
    "mysql": "MySQL",
    "github": "GitHub",
    "gitlab": "GitLab",
    "pgvector": "pgvector",
    "fastapi": "FastAPI",
    "openai": "OpenAI",
    "pytorch": "PyTorch",
}


def _relations(text: str, known: set[str], speaker: str) -> list[RelationFact]:
    found: list[RelationFact] = []
    for sentence in _sentences(text):
        position = 0
        previous = ""
        while (match := _RELATION.search(sentence, position)) is not None:
            position = match.end("verb")
            source = canonicalize(match.group("subject"))
            if source in ("i", "we") and speaker:
                source = speaker
            elif source in ("and", "also") and previous:
                source = previous  # "Alice works at Acme and lives in Porto"
            if source not in known:
                continue
            previous = source
            relation = _relation_name(match.group("verb"))
            for target in _objects(match.group("object"), known):
                fact = RelationFact(source, relation, target)
                if target != source and fact not in found:
                    found.append(fact)
    return found


def _relation_name(verb: str) -> str:
    words = verb.lower().split()
    if words[0] in _VERBS:
        return _VERBS[words[0]]
    if words[0].startswith("work"):
        return "works_at"
    if words[0].startswith("liv"):
        return "lives_in"
    return "is_a"


def _objects(phrase: str, known: set[str]) -> list[str]:
    """The first object, plus known mentions joined by and/or ("PostgreSQL and Redis")."""
    parts = _CONJUNCTION.split(phrase)[:4]
    first = _object(parts[0], known)
    more = [_object(part, known) for part in parts[1:]]
    return ([first] if first else []) + [m for m in more if m in known]


def _object(phrase: str, known: set[str]) -> str:
    """The object's canonical: a known mention at its start, else ≤ 3 words up to a stop."""
    words: list[str] = []
    for raw in phrase.split():
        word = raw.strip("\"'`*")
        if not word or word.lower() in _OBJECT_STOP or len(words) == 3:
            break
        if not words and word.lower() in _DETERMINERS:
            continue
        words.append(word)
    for size in range(len(words), 0, -1):
        candidate = canonicalize(" ".join(words[:size]))
        if candidate in known:
            return candidate
    return canonicalize(" ".join(words))
