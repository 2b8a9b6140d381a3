"""Salience parts and composite: the lexicon rules, relevance, novelty, bounds and determinism."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.config import PROJECT_ROOT, Settings
from app.scoring.salience import (
    SalienceScore,
    SalienceWeights,
    composite_salience,
    connection_relevance,
    emotional_intensity,
    score_turn,
    semantic_novelty,
)

WORRIED = "I'm really worried I'll miss the deadline for my promotion case!"
SMALL_TALK = "ok, sounds good"
KNOWN = ["promotion case", "deadline", "Acme Corp", "marathon training", "Berlin"]

# -- the composite on crafted turns ---------------------------------------------------------------


def test_an_emotional_goal_related_turn_beats_small_talk() -> None:
    worried = score_turn(WORRIED, KNOWN, None)
    small = score_turn(SMALL_TALK, KNOWN, None)
    assert worried.emotional > 0.7 > 0.2 > small.emotional
    assert worried.connection > small.connection == 0.0
    assert worried.composite > small.composite + 0.3


def test_the_emotional_turn_wins_even_when_it_is_less_novel() -> None:
    assert score_turn(WORRIED, KNOWN, 0.6).composite > score_turn(SMALL_TALK, KNOWN, 0.0).composite


def test_score_turn_holds_the_parts_and_their_composite() -> None:
    weights = SalienceWeights(emotional=1.0, connection=2.0, novelty=3.0)
    score = score_turn(WORRIED, KNOWN, 0.3, weights)
    assert score == SalienceScore(
        emotional=emotional_intensity(WORRIED),
        connection=connection_relevance(WORRIED, KNOWN),
        novelty=semantic_novelty(0.3),
        composite=composite_salience(
            emotional_intensity(WORRIED), connection_relevance(WORRIED, KNOWN), 0.7, weights
        ),
    )


# -- emotional intensity --------------------------------------------------------------------------


def test_neutral_text_has_no_intensity() -> None:
    assert emotional_intensity("The meeting is in room 4 at 10.") == 0.0
    assert emotional_intensity("") == 0.0


def test_negation_lowers() -> None:
    assert emotional_intensity("I'm not upset") < emotional_intensity("I'm upset")
    assert emotional_intensity("I am never worried") < emotional_intensity("I am worried")
    assert emotional_intensity("no worries") < emotional_intensity("worries")
    assert emotional_intensity("I don't hate it") < emotional_intensity("I hate it")


def test_negation_reaches_three_words_back_and_stops_at_punctuation() -> None:
    assert emotional_intensity("not at all upset") < emotional_intensity("upset")
    assert emotional_intensity("not that it is upsetting") == emotional_intensity("upsetting")
    assert emotional_intensity("No. Upset.") == emotional_intensity("Upset.")


@pytest.mark.parametrize("intensifier", ["very", "extremely", "so", "really"])
def test_intensifiers_raise(intensifier: str) -> None:
    assert emotional_intensity(f"I'm {intensifier} upset") > emotional_intensity("I'm upset")


def test_stacked_intensifiers_raise_more_and_diminishers_lower() -> None:
    assert emotional_intensity("really very upset") > emotional_intensity("very upset")
    assert emotional_intensity("slightly upset") < emotional_intensity("upset")


def test_exclamations_and_capitals_add_but_saturate() -> None:
    assert emotional_intensity("upset!") > emotional_intensity("upset")
    assert emotional_intensity("UPSET") > emotional_intensity("upset")
    assert emotional_intensity("upset!!!") == emotional_intensity("upset!!!!!!!!!!!")


def test_first_person_stakes_add() -> None:
    assert emotional_intensity("I am worried") > emotional_intensity("they are worried")
    assert emotional_intensity("about my job") > emotional_intensity("about the job")
    assert emotional_intensity("my health") > 0.0
    assert emotional_intensity("our whole family") > 0.0


def test_inflections_and_elongation_are_recognised() -> None:
    assert emotional_intensity("worrying") > 0.0
    assert emotional_intensity("she panicked") > 0.0
    assert emotional_intensity("sooo happy") > emotional_intensity("happy")


def test_stakes_words_score_high() -> None:
    for word in ("fired", "divorce", "diagnosed", "wedding", "promoted", "furious", "thrilled"):
        assert emotional_intensity(f"I got {word}") > 0.4, word


def test_emoji_with_clear_sentiment_count() -> None:
    assert emotional_intensity("🎉") > 0.0
    assert emotional_intensity("meeting moved 😡") > emotional_intensity("meeting moved")
    assert emotional_intensity("❤️") == emotional_intensity("❤")


def test_acronyms_are_not_shouting() -> None:
    assert emotional_intensity("The API of AWS") == 0.0


# -- connection relevance -------------------------------------------------------------------------


def test_relevance_is_zero_without_known_terms() -> None:
    assert connection_relevance(WORRIED, []) == 0.0
    assert connection_relevance(WORRIED, set()) == 0.0
    assert connection_relevance(WORRIED, ["the", "", "  "]) == 0.0
    assert connection_relevance("", KNOWN) == 0.0


def test_relevance_rises_with_overlap() -> None:
    texts = [
        "What a day.",
        "Flying to Berlin.",
        "Flying to Berlin for Acme Corp.",
        "Flying to Berlin for Acme Corp, right before my marathon training starts.",
    ]
    scores = [connection_relevance(t, KNOWN) for t in texts]
    assert scores[0] == 0.0
    assert scores == sorted(scores)
    assert len(set(scores)) == len(scores)


def test_phrase_matches_outweigh_single_words() -> None:
    phrase = connection_relevance("I do machine learning", ["machine learning"])
    scattered = connection_relevance("the learning machine", ["machine learning"])
    word = connection_relevance("I do Python", ["Python"])
    partial = connection_relevance("a washing machine", ["machine learning"])
    assert phrase > scattered >= word > partial > 0.0


def test_relevance_normalises_case_plurals_and_possessives() -> None:
    base = connection_relevance("acme corp", ["Acme Corp"])
    assert base > 0.0
    assert connection_relevance("ACME CORP's goals", ["acme corp", "goal"]) > base
    assert connection_relevance("my goals", ["goal"]) == connection_relevance("goal", ["goal"])


def test_relevance_ignores_the_order_and_repeats_of_known() -> None:
    known = ["Berlin", "Acme Corp", "marathon training"]
    text = "Acme Corp marathon training in Berlin"
    assert connection_relevance(text, known) == connection_relevance(text, list(reversed(known)))
    assert connection_relevance(text, known) == connection_relevance(text, set(known + known))


# -- novelty and composite ------------------------------------------------------------------------


def test_novelty() -> None:
    assert semantic_novelty(None) == 1.0
    assert semantic_novelty(1.0) == 0.0  # an exact duplicate
    assert semantic_novelty(0.25) == 0.75
    assert semantic_novelty(-0.5) == 1.0
    assert semantic_novelty(1.0000001) == 0.0
    assert semantic_novelty(math.nan) == 1.0


def test_composite_is_a_normalised_weighted_mean() -> None:
    assert composite_salience(1.0, 1.0, 1.0) == pytest.approx(1.0)
    assert composite_salience(0.0, 0.0, 0.0) == 0.0
    assert composite_salience(0.5, 0.0, 1.0) == pytest.approx(0.4 * 0.5 + 0.25)
    scaled = SalienceWeights(emotional=4.0, connection=3.5, novelty=2.5)
    assert composite_salience(0.3, 0.6, 0.9, scaled) == pytest.approx(
        composite_salience(0.3, 0.6, 0.9)
    )
    only = SalienceWeights(emotional=0.0, connection=1.0, novelty=0.0)
    assert composite_salience(0.9, 0.2, 0.9, only) == pytest.approx(0.2)


def test_weights_default_to_the_settings_defaults() -> None:
    defaults = SalienceWeights()
    assert (defaults.emotional, defaults.connection, defaults.novelty) == (0.4, 0.35, 0.25)
    settings = Settings(
        salience_weight_emotional=1.0, salience_weight_connection=0.0, salience_weight_novelty=2.0
    )
    assert SalienceWeights.from_settings(settings) == SalienceWeights(1.0, 0.0, 2.0)


@pytest.mark.parametrize("weights", [(0.0, 0.0, 0.0), (-0.1, 0.5, 0.5), (math.nan, 1.0, 1.0)])
def test_invalid_weights_are_refused(weights: tuple[float, float, float]) -> None:
    with pytest.raises(ValueError, match="weight"):
        SalienceWeights(*weights)


def test_settings_refuse_all_zero_weights() -> None:
    with pytest.raises(ValueError, match="SALIENCE_WEIGHT"):
        Settings(
            salience_weight_emotional=0, salience_weight_connection=0, salience_weight_novelty=0
        )


# -- properties -----------------------------------------------------------------------------------

WORDS = """i my me not never no don't very so really extremely slightly upset worried furious
happy job family deadline promoted fired ok the a and ! . , ? URGENT HATE sooo 🎉 😡 :) ❤️"""
VOCABULARY = WORDS.split()
wordy_text = st.lists(st.sampled_from(VOCABULARY), max_size=60).map(" ".join)
any_text = st.text(max_size=300) | wordy_text
unit = st.floats(min_value=0.0, max_value=1.0)
any_float = st.floats(allow_nan=True, allow_infinity=True)
weights = st.builds(
    SalienceWeights,
    st.floats(min_value=0.0, max_value=100.0),
    st.floats(min_value=0.0, max_value=100.0),
    st.floats(min_value=0.01, max_value=100.0),
)


def in_unit(value: float) -> bool:
    return isinstance(value, float) and 0.0 <= value <= 1.0


@given(any_text)
def test_emotional_intensity_is_bounded(text: str) -> None:
    assert in_unit(emotional_intensity(text))


@given(any_text, st.lists(any_text, max_size=12))
def test_connection_relevance_is_bounded(text: str, known: list[str]) -> None:
    assert in_unit(connection_relevance(text, known))


@given(st.none() | any_float)
def test_novelty_is_bounded(similarity: float | None) -> None:
    assert in_unit(semantic_novelty(similarity))


@given(any_float, any_float, any_float, st.none() | weights)
def test_composite_is_bounded(e: float, c: float, n: float, w: SalienceWeights | None) -> None:
    assert in_unit(composite_salience(e, c, n, w))


@given(any_text, st.lists(any_text, max_size=8), st.none() | any_float, st.none() | weights)
def test_score_turn_is_bounded_and_deterministic(
    text: str, known: list[str], similarity: float | None, w: SalienceWeights | None
) -> None:
    score = score_turn(text, known, similarity, w)
    assert all(
        in_unit(v) for v in (score.emotional, score.connection, score.novelty, score.composite)
    )
    assert score_turn(text, list(known), similarity, w) == score


@given(unit, unit, unit, unit, weights)
def test_composite_is_monotone_in_each_part(
    e: float, c: float, n: float, bump: float, w: SalienceWeights
) -> None:
    base = composite_salience(e, c, n, w)
    assert composite_salience(max(e, bump), c, n, w) >= base - 1e-12
    assert composite_salience(e, max(c, bump), n, w) >= base - 1e-12
    assert composite_salience(e, c, max(n, bump), w) >= base - 1e-12


def test_scores_do_not_depend_on_the_hash_seed() -> None:
    """Same numbers in fresh interpreters with different string-hash seeds (set iteration)."""
    program = (
        "from app.scoring.salience import score_turn\n"
        f"print(repr(score_turn({WORRIED!r}, set({KNOWN!r}), 0.42)))\n"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", program],
            capture_output=True,
            text=True,
            check=True,
            cwd=PROJECT_ROOT,
            env={"PYTHONHASHSEED": seed, "PATH": ""},
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(outputs) == 1
    assert repr(score_turn(WORRIED, KNOWN, 0.42)) + "\n" in outputs
