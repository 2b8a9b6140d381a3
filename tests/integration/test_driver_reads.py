"""Reads on the session's driver connection (app/db/rows.py) are the session's own: the same
transaction and the same tenant scope under row-level security."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from sqlalchemy import text

from app.db.rows import fetch, fetch_value
from app.db.session import unit_of_work


def _remember(session: object, tenant: str, user: str, content: str) -> uuid.UUID:
    memory_id = uuid.uuid4()
    session.execute(  # type: ignore[attr-defined]
        text(
            "INSERT INTO semantic.memories (id, tenant_id, user_id, kind, content,"
            " content_hash, occurred_at, valid_from) VALUES (:id, :t, :u, 'fact', :c, :h,"
            " :at, :at)"
        ),
        {
            "id": memory_id,
            "t": tenant,
            "u": user,
            "c": content,
            "h": content,
            "at": datetime(2026, 5, 1, tzinfo=UTC),
        },
    )
    return memory_id


def test_a_driver_read_sees_its_own_tenant_only(tenant: str) -> None:
    other = f"{tenant}-other"
    with unit_of_work(other) as session:
        theirs = _remember(session, other, "ann", "the other tenant's secret")
    with unit_of_work(tenant) as session:
        ours = _remember(session, tenant, "ann", "our note")
        # Uncommitted yet: the read is in the session's transaction.
        rows = fetch(
            session,
            "SELECT id, tenant_id FROM semantic.memories WHERE id = ANY(CAST(:ids AS uuid[]))",
            {"ids": [ours, theirs]},
        )
        assert [(r.id, r.tenant_id) for r in rows] == [(ours, tenant)]
        assert fetch_value(session, "SELECT count(*) FROM semantic.memories") == 1
    with unit_of_work(tenant) as session:  # committed by the unit of work, not by the read
        assert (
            fetch_value(
                session, "SELECT content FROM semantic.memories WHERE id = :id", {"id": ours}
            )
            == "our note"
        )


def test_lists_of_ids_arrive_as_the_ids_they_are(tenant: str) -> None:
    """Lists of uuids travel as the text of a Postgres array (app/db/rows.py `_bound`);
    other lists and the empty list as psycopg sends them."""
    ids = [uuid.uuid4() for _ in range(300)]
    with unit_of_work(tenant) as session:
        got = fetch(
            session,
            "SELECT x FROM unnest(CAST(:ids AS uuid[])) WITH ORDINALITY AS u(x, n) ORDER BY n",
            {"ids": ids},
        )
        assert [r.x for r in got] == ids
        assert fetch_value(session, "SELECT CAST(:ids AS uuid[])", {"ids": tuple(ids[:2])}) == [
            *ids[:2]
        ]
        assert fetch_value(session, "SELECT cardinality(CAST(:ids AS uuid[]))", {"ids": []}) == 0
        assert fetch_value(
            session, "SELECT CAST(:names AS text[])", {"names": ["{a,b}", 'say "hi"', ""]}
        ) == ["{a,b}", 'say "hi"', ""]
        assert fetch_value(
            session, "SELECT :id = ANY(CAST(:ids AS uuid[]))", {"id": ids[7], "ids": ids}
        )


def test_a_search_transaction_reads_ids_as_their_text(tenant: str) -> None:
    """With `text_ids` (a search's transaction) uuid columns and arrays of them come back as
    their text, and a list of those goes back to Postgres as the same uuids; the next
    transaction on the pooled connection reads uuids again."""
    ids = [uuid.uuid4() for _ in range(300)]
    with unit_of_work(tenant, text_ids=True) as session:
        got = fetch(
            session,
            "SELECT x, ARRAY[x, x] AS pair"
            " FROM unnest(CAST(:ids AS uuid[])) WITH ORDINALITY AS u(x, n) ORDER BY n",
            {"ids": ids},
        )
        assert [r.x for r in got] == [str(i) for i in ids]
        assert got[0].pair == [str(ids[0])] * 2
        again = fetch(
            session,
            "SELECT x FROM unnest(CAST(:ids AS uuid[])) WITH ORDINALITY AS u(x, n) ORDER BY n",
            {"ids": [r.x for r in got]},
        )
        assert [r.x for r in again] == [r.x for r in got]
        assert fetch_value(session, "SELECT CAST(:id AS uuid)", {"id": ids[1]}) == str(ids[1])
        # Text that is not a list of uuids is sent as psycopg sends any list of text.
        assert fetch(session, "SELECT CAST(:names AS text[]) AS v", {"names": ["a,b", "}"]})[
            0
        ].v == ["a,b", "}"]
    with unit_of_work(tenant) as session:
        assert fetch(session, "SELECT CAST(:id AS uuid) AS x", {"id": str(ids[0])})[0].x == ids[0]
