"""Local embedding benchmark: load time, batched throughput, single-sentence latency.

Runs the real int8 all-MiniLM-L6-v2 (app/embedding/local.py) on ~2,000 chat-like sentences of
5-60 words, built from templates with a fixed seed so every run embeds the same text. No Redis,
no Postgres, no cache: this is the model alone, on the configured number of onnxruntime threads.

Last line: `embed sentences_per_s=<N> single_ms=<N> load_s=<N>` (throughput at the default
batch, 16; median latency of one sentence; cold load including the sha256 checks).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.embedding.local import DEFAULT_BATCH_SIZE, LocalEmbedder

PEOPLE = ["I", "My wife", "Bob from finance", "The new intern", "Our landlord", "My doctor"]
VERBS = [
    "prefers",
    "asked about",
    "complained about",
    "wants to reschedule",
    "forgot",
    "is allergic to",
    "booked",
    "recommended",
]
THINGS = [
    "aisle seats on long flights",
    "the quarterly revenue report",
    "penicillin and anything with peanuts",
    "the standup at 9:30 on Fridays",
    "the Lisbon trip in early October",
    "a vegetarian restaurant near the office",
    "the deployment checklist for the payments service",
    "the dentist appointment about the crown",
    "the piano lessons for our daughter",
    "the lease renewal that is due next month",
]
TAILS = [
    "",
    "because it keeps coming up in every meeting",
    "and said we should not bring it up again until the budget is approved",
    "so please remind me on Tuesday morning before the call with the client",
    "which honestly surprised everyone, given how strongly they felt about it last year",
    "; the details are in the email thread from last week, along with the two attachments "
    "that legal asked us to review before anything is signed or sent to the vendor",
]


def sentences(count: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    out = []
    for n in range(count):
        text = f"{rng.choice(PEOPLE)} {rng.choice(VERBS)} {rng.choice(THINGS)}"
        tail = rng.choice(TAILS)
        if tail:
            text += ("" if tail.startswith(";") else " ") + tail
        out.append(f"{text} (note {n}).")
    return out


def throughput(embedder: LocalEmbedder, texts: list[str], batch: int) -> float:
    embedder.batch_size = batch
    embedder.embed(texts[:batch])  # warm the allocator for this batch shape
    started = time.perf_counter()
    embedder.embed(texts)
    return len(texts) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=2000)
    parser.add_argument("--single", type=int, default=200, help="one-by-one calls to time")
    parser.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads")
    args = parser.parse_args()

    texts = sentences(args.sentences)
    words = [len(t.split()) for t in texts]
    print(
        f"{len(texts)} sentences, {statistics.mean(words):.1f} words on average "
        f"(max {max(words)}); threads={args.threads}; {os.cpu_count()} CPUs; "
        f"load average {os.getloadavg()[0]:.2f}"
    )

    embedder = LocalEmbedder(threads=args.threads)
    started = time.perf_counter()
    embedder.load()
    load_s = time.perf_counter() - started
    print(f"load (sha256 of both files + session): {load_s:.2f}s")

    rates = {b: throughput(embedder, texts, b) for b in sorted({DEFAULT_BATCH_SIZE, 32, 64})}
    for batch, rate in rates.items():
        print(f"batch {batch}: {rate:.0f} sentences/s")

    embedder.batch_size = DEFAULT_BATCH_SIZE
    singles = []
    for text in texts[: args.single]:
        started = time.perf_counter()
        embedder.embed([text])
        singles.append((time.perf_counter() - started) * 1000)
    singles.sort()
    single_ms = statistics.median(singles)
    p95 = singles[int(len(singles) * 0.95) - 1]
    print(f"single sentence: median {single_ms:.1f} ms, p95 {p95:.1f} ms")

    print(
        f"embed sentences_per_s={rates[DEFAULT_BATCH_SIZE]:.0f} single_ms={single_ms:.1f} "
        f"load_s={load_s:.2f}"
    )


if __name__ == "__main__":
    main()
