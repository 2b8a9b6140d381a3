"""Turn-level fusion (app/scoring/fusion.py) and the time a question names
(app/text/time_window.py): pure functions, examples and properties."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from app.scoring.fusion import Leg, fuse_turns
from app.text.time_window import time_window

NOW = datetime(2024, 3, 1, 12, tzinfo=UTC)
scores = st.floats(min_value=0.01, max_value=1.0, allow_nan=False)


def top(fused: dict[str, float], n: int) -> list[str]:
    return [t for t, _ in sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))][:n]


@given(
    lexical_best=scores,
    others=st.lists(scores, min_size=10, max_size=100),
    weak=st.lists(scores, max_size=8),
)
def test_a_first_lexical_match_survives_a_dense_leg_that_disagrees(
    lexical_best: float, others: list[float], weak: list[float]
) -> None:
    # The dense leg ranks up to a hundred other turns; fewer than ten of them have any
    # lexical support, so only those may agree their way above the lexical leg's first.
    dense = {f"d{i}": s for i, s in enumerate(others)}
    lexical = {"rare": lexical_best + 1.0, **{f"d{i}": min(s, 1.0) for i, s in enumerate(weak)}}
    fused = fuse_turns(
        [Leg("turn_lexical", lexical, 1.5), Leg("turn_dense", dense, 1.0)],
        [],
        {},
        k=60,
        turns_per_memory=3,
    )
    assert "rare" in top(fused.turns, 10)


def test_a_turn_counts_once_per_leg_however_many_memories_cite_it() -> None:
    memories = {f"m{i}": 1.0 - i / 100 for i in range(20)}
    sources = {f"m{i}": ["chatty"] for i in range(20)}
    sources["m_other"] = ["quiet"]
    memories["m_other"] = 0.5
    fused = fuse_turns([], [Leg("memory_dense", memories)], sources, k=60, turns_per_memory=3)
    assert fused.turns["chatty"] == 1.0 / 61
    assert len(fused.via["chatty"]) == 20
    assert set(fused.turns) == {"chatty", "quiet"}


def test_a_memory_lends_its_rank_to_its_best_cited_turns_only() -> None:
    turns = Leg("turn_lexical", {"t3": 1.0, "t1": 0.5})
    memory = Leg("memory_lexical", {"m": 1.0})
    sources = {"m": ["t0", "t1", "t2", "t3"]}
    fused = fuse_turns([turns], [memory], sources, k=60, turns_per_memory=2)
    assert set(fused.via) == {"t3", "t1"}
    assert "t0" not in fused.turns and "t2" not in fused.turns


def test_a_memory_citing_one_turn_twice_lends_it_one_vote_within_the_cap() -> None:
    memory = Leg("memory_lexical", {"m": 1.0, "n": 0.5})
    sources = {"m": ["t1", "t1"], "n": ["t2"]}
    fused = fuse_turns([], [memory], sources, k=60, turns_per_memory=1)
    assert fused.turns == {"t1": 1.0 / 61, "t2": 1.0 / 62 * 0.5}
    assert fused.via == {"t1": ["m"], "t2": ["n"]}
    # No turn may be lent to: the fast path for one cited turn honours the cap as well.
    none = fuse_turns([], [memory], sources, k=60, turns_per_memory=0)
    assert none.turns == {} and none.via == {}


def test_a_memory_citing_no_turn_stands_for_itself() -> None:
    fused = fuse_turns([], [Leg("memory_dense", {"told": 0.9})], {}, k=60, turns_per_memory=3)
    assert fused.memories == {"told": 1.0 / 61} and fused.turns == {}


def test_question_dates_in_the_usual_forms() -> None:
    day = date(2024, 1, 22)
    for query in (
        "What food did Paola cook on 22.01.2024?",
        "what happened on 22 January 2024",
        "what happened on January 22nd, 2024",
        "and on 2024-01-22?",
        "the party on 1/22/2024",
    ):
        window = time_window(query, NOW)
        assert window is not None, query
        assert window.start.date() < day < window.end.date(), query
    month = time_window("What did Caroline do in June 2023?", NOW)
    assert month is not None and month.start.date() <= date(2023, 6, 1)
    assert month.end.date() >= date(2023, 6, 30)
    assert time_window("When did Melanie paint a sunrise?", NOW) is None
    assert time_window("I may come along", NOW) is None
    last_week = time_window("what did I say last week?", NOW)
    assert last_week is not None and last_week.end <= NOW + timedelta(days=1)


@given(st.dates(min_value=date(1990, 1, 1), max_value=date(2099, 12, 31)))
def test_any_written_date_gives_a_window_holding_it(day: date) -> None:
    for written in (f"{day:%d.%m.%Y}", f"{day.day} {day:%B %Y}", f"{day:%B} {day.day}, {day.year}"):
        window = time_window(f"what happened on {written}?", NOW)
        assert window is not None, written
        assert window.start.date() < day < window.end.date(), written


def test_a_speaker_is_named_only_as_a_whole_word() -> None:
    from app.text.speaker_names import names_speaker

    assert names_speaker("What are Kate's hobbies?", "Kate")
    assert names_speaker("what did kate say", "Kate")
    assert not names_speaker("What did Katelyn say?", "Kate")
    assert not names_speaker("Also, what happened?", "Al")
    assert not names_speaker("anything", " ")


def test_a_speaker_of_several_names_is_named_by_one_of_them() -> None:
    from app.text.speaker_names import names_speaker

    assert names_speaker("What car does Fahim drive?", "Fahim Khan")
    assert names_speaker("Where does Mr Khan work?", "Fahim  Khan")
    assert names_speaker("What did Fahim Khan say?", "Fahim Khan")
    assert not names_speaker("What did Fahimah say?", "Fahim Khan")
    assert not names_speaker("Who is Al?", "Al Green")  # too short a word to name anyone
