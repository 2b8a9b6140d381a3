"""Turn-level evidence retrieval on real long conversations (REALTALK), through the REST API.

Measures what a memory engine exists for: after three weeks of messages between two people,
does a question find the exact turns that answer it? Each conversation is ingested as one user
(`realtalk-<n>`) through `POST /v1/events` (the Python SDK, batches of 200): every message is a
`turn` with its real timestamp, the speaker's name, role "user" for the first speaker and
"assistant" for the second, its `dia_id` as the producer's `external_id`, and a shared photo's
caption appended to the text. A real Celery worker ingests and extracts; once every user is
caught up (`index_s`), each question is searched (`limit=30`) and the distinct source turns of
the hits, in hit order, are scored against the question's evidence turns: recall@5/10/20,
any@10, all@10, MRR, recall@10 per category (each search timed here, through the API, and
by the service's own `took_ms`); then `POST /v1/context` (2,000 tokens) is asked
the same question, and an evidence turn counts as in the context when its first 60 characters
(whitespace and case normalised) appear in the block. In the same run, over the same turn
texts and questions: BM25 (k1 1.2, b 0.75, Postgres' English stemming and stop words), cosine
over all-MiniLM-L6-v2's vectors (always the fp32-arithmetic int8 file, whichever file Engram
runs, so the baseline does not move with it), and their reciprocal-rank fusion (k 60), each
ranking only the turns of the question's own conversation; and `dense-passages`, cosine over
the keys Engram's dense leg stores for a turn (its sentences led by the speaker, embedded by
Engram's model), a turn scoring its best — what those keys are worth against the whole turn.

Data: REALTALK (arXiv 2502.13270), ten 21-day messaging conversations with memory-probing
questions whose evidence names turns. Used for evaluation only and not part of Engram: it is read
from ../shared/data/realtalk (`--data`). Evidence ids are parsed leniently ("D3:12.", ranges
"D12:3-D12:5", lists); ids naming no turn of the file are dropped, and questions left without
evidence are skipped (both counted in the output).

Conversations 1-7 are the development split, 8-10 the held-out one. Own database
(`engram_bench_conversations`) and Redis prefix; `--reuse` keeps the database and its users
(searches only; `index_s` is nan then). Questions are asked on a second Redis prefix, so the
context block holds no live conversation (L1) either way and both kinds of run compare. Also
printed: the share of evidence turns the block shows or cites as a packed memory's source.

    python bench/conversations.py                       # all ten (the full benchmark)
    python bench/conversations.py --conversations 1 --max-questions 15   # a smoke run
    python bench/conversations.py --reuse --json /tmp/conversations.json

Last line: `conversations recall_at_10=<N> recall_at_20=<N> mrr=<N> rrf_recall_at_10=<N>
bm25_recall_at_10=<N> context_recall=<N> memories_per_turn=<N> search_p95_ms=<N> index_s=<N>`
(the held-out split, or the conversations run when none of 8-10 is).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _api import serve
from _realtalk import (
    CATEGORIES,
    METRICS,
    Conversation,
    Metrics,
    Question,
    RankFn,
    Result,
    evaluate,
    in_context,
    load_conversations,
    parse_numbers,
    score,
)
from _realtalk_baselines import baselines

__all__ = ["Metrics", "RankFn", "engram_rank_fn", "evaluate", "load_conversations", "score"]

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "realtalk"
DATABASE = "engram_bench_conversations"
TENANT = "realtalk"
DEV, HELD_OUT = range(1, 8), range(8, 11)
BATCH = 200
SEARCH_LIMIT = 30
CONTEXT_BUDGET = 2000


def engram_rank_fn(
    client: Any, limit: int = SEARCH_LIMIT, took: dict[tuple[str, str], float] | None = None
) -> RankFn:
    """Search through the SDK; the hits' source turns in hit order (a hit's in given order).
    `took` gathers each search's own time as the API reports it (`took_ms`: the search
    service, without HTTP, authentication and the answer's JSON), by (user, question)."""

    def rank(user_id: str, question: str) -> list[str]:
        found = client.search(user_id, question, limit=limit)
        if took is not None:
            took[(user_id, question)] = found.took_ms
        return list(dict.fromkeys(t for hit in found.hits for t in hit.source_turn_ids))

    return rank


