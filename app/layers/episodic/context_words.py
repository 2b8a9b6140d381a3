"""A turn's full-text key borrows the words of the turns beside it.

A question's words are often split between a message and the one before or after it ("What
drinks does Nicolas like?": "Got some lemon citron tea i can make" / "I like it with lots of
lemons"). So a turn's `search_tsv` holds its own words (speaker and text, label D, set by the
table's trigger on insert) and the own words of the turn just before and the turn just after
it in its session, in message order (label C). BM25 counts a label-C position as a fraction
of one of the turn's own (app/db/fulltext.py, CONTEXT_WEIGHT), and the match function ranks
borrowed words below own ones (the turn_context_words migration).

Kept in step where neighbours change: the claim that takes turns to extraction rekeys them and
their neighbours (every turn is claimed once scored; a neighbour that arrives later rekeys it
when its own claim comes; two sessions merge only when a new turn falls between them, and
its claim rekeys both edges), and deleting turns rekeys the turns that were beside them (a
deleted turn's words leave the index with it). A claim skips a neighbour another transaction
holds: it is held for its own claim, which rekeys it, or for its deletion. A deletion waits for
the turns beside it instead (a claim never waits, so nothing waits in a circle): a claim that
read the deleted turn before the deletion committed has committed its keys by then, and they
are written over.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from sqlalchemy import text
from sqlalchemy.orm import Session

from app.layers.episodic.message_order import SOURCES, arrival, owner, walk

OWN_WORDS = "ts_filter({alias}search_tsv, '{{d}}')"


def _beside(side: str) -> str:
    """The own words of the turn just before ('<') or after ('>') turn `k` in its session."""
    inner = walk(side, "k", "t.search_tsv")
    return f"SELECT {OWN_WORDS.format(alias='t.')} FROM ({inner}) AS t"  # noqa: S608


def _rekey(lock: str) -> str:
    """Locks the turns it rekeys (`lock`: see the module's docstring) and writes only keys
    that change."""
    return (
        f"k AS (SELECT id, session_id, occurred_at, {arrival('')} AS arrival,"  # noqa: S608
        f" search_tsv FROM episodic.turns WHERE {owner()} AND id IN (SELECT id FROM ids)"
        f" ORDER BY id {lock}),"
        f" keyed AS (SELECT k.id, {OWN_WORDS.format(alias='k.')}"
        f" || setweight(coalesce(({_beside('<')}), ''), 'C')"
        f" || setweight(coalesce(({_beside('>')}), ''), 'C') AS v FROM k)"
        " UPDATE episodic.turns AS t SET search_tsv = keyed.v FROM keyed"
        f" WHERE {owner('t.')} AND t.id = keyed.id AND t.search_tsv IS DISTINCT FROM keyed.v"
    )


_REKEY_SKIPPING = _rekey("FOR UPDATE SKIP LOCKED")
_REKEY_WAITING = _rekey("FOR UPDATE")
_AROUND = (
    f"src AS ({SOURCES}), ids AS (SELECT id FROM src"  # noqa: S608
    f" UNION SELECT b.id FROM src CROSS JOIN LATERAL ({walk('<')}) AS b"
    f" UNION SELECT a.id FROM src CROSS JOIN LATERAL ({walk('>')}) AS a)"
)


def rekey(
    *,
    session: Session,
    tenant_id: str,
    user_id: str,
    turn_ids: Sequence[uuid.UUID],
    neighbours: bool,
    wait: bool = False,
) -> None:
    """Set the full-text key of these turns of the user from their current neighbours, and,
    with `neighbours`, the keys of the turns just before and after each of them too; turns
    another transaction holds are waited for with `wait`, else skipped."""
    if not turn_ids:
        return
    ids = _AROUND if neighbours else "ids AS (SELECT unnest(CAST(:ids AS uuid[])) AS id)"
    session.execute(
        text(f"WITH {ids}, {_REKEY_WAITING if wait else _REKEY_SKIPPING}"),
        {"tenant": tenant_id, "user": user_id, "ids": list(turn_ids), "n": 1},
    )


def beside(
    *, session: Session, tenant_id: str, user_id: str, turn_ids: Sequence[uuid.UUID]
) -> list[uuid.UUID]:
    """The turns just before and after these ones in their sessions, themselves excluded:
    whose keys hold their words (read before deleting them)."""
    if not turn_ids:
        return []
    rows = session.execute(
        text(f"WITH {_AROUND} SELECT id FROM ids EXCEPT SELECT id FROM src"),  # noqa: S608
        {"tenant": tenant_id, "user": user_id, "ids": list(turn_ids), "n": 1},
    )
    return [row[0] for row in rows]
