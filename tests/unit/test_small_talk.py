"""Small talk makes no memory (app/extraction/smalltalk.py), wherever a turn holds some.

The predicate is pure; the extractor, the store's near-duplicate merging and the dream
cycle's cluster merging all ask it. Content said beside a greeting keeps its memory.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.extraction.base import Gem, SourceTurn
from app.extraction.classify import answers, classify
from app.extraction.offline import OfflineExtractor
from app.extraction.smalltalk import heard_words, is_echo, is_small_talk_sentence, says_nothing

MONDAY = datetime(2026, 3, 9, 9, 0, tzinfo=UTC)

SMALL_TALK = [
    "Thanks, Caroline!",
    "Thanks so much 🙏",
    "thank you Sam",
    "Thanks for the tips, Liza!",
    "That's so funny!",
    "Long time no talk!",
    "Wow, Caroline!",
    "Wow, fantastic, Caroline!",
    "hahaha omg 😂😂",
    "lol",
    "LMAOOO",
    "How are you?",
    "Hey how are you doing",
    "Good night!",
    "Night!",
    "Hi there Emily!",
    "Hey Bella!",
    "You're welcome!",
    "Yesss sooo goood",
    "Aww that's so sweet 🥰",
    "Sounds good, thanks.",
    "Me too lol",
    "Congrats!!",
    "Take care :)",
    "Nice to meet you, Sam.",
    "Have a great weekend!",
    "Talk to you later!",
    "My day was good, thank you!",
    "That's great to hear!",
    "Oh no, I'm so sorry to hear that",
    "What a fantastic idea!",
    "Those look amazing!",
    "I hope you have a great rest of your night and again, was great meeting you!",
]

CONTENT = [
    "Thanks! I finally adopted a dog named Max",
    "I'm 25",
    "Happy birthday Sam!",
    "I love Paris",
    "Hi Sam, I moved to Lisbon.",
    "Tokyo, Kyoto!",
    "This was it last night!",
    "I told you Paris is great",
    "We decided to go with the blue logo.",
    "I cried myself to sleep last night",
]


def turn(
    turn_id: str, content: str, *, role: str = "user", speaker: str | None = None, minutes: int = 0
) -> SourceTurn:
    name = speaker or ("Alice" if role == "user" else "Bob")
    return SourceTurn(
        id=turn_id,
        external_id=f"ext-{turn_id}",
        role=role,
        speaker=name,
        content=content,
        channel="chat",
        at=MONDAY + timedelta(minutes=minutes),
    )


def extract(*turns: SourceTurn) -> list[Gem]:
    return OfflineExtractor().extract(batch=list(turns), context=[])


@pytest.mark.parametrize("text", SMALL_TALK)
def test_small_talk_says_nothing_and_makes_no_memory(text: str) -> None:
    assert says_nothing(text)
    assert extract(turn("t1", text)) == []
    assert extract(turn("t1", text, role="assistant")) == []


@pytest.mark.parametrize("text", CONTENT)
def test_content_beside_a_greeting_or_a_name_is_kept(text: str) -> None:
    assert not says_nothing(text)
    assert not is_small_talk_sentence(text)


def test_a_reaction_before_news_keeps_the_news() -> None:
    gems = extract(turn("t1", "Thanks! I finally adopted a dog named Max"))
    assert [g.content for g in gems] == ["Alice finally adopted a dog named Max"]
    assert gems[0].source_turn_ids == ["t1"]


def test_a_stored_question_with_small_talk_for_an_answer_says_nothing() -> None:
    assert says_nothing("What inspired Caroline? Caroline: Thanks, Melanie!")
    assert not says_nothing("How many people? Alice: Twelve people, the week of March 9.")


# -- a question and the next turn --------------------------------------------------------


@pytest.mark.parametrize(
    ("question", "answer", "expected"),
    [
        ("How many people is Alice inviting?", "Twelve people.", True),
        ("What inspired Caroline?", "Thanks, Melanie!", False),
        ("What inspired Caroline?", "Wow, so cool!", False),
        ("Does Bob have a dog?", "Yeah, two.", True),
        ("Does Bob have a dog?", "Hmm not really", True),
        ("Does Bob like sushi?", "Lovely pics!", False),
        ("Does Bob like sushi?", "Tuesdays at noon.", False),
        ("Any pets?", "Two cats.", True),
        ("Tea or coffee?", "Coffee, always.", True),
        ("Where is Bob from?", "Porto.", True),
        ("Where is Kevin from?", "Wow what a nice name!", False),
        ("What's your name?", "What a lovely name!", False),
        ("How often should Emi use it?", "Wow, congrats on the hair transformation!", False),
        ("Which concert are you going to?", "The Weeknd!", True),
        ("What styles is Elise into?", "Abstract expressionism!", True),
        ("Morning, what are your plans for today?", "Hi good morning!", False),
        ("Any plans for the evening?", "A quiet evening in.", True),
    ],
)
def test_an_answer_must_answer(question: str, answer: str, expected: bool) -> None:
    assert answers(question, answer) is expected


def test_small_talk_after_a_question_is_not_glued_to_it() -> None:
    question = turn("q1", "What inspired you to start painting?", role="assistant")
    assert extract(question, turn("a1", "Thanks, Melanie!", minutes=1)) == []


def test_an_unrelated_reply_stands_alone() -> None:
    question = turn("q1", "Do you like sushi?", role="assistant")
    gems = extract(question, turn("a1", "Twelve people, the week of March 9.", minutes=1))
    assert [g.source_turn_ids for g in gems] == [["a1"]]
    assert "?" not in gems[0].content


def test_a_real_answer_is_kept_with_its_question() -> None:
    question = turn("q1", "Do you have any pets?", role="assistant")
    gems = extract(question, turn("a1", "Two cats, Miso and Tofu.", minutes=1))
    assert [g.source_turn_ids for g in gems] == [["a1", "q1"]]
    assert gems[0].content == "Does Alice have any pets? Alice: Two cats, Miso and Tofu."


# -- echoes and passages -------------------------------------------------------------------


def test_an_echo_of_the_other_persons_news_adds_no_memory() -> None:
    heard = heard_words("I made risotto with shrimp tonight!")
    assert is_echo("Risotto with shrimp sounds delicious!", heard)
    assert not is_echo("I made risotto with shrimp last week too.", heard)
    assert not is_echo("Risotto with saffron is better.", heard)
    gems = extract(
        turn("t1", "I made risotto with shrimp tonight!", speaker="Bob", role="assistant"),
        turn("t2", "Risotto with shrimp sounds delicious!", minutes=1),
    )
    assert {tuple(g.source_turn_ids) for g in gems} == {("t1",)}


def test_a_turns_plain_facts_are_one_passage() -> None:
    text = (
        "The cabin sits on a lake in Maine. The nearest town is forty minutes away. "
        "My grandfather built it in 1962."
    )
    gems = extract(turn("t1", text))
    assert len(gems) == 1
    assert gems[0].content == (
        "The cabin sits on a lake in Maine. The nearest town is forty minutes away. "
        "Alice's grandfather built it in 1962."
    )
    assert gems[0].original == text and gems[0].embed_text == f"Alice: {text}"


# -- properties ------------------------------------------------------------------------------

names = st.from_regex(r"[A-Z][a-z]{2,8}", fullmatch=True)
greetings = st.builds(
    lambda template, name, tail: template.format(name=name) + tail,
    st.sampled_from(
        [
            "Thanks, {name}!",
            "Thank you so much {name}!",
            "Hi {name}!",
            "Hey there {name}!",
            "Wow, {name}!",
            "Haha, that's so funny, {name}!",
            "Omg {name}!!",
            "Long time no talk!",
            "Good night, {name}.",
            "Aww, thanks!",
            "lol.",
            "Congrats {name}!",
        ]
    ),
    names,
    st.sampled_from(["", " 😂", " 🙏🙏", " :)"]),
)
content_sentences = st.sampled_from(
    [
        "I prefer aisle seats on long flights.",
        "We decided to go with the blue logo.",
        "I need to email the landlord about the boiler.",
        "My goal is to run a marathon in under four hours.",
        "The office moved to 12 Rua Augusta in Lisbon.",
        "Bruno is vegetarian.",
        "I finally adopted a dog named Biscuit.",
    ]
)


@settings(max_examples=150, deadline=None)
@given(greetings)
def test_greetings_with_any_name_and_emoji_say_nothing(greeting: str) -> None:
    assert says_nothing(greeting), greeting
    assert classify(greeting, role="user") is None


@settings(max_examples=150, deadline=None)
@given(greetings, content_sentences, st.booleans())
def test_a_greeting_never_removes_a_content_sentences_memory(
    greeting: str, sentence: str, before: bool
) -> None:
    alone = extract(turn("t1", sentence))
    assert len(alone) == 1
    text = f"{greeting} {sentence}" if before else f"{sentence} {greeting}"
    with_greeting = extract(turn("t1", text))
    # The same one memory; an emoji split off the greeting may stay in front of it.
    assert [g.kind for g in with_greeting] == [alone[0].kind]
    assert alone[0].content in with_greeting[0].content


@settings(max_examples=100, deadline=None)
@given(st.lists(greetings, min_size=1, max_size=4), content_sentences)
def test_says_nothing_is_false_as_soon_as_one_sentence_says_something(
    lines: list[str], sentence: str
) -> None:
    assert says_nothing(" ".join(lines))
    assert not says_nothing(" ".join([*lines, sentence]))