def context_metrics(
    client: Any, questions: Sequence[Question], contents: dict[str, str]
) -> Metrics:
    """Per question, the share of evidence turns the context block shows as text (`context`,
    `ranked` lists them) and the share it shows or cites as a packed memory's source
    (`context_cited`: a memory rephrases its turns, so its text rarely repeats theirs)."""
    metrics = Metrics()
    for q in questions:
        started = time.perf_counter()
        block = client.context(q.user_id, q.text, token_budget=CONTEXT_BUDGET)
        ms = (time.perf_counter() - started) * 1000
        shown = sorted(
            e for e in q.evidence if in_context(contents[f"{q.user_id}/{e}"], block.text)
        )
        cited = {t for m in block.parts.get("memories") or [] for t in m.get("source_turn_ids", [])}
        scores = {
            "context": len(shown) / len(q.evidence),
            "context_cited": len(q.evidence & (cited | set(shown))) / len(q.evidence),
        }
        metrics.results.append(Result(q, shown, scores, ms))
    return metrics


def turn_events(
    conversation: Conversation, roles: str = "user-assistant", times: str = "turn"
) -> list[dict[str, Any]]:
    """`roles`: "user-assistant" sends the second speaker as the assistant; "user" sends both
    people as users, told apart by their speaker names alone (a chat between two people).
    `times`: "turn" sends each message's own time; "session" the time its session began for
    every turn of it, as a producer that knows only when a session was held would (turns of
    one time are then told apart by the order they were sent in)."""
    began: dict[str, datetime] = {}
    for turn in conversation.turns:
        session = turn.dia_id.split(":")[0]
        began[session] = min(began.get(session, turn.at), turn.at)
    return [
        {
            "type": "turn",
            "user_id": conversation.user_id,
            "role": "user" if roles == "user" else turn.role,
            "speaker": turn.speaker,
            "external_id": turn.dia_id,
            "channel": "chat",
            "content": turn.content,
            "timestamp": began[turn.dia_id.split(":")[0]] if times == "session" else turn.at,
        }
        for turn in conversation.turns
    ]


def count_memories(client: Any, user_id: str) -> int:
    """The user's stored memories, superseded ones included (the API lists per user)."""
    return sum(1 for _ in client.iter_memories(user_id, page_size=500, include_superseded=True))


def held(client: Any, conversation: Conversation) -> bool:
    """Whether the database already holds the conversation, extracted (for `--reuse`)."""
    status = client.extraction_status(conversation.user_id)
    return bool(status.turns >= len(conversation.turns) and status.caught_up)


def ingest(client: Any, settings: Any, todo: list[Conversation], args: Any) -> float:
    """Send every turn, wait until all users are extracted; seconds from first send."""
    from app.cli.supervisor import ProcessGroup, worker_command
    from app.keys import RedisKeys
    from app.redis_client import get_redis

    group = ProcessGroup()
    log = (settings.data_dir / "bench-conversations-worker.log").open("w")
    command = worker_command(concurrency=args.workers, consumers=1, loglevel="WARNING")
    group.processes.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT))
    try:
        redis, pattern = (
            get_redis(settings),
            RedisKeys.from_settings(settings).consumer_heartbeats(),
        )
        deadline = time.monotonic() + 120
        while not any(True for _ in redis.scan_iter(match=pattern)):
            if time.monotonic() > deadline:
                raise SystemExit(f"the worker did not start, see {log.name}")
            time.sleep(0.2)
        started = time.perf_counter()
        for conversation in todo:
            events = turn_events(conversation, args.roles, args.times)
            for start in range(0, len(events), BATCH):
                client.send_events(events[start : start + BATCH])
        deadline = time.monotonic() + args.timeout
        for conversation in todo:
            left = max(1.0, deadline - time.monotonic())
            status = client.wait_until_extracted(conversation.user_id, timeout=left)
            if status.failed_batches:
                print(f"{conversation.user_id}: {status.failed_batches} batch(es) failed")
        return time.perf_counter() - started
    finally:
        group.stop()
        log.close()


