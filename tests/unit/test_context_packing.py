"""The context block's packer (app/services/context_block.py): dated lines are shown as a
timeline under one header per day, and every header is paid for out of the budget, so the
block never runs over it whatever order lines are packed in."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from app.services.context_block import Packer, day_of
from app.text.tokens import count_tokens

T0 = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)


def test_dated_lines_read_as_a_timeline_a_day_written_once() -> None:
    packer = Packer(500)
    for minutes, line in [(60 * 30, "- C"), (5, "- B"), (0, "- A"), (60 * 24 + 1, "- D")]:
        assert packer.add("memories", line, day=day_of(T0 + timedelta(minutes=minutes)))
    packer.add("procedure", "build → ship")
    assert packer.text() == (
        "## Relevant memories\n### 2024-03-01\n- A\n- B\n### 2024-03-02\n- D\n- C"
        "\n\n## Suggested procedure\nbuild → ship"
    )


def test_undated_lines_come_first_and_none_is_lost() -> None:
    packer = Packer(500)
    packer.add("memories", "- dated", day=day_of(T0))
    packer.add("memories", "- same words")
    packer.add("memories", "- same words", day=day_of(T0 - timedelta(days=1)))
    assert packer.text() == (
        "## Relevant memories\n- same words\n### 2024-02-29\n- same words\n### 2024-03-01\n- dated"
    )


def test_times_from_any_zone_share_one_clock() -> None:
    packer = Packer(500)
    packer.add("memories", "- late", day=day_of(datetime(2024, 3, 1, 23, 30)))  # UTC, naive
    east = timezone(timedelta(hours=5))
    packer.add("memories", "- early", day=day_of(datetime(2024, 3, 2, 1, 0, tzinfo=east)))
    assert packer.text() == "## Relevant memories\n### 2024-03-01\n- early\n- late"


def test_a_new_day_costs_its_header() -> None:
    packer = Packer(10_000)
    packer.add("memories", "- first", day=day_of(T0))
    same = packer.used
    packer.add("memories", "- second", day=day_of(T0 + timedelta(hours=1)))
    assert packer.used - same == count_tokens("\n- second")
    before = packer.used
    packer.add("memories", "- third", day=day_of(T0 + timedelta(days=1)))
    assert packer.used - before == count_tokens("\n- third") + count_tokens("\n### 2024-03-02")


@settings(max_examples=150, deadline=None)
@given(
    st.integers(min_value=20, max_value=400),
    st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=60 * 24 * 40),
            st.text(alphabet="abcdefghij klmnop", min_size=1, max_size=80),
        ),
        max_size=40,
    ),
)
def test_the_block_never_runs_over_its_budget(budget: int, lines: list[tuple[int, str]]) -> None:
    packer = Packer(budget)
    kept = []
    for minutes, words in lines:
        line = f"- {words}"
        if packer.add("memories", line, day=day_of(T0 + timedelta(minutes=minutes))):
            kept.append(line)
    text = packer.text()
    assert count_tokens(text) <= packer.used <= budget
    assert sorted(kept) == sorted(t for t in text.splitlines() if t.startswith("- "))
