"""Extraction entry points. Chained per batch of users, never per turn:

    ingest batch committed → score_turns (extract queue) → extract_batches (extract)
      → embed_batches (embed) → store_batches (extract) → the user's next batch, if due

Only (tenant, batch id) pairs travel in messages; every step re-reads its batch and checks
its state, so a redelivered message changes nothing.
"""

from __future__ import annotations

from functools import lru_cache

from celery import chain

from app.config import get_settings
from app.embedding.base import Embedder
from app.embedding.factory import check_dimension, get_embedder
from app.extraction.base import Extractor
from app.extraction.factory import get_extractor
from app.layers.working.store import WorkingMemoryStore
from app.logs import batch_log_ids
from app.redis_client import get_redis
from app.services import extraction
from app.services.attention import score_users
from workers.base import engram_task


@lru_cache(maxsize=1)
def _embedder() -> Embedder:
    settings = get_settings()
    embedder = get_embedder(settings, get_redis(settings))
    check_dimension(embedder, settings)
    return embedder


@lru_cache(maxsize=1)
def _extractor() -> Extractor:
    return get_extractor(get_settings())


def run_chain(refs: list[extraction.BatchRef]) -> None:
    """Queue extract → embed → store for these batches (a no-op for none)."""
    if refs:
        pairs = [list(ref) for ref in refs]
        chain(
            extract_batches.si(pairs), embed_batches.si(pairs), store_batches.si(pairs)
        ).apply_async()


@engram_task("engram.extract.score_turns")
def score_turns(users_by_tenant: dict[str, list[str]]) -> int:
    """Salience and attention for the new turns of these users, then the N-turns and
    context-usage triggers."""
    settings = get_settings()
    client = get_redis(settings)
    store = WorkingMemoryStore(client, settings)
    scored = 0
    for tenant_id, users in sorted(users_by_tenant.items()):
        scored += score_users(
            settings=settings,
            client=client,
            embedder=_embedder(),
            tenant_id=tenant_id,
            user_ids=users,
        ).scored
        run_chain(extraction.claim_due(settings, store, tenant_id, users))
    return scored


@engram_task("engram.extract.extract_batches")
def extract_batches(refs: list[list[str]]) -> int:
    with batch_log_ids(refs):
        report = extraction.extract(get_settings(), _extractor(), [(t, b) for t, b in refs])
    return report.done


@engram_task("engram.embed.batches")
def embed_batches(refs: list[list[str]]) -> int:
    with batch_log_ids(refs):
        return extraction.embed(get_settings(), _embedder(), [(t, b) for t, b in refs]).done


@engram_task("engram.extract.store_batches")
def store_batches(refs: list[list[str]]) -> int:
    """Store, then keep draining: the next batch of each user with N turns still unclaimed
    (bounded per user, see extraction.claim_batches), and scoring again where unscored turns
    would hold the drain up."""
    settings = get_settings()
    pairs = [(t, b) for t, b in refs]
    with batch_log_ids(refs):
        done = extraction.store(settings, _embedder(), pairs).done
    follow = extraction.drain(settings, pairs)
    run_chain(follow.batches)
    if follow.score:
        score_turns.delay(follow.score)
    return done


@engram_task("engram.extract.sweep_idle")
def sweep_idle() -> int:
    """Beat: score what a lost dispatch left unscored, then the idle-timeout trigger."""
    settings = get_settings()
    client = get_redis(settings)
    for tenant_id in extraction.tenants():
        users = extraction.unscored_users(tenant_id, older_than_s=min(60, settings.extract_idle_s))
        if users:
            score_users(
                settings=settings,
                client=client,
                embedder=_embedder(),
                tenant_id=tenant_id,
                user_ids=users,
            )
    refs = extraction.idle_batches(settings)
    run_chain(refs)
    return len(refs)


@engram_task("engram.extract.retry_stale")
def retry_stale() -> int:
    """Beat: batches that failed or stalled go through the (idempotent) chain again."""
    refs = extraction.stale_batches(get_settings())
    run_chain(refs)
    return len(refs)
