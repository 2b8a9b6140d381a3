"""A turn's dense keys: sentences of a message that says several things, the whole of one
that says one thing, always led by the speaker, never more than MAX_PASSAGES."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from app.text.passages import MAX_PASSAGES, key_text, mean_direction, passages


def test_a_message_of_several_sentences_gives_one_key_per_sentence() -> None:
    text = "Work ran late again today. Oh, and we finally adopted a kitten called Miso! Wow."
    assert passages(text, "Rosa") == [
        "Rosa: Work ran late again today.",
        "Rosa: Oh, and we finally adopted a kitten called Miso!",
    ]


def test_a_message_that_says_one_thing_is_one_key() -> None:
    assert passages("I always prefer aisle seats on long flights.", None) == [
        "I always prefer aisle seats on long flights."
    ]
    assert passages("Thanks! Great.", "Kate") == ["Kate: Thanks! Great."]


def test_abbreviations_do_not_split_a_sentence() -> None:
    text = "Dr. Lee moved the appointment to 3.30 p.m. on Friday. The clinic is on Main St. now."
    assert passages(text, "Ana") == [
        "Ana: Dr. Lee moved the appointment to 3.30 p.m. on Friday.",
        "Ana: The clinic is on Main St. now.",
    ]


def test_a_long_message_is_grouped_into_at_most_the_bound() -> None:
    text = " ".join(f"This is sentence number {n} of the story." for n in range(40))
    keys = passages(text, "Bo")
    assert len(keys) == MAX_PASSAGES
    assert all(key.startswith("Bo: ") for key in keys)
    assert " ".join(key.removeprefix("Bo: ") for key in keys) == text


def test_a_role_in_the_speakers_place_leads_with_nothing() -> None:
    assert key_text("I prefer aisle seats.", "user") == "I prefer aisle seats."
    assert key_text("Noted.", " Engram   assistant ") == "Engram assistant: Noted."


def test_nothing_to_say_gives_no_key() -> None:
    assert passages("   \n\t ", "Kate") == []


@given(st.text(max_size=3000), st.one_of(st.none(), st.text(max_size=40)))
def test_keys_are_bounded_and_lead_with_the_speaker(content: str, speaker: str | None) -> None:
    keys = passages(content, speaker)
    assert len(keys) <= MAX_PASSAGES
    if any(c.isalnum() for c in content):
        assert keys
    lead = key_text("", speaker)
    assert all(key.startswith(lead) and key.removeprefix(lead).strip() for key in keys)


@given(
    st.lists(
        st.lists(st.floats(-1, 1, allow_nan=False), min_size=4, max_size=4),
        min_size=2,
        max_size=6,
    )
)
def test_the_mean_direction_has_unit_length_or_is_zero(vectors: list[list[float]]) -> None:
    mean = mean_direction(vectors)
    norm = math.sqrt(sum(x * x for x in mean))
    assert len(mean) == 4
    assert math.isclose(norm, 1.0, rel_tol=1e-9) or norm < 1e-9
