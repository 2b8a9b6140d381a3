"""Stored rows stay readable: repair rows accepted before the door checked their range

Before this revision the door let through times that Python cannot hold once converted to
UTC (0001-01-01T00:00:00+05:00 is stored as 1 BC; psycopg refuses to read it back, so every
read of the user's rows failed) and free-form JSON nested so deep that decoding or encoding it
for a response runs out of recursion. The door now refuses both (app/limits.py); this revision
brings the rows written before it into the same range:

- every time that came from a client (event timestamps, `occurred_at` of memories, and what
  was derived from them: sessions, validity, entity sightings, summaries) is clamped into
  1970-01-01T00:00:00Z .. 2200-01-01T00:00:00Z;
- client JSON nested deeper than 32 levels (turn and memory metadata, each top-level field of a
  raw event's payload, each step of a procedure) is replaced by a marker object
  {"_repaired": "..."}.

The values are fixed here, not imported, so the revision keeps meaning what it meant. The
repair cannot be undone (the old values are gone), so the downgrade leaves the rows as they are.

Revision ID: a1c4e7b2d950
Revises: 4d7a1c9e8b20
Create Date: 2026-11-24 13:00:00.000000
"""

import json
from collections.abc import Sequence

from alembic import op

revision: str = "a1c4e7b2d950"
down_revision: str | None = "4d7a1c9e8b20"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

EARLIEST = "TIMESTAMPTZ '1970-01-01 00:00:00+00'"
LATEST = "TIMESTAMPTZ '2200-01-01 00:00:00+00'"
MAX_DEPTH = 32

# Times a client chose, directly or through what was derived from them.
CLIENT_TIMES: dict[str, tuple[str, ...]] = {
    "episodic.turns": ("occurred_at",),
    "episodic.events": ("occurred_at",),
    "episodic.sessions": ("started_at", "last_turn_at", "closed_at"),
    "semantic.memories": ("occurred_at", "valid_from", "valid_to"),
    "conceptual.entities": ("first_seen_at", "last_seen_at"),
    "conceptual.relations": ("valid_from", "valid_to"),
    "working.summaries": ("last_turn_at",),
}

# A container at nesting level 32 (the value itself is level 0) means a depth over 32. The
# `{32}` accessor descends no further than that level, however deep the document goes.
TOO_DEEP = (
    f'\'strict $.**{{{MAX_DEPTH}}} ? (@.type() == "object" || @.type() == "array")\'::jsonpath'
)
MARKER = json.dumps(
    {"_repaired": f"JSON nested deeper than {MAX_DEPTH} levels was removed (a1c4e7b2d950)"}
)


def _clamped(column: str) -> str:
    # CASE, not GREATEST/LEAST: those would turn a NULL (an open validity) into a bound.
    return (
        f"{column} = CASE WHEN {column} < {EARLIEST} THEN {EARLIEST}"
        f" WHEN {column} > {LATEST} THEN {LATEST} ELSE {column} END"
    )


def _too_deep(expression: str) -> str:
    return f"jsonb_path_exists({expression}, {TOO_DEEP})"


def upgrade() -> None:
    for table, columns in CLIENT_TIMES.items():
        outside = " OR ".join(f"{c} < {EARLIEST} OR {c} > {LATEST}" for c in columns)
        op.execute(f"UPDATE {table} SET {', '.join(map(_clamped, columns))} WHERE {outside}")

    marker = f"'{MARKER}'::jsonb"
    for table in ("episodic.turns", "semantic.memories"):
        op.execute(f"UPDATE {table} SET metadata = {marker} WHERE {_too_deep('metadata')}")
    # A raw event's payload holds its fields (metadata, arguments, payload, ...): each one
    # had the limit, so each one is repaired on its own.
    op.execute(
        f"""
        UPDATE episodic.events AS e SET payload = (
            SELECT jsonb_object_agg(f.key, CASE WHEN {_too_deep("f.value")}
                                           THEN {marker} ELSE f.value END)
            FROM jsonb_each(e.payload) AS f
        )
        WHERE jsonb_typeof(e.payload) = 'object'
          AND EXISTS (SELECT 1 FROM jsonb_each(e.payload) AS f WHERE {_too_deep("f.value")})
        """
    )
    op.execute(
        f"""
        UPDATE meta.procedures AS p SET tool_sequence = (
            SELECT jsonb_agg(CASE WHEN {_too_deep("s.step")} THEN {marker} ELSE s.step END
                             ORDER BY s.n)
            FROM jsonb_array_elements(p.tool_sequence) WITH ORDINALITY AS s(step, n)
        )
        WHERE jsonb_typeof(p.tool_sequence) = 'array'
          AND EXISTS (
              SELECT 1 FROM jsonb_array_elements(p.tool_sequence) AS s(step)
              WHERE {_too_deep("s.step")}
          )
        """
    )


def downgrade() -> None:
    """Nothing to undo: the repaired values are not kept, and the schema did not change."""
