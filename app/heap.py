"""Garbage-collector pauses kept out of a server's request latency.

CPython's full collection walks every object the collector tracks. In a server, nearly all of
them are what start-up built and what lives as long as the process: modules, pydantic and
SQLAlchemy metadata, the tokenizer, the routes (well over a hundred thousand objects). A full
collection comes every few dozen requests, and whichever request is running when it comes
waits for the whole walk: the tail of the search latency (bench/conversations.py). Frozen
once start-up is done (`gc.freeze`), those objects are left out of every later collection;
what requests allocate is collected as before, and a cycle of start-up objects that dies
later is only reclaimed once the server stops (`gc.unfreeze`).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def startup_heap_frozen() -> Iterator[None]:
    """While the server runs: start-up's garbage collected, what is left frozen."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
