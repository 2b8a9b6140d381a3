"""What a fault did to the data: events sent, stored, lost and duplicated.

`sent` are the events Engram acknowledged (a receipt, a 202); `stored` the turn rows they
became; `lost` the acknowledged events with no row; `duplicated` the rows beyond one per event
plus turns counted twice in their session's `turn_count` (a replay applied twice).
"""

from __future__ import annotations

import subprocess
from collections.abc import Collection
from dataclasses import dataclass

import redis
from sqlalchemy import func, select

from app.config import Settings
from app.db.session import app_engine, unit_of_work
from app.keys import RedisKeys
from app.layers.episodic.models import Session, Turn
from tests.integration.helpers import wait_for
from tests.integration.test_redelivery_after_crash import _pending as pending

__all__ = [
    "Tally",
    "dead_letters",
    "lost_entries",
    "pending",
    "stored_turns",
    "tally",
    "transient_errors",
    "turn_counts",
    "wait_until_stored",
]


@dataclass(frozen=True)
class Tally:
    name: str
    sent: int
    stored: int
    lost: int
    duplicated: int

    def line(self) -> str:
        return (
            f"fault {self.name} sent={self.sent} stored={self.stored} lost={self.lost}"
            f" duplicated={self.duplicated}"
        )


def turn_counts(settings: Settings, tenant: str) -> tuple[dict[str, int], int]:
    """(external id → rows, Σ sessions' turn_count) of the tenant, on the test's database."""
    with unit_of_work(tenant, engine=app_engine(settings)) as session:
        rows = session.execute(select(Turn.external_id, func.count()).group_by(Turn.external_id))
        counts = {external: int(n) for external, n in rows}
        counted = int(session.scalar(select(func.coalesce(func.sum(Session.turn_count), 0))) or 0)
    return counts, counted


def stored_turns(settings: Settings, tenant: str) -> int:
    return sum(turn_counts(settings, tenant)[0].values())


def wait_until_stored(
    settings: Settings, tenant: str, worker: subprocess.Popen[bytes], at_least: int = 1
) -> None:
    """Wait for the worker's first rows; fail saying so if it died first (it logs nothing)."""
    wait_for(
        lambda: worker.poll() is not None or stored_turns(settings, tenant) >= at_least,
        timeout=90,
        every=0.02,
    )
    assert worker.poll() is None, f"the worker exited with {worker.poll()} before storing"
    assert stored_turns(settings, tenant) >= at_least, "the worker stored nothing in 90 s"


def tally(name: str, settings: Settings, tenant: str, sent: Collection[str]) -> Tally:
    """Compare the acknowledged external ids with the tenant's rows."""
    counts, counted = turn_counts(settings, tenant)
    rows = sum(counts.values())
    lost = sum(1 for external in sent if external not in counts)
    duplicated = sum(n - 1 for n in counts.values()) + max(counted - rows, 0)
    return Tally(name, len(sent), rows, lost, duplicated)


def dead_letters(client: redis.Redis, settings: Settings) -> list[dict[str, str]]:
    entries = client.xrange(RedisKeys.from_settings(settings).dead_letters())
    return [
        {k.decode(errors="replace"): v.decode(errors="replace") for k, v in f.items()}
        for _, f in entries
    ]


def lost_entries(client: redis.Redis, settings: Settings) -> int:
    return int(client.get(RedisKeys.from_settings(settings).lost_entries()) or 0)


def transient_errors(client: redis.Redis, settings: Settings) -> int:
    """Outages the live stream consumers waited out (from their heartbeats)."""
    keys = client.scan_iter(match=RedisKeys.from_settings(settings).consumer_heartbeats())
    return sum(int(client.hget(key, "transient_errors") or 0) for key in keys)
