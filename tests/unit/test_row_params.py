"""Lists of uuids travel to Postgres as the text of an array of their hex digits (app/db/rows.py
`_bound`; Postgres reads a uuid without its hyphens, tests/integration/test_driver_reads.py);
every other parameter as the caller gave it."""

from __future__ import annotations

import uuid

from app.db.rows import _bound


def test_a_list_of_uuids_becomes_an_array_literal() -> None:
    ids = [uuid.UUID(int=1), uuid.UUID(int=2)]
    assert _bound({"ids": ids, "pair": tuple(ids)}) == {
        "ids": "{00000000000000000000000000000001,00000000000000000000000000000002}",
        "pair": "{00000000000000000000000000000001,00000000000000000000000000000002}",
    }


def test_other_parameters_are_left_as_they_are() -> None:
    mixed = [uuid.UUID(int=1), "not a uuid"]
    params = {"names": ["a", "b"], "empty": [], "mixed": mixed, "one": uuid.UUID(int=3), "n": 1}
    assert _bound(params) == params
    assert _bound(None) == {}


def test_a_list_of_uuid_texts_is_joined_as_it_is() -> None:
    """Ids a search read as text (app/db/rows.py TEXT_IDS) go back as an array literal; any
    other list of text is left to psycopg, which quotes what needs it."""
    ids = [str(uuid.UUID(int=1)), str(uuid.UUID(int=2))]
    assert _bound({"ids": ids}) == {
        "ids": "{00000000-0000-0000-0000-000000000001,00000000-0000-0000-0000-000000000002}"
    }
    lettered = str(uuid.UUID(int=0xABCDEF))
    assert _bound({"ids": [lettered]}) == {"ids": "{" + lettered + "}"}
    for other in (["a,b"], [ids[0], "x"], [lettered.upper()], [ids[0] + ",}"], [ids[0][:-1]]):
        assert _bound({"v": other}) == {"v": other}
