"""Local embedding benchmark: load time, throughput, single-sentence latency, both model files.

Runs the real all-MiniLM-L6-v2 (app/embedding/local.py) on ~2,000 chat-like sentences of
5-60 words, built from templates with a fixed seed so every run embeds the same text. No Redis,
no Postgres, no cache: this is the model alone, on the configured number of onnxruntime threads.
Both files in one run, so they compare as a ratio: the default q8 (int8 arithmetic, one text
per call) and the int8-storage file it is made from (fp32 arithmetic, batches of 16 by token
count), each also at the other batch sizes; and how far apart their vectors are.

Last line: `embed sentences_per_s=<N> single_ms=<N> load_s=<N> int8_sentences_per_s=<N>
int8_single_ms=<N> speedup=<N> cosine_to_int8=<N>` (throughput at each file's own batch size;
median latency of one sentence; cold load including the sha256 checks; q8 / int8 throughput;
mean cosine between the two files' vectors of the same sentences).
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

import numpy as np

from app.embedding.local import INT8, Q8, LocalEmbedder

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


def measure(embedder: LocalEmbedder, texts: list[str], singles: int) -> dict[str, float]:
    """Cold load, throughput at 1/16/32/64 (then its own batch size again), one-text latency."""
    own = embedder.batch_size
    started = time.perf_counter()
    embedder.load()
    load_s = time.perf_counter() - started
    rates = {b: throughput(embedder, texts, b) for b in sorted({1, 16, 32, 64, own})}
    embedder.batch_size = own
    times = []
    for text in texts[:singles]:
        started = time.perf_counter()
        embedder.embed([text])
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    print(
        f"{embedder.name} (own batch {own}): load {load_s:.2f}s (sha256 of both files + session); "
        + ", ".join(f"batch {b}: {r:.0f}/s" for b, r in rates.items())
        + f"; one sentence: median {statistics.median(times):.1f} ms, "
        f"p95 {times[int(len(times) * 0.95) - 1]:.1f} ms"
    )
    return {"rate": rates[own], "single_ms": statistics.median(times), "load_s": load_s}


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
    q8 = LocalEmbedder(model=Q8.name, threads=args.threads)
    int8 = LocalEmbedder(model=INT8.name, threads=args.threads)
    fast = measure(q8, texts, args.single)
    slow = measure(int8, texts, args.single)
    sample = texts[:500]
    cosine = (np.array(q8.embed(sample)) * np.array(int8.embed(sample))).sum(axis=1)
    print(
        f"cosine q8 to int8 over {len(sample)} sentences: mean {cosine.mean():.4f}, "
        f"min {cosine.min():.4f}"
    )
    print(
        f"embed sentences_per_s={fast['rate']:.0f} single_ms={fast['single_ms']:.1f} "
        f"load_s={fast['load_s']:.2f} int8_sentences_per_s={slow['rate']:.0f} "
        f"int8_single_ms={slow['single_ms']:.1f} speedup={fast['rate'] / slow['rate']:.2f} "
        f"cosine_to_int8={cosine.mean():.4f}"
    )


if __name__ == "__main__":
    main()
