"""Queues per concern, so each kind of work scales (and fails) on its own."""

from __future__ import annotations

from kombu import Exchange, Queue

INGEST = "ingest"
EXTRACT = "extract"
EMBED = "embed"
MAINTENANCE = "maintenance"
DREAM = "dream"
RECALL = "recall"
ALL_QUEUES = (INGEST, EXTRACT, EMBED, MAINTENANCE, DREAM, RECALL)

TASK_QUEUES = tuple(
    Queue(name, Exchange(name, type="direct"), routing_key=name) for name in ALL_QUEUES
)

# Task names are stable and say where they run: engram.<area>.<action>.
ROUTES = {
    "engram.ingest.*": {"queue": INGEST},
    "engram.extract.*": {"queue": EXTRACT},
    "engram.embed.*": {"queue": EMBED},
    "engram.maintenance.*": {"queue": MAINTENANCE},
    "engram.dream.*": {"queue": DREAM},
    "engram.recall.*": {"queue": RECALL},
}
