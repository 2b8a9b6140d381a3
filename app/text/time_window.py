"""The time a question names, as a window over the turns' own timestamps.

"What did Ana cook on 22.01.2024?", "what happened in June 2023?", "what did I say last
weekend?": the words of the date rarely appear in the turn that answers (a turn says "today"
or nothing), so the lexical and dense legs cannot use them; the turn's timestamp can. Absolute
dates are read here (ISO, day.month.year, month/day/year, "5 January 2024", "January 5th,
2024", "June 2023", "in 2023", a month or day without a year: its latest occurrence up to
now); relative ones ("yesterday", "last week", "three days ago") through the same rules the
extractor uses for gems (app/extraction/timeref.py), read against `now`. The window is widened
by a day on each side: producers' clocks and time zones blur the edges of a day.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from app.extraction.timeref import resolve_times

MONTHS = {
    name: index + 1
    for index, names in enumerate(
        [
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ]
    )
    for name in names
}
_MONTH = r"(?P<{}>" + "|".join(sorted(MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<{}>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?P<{}>(?:19|20)\d\d)"
_PATTERNS = [
    ("iso", re.compile(r"\b(?P<y>(?:19|20)\d\d)-(?P<m>[01]?\d)-(?P<d>[0-3]?\d)\b")),
    ("dotted", re.compile(r"\b(?P<d>[0-3]?\d)\.(?P<m>[01]?\d)\.(?P<y>(?:19|20)\d\d)\b")),
    ("slashed", re.compile(r"\b(?P<a>[0-3]?\d)/(?P<b>[0-3]?\d)/(?P<y>(?:19|20)\d\d)\b")),
    (
        "day_month",
        re.compile(
            r"\b"
            + _DAY.format("d")
            + r"(?:\s+of)?\s+"
            + _MONTH.format("m")
            + r"(?:,?\s+"
            + _YEAR.format("y")
            + r")?\b",
            re.IGNORECASE,
        ),
    ),
    (
        "month_day",
        re.compile(
            r"\b"
            + _MONTH.format("m")
            + r"\s+"
            + _DAY.format("d")
            + r"\b(?![:.]\d)"
            + r"(?:,?\s+"
            + _YEAR.format("y")
            + r")?",
            re.IGNORECASE,
        ),
    ),
    (
        "month",
        re.compile(
            r"\b(?:in|during|of|since|until|before|after)?\s*"
            + _MONTH.format("m")
            + r"(?:,?\s+"
            + _YEAR.format("y")
            + r")?\b",
            re.IGNORECASE,
        ),
    ),
    ("year", re.compile(r"\b(?:in|during|of|since|until)\s+" + _YEAR.format("y") + r"\b")),
]
# "May" and "march" are also ordinary words: alone they name a month only after a preposition.
_AMBIGUOUS_MONTHS = frozenset({"may", "mar", "march", "jan", "jun", "dec", "oct", "sep"})
_PREPOSITION = re.compile(r"\b(?:in|during|of|since|until|before|after)\s*$", re.IGNORECASE)
MARGIN = timedelta(days=1)


@dataclass(frozen=True)
class TimeWindow:
    """[start, end) in UTC, and the words of the query that named it."""

    start: datetime
    end: datetime
    expression: str


def _window(first: date, last: date, expression: str) -> TimeWindow:
    start = datetime(first.year, first.month, first.day, tzinfo=UTC) - MARGIN
    end = datetime(last.year, last.month, last.day, tzinfo=UTC) + timedelta(days=1) + MARGIN
    return TimeWindow(start, end, expression)


def _month_end(year: int, month: int) -> date:
    return (date(year + month // 12, month % 12 + 1, 1)) - timedelta(days=1)


def _latest(month: int, day: int | None, today: date) -> int:
    """The year of the latest such month (or day) up to today."""
    try:
        candidate = date(today.year, month, day or 1)
    except ValueError:
        return today.year - 1
    return today.year if candidate <= today else today.year - 1


def _absolute(kind: str, match: re.Match[str], query: str, today: date) -> TimeWindow | None:
    groups = match.groupdict()
    expression = match.group(0).strip()
    try:
        if kind == "year":
            year = int(groups["y"])
            return _window(date(year, 1, 1), date(year, 12, 31), expression)
        if kind == "slashed":
            first, second = int(groups["a"]), int(groups["b"])
            month, day = (second, first) if first > 12 else (first, second)
            value = date(int(groups["y"]), month, day)
            return _window(value, value, expression)
        month_word = groups["m"]
        month = MONTHS[month_word.lower()] if not month_word.isdigit() else int(month_word)
        if kind == "month":
            bare = month_word.lower() in _AMBIGUOUS_MONTHS and not groups.get("y")
            if bare and not _PREPOSITION.search(query, 0, match.start("m")):
                return None
            year = int(groups["y"]) if groups.get("y") else _latest(month, None, today)
            return _window(date(year, month, 1), _month_end(year, month), expression)
        day = int(groups["d"])
        year = int(groups["y"]) if groups.get("y") else _latest(month, day, today)
        value = date(year, month, day)
        return _window(value, value, expression)
    except (ValueError, KeyError):
        return None


_SPANS = {"day": 1, "week": 7, "weekend": 2}


def time_window(query: str, now: datetime) -> TimeWindow | None:
    """The first time expression of the query as a window, or None when it names no time."""
    today = now.astimezone(UTC).date()
    taken: list[tuple[int, int]] = []
    found: list[tuple[int, TimeWindow]] = []
    for kind, pattern in _PATTERNS:
        for match in pattern.finditer(query):
            if any(match.start() < end and start < match.end() for start, end in taken):
                continue
            window = _absolute(kind, match, query, today)
            if window is not None:
                taken.append((match.start(), match.end()))
                found.append((match.start(), window))
    for mention in resolve_times(query, now).mentions:
        if any(mention.start < end and start < mention.end for start, end in taken):
            continue
        first = mention.day
        if mention.granularity == "month":
            last = _month_end(first.year, first.month)
        elif mention.granularity == "year":
            last = date(first.year, 12, 31)
        else:
            last = first + timedelta(days=_SPANS.get(mention.granularity, 1) - 1)
        found.append((mention.start, _window(first, last, mention.expression.strip())))
    if not found:
        return None
    return min(found, key=lambda item: item[0])[1]
