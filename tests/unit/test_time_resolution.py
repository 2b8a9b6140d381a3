"""Relative time expressions resolved against the turn's own timestamp, never the clock."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta, timezone

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from app.extraction.timeref import resolve_text, resolve_times

MONDAY = datetime(2026, 3, 9, 10, 0, tzinfo=UTC)  # a Monday
WEDNESDAY = datetime(2026, 3, 11, 15, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I'll call Bob today.", "I'll call Bob on 2026-03-09."),
        ("I'll call Bob tomorrow.", "I'll call Bob on 2026-03-10."),
        ("I called Bob yesterday.", "I called Bob on 2026-03-08."),
        ("Dinner tonight with Bruno.", "Dinner on the night of 2026-03-09 with Bruno."),
        ("I ran this morning.", "I ran on the morning of 2026-03-09."),
        ("We shipped it last week.", "We shipped it in the week of 2026-03-02."),
        ("We ship next week.", "We ship in the week of 2026-03-16."),
        ("Sales dipped last month.", "Sales dipped in 2026-02."),
        ("Prices rise next month.", "Prices rise in 2026-04."),
        ("We moved last year.", "We moved in 2025."),
        ("We move next year.", "We move in 2027."),
        ("Let's meet in 3 days.", "Let's meet on 2026-03-12."),
        ("The review is in two weeks.", "The review is in the week of 2026-03-23."),
        ("We launched 2 weeks ago.", "We launched in the week of 2026-02-23."),
        ("She left three days ago.", "She left on 2026-03-06."),
        ("Send the shortlist by Friday.", "Send the shortlist by 2026-03-13."),
        ("Hiking this weekend.", "Hiking on the weekend of 2026-03-14."),
        ("It is due the day after tomorrow.", "It is due on 2026-03-11."),
        ("Call me tomorrow morning.", "Call me on the morning of 2026-03-10."),
        ("Finish it by the end of next week.", "Finish it by the end of the week of 2026-03-16."),
        ("Booked since last month.", "Booked since 2026-02."),
    ],
)
def test_expressions_resolve_against_a_monday(text: str, expected: str | None) -> None:
    result = resolve_times(text, MONDAY)
    if expected is not None:
        assert result.text == expected
    assert result.original == text


def test_possessive_days_stay_readable() -> None:
    assert resolve_text("Tonight's dinner is at 8.", MONDAY) == "2026-03-09 night's dinner is at 8."
    assert resolve_text("Move today's call.", MONDAY) == "Move 2026-03-09's call."


@pytest.mark.parametrize(
    ("text", "at", "expected"),
    [
        # "next X" / "on X" (future): the first X strictly after the turn's day.
        ("Let's meet on Friday.", WEDNESDAY, "Let's meet on 2026-03-13."),
        ("Let's meet next Friday.", WEDNESDAY, "Let's meet on 2026-03-13."),
        ("Let's meet on Monday.", MONDAY, "Let's meet on 2026-03-16."),
        ("Let's meet on Wednesday.", WEDNESDAY, "Let's meet on 2026-03-18."),
        # "last X" / "on X" (past tense): the latest X strictly before.
        ("We met last Tuesday.", WEDNESDAY, "We met on 2026-03-10."),
        ("We met on Monday.", WEDNESDAY, "We met on 2026-03-09."),
        ("We met on Monday.", MONDAY, "We met on 2026-03-02."),
        # "this X": X of the current Monday-to-Sunday week.
        ("The demo is this Friday.", WEDNESDAY, "The demo is on 2026-03-13."),
        ("The retro was this Monday.", WEDNESDAY, "The retro was on 2026-03-09."),
        ("See you next Monday morning.", WEDNESDAY, "See you on the morning of 2026-03-16."),
        # A passive "-ed" is not past tense: "scheduled for Friday" is still ahead.
        ("It's scheduled for Friday.", WEDNESDAY, "It's scheduled for 2026-03-13."),
    ],
)
def test_weekdays(text: str, at: datetime, expected: str) -> None:
    assert resolve_text(text, at) == expected


@pytest.mark.parametrize(
    ("text", "at", "expected"),
    [
        ("Back tomorrow.", datetime(2026, 12, 31, 9, tzinfo=UTC), "Back on 2027-01-01."),
        ("Due next month.", datetime(2026, 12, 5, tzinfo=UTC), "Due in 2027-01."),
        ("Due next week.", datetime(2026, 12, 31, tzinfo=UTC), "Due in the week of 2027-01-04."),
        ("Paid yesterday.", datetime(2026, 1, 1, tzinfo=UTC), "Paid on 2025-12-31."),
        ("Paid last month.", datetime(2026, 1, 15, tzinfo=UTC), "Paid in 2025-12."),
        ("Paid last week.", datetime(2026, 1, 1, tzinfo=UTC), "Paid in the week of 2025-12-22."),
        ("Back in 2 months.", datetime(2026, 11, 30, tzinfo=UTC), "Back in 2027-01."),
        ("Back in a month.", datetime(2026, 1, 31, tzinfo=UTC), "Back in 2026-02."),
        ("Back tomorrow.", datetime(2024, 2, 28, tzinfo=UTC), "Back on 2024-02-29."),
        ("Back tomorrow.", datetime(2026, 2, 28, tzinfo=UTC), "Back on 2026-03-01."),
        ("Moved a year ago.", datetime(2026, 1, 1, tzinfo=UTC), "Moved in 2025."),
    ],
)
def test_month_and_year_boundaries(text: str, at: datetime, expected: str) -> None:
    assert resolve_text(text, at) == expected


def test_the_day_is_the_one_in_the_timestamps_own_offset() -> None:
    late_evening_in_new_york = datetime(2026, 3, 9, 23, 30, tzinfo=timezone(timedelta(hours=-5)))
    assert resolve_text("Back tomorrow.", late_evening_in_new_york) == "Back on 2026-03-10."


@pytest.mark.parametrize(
    "text",
    [
        "I work from home on Mondays.",
        "We have a standup every Monday.",
        "It rained a lot in the last week.",
        "I finished the migration in 3 days.",
        "Todays and tomorrows are words, weekdays too.",
        "The Mondayfest starts soon.",
    ],
)
def test_habits_spans_and_durations_are_left_as_written(text: str) -> None:
    result = resolve_times(text, MONDAY)
    assert result.text == text
    assert result.mentions == ()


def test_capital_only_at_a_sentence_start() -> None:
    assert resolve_text("Today I met Bob.", MONDAY) == "On 2026-03-09 I met Bob."
    assert resolve_text("Ok. Tomorrow works.", MONDAY) == "Ok. On 2026-03-10 works."
    assert resolve_text("see you Friday", MONDAY) == "see you on 2026-03-13"


def test_mentions_record_what_was_written_and_the_day() -> None:
    text = "Send it by Friday, then call me next week."
    result = resolve_times(text, MONDAY)
    by_friday, next_week = result.mentions
    assert by_friday.expression == "by Friday"
    assert text[by_friday.start : by_friday.end] == "by Friday"
    assert by_friday.day == date(2026, 3, 13) and by_friday.granularity == "day"
    assert next_week.replacement == "in the week of 2026-03-16"
    assert next_week.day == date(2026, 3, 16) and next_week.granularity == "week"
    assert result.text == "Send it by 2026-03-13, then call me in the week of 2026-03-16."


def test_huge_amounts_are_left_alone() -> None:
    assert resolve_text("in 999 years", MONDAY) == "in 999 years"
    assert resolve_text("99999 days ago", MONDAY) == "99999 days ago"


# -- properties ------------------------------------------------------------------------------

_TIME_WORDS = re.compile(
    r"today|tomorrow|yesterday|tonight|night|morning|afternoon|evening|week|month|year|"
    r"monday|tuesday|wednesday|thursday|friday|saturday|sunday|ago|day",
    re.IGNORECASE,
)
moments = st.datetimes(
    min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
)
_WORDS = [
    "I",
    "we",
    "met",
    "will",
    "call",
    "Bob",
    "on",
    "by",
    "in",
    "the",
    "every",
    "last",
    "next",
    "this",
    "3",
    "a",
    "two",
    "days",
    "weeks",
    "ago",
    "Friday",
    "Mondays",
    "tomorrow",
    "today's",
    "tonight",
    "weekend",
    "month",
    "year",
    "morning",
    ".",
    ",",
]
phrases = st.lists(st.sampled_from(_WORDS), max_size=25).map(" ".join)


@given(st.text(max_size=300), moments)
def test_resolution_never_raises(text: str, at: datetime) -> None:
    result = resolve_times(text, at)
    assert result.original == text
    assert isinstance(result.text, str)


@given(st.text(max_size=300), moments)
def test_text_without_a_time_expression_is_unchanged(text: str, at: datetime) -> None:
    assume(not _TIME_WORDS.search(text))
    result = resolve_times(text, at)
    assert result.text == text
    assert result.mentions == ()


@given(phrases, moments)
def test_resolving_twice_changes_nothing_more(text: str, at: datetime) -> None:
    once = resolve_text(text, at)
    assert resolve_text(once, at) == once


@given(phrases, moments)
def test_mentions_point_at_what_they_replaced(text: str, at: datetime) -> None:
    result = resolve_times(text, at)
    for mention in result.mentions:
        assert text[mention.start : mention.end] == mention.expression
        assert mention.replacement in result.text
