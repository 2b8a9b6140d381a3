"""The servers' start-up heap: its garbage collected, the rest frozen while they run, and
given back to the collector when they stop."""

from __future__ import annotations

import gc
import weakref

from app.heap import startup_heap_frozen


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def _cycle() -> Node:
    a, b = Node(), Node()
    a.other, b.other = b, a
    return a


def test_startup_garbage_is_collected_and_the_rest_frozen_until_the_end() -> None:
    dead = weakref.ref(_cycle())  # a cycle only the collector can free
    alive = _cycle()
    with startup_heap_frozen():
        assert dead() is None
        assert gc.get_freeze_count() > 0
        assert not any(o is alive for o in gc.get_objects())  # frozen: never walked
        later = weakref.ref(_cycle())  # what a request leaves is still collected
        gc.collect()
        assert later() is None
    assert gc.get_freeze_count() == 0
    assert any(o is alive for o in gc.get_objects())
