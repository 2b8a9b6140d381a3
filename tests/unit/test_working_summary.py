"""The rolling summariser: one clipped first sentence per evicted turn, newest kept in budget."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from app.layers.working.summary import MAX_LINE_CHARS, first_sentence, fold_summary
from app.text.tokens import count_tokens

speakers = st.sampled_from(["user", "assistant", "tool", "Dr. Who"])
contents = st.text(min_size=0, max_size=400)
evictions = st.lists(st.tuples(speakers, contents), max_size=30)


def line_of(speaker: str, content: str) -> str:
    return f"{speaker}: {first_sentence(content)}"


# -- first_sentence -------------------------------------------------------------------------------


def test_first_sentence_stops_at_the_first_sentence_end() -> None:
    assert first_sentence("We ship Thursday. Then we rest!") == "We ship Thursday."
    assert first_sentence("Really? Yes.") == "Really?"


def test_first_sentence_without_an_end_is_the_whole_text() -> None:
    assert first_sentence("no full stop here") == "no full stop here"


def test_first_sentence_flattens_whitespace() -> None:
    assert first_sentence("  line one\n\n  still   one\tpart") == "line one still one part"


def test_punctuation_inside_a_token_does_not_end_the_sentence() -> None:
    assert first_sentence("Version 3.14 is out. Upgrade.") == "Version 3.14 is out."


def test_long_sentence_is_clipped_with_an_ellipsis() -> None:
    clipped = first_sentence("word " * 100)
    assert len(clipped) <= MAX_LINE_CHARS
    assert clipped.endswith("…")
    assert clipped.startswith("word word")


def test_sentence_of_exactly_the_limit_is_not_clipped() -> None:
    text = "x" * MAX_LINE_CHARS
    assert first_sentence(text) == text


@given(contents)
def test_first_sentence_is_one_bounded_line(text: str) -> None:
    sentence = first_sentence(text)
    assert len(sentence) <= MAX_LINE_CHARS
    assert "\n" not in sentence
    assert sentence == sentence.strip()


# -- fold_summary --------------------------------------------------------------------------------


def test_fold_adds_one_line_per_evicted_turn_oldest_first() -> None:
    summary = fold_summary("", [("user", "Hi there. More."), ("assistant", "Hello!")], 100)
    assert summary == "user: Hi there.\nassistant: Hello!"


def test_fold_appends_to_the_existing_summary() -> None:
    summary = fold_summary("user: earlier.", [("assistant", "later")], 100)
    assert summary.splitlines() == ["user: earlier.", "assistant: later"]


def test_fold_drops_the_oldest_lines_first_when_over_budget() -> None:
    evicted = [("user", f"topic number {i}") for i in range(10)]  # 5 tokens a line
    summary = fold_summary("", evicted, max_tokens=16)
    assert summary.splitlines() == [
        "user: topic number 7",
        "user: topic number 8",
        "user: topic number 9",
    ]


def test_fold_with_nothing_evicted_keeps_the_summary() -> None:
    assert fold_summary("user: a.\nassistant: b.", [], 100) == "user: a.\nassistant: b."


@given(existing=evictions, evicted=evictions, max_tokens=st.integers(min_value=1, max_value=400))
def test_fold_stays_within_budget_and_keeps_the_newest_lines(
    existing: list[tuple[str, str]], evicted: list[tuple[str, str]], max_tokens: int
) -> None:
    previous = fold_summary("", existing, 10_000)
    summary = fold_summary(previous, evicted, max_tokens)

    assert count_tokens(summary) <= max_tokens
    every_line = [ln for ln in previous.splitlines() if ln.strip()] + [
        line_of(s, c) for s, c in evicted
    ]
    kept = summary.splitlines() if summary else []
    # What survives is the newest suffix of all lines ...
    assert kept == every_line[len(every_line) - len(kept) :]
    # ... and it is as long as the budget allows: one more line would not fit.
    if len(kept) < len(every_line):
        dropped = every_line[len(every_line) - len(kept) - 1]
        assert count_tokens(dropped) + count_tokens(summary) > max_tokens
