"""Turn text → bounded, cleaned segments: prose sentences and whole code blocks.

Splitting is abbreviation-safe ("Dr. Lee", "e.g. this", "3.14", "v1.2"), keeps inline
`code` spans intact, and treats a fenced block (``` or ~~~, closed or not) or a multi-line
backtick span as one code segment. Every step is linear in the (already capped) text.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from app.extraction.vocabulary import word_set

TRUNCATION_MARKER = "[…truncated]"

_ABBREVIATIONS = word_set(
    """mr mrs ms dr prof sr jr st vs etc approx apt dept est inc ltd co corp no nos vol fig
    e.g i.e a.m p.m u.s u.k cf al ca jan feb mar apr jun jul aug sep sept oct nov dec mon tue
    wed thu fri sat sun min max avg gen col lt sgt rev ph.d"""
)
_FENCE = re.compile(
    r"^[ \t]*(```|~~~)[ \t]*([\w+#.\-]*)[^\n]*\n?(.*?)(?:^[ \t]*\1[ \t]*$|\Z)", re.M | re.S
)
_MULTILINE_TICKS = re.compile(r"`([^`]*\n[^`]*)`")
_INLINE_CODE = re.compile(r"`[^`\n]+`")
_BOUNDARY = re.compile(r"[.!?…]+[\"'\u2019\u201d)\]]*(?=\s|$)|[\u3002\uff01\uff1f]+")
_BULLET = re.compile(r"^\s*(?:[-*•·]|\d{1,3}[.)]|[a-z][.)](?=\s))\s+")
_DOTTED_ABBREVIATION = re.compile(r"(?:[^\W\d_]{1,2}\.)+[^\W\d_]{0,2}")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u200b-\u200f\u2028\u2029\ufeff]")


@dataclass(frozen=True)
class Segment:
    """A prose sentence, or a code block kept whole."""

    text: str
    is_code: bool = False
    language: str = ""


def clean_turn(text: str, max_chars: int) -> tuple[str, bool]:
    """Cap the text first (cost is bounded whatever arrives), then drop control characters.

    Returns (text, truncated); a truncated text ends with TRUNCATION_MARKER on its own line."""
    truncated = len(text) > max_chars
    if truncated:
        text = text[:max_chars]
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _CONTROL.sub("", text.replace("\t", "    "))
    text = unicodedata.normalize("NFC", text)
    if truncated:
        text = text.rstrip() + "\n" + TRUNCATION_MARKER
    return text, truncated


def flat_text(text: str, max_chars: int) -> str:
    """A turn cleaned as extraction cleans it, on one line: the form it is embedded in for
    novelty, so that a one-sentence turn and the gem taken from it share one vector."""
    cleaned, _ = clean_turn(text, max_chars)
    return " ".join(cleaned.split())


def looks_like_junk(text: str) -> bool:
    """Binary residue, emoji walls, symbol noise: too few letters or digits to say anything."""
    visible = [c for c in text if not c.isspace()]
    if not visible:
        return True
    wordish = sum(1 for c in visible if c.isalnum())
    replacement = text.count("\ufffd")
    return wordish < 2 or wordish / len(visible) < 0.3 or replacement / len(visible) > 0.1


def split_segments(text: str) -> list[Segment]:
    """Code blocks whole, the prose around them as sentences, in their original order."""
    segments: list[Segment] = []
    cursor = 0
    for match in _code_blocks(text):
        segments += [Segment(s) for s in split_sentences(text[cursor : match[0]])]
        code, language = match[2], match[3]
        if code.strip():
            segments.append(Segment(code.strip("\n"), is_code=True, language=language.lower()))
        cursor = match[1]
    segments += [Segment(s) for s in split_sentences(text[cursor:])]
    return segments


def _code_blocks(text: str) -> list[tuple[int, int, str, str]]:
    """(start, end, code, language) of fenced blocks and multi-line backtick spans."""
    blocks = [(m.start(), m.end(), m.group(3), m.group(2)) for m in _FENCE.finditer(text)]
    for match in _MULTILINE_TICKS.finditer(text):
        if not any(start <= match.start() < end for start, end, _, _ in blocks):
            blocks.append((match.start(), match.end(), match.group(1), ""))
    return sorted(blocks)


def split_sentences(text: str) -> list[str]:
    """Sentences of prose; a line break ends a sentence unless the next line continues it."""
    sentences: list[str] = []
    for paragraph in _paragraphs(text):
        sentences += _split_line(paragraph)
    return [s for s in (" ".join(s.split()) for s in sentences) if s]


def _paragraphs(text: str) -> list[str]:
    """Lines joined where a wrapped sentence continues in lowercase; bullets stripped."""
    joined: list[str] = []
    for raw in text.split("\n"):
        line = _BULLET.sub("", raw).strip()
        if not line:
            joined.append("")
            continue
        is_bullet = line != raw.strip()
        previous = joined[-1] if joined else ""
        if previous and previous[-1] not in ".!?:;" and not is_bullet and line[0].islower():
            joined[-1] += " " + line
            continue
        joined.append(line)
    return [line for line in joined if line]


def _split_line(line: str) -> list[str]:
    protected = [m.span() for m in _INLINE_CODE.finditer(line)]
    pieces: list[str] = []
    start = 0
    for match in _BOUNDARY.finditer(line):
        end = match.end()
        if any(a < match.start() < b for a, b in protected):
            continue
        if not _ends_sentence(line, match):
            continue
        pieces.append(line[start:end])
        start = end
    pieces.append(line[start:])
    return [p.strip() for p in pieces if p.strip()]


def _ends_sentence(line: str, match: re.Match[str]) -> bool:
    marks = match.group()
    following = line[match.end() :].lstrip()
    if marks[0] in "\u3002\uff01\uff1f":
        return True
    if marks.rstrip("\"'\u2019\u201d)]") != ".":
        return not following[:1].islower() or "?" in marks or "!" in marks
    word = line[: match.start()].rsplit(None, 1)[-1] if line[: match.start()].strip() else ""
    word = word.lstrip("(\"'\u201c\u2018[").lower()
    if word in _ABBREVIATIONS or (len(word) == 1 and word.isalpha()):
        return False  # "Dr. Lee", "e.g. this", "J. Smith"
    if _DOTTED_ABBREVIATION.fullmatch(word):
        return False  # "U.S.", "a.m.", "Ph.D.": letters between dots
    # Chat often skips capitals: "maybe. ok" splits; a short unknown "xyz. foo" does not.
    return not following[:1].islower() or (len(word) >= 4 and word.isalpha())