def split_figures(
    numbers: set[int],
    conversations: list[Conversation],
    runs: dict[str, Metrics],
    context: Metrics,
    memories: dict[str, int],
    index_s: float,
) -> dict[str, float]:
    chosen = [c for c in conversations if c.number in numbers]
    engram = runs["engram"].only(numbers)
    turns = sum(len(c.turns) for c in chosen)
    return {
        "recall_at_10": engram.mean("recall@10"),
        "recall_at_20": engram.mean("recall@20"),
        "mrr": engram.mean("mrr"),
        "rrf_recall_at_10": runs["rrf"].only(numbers).mean("recall@10"),
        "bm25_recall_at_10": runs["bm25"].only(numbers).mean("recall@10"),
        "context_recall": context.only(numbers).mean("context"),
        "memories_per_turn": sum(memories[c.user_id] for c in chosen) / turns
        if turns
        else math.nan,
        "search_p95_ms": engram.latency(0.95),
        "index_s": index_s,
    }


def line(name: str, figures: dict[str, float]) -> str:
    return f"{name} " + " ".join(
        f"{k}={v:.1f}" if k.endswith(("_ms", "_s")) else f"{k}={v:.3f}" for k, v in figures.items()
    )


def print_split(
    title: str,
    numbers: set[int],
    conversations: list[Conversation],
    runs: dict[str, Metrics],
    figures: dict[str, float],
    context: Metrics,
    took: dict[tuple[str, str], float],
) -> None:
    chosen = [c for c in conversations if c.number in numbers]
    engram = runs["engram"].only(numbers)
    # The same questions timed by the service itself: what the API and this process add is
    # the difference (both run here, in one process).
    served = Metrics(
        [
            Result(r.question, [], {}, took[(r.question.user_id, r.question.text)])
            for r in engram.results
        ]
    )
    per_cat = Counter(r.question.category for r in engram.results)
    print(
        f"\n== {title}: conversations {','.join(str(c.number) for c in chosen)}, "
        f"{sum(len(c.turns) for c in chosen)} turns, {len(engram.results)} questions "
        f"(by category {', '.join(f'{k}: {per_cat[k]}' for k in CATEGORIES)}) =="
    )
    columns = [*METRICS, *(f"cat{c} recall@10" for c in CATEGORIES)]
    heads = [c.replace("recall", "r").replace(" ", "") for c in columns]
    print(f"{'':34s}" + "".join(f"{h:>10s}" for h in heads))
    for name, metrics in runs.items():
        summary = metrics.only(numbers).summary()
        print(f"{name:34s}" + "".join(f"{summary[c]:>10.3f}" for c in columns))
    print(
        f"engram search p50 {engram.latency(0.5):.1f} ms, p95 {figures['search_p95_ms']:.1f} ms, "
        f"p99 {engram.latency(0.99):.1f} ms (the service's own took_ms p50 "
        f"{served.latency(0.5):.1f}, p95 {served.latency(0.95):.1f}); "
        f"context recall {figures['context_recall']:.3f}, shown or cited "
        f"{context.only(numbers).mean('context_cited'):.3f} (p95 "
        f"{context.only(numbers).latency(0.95):.1f} ms); "
        f"memories/turn {figures['memories_per_turn']:.3f}; index_s {figures['index_s']:.1f}"
    )


