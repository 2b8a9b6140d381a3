"""Names a question calls a speaker by that are not their display name
(app/text/speaker_names.py): what others call them, and misspellings of their name."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from app.text.speaker_names import (
    Mention,
    Names,
    called_by_others,
    calls_by,
    jaro_winkler,
    name_forms,
    spelled_like,
    unknown_names,
)


def test_unknown_names_are_capitalised_words_that_name_no_speaker() -> None:
    query = "What did Kate's sister cook in June when Emi visited Hawaii? When did Akim go?"
    assert unknown_names(query, ["Emi", "elise"]) == ["Kate", "Hawaii", "Akim"]
    assert unknown_names("Kate's hobbies?", ["Emi"]) == ["Kate"]  # possessive: a name
    assert unknown_names("Where does I go?", []) == []
    assert unknown_names("what are kate's hobbies?", ["Emi"]) == []  # nothing capitalised
    assert unknown_names("Did Fahim call NASA?", ["Fahim Khan"]) == []


def test_jaro_winkler_known_values() -> None:
    assert round(jaro_winkler("MARTHA", "MARHTA"), 3) == 0.961
    assert round(jaro_winkler("DIXON", "DICKSONX"), 3) == 0.813
    assert jaro_winkler("Kate", "kate") == 1.0
    assert jaro_winkler("abc", "xyz") == 0.0


_word = st.text(alphabet=st.characters(categories=("L",)), max_size=12)


@given(_word, _word)
def test_jaro_winkler_is_a_bounded_symmetric_similarity(a: str, b: str) -> None:
    score = jaro_winkler(a, b)
    assert 0.0 <= score <= 1.0 + 1e-9
    assert abs(score - jaro_winkler(b, a)) < 1e-9
    assert jaro_winkler(a, a) == 1.0


def test_a_misspelled_speaker_is_the_one_speaker_it_resembles() -> None:
    assert spelled_like("Muhammad", ["Akib", "Muhhamed"]) == "Muhhamed"
    assert spelled_like("Akim", ["Akib", "Muhhamed"]) == "Akib"
    assert spelled_like("Faheem", ["Akib", "Fahim Khan"]) == "Fahim Khan"
    assert spelled_like("Hawaii", ["Akib", "Muhhamed"]) is None
    assert spelled_like("Kyle", ["Kate", "Jane"]) is None  # too far from Kate
    assert spelled_like("Ana", ["Anna", "Ann"]) is None  # two speakers: no guess


def test_a_call_ends_a_clause_and_is_not_talked_about() -> None:
    for text in [
        "Hey Kate!",
        "Thanks, Kate. See you",
        "That looks amazing Kate.",
        "What about you Kate?",
        "Kate, how are you",
        "Thank you Kate",
    ]:
        assert calls_by(text, "Kate"), text
    for text in [
        "I went with Kate.",
        "I told Kate!",
        "We flew to the Maldives!",
        "Kate said hi",
        "Katelyn!",
    ]:
        assert not calls_by(text, "Kate" if "Maldives" not in text else "Maldives"), text


def _mention(speaker: str, to: str | None, text: str) -> Mention:
    return Mention(speaker=speaker, addressee=to, content=text)


def test_a_name_others_call_a_speaker_is_theirs() -> None:
    mentions = [
        _mention("elise", "Emi", "Hey Kate!"),
        _mention("elise", "Emi", "Those look amazing Kate!"),
        _mention("Emi", "elise", "I forgot to introduce myself, I'm Kate."),
        _mention("elise", "Emi", "Did you see the photo Kate sent?"),
    ]
    assert called_by_others("Kate", mentions) == "Emi"
    # "It's Kate's birthday" gives no one the name.
    birthday = [_mention("elise", "Emi", "It's Kate's birthday today!")] * 3
    assert called_by_others("Kate", birthday) is None
    # Called once: not enough to say.
    assert called_by_others("Kate", mentions[:1]) is None


def test_a_friend_talked_about_is_nobodys_alias() -> None:
    talked_about = [
        _mention("elise", "Emi", "I had lunch with Sarah today."),
        _mention("Emi", "elise", "How is Sarah doing?"),
        _mention("elise", "Emi", "Sarah got a new job, congrats Sarah!"),
        _mention("elise", "Emi", "Sarah and I went hiking."),
        _mention("Emi", "elise", "Tell Sarah I said hi!"),
    ]
    assert called_by_others("Sarah", talked_about) is None
    split = [_mention("a", "b", "Hi Sam!"), _mention("b", "a", "Hi Sam!")] * 2
    assert called_by_others("Sam", split) is None  # two speakers called Sam: no guess


def test_names_resolve_and_rewrite_the_query() -> None:
    mentions = {"Kate": [_mention("elise", "Emi", "Hey Kate!")] * 3, "Hawaii": []}
    names = Names.resolve(
        "What are Kate's hobbies in Hawaii?", ["elise", "Emi"], lambda words: mentions
    )
    assert names.aliases == {"Kate": "Emi"}
    assert (
        names.lexical("What are Kate's hobbies in Hawaii?") == "What are Emi's hobbies in Hawaii?"
    )
    assert (
        names.for_embedding("What are Kate's hobbies in Hawaii?") == "What are hobbies in Hawaii?"
    )
    misspelled = Names.resolve("When did Muhammad call?", ["Akib", "Muhhamed"], lambda words: {})
    assert misspelled.lexical("When did Muhammad call?") == "When did Muhhamed call?"
    # Said in the chat and never a call: a person of its own, not a misspelled speaker.
    said = {"Akim": [_mention("Akib", "Muhhamed", "Akim is my cousin")]}
    assert Names.resolve("Who is Akim?", ["Akib", "Muhhamed"], lambda words: said).aliases == {}


_speaker = st.text(alphabet=st.characters(categories=("L",)), min_size=2, max_size=8)


@given(st.text(max_size=80), st.lists(_speaker, max_size=3))
def test_no_alias_no_change_and_never_a_speaker_form(query: str, speakers: list[str]) -> None:
    forms = {f.casefold() for s in speakers for f in name_forms(s)}
    assert not any(w.casefold() in forms for w in unknown_names(query, speakers))
    names = Names.resolve(query, speakers, lambda words: {})
    if not names.aliases:
        assert names.lexical(query) == query
    assert set(names.aliases.values()) <= set(speakers)
