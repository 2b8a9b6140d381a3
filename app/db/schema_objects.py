"""Schema objects that live outside the models (views written by hand in migrations)."""

from __future__ import annotations

HOT_MEMORIES_MATVIEW = ("meta", "hot_memories_mv")
HOT_MEMORIES_VIEW = ("meta", "hot_memories")
_HAND_MANAGED = {HOT_MEMORIES_MATVIEW, HOT_MEMORIES_VIEW}


def is_hand_managed(name: str, schema: str | None) -> bool:
    return (schema, name) in _HAND_MANAGED
