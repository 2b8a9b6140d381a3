"""The search path's statements keep SQLAlchemy's placeholders (app/db/rows.py): the
conversion to psycopg's must bind exactly what text() would and leave the rest alone."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from app.db.rows import _pyformat


def test_names_become_pyformat_and_casts_stay() -> None:
    statement = (
        "SELECT to_tsvector('english'::regconfig, :query) WHERE id = ANY(CAST(:ids AS uuid[]))"
    )
    assert _pyformat(statement) == (
        "SELECT to_tsvector('english'::regconfig, %(query)s)"
        " WHERE id = ANY(CAST(%(ids)s AS uuid[]))"
    )


def test_a_literal_percent_is_doubled_and_an_escaped_colon_is_not_a_name() -> None:
    assert _pyformat("SELECT '100%' LIKE :p, '\\:x'") == "SELECT '100%%' LIKE %(p)s, '\\:x'"


NAME = st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True)
FILLER = st.sampled_from([" ", ", ", " = ", "::int", "'%'", "(", ")", " AND ", "x"])


@given(st.lists(st.tuples(FILLER, NAME), min_size=1, max_size=8), FILLER)
def test_every_name_is_bound_once_where_it_stood(parts: list[tuple[str, str]], tail: str) -> None:
    statement = "".join(f"{filler} :{name} " for filler, name in parts) + tail
    converted = _pyformat(statement)
    assert re.findall(r"%\((\w+)\)s", converted) == [name for _, name in parts]
    # Only the binds changed: with them put back, the statement is the one written (% doubled).
    restored = re.sub(r"%\((\w+)\)s", r":\1", converted)
    assert restored == statement.replace("%", "%%")
