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
