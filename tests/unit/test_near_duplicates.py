"""Near-duplicates must agree on their numbers (app/layers/semantic/service.same_numbers),
and a memory's list of source turns stays bounded however often it is repeated (`cite`)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.layers.semantic.service import MAX_SOURCE_TURNS, cite, same_numbers


def test_a_changed_amount_or_date_is_another_memory() -> None:
    a = "Remind Ana to send Bruno the offsite budget of 4,372 euros by 2026-02-06."
    assert not same_numbers(a, a.replace("4,372", "20,092"))
    assert not same_numbers(a, a.replace("2026-02-06", "2026-02-13"))
    assert same_numbers(a, a.replace("Remind Ana", "Ana wants a reminder"))


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("a budget of 1,800 euros", "a budget of 1800 euros", True),
        ("rooms 1,2,3", "rooms 1, 2, 3", True),
        ("\u22125 degrees", "-5 degrees", True),
        ("-5 degrees", "5 degrees", False),
        ("COVID-19 rules", "COVID 19 rules", True),
        ("release v2", "release v3", False),
        ("3.5 hours", "3.50 hours", False),
        ("ideally row 5.", "ideally row 5", True),
    ],
)
def test_number_forms(a: str, b: str, same: bool) -> None:
    assert same_numbers(a, b) is same


def test_texts_without_numbers_agree() -> None:
    assert same_numbers("We use Terraform.", "We decided to use Terraform!")


@given(st.lists(st.integers(min_value=0, max_value=10**9), min_size=1, max_size=6), st.data())
def test_order_does_not_matter_but_every_number_does(numbers: list[int], data) -> None:  # type: ignore[no-untyped-def]
    text = " and ".join(f"item {n}" for n in numbers)
    shuffled = data.draw(st.permutations(numbers))
    assert same_numbers(text, " then ".join(f"thing {n}" for n in shuffled))
    index = data.draw(st.integers(min_value=0, max_value=len(numbers) - 1))
    changed = list(numbers)
    changed[index] += 1
    assert not same_numbers(text, " and ".join(f"item {n}" for n in changed))


def test_a_repeated_memory_cites_its_first_turns_only() -> None:
    turns = [f"turn-{n}" for n in range(40)]
    cited: list[str] = []
    for turn in turns:  # "Thanks!" said forty times, one batch each
        cited = cite(cited, [turn])
    assert cited == turns[:MAX_SOURCE_TURNS]
    assert cite(cited, ["turn-99"]) == cited  # at the cap nothing is added


@given(
    st.lists(st.sampled_from([f"t{n}" for n in range(30)]), max_size=20, unique=True),
    st.lists(st.sampled_from([f"t{n}" for n in range(30)]), max_size=20),
    st.integers(min_value=1, max_value=12),
)
def test_cite_keeps_order_adds_no_duplicate_and_respects_the_cap(
    cited: list[str], more: list[str], limit: int
) -> None:
    out = cite(cited, more, limit)
    assert out[: len(cited)] == cited  # what a memory already cites is never dropped
    assert len(out) == len(set(out))
    assert len(out) <= max(limit, len(cited))
    assert set(out) <= set(cited) | set(more)
    if len(set(cited) | set(more)) <= limit:
        assert set(out) == set(cited) | set(more)
