"""The speakers' names in a question (app/text/speaker_names.py): which speaker it names, and
the question the dense legs embed, without them."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from app.text.speaker_names import names_speaker, subject_speaker, without_speakers


def test_names_are_taken_out_whole_with_their_possessive() -> None:
    assert without_speakers("What hobbies does Nicolas have?", ["Nicolas", "Vanessa"]) == (
        "What hobbies does have?"
    )
    assert without_speakers("What are Kate's hobbies?", ["Kate"]) == "What are hobbies?"
    assert without_speakers("What are Kate\u2019s hobbies?", ["Kate"]) == "What are hobbies?"
    assert without_speakers("Did fahim khan call Akib?", ["Fahim Khan", "Akib"]) == "Did call ?"
    assert without_speakers("When did Fahim move?", ["Fahim Khan"]) == "When did move?"


def test_other_words_and_roles_stay() -> None:
    assert without_speakers("What did Katelyn say?", ["Kate"]) == "What did Katelyn say?"
    assert without_speakers("What did the user say?", ["user", "assistant"]) == (
        "What did the user say?"
    )
    assert without_speakers("Who is Al?", ["Al Green"]) == "Who is Al?"
    assert without_speakers("Where is Paris?", []) == "Where is Paris?"


def test_a_question_that_is_only_a_name_stays_whole() -> None:
    assert without_speakers("Nicolas?", ["Nicolas"]) == "Nicolas?"
    assert without_speakers("Kate's", ["Kate"]) == "Kate's"


_names = st.lists(
    st.text(alphabet=st.characters(categories=("L",)), min_size=2, max_size=8), max_size=3
).map(lambda words: " ".join(words))
_speakers = st.lists(_names, max_size=3)
_queries = st.text(max_size=80)


@given(_queries, _speakers)
def test_no_speaker_is_named_by_what_is_left(query: str, speakers: list[str]) -> None:
    left = without_speakers(query, speakers)
    if left != query:
        assert not any(names_speaker(left, s) for s in speakers)
        assert any(c.isalnum() for c in left)
        assert without_speakers(left, speakers) == left


@given(_queries, _speakers)
def test_words_that_name_no_speaker_are_kept_in_order(query: str, speakers: list[str]) -> None:
    left = without_speakers(query, speakers).split()
    it = iter(query.split())
    assert all(any(word in kept for kept in it) for word in left)


def test_the_subject_is_the_one_speaker_named_or_the_first_of_two_apart() -> None:
    speakers = ["Elise", "Kate", "Fahim Khan"]
    assert subject_speaker("What are Kate's hobbies?", speakers) == "Kate"
    assert subject_speaker("Where does Fahim live?", speakers) == "Fahim Khan"
    assert subject_speaker("What did Elise buy on Kate's advice?", speakers) == "Elise"
    assert subject_speaker("Did Fahim tell Kate about Elise?", speakers) == "Fahim Khan"
    assert subject_speaker("Is the weather nice?", speakers) is None


def test_speakers_named_together_are_no_one_subject() -> None:
    speakers = ["Elise", "Kate", "Fahim Khan"]
    for query in (
        "What do Elise and Kate have in common?",
        "Do Kate & Elise talk?",
        "What do Kate, Elise and Fahim like?",
        "What did Kate's and Elise's parents say?",
        "Would Kate or Elise go?",
    ):
        assert subject_speaker(query, speakers) is None, query
    for query in ("Where does Fahim live?", "Where does Fahim Khan live?"):  # both named
        assert subject_speaker(query, ["Fahim", "Fahim Khan"]) is None, query


@given(_queries, _speakers)
def test_the_subject_is_a_speaker_the_question_names(query: str, speakers: list[str]) -> None:
    subject = subject_speaker(query, speakers)
    assert subject is None or (subject in speakers and names_speaker(query, subject))
