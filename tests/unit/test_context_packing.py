"""The context block's packer (app/services/context_block.py): dated lines are shown as a
timeline under one header per day, and every header is paid for out of the budget, so the
block never runs over it whatever order lines are packed in."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from app.services.context_block import Packer, day_of
from app.text.tokens import count_tokens, counts_add_up

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


SECTIONS = ["turns", "summary", "memories", "facts", "procedure"]
ODD_PIECES = st.sampled_from(
    ["[MASK]", "[unk]", "\U0001f642", "caf\u00e9", "\u65e5\u672c\u8a9e", "\u2019", "\u00a0",
     "\u200b", "\x00", "\t", "\u2028", "x" * 90, "e-mail", "9:30"]
)  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(SECTIONS),
            st.one_of(st.none(), st.integers(min_value=0, max_value=60 * 24 * 10)),
            st.lists(ODD_PIECES | st.text(max_size=12), min_size=1, max_size=8),
        ),
        max_size=30,
    )
)
def test_the_packed_count_is_the_blocks_count_with_the_shipped_tokenizer(
    lines: list[tuple[str, int | None, list[str]]],
) -> None:
    """The context block takes the packer's sum as its count, without counting the block
    again, when the tokenizer's counts add up over whitespace (app/services/context.py): the
    sum must be exact for any text, whatever the sections, days and order."""
    assert counts_add_up()
    packer = Packer(100_000)
    for section, minutes, pieces in lines:
        line = " ".join(pieces)
        day = None if minutes is None else day_of(T0 + timedelta(minutes=minutes))
        assert packer.add(section, line, day=day)
    assert packer.used == count_tokens(packer.text())
