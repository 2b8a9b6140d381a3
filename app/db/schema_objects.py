"""Schema objects that live outside the models: views written by hand in migrations, and the
partitions of the partitioned tables (the models declare the parent; partitions are made by
the migration and by the retention jobs, app/db/partitions.py)."""

from __future__ import annotations

import re
from typing import Any

from app.db.base import LAYER_SCHEMAS

HOT_MEMORIES_MATVIEW = ("meta", "hot_memories_mv")
HOT_MEMORIES_VIEW = ("meta", "hot_memories")
_HAND_MANAGED = {HOT_MEMORIES_MATVIEW, HOT_MEMORIES_VIEW}
# Expression indexes: Alembic compares an index's expressions as text, and Postgres gives
# them back in its own spelling (casts added), so the models' would always differ.
EXPRESSION_INDEXES = {("episodic", "ix_turns_session_order")}
# Hash partitions `<table>_p00`..`_p15` (the trace, and tables partitioned like it); day
# partitions `<table>_pYYYYMMDD` and `<table>_default`. No model's table is named so.
_PARTITION = re.compile(r"[a-z_]+_(p\d{2}|p\d{8}|default)")


def is_partition(name: str, schema: str | None) -> bool:
    return schema in LAYER_SCHEMAS and _PARTITION.fullmatch(name) is not None


def is_hand_managed(name: str, schema: str | None) -> bool:
    return (schema, name) in _HAND_MANAGED or is_partition(name, schema)


def in_models(obj: Any, name: str | None, type_: str) -> bool:
    """Whether Alembic should compare this object with the models: not the hand-written
    views, not the partitions, not the copies of a foreign key that Postgres makes for each
    partition of the table it references, not expression indexes (EXPRESSION_INDEXES)."""
    if type_ == "table":
        return not is_hand_managed(name or "", getattr(obj, "schema", None))
    if type_ == "foreign_key_constraint":
        referred = obj.referred_table
        return not is_partition(referred.name, referred.schema)
    if type_ == "index":
        return (getattr(obj.table, "schema", None), name) not in EXPRESSION_INDEXES
    return True
