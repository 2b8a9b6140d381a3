"""BM25 reads a matched row's length and its counts of the query's terms from the stored
tsvector in SQL (app/db/fulltext.py's _MATCHED), not from its text form in Python: the counts
must be the ones Postgres holds, whatever characters the lexemes carry, a position labelled C
(a word a turn borrows from its neighbours) counting CONTEXT_WEIGHT of one. The length is in
lexemes, the unit of the sample's average length: one the row says counts one, one it
borrows CONTEXT_WEIGHT, one it both says and borrows both; one without positions (a stripped
tsvector, never stored) counts nothing, in the length as in the term counts. The rows are
written here as tsvector literals, read by Postgres' own parser."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from app.db.fulltext import _MATCHED, CONTEXT_WEIGHT
from app.db.session import unit_of_work

# One row standing in for a layer's match function: (id, v = the row's tsvector).
_ONE_ROW = _MATCHED.format(match="(SELECT 1 AS id, CAST(:v AS tsvector) AS v)")


def _counts(value: str, terms: list[str]) -> tuple[float, dict[str, float]]:
    with unit_of_work("bm25-term-counts") as session:
        row = session.execute(
            text(_ONE_ROW), {"v": value, "terms": terms, "context": CONTEXT_WEIGHT}
        ).one()
    return float(row.doc_len or 0), dict(zip(row.lexemes or (), row.tfs or (), strict=True))


def _tsvector_text(terms: dict[str, list[int]]) -> str:
    """A tsvector literal: quoted lexemes ('' for a quote, \\\\ for a backslash), positions."""
    items = []
    for lexeme, positions in terms.items():
        quoted = "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"
        items.append(quoted + (":" + ",".join(map(str, positions)) if positions else ""))
    return " ".join(items)


@pytest.mark.parametrize(
    ("value", "terms", "length", "held"),
    [
        (
            "'allerg':3 'daughter':2 'peanut':5,9,12",
            ["peanut", "daughter", "walnut"],
            3,
            {"peanut": 3, "daughter": 1},
        ),
        ("'lexem':1,4B 'titl':2A,7D", ["lexem", "titl"], 2, {"lexem": 2, "titl": 2}),
        (
            "'lemon':1,5C 'tea':2C 'like':3",
            ["lemon", "tea"],
            2 + 2 * CONTEXT_WEIGHT,
            {"lemon": 1 + CONTEXT_WEIGHT, "tea": CONTEXT_WEIGHT},
        ),
        ("'it''s':2 'o''brien':1,5", ["it's", "o'brien"], 2, {"it's": 1, "o'brien": 2}),
        ("'budget' 'review' 'quarter'", ["review"], 0, {"review": 0}),
        (
            "'budget' 'review':4C",
            ["review", "budget"],
            CONTEXT_WEIGHT,
            {"review": CONTEXT_WEIGHT, "budget": 0},
        ),
        ("'new york':1 'a:b':2,3", ["new york", "a:b"], 2, {"new york": 1, "a:b": 2}),
        ("'peanut':1", ["walnut"], 1, {}),
        ("", ["peanut"], 0, {}),
    ],
)
def test_length_and_term_counts(value: str, terms: list[str], length: float, held: Any) -> None:
    assert _counts(value, terms) == (length, held)


_lexemes = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    min_size=1,
    max_size=12,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.dictionaries(
        _lexemes,
        st.lists(st.integers(min_value=1, max_value=16383), max_size=6, unique=True),
        max_size=12,
    ),
    st.data(),
)
def test_any_lexemes_count_as_postgres_stores_them(
    terms: dict[str, list[int]], data: st.DataObject
) -> None:
    asked = data.draw(st.lists(st.sampled_from(sorted(terms)), unique=True)) if terms else []
    length, held = _counts(_tsvector_text(terms), [*asked, "absent-term"])
    assert length == sum(1 for positions in terms.values() if positions)
    assert held == {t: len(terms[t]) for t in asked if t != "absent-term"}
