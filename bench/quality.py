"""Retrieval quality on MADial-Bench (English): human-labelled relevant memories per dialogue.

The memory archive (160 events of two users, each with its date and scene) is loaded through
the public REST API (`POST /v1/memories`, via the Python SDK) into a fresh database; every
dialogue point is then asked through `POST /v1/search` with the conversation so far as the
query (both speakers' lines before the test turn, speaker tags removed) — what an agent would
send. Reported: recall@1/5/10 and NDCG@10 of the labelled memories, and in the same run two
baselines over the same texts and queries: BM25 (Okapi, k1 1.2, b 0.75, lower-cased word
tokens, English stop words removed) and plain cosine over the same local embeddings.

The data is read from ../shared/data/madial_bench (MIT licence); it is not part of Engram.
Each memory names its user (Bart or Lisa), which is how the archive is split between users 1
and 2 (the labels agree for every memory).

With `--turns` the same archive is also sent as raw turns (`POST /v1/events`, each a user's
own diary line with its date) through a real worker (ingest, salience, extraction, embedding)
and searched three ways — gems only, gems plus the raw turns no gem covers (the default), and
gems plus every raw turn — to measure how raw L2 turns should join the results.

Last line: `quality recall_at_5=<N> recall_at_10=<N> ndcg_at_10=<N> bm25_recall_at_10=<N>
dense_recall_at_10=<N>`
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("ENGRAM_DATABASE_NAME", "engram_bench_quality")
from _api import serve

os.environ["ENGRAM_REDIS_PREFIX"] = f"benchq-{os.getpid()}"

import numpy as np
from engram_memory_client import EngramClient
from sqlalchemy import text

from app.cli.supervisor import ProcessGroup, fresh_database, worker_command
from app.config import Settings, get_settings
from app.db.session import unit_of_work
from app.embedding.factory import get_embedder
from app.redis_client import get_redis
from app.services.extraction import claim
from app.services.tenants import mint_key
from tasks.extract import run_chain

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "madial_bench"
USERS = {1: "Bart", 2: "Lisa"}
LINE = re.compile(r'^<([^>]+)>:\s*"?(.*?)"?\s*$')
WORD = re.compile(r"[a-z0-9]+")
STOP_WORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "do",
        "did",
        "does",
        "for",
        "from",
        "had",
        "has",
        "have",
        "he",
        "her",
        "hers",
        "him",
        "his",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "me",
        "my",
        "no",
        "not",
        "of",
        "on",
        "or",
        "our",
        "ours",
        "she",
        "so",
        "that",
        "the",
        "their",
        "them",
        "they",
        "this",
        "to",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "will",
        "with",
        "you",
        "your",
        "yours",
    ]
)


@dataclass(frozen=True)
class Point:
    user_id: int
    query: str
    relevant: frozenset[int]


def load_archive(data: Path) -> dict[int, dict[str, str]]:
    archive: dict[int, dict[str, str]] = {}
    with (data / "MADial-Bench-en-memory.json").open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                ((key, value),) = json.loads(line).items()
                archive[int(key)] = value
    return archive


def owner_of(event: str) -> int:
    owners = [user for user, name in USERS.items() if name in event]
    if len(owners) != 1:
        raise ValueError(f"memory names no single user: {event!r}")
    return owners[0]


def load_points(data: Path) -> list[Point]:
    points = []
    with (data / "MADial-Bench-en-dialogue.json").open(encoding="utf-8") as handle:
        for line in handle:
            if not line.strip():
                continue
            item = json.loads(line)
            said = []
            for raw in item["dialogue"][1 : item["test-turn"][0]]:
                match = LINE.match(raw.strip())
                if match:
                    said.append(match.group(2))
            points.append(
                Point(int(item["user-id"]), " ".join(said), frozenset(item["relevant-id"]))
            )
    return points


def metrics(ranked: Sequence[int], relevant: frozenset[int]) -> dict[str, float]:
    def recall(k: int) -> float:
        return len(relevant & set(ranked[:k])) / len(relevant)

    dcg = sum(1 / math.log2(i + 2) for i, m in enumerate(ranked[:10]) if m in relevant)
    ideal = sum(1 / math.log2(i + 2) for i in range(min(len(relevant), 10)))
    return {"r1": recall(1), "r5": recall(5), "r10": recall(10), "ndcg": dcg / ideal}


def mean(rows: Iterable[dict[str, float]]) -> dict[str, float]:
    rows = list(rows)
    return {k: sum(r[k] for r in rows) / len(rows) for k in rows[0]}


def tokens(text: str) -> list[str]:
    return [w for w in WORD.findall(text.lower()) if w not in STOP_WORDS]


class Bm25:
    def __init__(self, docs: dict[int, str], k1: float = 1.2, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.docs = {k: Counter(tokens(v)) for k, v in docs.items()}
        self.lengths = {k: sum(c.values()) for k, c in self.docs.items()}
        self.avg = sum(self.lengths.values()) / max(len(self.docs), 1)
        df: Counter[str] = Counter()
        for counts in self.docs.values():
            df.update(counts.keys())
        n = len(self.docs)
        self.idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}

    def rank(self, query: str, k: int = 10) -> list[int]:
        q = Counter(tokens(query))
        scores = {}
        for key, counts in self.docs.items():
            norm = self.k1 * (1 - self.b + self.b * self.lengths[key] / self.avg)
            score = sum(
                qtf * self.idf[t] * counts[t] * (self.k1 + 1) / (counts[t] + norm)
                for t, qtf in q.items()
                if t in counts
            )
            if score > 0:
                scores[key] = score
        return [key for key, _ in sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[:k]]


def _archive_id(external_id: str) -> int:
    return int(external_id.removeprefix("mem-")) if external_id.startswith("mem-") else -1


def _pending(tenant: str) -> tuple[int, int, int]:
    with unit_of_work(tenant) as session:
        row = session.execute(
            text(
                "SELECT (SELECT count(*) FROM episodic.turns),"
                " (SELECT count(*) FROM episodic.turns WHERE extraction_batch_id IS NULL),"
                " (SELECT count(*) FROM semantic.extraction_batches"
                "  WHERE state NOT IN ('stored', 'failed'))"
            )
        ).one()
    return int(row[0]), int(row[1]), int(row[2])


def turns_experiment(
    settings: Settings, archive: dict[int, dict[str, str]], points: list[Point]
) -> dict[str, dict[str, float]]:
    """Archive as raw turns → worker → gems; then search with each way of adding turns."""
    tenant = f"madial-turns-{uuid.uuid4().hex[:6]}"
    key = mint_key(tenant, "quality benchmark, turns").key
    group = ProcessGroup()
    group.start(worker_command(queues=("ingest", "extract", "embed"), concurrency=2, consumers=1))
    results: dict[str, dict[str, float]] = {}
    try:
        server, url = serve(settings)
        with EngramClient(url, key, timeout=120) as client:
            for user, name in USERS.items():
                client.send_events(
                    [
                        {
                            "type": "turn",
                            "user_id": f"user-{user}",
                            "role": "user",
                            "speaker": name,
                            "content": v["event"],
                            "channel": "diary",
                            "external_id": f"mem-{k}",
                            "timestamp": f"{v['time']}T12:00:00Z",
                        }
                        for k, v in sorted(archive.items())
                        if owner_of(v["event"]) == user
                    ]
                )
        server.should_exit = True
        deadline = time.monotonic() + 600
        while True:
            stored, unclaimed, open_batches = _pending(tenant)
            if stored == len(archive) and unclaimed == 0 and open_batches == 0:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"extraction did not finish: {stored, unclaimed, open_batches}")
            if stored == len(archive) and unclaimed and not open_batches:
                run_chain(claim(settings, tenant, {f"user-{u}": "idle" for u in USERS}))
            time.sleep(0.5)
        with unit_of_work(tenant) as session:
            gems = session.execute(text("SELECT count(*) FROM semantic.memories")).scalar_one()
        print(f"turns mode: {len(archive)} turns became {gems} gems")
        for mode in ("never", "uncovered", "always"):
            server, url = serve(settings.model_copy(update={"search_turns": mode}))
            rows = []
            with EngramClient(url, key, timeout=120) as client:
                for point in points:
                    found = client.search(f"user-{point.user_id}", point.query[:8000], limit=30)
                    ranked: list[int] = []
                    for hit in found.hits:
                        for external in hit.source_turn_ids[:1]:
                            k = _archive_id(external)
                            if k not in ranked:
                                ranked.append(k)
                    rows.append(metrics(ranked[:10], point.relevant))
            server.should_exit = True
            results[mode] = mean(rows)
    finally:
        group.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA, help="MADial-Bench folder")
    parser.add_argument("--verbose", action="store_true", help="per-point ranks")
    parser.add_argument(
        "--turns", action="store_true", help="also load the archive as raw turns (see above)"
    )
    args = parser.parse_args()

    settings = get_settings()
    started = time.perf_counter()
    services = fresh_database(settings)
    archive = load_archive(args.data)
    points = load_points(args.data)
    server, url = serve(settings)
    tenant = f"madial-{uuid.uuid4().hex[:6]}"
    key = mint_key(tenant, "quality benchmark").key
    memory_of: dict[uuid.UUID, int] = {}
    try:
        with EngramClient(url, key, timeout=120) as client:
            load_started = time.perf_counter()
            for user in USERS:
                items = [(k, v) for k, v in sorted(archive.items()) if owner_of(v["event"]) == user]
                stored = client.remember(
                    f"user-{user}",
                    [
                        {
                            "content": v["event"],
                            "occurred_at": f"{v['time']}T12:00:00Z",
                            "tags": [v["scene"].lower()],
                            "metadata": {"emotion": v["emotion"], "archive_id": k},
                        }
                        for k, v in items
                    ],
                )
                for (k, _), result in zip(items, stored, strict=True):
                    memory_of.setdefault(result.id, k)
            load_s = time.perf_counter() - load_started
            engram, latencies = [], []
            for point in points:
                t0 = time.perf_counter()
                found = client.search(f"user-{point.user_id}", point.query[:8000], limit=10)
                latencies.append((time.perf_counter() - t0) * 1000)
                ranked = [memory_of.get(hit.id, -1) for hit in found.hits]
                engram.append(metrics(ranked, point.relevant))
                if args.verbose:
                    print(sorted(point.relevant), ranked)
    finally:
        server.should_exit = True

    embedder = get_embedder(settings, get_redis(settings))
    dense, lexical = [], []
    for user in USERS:
        keys = [k for k, v in sorted(archive.items()) if owner_of(v["event"]) == user]
        texts = {k: archive[k]["event"] for k in keys}
        bm25 = Bm25(texts)
        matrix = np.asarray(embedder.embed([texts[k] for k in keys]), dtype=np.float32)
        asked = [p for p in points if p.user_id == user]
        queries = np.asarray(embedder.embed([p.query[:8000] for p in asked]), dtype=np.float32)
        for point, vector in zip(asked, queries, strict=True):
            order = np.argsort(-(matrix @ vector), kind="stable")[:10]
            dense.append(metrics([keys[i] for i in order], point.relevant))
            lexical.append(metrics(bm25.rank(point.query), point.relevant))

    ours, bm, cos = mean(engram), mean(lexical), mean(dense)
    by_mode = turns_experiment(settings, archive, points) if args.turns else {}
    latencies.sort()
    print(f"points={len(points)} memories={len(archive)} load_s={load_s:.1f}")
    print(f"engram search over HTTP: p50 {latencies[len(latencies) // 2]:.1f} ms")
    for name, m in (("engram hybrid", ours), ("bm25", bm), ("dense cosine", cos)):
        print(
            f"{name:14s} recall@1 {m['r1']:.3f}  recall@5 {m['r5']:.3f}  "
            f"recall@10 {m['r10']:.3f}  ndcg@10 {m['ndcg']:.3f}"
        )
    for name, m in (("bm25", bm), ("dense cosine", cos)):
        print(
            f"engram vs {name}: recall@10 {ours['r10'] - m['r10']:+.3f}, "
            f"ndcg@10 {ours['ndcg'] - m['ndcg']:+.3f}"
        )
    for mode, m in by_mode.items():
        print(
            f"turns, search_turns={mode:9s} recall@1 {m['r1']:.3f}  recall@5 {m['r5']:.3f}  "
            f"recall@10 {m['r10']:.3f}  ndcg@10 {m['ndcg']:.3f}"
        )
    print(f"total {time.perf_counter() - started:.0f} s")
    services.stop()
    print(
        f"quality recall_at_5={ours['r5']:.3f} recall_at_10={ours['r10']:.3f} "
        f"ndcg_at_10={ours['ndcg']:.3f} bm25_recall_at_10={bm['r10']:.3f} "
        f"dense_recall_at_10={cos['r10']:.3f}"
    )


if __name__ == "__main__":
    main()
