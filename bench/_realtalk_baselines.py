"""The same-run baselines of bench/conversations.py, over the same raw turns and questions.

BM25 on Postgres' English lexemes, cosine over all-MiniLM-L6-v2 (always the int8-storage
file, whichever file Engram runs), their reciprocal-rank fusion, and `dense-passages`: cosine
over the keys Engram's dense leg stores for a turn, embedded by Engram's own model.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from _realtalk import (
    DEPTH,
    Conversation,
    Metrics,
    Question,
    RankFn,
    bm25_rank_fn,
    dense_rank_fn,
    evaluate,
    rrf_rank_fn,
)

FUSE_DEPTH = 100  # each baseline ranking fed to the fusion


def pg_lexemes(settings: Any, texts: list[str]) -> list[Counter[str]]:
    """Stemmed lexemes (stop words removed) of every text: `to_tsvector('english', …)`."""
    from sqlalchemy import text

    from app.db.session import owner_engine

    counts: list[Counter[str]] = [Counter() for _ in texts]
    with owner_engine(settings).connect() as conn:
        rows = conn.execute(
            text(
                "SELECT d.n, u.lexeme, cardinality(u.positions)"
                " FROM unnest(CAST(:texts AS text[])) WITH ORDINALITY AS d(t, n),"
                " unnest(to_tsvector('english', d.t)) AS u"
            ),
            {"texts": texts},
        )
        for n, lexeme, tf in rows:
            counts[int(n) - 1][str(lexeme)] += int(tf or 1)
    return counts


def baselines(
    settings: Any, conversations: list[Conversation], questions: list[Question]
) -> dict[str, Metrics]:
    import numpy as np

    from app.embedding.factory import get_embedder, local_embedder
    from app.embedding.local import INT8

    asked = list(dict.fromkeys(q.text for q in questions))
    turns = [(c.user_id, t) for c in conversations for t in c.turns]
    lexemes = pg_lexemes(settings, [t.content for _, t in turns] + asked)
    docs: dict[str, dict[str, Counter[str]]] = {c.user_id: {} for c in conversations}
    for (user, turn), terms in zip(turns, lexemes[: len(turns)], strict=True):
        docs[user][turn.dia_id] = terms
    bm25 = bm25_rank_fn(docs, dict(zip(asked, lexemes[len(turns) :], strict=True)), FUSE_DEPTH)

    # The MiniLM baseline is the same model whatever file Engram runs: the int8-storage file
    # (fp32 arithmetic, cosine 0.9995 to the original). No cache: every text is new here.
    reference = local_embedder(1, INT8.name)
    vectors = np.asarray(reference.embed([t.content for _, t in turns] + asked), dtype=np.float32)
    by_user: dict[str, tuple[list[str], Any]] = {}
    offset = 0
    for c in conversations:
        by_user[c.user_id] = ([t.dia_id for t in c.turns], vectors[offset : offset + len(c.turns)])
        offset += len(c.turns)
    queries = dict(zip(asked, vectors[offset:], strict=True))
    dense = dense_rank_fn(by_user, queries, FUSE_DEPTH)
    embedder = get_embedder(settings)  # Engram's own keys are embedded by Engram's model
    query_vectors = np.asarray(embedder.embed(asked), dtype=np.float32)
    passages = passage_rank_fn(
        embedder, conversations, dict(zip(asked, query_vectors, strict=True))
    )

    def top(fn: RankFn) -> RankFn:
        return lambda user, question: fn(user, question)[:DEPTH]

    print(
        f"baselines: BM25 on Postgres english lexemes, cosine on {reference.name}; "
        f"dense-passages on {embedder.name}",
        flush=True,
    )
    return {
        "bm25": evaluate(questions, top(bm25)),
        "dense": evaluate(questions, top(dense)),
        "rrf": evaluate(questions, rrf_rank_fn([bm25, dense])),
        "dense-passages": evaluate(questions, top(passages)),
    }


def passage_rank_fn(embedder: Any, conversations: list[Conversation], queries: Any) -> RankFn:
    """Cosine over the keys Engram stores for a turn (app/text/passages.py: its sentences, or
    the whole turn, led by the speaker), a turn scoring its best: the dense leg's own keys,
    beside the whole-turn `dense` baseline, so what the split is worth is measured here."""
    import numpy as np

    from app.text.passages import passages

    texts: list[str] = []
    spans: dict[str, tuple[list[str], list[int]]] = {}
    for c in conversations:
        owners: list[int] = []
        for n, turn in enumerate(c.turns):
            keys = passages(turn.content, turn.speaker) or [turn.content]
            texts += keys
            owners += [n] * len(keys)
        spans[c.user_id] = ([t.dia_id for t in c.turns], owners)
    vectors = np.asarray(embedder.embed(texts), dtype=np.float32)
    rows: dict[str, tuple[list[str], Any]] = {}
    offset = 0
    for user, (ids, owners) in spans.items():
        rows[user] = (ids, vectors[offset : offset + len(owners)])
        offset += len(owners)
    owner_rows = {user: np.asarray(owners) for user, (_, owners) in spans.items()}
    return dense_rank_fn(rows, queries, FUSE_DEPTH, owners=owner_rows)
