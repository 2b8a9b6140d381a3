"""Relative time expressions → absolute dates, read against the turn's own timestamp.

A gem is read months after it was said, when "tomorrow" no longer means anything. Each
expression is replaced by an absolute phrase ("on 2026-03-09", "in the week of 2026-03-02",
"in 2026-04", "in 2027"); the caller keeps the original wording beside it (`Gem.original`).

Rules (deterministic; weeks run Monday to Sunday; dates in the timestamp's own UTC offset):
- today / tomorrow / yesterday / tonight / this morning / last night: that day (part of day kept).
- this|next|last week|month|year|weekend: the calendar unit containing, after or before today.
- next X / coming X: the first weekday X strictly after today; last X: the latest strictly
  before; this X: X of the current week; bare "X" / "on X" / "by X": last X when the sentence
  reads as past tense ("we met on Monday"), otherwise next X.
- in N days|weeks|months|years (not in past-tense sentences, where it is a duration) and
  N … ago: the unit N away.
A preposition in front (on, by, until, before, since, …) is kept; "the last week", "every
Monday" and plural weekdays ("on Mondays") are habitual or spans and left as written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta

_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_NUMBERS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "a couple of": 2,
}
# Bounds that keep date arithmetic far from year 1 / 9999.
_MAX_AMOUNT = {"day": 36_500, "week": 5_200, "month": 1_200, "year": 100}

_NUM = r"\d{1,3}|a couple of|an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve"
_WD = "|".join(_WEEKDAYS)
_PART = r"(?:\s+(?P<{}>morning|afternoon|evening|night))?"
_POSS = r"(?P<poss>['\u2019]s)?"

_EXPRESSION = re.compile(
    r"(?:(?P<prep>\b(?:on|by|until|till|before|after|since|from|for|during|in|of)\s+))?"
    r"(?P<expr>"
    r"\bthe\s+day\s+(?P<around>after\s+tomorrow|before\s+yesterday)\b"
    r"|\b(?P<day>today|tomorrow|yesterday)\b" + _POSS + _PART.format("part") + r"\b"
    r"|\btonight\b(?P<tposs>['\u2019]s)?"
    r"|\blast\s+night\b"
    r"|\bthis\s+(?P<thispart>morning|afternoon|evening)\b"
    r"|\b(?P<mod>this|next|last|coming)\s+(?P<unit>week|weekend|month|year)\b(?!s)"
    r"|\b(?:(?P<wdmod>this|next|last|coming)\s+)?(?P<wd>"
    + _WD
    + r")\b(?!s\b)"
    + _PART.format("wdpart")
    + r"\b"
    r"|\bin\s+(?P<in_n>" + _NUM + r")\s+(?P<in_unit>day|week|month|year)s?\b"
    r"|(?<![\w\-./:])(?P<ago_n>" + _NUM + r")\s+(?P<ago_unit>day|week|month|year)s?\s+ago\b"
    r")",
    re.IGNORECASE,
)
# What makes "last week" a span or a habit rather than a date: "the last week", "every Monday".
_SPAN_BEFORE = re.compile(r"\b(?:the|every|each|a|per|one)\s+$", re.IGNORECASE)
_FUTURE = re.compile(
    r"\b(?:will|shall|gonna|going to|plan(?:ning)? to)\b|['\u2019]ll\b", re.IGNORECASE
)
_PAST = re.compile(
    r"\b(?:was|were|did|had|went|met|saw|got|came|told|said|made|took|left|arrived|happened"
    r"|ago|yesterday|spent|bought|sent|paid|lost|found|thought|heard|ran|wrote|ate|flew)\b",
    re.IGNORECASE,
)
_PAST_ED = re.compile(r"\b(\w+)\s+(\w{3,}ed)\b", re.IGNORECASE)
# Words before an -ed form that make it passive or adjectival ("it's scheduled"), not past.
_PASSIVE = frozenset({"is", "are", "am", "be", "been", "being", "get", "gets", "s", "re", "m"})
_SENTENCE_END = re.compile(r"[.!?\n]")


@dataclass(frozen=True)
class TimeMention:
    """One resolved expression: where it was, what replaced it, the first day it means."""

    expression: str  # as written, preposition included
    replacement: str
    start: int  # offsets into the original text
    end: int
    day: date
    granularity: str  # day | week | weekend | month | year


@dataclass(frozen=True)
class TimeResolution:
    text: str  # the text with every expression replaced
    original: str
    mentions: tuple[TimeMention, ...]


def resolve_times(text: str, at: datetime) -> TimeResolution:
    """Replace every relative time expression in `text`, read as said at `at`."""
    today = at.date()
    pieces: list[str] = []
    mentions: list[TimeMention] = []
    cursor = 0
    for match in _EXPRESSION.finditer(text):
        resolved = _resolve(match, text, today)
        if resolved is None:
            continue
        day, granularity, phrase = resolved
        start = match.start()
        prep = match.group("prep")
        if prep is None and _SPAN_BEFORE.search(text, max(0, start - 12), start):
            continue
        replacement = _phrase(prep, phrase, granularity, _possessive(match))
        written = text[start : match.end()]
        if written[:1].isupper() and _at_sentence_start(text, start):
            replacement = replacement[:1].upper() + replacement[1:]
        pieces.append(text[cursor:start])
        pieces.append(replacement)
        cursor = match.end()
        mentions.append(TimeMention(written, replacement, start, match.end(), day, granularity))
    if not mentions:
        return TimeResolution(text, text, ())
    pieces.append(text[cursor:])
    return TimeResolution("".join(pieces), text, tuple(mentions))


def resolve_text(text: str, at: datetime) -> str:
    return resolve_times(text, at).text


# -- one expression -------------------------------------------------------------------------


def _resolve(match: re.Match[str], text: str, today: date) -> tuple[date, str, str] | None:
    """(first day, granularity, absolute phrase without preposition), or None to leave it."""
    group = match.group
    part = group("part")
    if group("around"):
        offset = 2 if group("around").lower().startswith("after") else -2
        return _day(today + timedelta(days=offset), None)
    if group("day"):
        offset = {"today": 0, "tomorrow": 1, "yesterday": -1}[group("day").lower()]
        return _day(today + timedelta(days=offset), part)
    expression = group("expr").lower()
    if expression.startswith("tonight"):
        return _day(today, "night")
    if expression.startswith("last") and expression.endswith("night"):
        return _day(today - timedelta(days=1), "night")
    if group("thispart"):
        return _day(today, group("thispart"))
    if group("unit"):
        return _unit(today, group("mod").lower(), group("unit").lower())
    if group("wd"):
        return _weekday(match, text, today)
    if group("in_n"):
        if _tense(text, match.start(), match.end()) == "past":
            return None  # "finished it in 3 days" is a duration
        return _shift(today, group("in_n"), group("in_unit"), +1)
    if group("ago_n"):
        return _shift(today, group("ago_n"), group("ago_unit"), -1)
    return None


def _day(day: date, part: str | None) -> tuple[date, str, str]:
    if part:
        return day, "day", f"the {part.lower()} of {day.isoformat()}"
    return day, "day", day.isoformat()


def _week_start(day: date) -> date:
    return day - timedelta(days=day.weekday())


def _add_months(day: date, months: int) -> date:
    index = day.year * 12 + day.month - 1 + months
    return date(index // 12, index % 12 + 1, 1)


def _unit(today: date, modifier: str, unit: str) -> tuple[date, str, str]:
    step = {"this": 0, "next": 1, "coming": 1, "last": -1}[modifier]
    if unit == "week":
        start = _week_start(today) + timedelta(weeks=step)
        return start, "week", f"the week of {start.isoformat()}"
    if unit == "weekend":
        saturday = _week_start(today) + timedelta(days=5, weeks=step)
        return saturday, "weekend", f"the weekend of {saturday.isoformat()}"
    if unit == "month":
        first = _add_months(today, step)
        return first, "month", f"{first.year:04d}-{first.month:02d}"
    first = date(today.year + step, 1, 1)
    return first, "year", f"{first.year:04d}"


def _weekday(match: re.Match[str], text: str, today: date) -> tuple[date, str, str]:
    target = _WEEKDAYS.index(match.group("wd").lower())
    modifier = (match.group("wdmod") or "").lower()
    if modifier == "this":
        day = _week_start(today) + timedelta(days=target)
    elif modifier == "last" or (
        not modifier and _tense(text, match.start(), match.end()) == "past"
    ):
        day = today - timedelta(days=(today.weekday() - target - 1) % 7 + 1)
    else:
        day = today + timedelta(days=(target - today.weekday() - 1) % 7 + 1)
    return _day(day, match.group("wdpart"))


def _shift(today: date, amount: str, unit: str, sign: int) -> tuple[date, str, str] | None:
    word = amount.lower()
    count = int(word) if word.isdigit() else _NUMBERS.get(word)
    unit = unit.lower()
    if count is None or count > _MAX_AMOUNT[unit]:
        return None
    if unit == "day":
        return _day(today + timedelta(days=sign * count), None)
    if unit == "week":
        start = _week_start(today + timedelta(weeks=sign * count))
        return start, "week", f"the week of {start.isoformat()}"
    if unit == "month":
        first = _add_months(today, sign * count)
        return first, "month", f"{first.year:04d}-{first.month:02d}"
    first = date(today.year + sign * count, 1, 1)
    return first, "year", f"{first.year:04d}"


def _possessive(match: re.Match[str]) -> bool:
    return bool(match.group("poss") or match.group("tposs"))


def _phrase(prep: str | None, phrase: str, granularity: str, possessive: bool) -> str:
    """The replacement: the written preposition if any, else the natural one."""
    if possessive:  # "tonight's dinner" → "2026-03-09 night's dinner"
        if phrase.startswith("the ") and " of " in phrase:
            part, _, day = phrase[4:].partition(" of ")
            phrase = f"{day} {part}"
        return f"{prep or ''}{phrase}'s"
    if prep is not None:
        return f"{prep}{phrase}"
    default = "on" if granularity in ("day", "weekend") else "in"
    return f"{default} {phrase}"


def _at_sentence_start(text: str, start: int) -> bool:
    before = text[max(0, start - 3) : start].rstrip(" \t\"'(*-")
    return not before or before[-1] in ".!?\n:"


def _tense(text: str, start: int, end: int) -> str:
    """'past' or 'future' for the sentence around [start, end): a handful of cue words."""
    window = max(0, start - 300)
    left = max((m.end() for m in _SENTENCE_END.finditer(text, window, start)), default=window)
    right = _SENTENCE_END.search(text, end, end + 300)
    sentence = text[left : right.start() if right else end + 300]
    if _FUTURE.search(sentence):
        return "future"
    if _PAST.search(sentence):
        return "past"
    for before, verb in _PAST_ED.findall(sentence):
        if before.lower() not in _PASSIVE and not verb.lower().endswith("eed"):
            return "past"
    return "future"
