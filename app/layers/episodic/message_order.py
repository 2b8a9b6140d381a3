"""Message order within a session, and the walks along it, for the trace's reads and writes.

Turns are ordered by time, then by arrival in the stream (one user's events keep their order
in one stream partition), so turns a producer stamped with the same time (a whole imported
session, or several messages in one second) keep the order they were sent. The trace's
`ix_turns_session_order` index holds exactly this order, so a walk from a turn to its
neighbours reads only the rows it returns.
"""

from __future__ import annotations


def owner(alias: str = "") -> str:
    """The trace's partition key, named in every read of it (see search.turn_facts)."""
    return f"{alias}tenant_id = :tenant AND {alias}user_id = :user"


def arrival(alias: str) -> str:
    """The stream entry id ("<ms>-<seq>") as text that sorts in arrival order (the index's
    expression: change both together)."""
    entry = f"coalesce({alias}stream_entry_id, '')"
    return (
        f"lpad(split_part({entry}, '-', 1), 20, '0') || '-'"
        f" || lpad(split_part({entry}, '-', 2), 20, '0')"
    )


def arrival_key(entry_id: str | None) -> str:
    """`arrival` in Python, for orders kept outside Postgres (working memory)."""
    ms, _, seq = (entry_id or "").partition("-")
    return f"{ms:0>20}-{seq:0>20}"


MESSAGE_ORDER = f"occurred_at, {arrival('')}, id"

# The user's turns with ids :ids, with what a walk from them needs.
SOURCES = (
    f"SELECT id, session_id, occurred_at, {arrival('')} AS arrival"  # noqa: S608
    " FROM episodic.turns"
    f" WHERE {owner()} AND id = ANY(CAST(:ids AS uuid[]))"
)


def walk(side: str, source: str = "src", columns: str = "t.id") -> str:
    """Up to :n turns of `source`'s session before ('<') or after ('>') it, nearest first,
    numbered from 1 as `n`; `source` has id, session_id, occurred_at and arrival."""
    way = " DESC" if side == "<" else ""
    order = f"t.occurred_at{way}, {arrival('t.')}{way}, t.id{way}"
    return (
        f"SELECT {columns}, row_number() OVER (ORDER BY {order}) AS n"  # noqa: S608
        " FROM episodic.turns AS t"
        f" WHERE t.session_id = {source}.session_id AND {owner('t.')}"
        f" AND t.occurred_at {side}= {source}.occurred_at"  # the index's bound
        f" AND (t.occurred_at, {arrival('t.')}, t.id) {side}"
        f" ({source}.occurred_at, {source}.arrival, {source}.id)"
        f" ORDER BY {order} LIMIT :n"
    )