def write_json(path: Path, runs: dict[str, Metrics], context: Metrics) -> None:
    rows = []
    for i, result in enumerate(runs["engram"].results):
        q = result.question
        rows.append(
            {
                "conversation": q.conversation,
                "question": q.text,
                "answer": q.answer,
                "category": q.category,
                "evidence": sorted(q.evidence),
                "ranked": {name: m.results[i].ranked for name, m in runs.items()},
                "scores": {name: m.results[i].scores for name, m in runs.items()},
                "in_context": context.results[i].ranked,
                "context": context.results[i].scores,
            }
        )
    path.write_text(json.dumps(rows, indent=1, ensure_ascii=False), encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA, help="folder of Chat_*.json")
    parser.add_argument("--conversations", default="1-10", help="e.g. 1-7 or 1,3,8-10")
    parser.add_argument("--max-questions", type=int, default=None, help="per conversation")
    parser.add_argument("--reuse", action="store_true", help="keep the database and its users")
    parser.add_argument("--json", type=Path, default=None, help="per-question output")
    parser.add_argument("--workers", type=int, default=2, help="worker concurrency")
    parser.add_argument(
        "--roles",
        choices=("user-assistant", "user"),
        default="user-assistant",
        help="the second speaker as the assistant, or both people as users (speaker names only)",
    )
    parser.add_argument(
        "--times",
        choices=("turn", "session"),
        default="turn",
        help="each turn's own time, or its session's start for all its turns (ties in order sent)",
    )
    parser.add_argument("--timeout", type=float, default=3600, help="extraction wait, seconds")
    args = parser.parse_args(argv)
    if not any(args.data.glob("Chat_*.json")) and (args.data / "realtalk").is_dir():
        args.data = args.data / "realtalk"

    os.environ.setdefault("ENGRAM_DATABASE_NAME", DATABASE)
    os.environ["ENGRAM_REDIS_PREFIX"] = f"benchconv-{os.getpid()}"
    from engram_memory_client import EngramClient

    from app.cli.supervisor import ensure_services, fresh_database
    from app.config import get_settings
    from app.db.migrate import upgrade
    from app.db.session import dispose_engines
    from app.redis_client import get_redis
    from app.services.tenants import mint_key

    settings = get_settings()
    conversations = load_conversations(
        args.data, parse_numbers(args.conversations), args.max_questions
    )
    questions = [q for c in conversations for q in c.questions]
    contents = {f"{c.user_id}/{t.dia_id}": t.content for c in conversations for t in c.turns}
    print(
        f"{len(conversations)} conversations, {len(contents)} turns, {len(questions)} questions "
        f"({sum(c.skipped_questions for c in conversations)} skipped without evidence, "
        f"{sum(c.dropped_evidence for c in conversations)} evidence ids naming no turn dropped)"
    )
    if args.reuse:
        services = ensure_services(settings)
        upgrade()
    else:
        services = fresh_database(settings)
    started = time.perf_counter()
    key = mint_key(TENANT, "conversations benchmark").key
    # Questions go to a second server on a fresh Redis prefix: no live conversation (L1) in
    # the context block, on a fresh run as with --reuse, so the two compare.
    asking = settings.model_copy(update={"redis_prefix": f"{settings.redis_prefix}-ask"})
    server, url = serve(settings)
    try:
        with EngramClient(url, key, timeout=120) as client:
            todo = [c for c in conversations if not (args.reuse and held(client, c))]
            index_s = math.nan
            if todo:
                print(f"ingesting {', '.join(c.user_id for c in todo)}", flush=True)
                took = ingest(client, settings, todo, args)
                index_s = took if len(todo) == len(conversations) else math.nan
                print(f"indexed in {took:.1f} s", flush=True)
        server.should_exit = True
        server, url = serve(asking)
        with EngramClient(url, key, timeout=120) as client:
            took: dict[tuple[str, str], float] = {}
            runs = {"engram": evaluate(questions, engram_rank_fn(client, took=took))}
            context = context_metrics(client, questions, contents)
            memories = {c.user_id: count_memories(client, c.user_id) for c in conversations}
        server.should_exit = True
        runs.update(baselines(settings, conversations, questions))
    finally:
        server.should_exit = True
        redis = get_redis(settings)
        left = [
            key
            for prefix in (settings.redis_prefix, asking.redis_prefix)
            for key in redis.scan_iter(match=f"{prefix}:*", count=1000)
        ]
        for start in range(0, len(left), 1000):
            redis.delete(*left[start : start + 1000])
        dispose_engines()
        if not os.environ.get("ENGRAM_TEST_KEEP_SERVICES"):
            services.stop()

    if args.json:
        write_json(args.json, runs, context)
    ran = {c.number for c in conversations}
    splits = [("dev", ran & set(DEV)), ("held-out", ran & set(HELD_OUT))]
    figures = {}
    for title, numbers in splits:
        if numbers:
            figures[title] = split_figures(numbers, conversations, runs, context, memories, index_s)
            print_split(title, numbers, conversations, runs, figures[title], context, took)
    print(f"total {time.perf_counter() - started:.0f} s")
    if "dev" in figures:
        print(line("conversations-dev", figures["dev"]))
    last = figures.get("held-out") or split_figures(
        ran, conversations, runs, context, memories, index_s
    )
    print(line("conversations", last))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
