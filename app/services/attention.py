"""Attention: score new turns for salience, let them compete, tag winners for consolidation.

Runs per ingest batch (never per turn): the unscored turns of the batch's users are locked,
embedded in one call, compared with each user's memories in one query, scored, and settled in
one UPDATE. Winners above the consolidation threshold go to the salience stream; losers below
the forget threshold are marked `forget` (they leave the awake path; the raw turn stays in L2).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import redis
from sqlalchemy.orm import Session

from app.config import Settings
from app.db.session import unit_of_work
from app.embedding.base import Embedder, Owner
from app.extraction.smalltalk import is_small_talk_sentence
from app.keys import RedisKeys
from app.layers.conceptual.repository import known_terms
from app.layers.episodic import attention as scoring
from app.layers.semantic.repository import max_similarity_per_vector, vector_literal
from app.scoring.attention import Candidate, compete
from app.scoring.salience import SalienceWeights, score_turn
from app.text.passages import mean_direction, passages

SALIENCE_STREAM_MAX_LEN = 1_000_000
SCORE_LIMIT = 5000
PASSES = 4


@dataclass
class ScoredBatch:
    scored: int = 0
    consolidate: int = 0
    forget: int = 0


def weights(settings: Settings) -> SalienceWeights:
    return SalienceWeights(
        emotional=settings.salience_weight_emotional,
        connection=settings.salience_weight_connection,
        novelty=settings.salience_weight_novelty,
    )


def score_users(
    *,
    settings: Settings,
    client: redis.Redis,
    embedder: Embedder,
    tenant_id: str,
    user_ids: Sequence[str],
) -> ScoredBatch:
    """Score every unscored turn of these users (idempotent: scored turns are skipped).

    Turns locked elsewhere are skipped rather than waited for (scoring tasks then run in
    parallel instead of queueing behind each other's embedding). A turn skipped because an
    extraction claim held it for a moment is picked up by the next pass; one held by another
    scoring task is that task's; beat's sweep catches whatever is left."""
    total = ScoredBatch()
    for attempt in range(PASSES):
        if attempt:
            time.sleep(0.05)
        scored = _score_pass(settings, client, embedder, tenant_id, user_ids)
        total.scored += scored.scored
        total.consolidate += scored.consolidate
        total.forget += scored.forget
        if scored.scored == 0:
            break
    return total


def _score_pass(
    settings: Settings,
    client: redis.Redis,
    embedder: Embedder,
    tenant_id: str,
    user_ids: Sequence[str],
) -> ScoredBatch:
    result = ScoredBatch()
    with unit_of_work(tenant_id, all_agents=True) as session:
        turns = scoring.lock_unscored(
            session=session, tenant_id=tenant_id, user_ids=user_ids, limit=SCORE_LIMIT
        )
        if not turns:
            return result
        rows, winners, passage_rows = _score(session, settings, embedder, tenant_id, turns)
        scoring.save_passages(session=session, tenant_id=tenant_id, rows=passage_rows)
        scoring.save_attention(session=session, tenant_id=tenant_id, rows=rows)
    result.scored = len(rows)
    result.consolidate = len(winners)
    result.forget = sum(1 for r in rows if r["attention"] == "forget")
    if winners:
        keys = RedisKeys.from_settings(settings)
        pipe = client.pipeline(transaction=False)
        for row in winners:
            pipe.xadd(
                keys.salience_stream(),
                {
                    "tenant_id": tenant_id,
                    "user_id": row["user_id"],
                    "turn_id": str(row["id"]),
                    "salience": f"{row['salience']:.4f}",
                    "emotional_intensity": f"{row['emotional_intensity']:.4f}",
                },
                maxlen=SALIENCE_STREAM_MAX_LEN,
                approximate=True,
            )
        pipe.execute()
    return result


def _score(
    session: Session,
    settings: Settings,
    embedder: Embedder,
    tenant_id: str,
    turns: list,  # type: ignore[type-arg]
) -> tuple[list[dict[str, object]], list[dict[str, object]], list[dict[str, object]]]:
    """(attention rows, the winners among them, the turns' passage rows)."""
    users = sorted({t.user_id for t in turns})
    known = known_terms(session=session, tenant_id=tenant_id, user_ids=users)
    # Acknowledgements and small talk ("ok thanks", "Wow, congrats Mel!") say nothing new:
    # novelty 0, no embedding (the model is the pipeline's bottleneck, ~130 sentences/s per
    # core here). A short statement ("I prefer aisle seats.") is embedded like any other.
    keys = {
        t.id: passages(t.content, t.speaker)
        for t in turns
        if not is_small_talk_sentence(" ".join(t.content.split()))
    }
    substantive = [t for t in turns if keys.get(t.id)]
    texts = [keys[t.id] for t in substantive]
    flat = embedder.embed(
        [p for ps in texts for p in ps],
        [Owner(tenant_id, t.user_id) for t, ps in zip(substantive, texts, strict=True) for _ in ps],
    )
    # A turn's passages are its dense retrieval keys (app/layers/episodic/search.py); their
    # mean stands for the whole turn when novelty compares it with the user's memories.
    keyed: list[list[Sequence[float]]] = []
    start = 0
    for ps in texts:
        keyed.append(flat[start : start + len(ps)])
        start += len(ps)
    # Each vector is formatted once: a one-passage turn's direction is its passage's.
    literals = [[vector_literal(v) for v in vs] for vs in keyed]
    found = max_similarity_per_vector(
        session=session,
        tenant_id=tenant_id,
        user_ids=[t.user_id for t in substantive],
        vectors=[
            ls[0] if len(ls) == 1 else vector_literal(mean_direction(vs))
            for vs, ls in zip(keyed, literals, strict=True)
        ],
    )
    by_id = {t.id: sim for t, sim in zip(substantive, found, strict=True)}
    passage_rows = [
        {
            "turn_id": t.id,
            "user_id": t.user_id,
            "ordinal": n,
            "channel": t.channel,
            "occurred_at": t.occurred_at,
            "embedding": literal,
        }
        for t, ls in zip(substantive, literals, strict=True)
        for n, literal in enumerate(ls)
    ]
    similar = [by_id.get(t.id, 1.0) for t in turns]
    w = weights(settings)
    scores = {
        str(t.id): score_turn(t.content, known.get(t.user_id, []), sim, w)
        for t, sim in zip(turns, similar, strict=True)
    }
    outcome = compete(
        [
            Candidate(str(t.id), tenant_id, t.user_id, t.occurred_at, scores[str(t.id)].composite)
            for t in turns
        ],
        window_s=settings.attention_window_s,
        consolidate_threshold=settings.attention_consolidate_threshold,
        forget_threshold=settings.attention_forget_threshold,
        winners_per_window=settings.attention_winners_per_window,
    )
    verdict = {c.turn_id: "consolidate" for c in outcome.consolidate}
    verdict.update({c.turn_id: "forget" for c in outcome.forget})
    rows: list[dict[str, object]] = []
    for t in turns:
        score = scores[str(t.id)]
        rows.append(
            {
                "id": t.id,
                "user_id": t.user_id,
                "emotional_intensity": score.emotional,
                "connection_relevance": score.connection,
                "novelty": score.novelty,
                "salience": score.composite,
                "attention": verdict.get(str(t.id), "keep"),
            }
        )
    winners = [r for r in rows if r["attention"] == "consolidate"]
    return rows, winners, passage_rows
