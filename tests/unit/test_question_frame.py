"""A question's framing verbs of speech (app/text/question_frame.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from app.text.question_frame import without_frame


def test_framing_words_go_and_the_asked_for_stays() -> None:
    assert without_frame("What games are Nebraas and Nicolas discussing?") == (
        "What games are Nebraas and Nicolas ?"
    )
    assert without_frame("What countries did they mention in their conversations?") == (
        "What countries did they ?"
    )
    assert without_frame("What did Kate talk about with Emi?") == "What did Kate with Emi?"
    assert without_frame("Which teas were mentioned?") == "Which teas were ?"
    assert without_frame("What kind of pasta did Kate make?") == "What pasta did Kate make?"
    assert without_frame("Which types of music?") == "Which music?"


def test_content_that_only_looks_like_framing_stays() -> None:
    assert without_frame("Did Nicolas give a talk at school?") == (
        "Did Nicolas give a talk at school?"
    )
    assert without_frame("What is the mentioned's cost?") == "What is the mentioned's cost?"
    assert without_frame("Discussed?") == "Discussed?"  # nothing else: read whole
    assert without_frame("mention it") == "mention it"
    assert without_frame("What is her type?") == "What is her type?"


_WORDS = st.sampled_from(
    [
        "What",
        "did",
        "Kate",
        "mention",
        "mentioned?",
        "discussing",
        "talk",
        "about",
        "in",
        "their",
        "conversation",
        "well-mentioned",
        "games",
        "?",
        "talked",
        "Conversations.",
    ]
)


@given(st.lists(_WORDS, max_size=12).map(" ".join))
def test_only_framing_words_go_and_never_all(query: str) -> None:
    out = without_frame(query)
    framing = {"mention", "mentioned", "discussing", "talk", "talked", "about", "in", "their"}
    framing |= {"conversation", "conversations"}
    kept = [w.strip("?.").lower() for w in out.split() if w.strip("?.")]
    asked = [w.strip("?.").lower() for w in query.split() if w.strip("?.")]
    assert all(w in asked for w in kept)
    assert all(w in framing for w in asked if w not in kept)
    assert kept or not asked  # never emptied
