"""Where one user's extraction stands, and flushing it: what the extraction routes call.

A turn travels stream → L2 (ingest) → scored → claimed into a batch → extract → embed →
stored. The status counts what is still at each stop, so a caller can tell when extraction
has caught up with everything it sent, without reading the database itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import redis

from app.config import Settings
from app.db.session import unit_of_work
from app.embedding.base import Embedder
from app.extraction.base import Extractor
from app.keys import RedisKeys, partition_of
from app.layers.episodic import claims
from app.layers.semantic import batches as semantic
from app.services import extraction

LAG_SCAN_LIMIT = 10_000  # undelivered entries counted one by one when Redis cannot tell


@dataclass(frozen=True)
class ExtractionStatus:
    """Counts for one user; `unclaimed` are scored turns in no batch yet (unscored ones are
    counted apart), `in_flight_batches` those not stored yet (`retrying_batches` of them after
    a failed attempt), `failed_batches` those parked after their last attempt."""

    user_id: str
    turns: int
    unscored: int
    unclaimed: int
    in_flight_batches: int
    retrying_batches: int
    failed_batches: int
    ingest_pending: int
    extract_after_turns: int

    @property
    def caught_up(self) -> bool:
        """Everything sent is ingested, scored, and in a batch that went through the chain."""
        return not (
            self.ingest_pending or self.unscored or self.unclaimed or self.in_flight_batches
        )

    @property
    def waiting_for_idle(self) -> bool:
        """Only leftovers below the N-turn trigger remain, with nothing else under way: they
        wait for the idle timeout unless flushed."""
        return 0 < self.unclaimed < self.extract_after_turns and not (
            self.ingest_pending or self.unscored or self.in_flight_batches
        )

    def as_dict(self) -> dict[str, object]:
        return {
            **asdict(self),
            "caught_up": self.caught_up,
            "waiting_for_idle": self.waiting_for_idle,
        }


def ingest_pending(settings: Settings, client: redis.Redis, tenant_id: str, user_id: str) -> int:
    """Entries of the user's partition the ingest group has not acknowledged: not delivered
    yet (the group's lag) plus delivered and not committed (its pending list). Other users'
    entries of the partition count too, so this errs on the side of "not yet"."""
    stream = RedisKeys.from_settings(settings).partition(
        partition_of(tenant_id, user_id, settings.stream_partitions)
    )
    try:
        groups = client.xinfo_groups(stream)
    except redis.ResponseError:  # no such stream: nothing was ever sent to this partition
        return 0
    group = next((g for g in groups if _text(g["name"]) == settings.consumer_group), None)
    if group is None:  # no consumer has started yet: every entry waits
        return int(client.xlen(stream))
    lag = group.get("lag")
    if lag is None:  # Redis cannot tell after deletions; count what follows the last delivery
        after = "(" + _text(group["last-delivered-id"])
        lag = len(client.xrange(stream, min=after, max="+", count=LAG_SCAN_LIMIT))
    return int(lag) + int(group["pending"])


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def extraction_status(
    settings: Settings, client: redis.Redis, tenant_id: str, user_id: str
) -> ExtractionStatus:
    """The user's extraction status under this tenant (another tenant's user of the same id
    is another user: zero counts)."""
    # Redis first: an entry acknowledged after this read is already in the counts below.
    pending = ingest_pending(settings, client, tenant_id, user_id)
    with unit_of_work(tenant_id, all_agents=True) as session:
        turns, unscored, unclaimed = claims.extraction_counts(
            session=session, tenant_id=tenant_id, user_id=user_id
        )
        in_flight, retrying, failed = semantic.batch_counts(
            session=session, tenant_id=tenant_id, user_id=user_id
        )
    return ExtractionStatus(
        user_id=user_id,
        turns=turns,
        unscored=unscored,
        unclaimed=unclaimed,
        in_flight_batches=in_flight,
        retrying_batches=retrying,
        failed_batches=failed,
        ingest_pending=pending,
        extract_after_turns=settings.extract_after_turns,
    )


@dataclass(frozen=True)
class Flushed:
    user_id: str
    batches: int
    turns: int


def flush(
    settings: Settings, tenant_id: str, user_id: str
) -> tuple[Flushed, list[extraction.BatchRef]]:
    """Claim the user's scored, unclaimed turns now, however few (at the end of a
    conversation fewer than N would wait for the idle timeout): one batch, within the
    per-user bound on batches in flight. Turns not ingested or scored yet are not in it."""
    claimed = extraction.claim_batches(settings, tenant_id, {user_id: "flush"}, bounded=True)
    refs = [ref for ref, _ in claimed]
    return Flushed(user_id, len(claimed), sum(turns for _, turns in claimed)), refs


def run_flushed(
    settings: Settings,
    extractor: Extractor,
    embedder: Embedder,
    refs: Sequence[extraction.BatchRef],
) -> None:
    """extract → embed → store for flushed batches, in this process: the API has no task
    queue to chain them on, and a flush is one batch. A batch this process does not
    finish (it stopped, a step failed) is retried by beat, as a chain's would be."""
    extraction.extract(settings, extractor, refs)
    extraction.embed(settings, embedder, refs)
    extraction.store(settings, embedder, refs)
