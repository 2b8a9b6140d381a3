"""REALTALK conversations for `bench/conversations.py`: loading, metrics and baselines.

Pure helpers (no database, no API): the benchmark passes in what needs one (the lexemes
Postgres computes, the embedder's vectors), so the metric code can be imported and tested alone.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

RankFn = Callable[[str, str], list[str]]  # (user_id, question) -> ranked dia_ids, best first
METRICS = ("recall@5", "recall@10", "recall@20", "any@10", "all@10", "mrr")
CATEGORIES = (1, 2, 3)
DEPTH = 30  # turns a baseline returns (Engram's search asks for 30 hits)
RRF_K = 60
CONTEXT_PREFIX = 60  # characters of a turn that must appear in the context block

_FILE = re.compile(r"^Chat_(\d+)_.+\.json$")
_SESSION = re.compile(r"^session_(\d+)$")
# A dia_id as the annotators wrote it: "D3:12", "D3:12.", "D 2:18", "23:29", "D17;39", and
# ranges "D12:3-D12:5"; lists are separated by ";", "," or spaces.
_EVIDENCE = re.compile(r"D?\s*(\d+)\s*[:;]\s*(\d+)(?:\s*-\s*D?\s*(\d+)\s*:\s*(\d+))?")


@dataclass(frozen=True)
class Turn:
    dia_id: str
    speaker: str
    role: str  # "user" for speaker_1, "assistant" for speaker_2
    content: str  # clean_text, plus the shared photo's caption
    at: datetime


@dataclass(frozen=True)
class Question:
    conversation: int
    user_id: str
    text: str
    answer: str
    category: int
    evidence: frozenset[str]


@dataclass
class Conversation:
    number: int
    speakers: tuple[str, str]
    turns: list[Turn]
    questions: list[Question]
    dropped_evidence: int = 0  # evidence ids naming no turn of the file
    skipped_questions: int = 0  # questions left without evidence

    @property
    def user_id(self) -> str:
        return f"realtalk-{self.number}"


def parse_numbers(spec: str) -> list[int]:
    """ "1-7,9" -> [1, 2, 3, 4, 5, 6, 7, 9]."""
    numbers: set[int] = set()
    for part in filter(None, (p.strip() for p in spec.split(","))):
        low, _, high = part.partition("-")
        numbers.update(range(int(low), int(high or low) + 1))
    return sorted(numbers)


def turn_text(clean_text: str, caption: str | None) -> str:
    text, caption = clean_text.strip(), (caption or "").strip()
    if not caption:
        return text
    return f"{text} [shares a photo: {caption}]" if text else f"[shares a photo: {caption}]"


def parse_time(value: str) -> datetime:
    return datetime.strptime(value, "%d.%m.%Y, %H:%M:%S").replace(tzinfo=UTC)


def parse_evidence(raw: Iterable[str]) -> list[str]:
    """The dia_ids an evidence list names, ranges expanded, in order, without repeats."""
    ids: list[str] = []
    for item in raw:
        for match in _EVIDENCE.finditer(str(item)):
            dialogue, first, end_dialogue, last = match.groups()
            if end_dialogue is not None and end_dialogue == dialogue:
                ids += [f"D{int(dialogue)}:{n}" for n in range(int(first), int(last) + 1)]
                continue
            ids.append(f"D{int(dialogue)}:{int(first)}")
            if end_dialogue is not None:
                ids.append(f"D{int(end_dialogue)}:{int(last)}")
    return list(dict.fromkeys(ids))


def load_conversation(path: Path, max_questions: int | None = None) -> Conversation:
    match = _FILE.match(path.name)
    if not match:
        raise ValueError(f"not a REALTALK conversation file: {path}")
    number = int(match.group(1))
    raw = json.loads(path.read_text(encoding="utf-8"))
    speakers = (raw["name"]["speaker_1"], raw["name"]["speaker_2"])
    sessions = sorted(
        (int(m.group(1)), key) for key in raw if (m := _SESSION.match(key)) is not None
    )
    turns = []
    for _, key in sessions:
        for item in raw[key]:
            content = turn_text(item.get("clean_text") or "", item.get("blip_caption"))
            if not content:
                continue
            role = "assistant" if item["speaker"] == speakers[1] else "user"
            turns.append(
                Turn(item["dia_id"], item["speaker"], role, content, parse_time(item["date_time"]))
            )
    known = {t.dia_id for t in turns}
    conversation = Conversation(number, speakers, turns, [])
    for qa in raw.get("qa", []):
        named = parse_evidence(qa.get("evidence") or [])
        evidence = frozenset(e for e in named if e in known)
        conversation.dropped_evidence += len(named) - len(evidence)
        if not evidence:
            conversation.skipped_questions += 1
            continue
        conversation.questions.append(
            Question(
                number,
                conversation.user_id,
                str(qa["question"]),
                str(qa.get("answer", "")),
                int(qa["category"]),
                evidence,
            )
        )
    if max_questions is not None:
        conversation.questions = conversation.questions[:max_questions]
    return conversation


def load_conversations(
    data: Path, numbers: Collection[int], max_questions: int | None = None
) -> list[Conversation]:
    paths = {}
    for path in data.glob("Chat_*.json"):
        match = _FILE.match(path.name)
        if match:
            paths[int(match.group(1))] = path
    missing = sorted(set(numbers) - set(paths))
    if missing:
        raise SystemExit(f"no conversation file for {missing} in {data}")
    return [load_conversation(paths[n], max_questions) for n in sorted(numbers)]


# ---------------------------------------------------------------------------------------------
# Metrics


def score(ranked: Sequence[str], evidence: Collection[str]) -> dict[str, float]:
    """Recall@5/10/20, any@10, all@10 and MRR of one ranking against the evidence turns.

    Repeats in `ranked` are dropped first (ranks count distinct turns); MRR is 0 when no
    evidence turn is in the list."""
    wanted = set(evidence)
    if not wanted:
        raise ValueError("a question needs at least one evidence turn")
    distinct = list(dict.fromkeys(ranked))

    def recall(k: int) -> float:
        return len(wanted.intersection(distinct[:k])) / len(wanted)

    first = next((i for i, turn in enumerate(distinct) if turn in wanted), None)
    at10 = recall(10)
    return {
        "recall@5": recall(5),
        "recall@10": at10,
        "recall@20": recall(20),
        "any@10": float(at10 > 0),
        "all@10": float(at10 == 1.0),
        "mrr": 0.0 if first is None else 1 / (first + 1),
    }


@dataclass(frozen=True)
class Result:
    question: Question
    ranked: list[str]
    scores: dict[str, float]
    ms: float


@dataclass
class Metrics:
    results: list[Result] = field(default_factory=list)

    def only(self, conversations: Collection[int]) -> Metrics:
        return Metrics([r for r in self.results if r.question.conversation in conversations])

    def mean(self, key: str, category: int | None = None) -> float:
        values = [
            r.scores[key]
            for r in self.results
            if category is None or r.question.category == category
        ]
        return sum(values) / len(values) if values else math.nan

    def latency(self, quantile: float) -> float:
        """Nearest-rank percentile of the per-question times, in ms."""
        times = sorted(r.ms for r in self.results)
        if not times:
            return math.nan
        return times[max(0, math.ceil(quantile * len(times)) - 1)]

    def summary(self) -> dict[str, float]:
        out = {key: self.mean(key) for key in METRICS}
        out.update({f"cat{c} recall@10": self.mean("recall@10", c) for c in CATEGORIES})
        return out


def evaluate(questions: Iterable[Question], rank_fn: RankFn) -> Metrics:
    """Ask every question through `rank_fn` (timed) and score its ranking."""
    metrics = Metrics()
    for question in questions:
        started = time.perf_counter()
        ranked = list(dict.fromkeys(rank_fn(question.user_id, question.text)))
        ms = (time.perf_counter() - started) * 1000
        metrics.results.append(Result(question, ranked, score(ranked, question.evidence), ms))
    return metrics


def normalised(text: str) -> str:
    return " ".join(text.split()).lower()


def in_context(content: str, context_text: str) -> bool:
    """Whether a turn shows in a context block: its first 60 characters, whitespace and case
    normalised, appear in the block."""
    return normalised(content)[:CONTEXT_PREFIX] in normalised(context_text)


# ---------------------------------------------------------------------------------------------
# Baselines


class Bm25:
    """Okapi BM25 over pre-tokenised documents (term -> count)."""

    def __init__(self, docs: Mapping[str, Counter[str]], k1: float = 1.2, b: float = 0.75):
        self.k1, self.b, self.docs = k1, b, docs
        self.lengths = {key: sum(c.values()) for key, c in docs.items()}
        self.avg = sum(self.lengths.values()) / max(len(docs), 1) or 1.0
        df: Counter[str] = Counter()
        for counts in docs.values():
            df.update(counts.keys())
        n = len(docs)
        self.idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}

    def rank(self, query: Counter[str], depth: int = DEPTH) -> list[str]:
        scores = {}
        for key, counts in self.docs.items():
            norm = self.k1 * (1 - self.b + self.b * self.lengths[key] / self.avg)
            value = sum(
                qtf * self.idf[t] * counts[t] * (self.k1 + 1) / (counts[t] + norm)
                for t, qtf in query.items()
                if t in counts
            )
            if value > 0:
                scores[key] = value
        return sorted(scores, key=lambda k: -scores[k])[:depth]  # stable: turn order on ties


def bm25_rank_fn(
    docs: Mapping[str, Mapping[str, Counter[str]]],
    queries: Mapping[str, Counter[str]],
    depth: int = DEPTH,
) -> RankFn:
    """BM25 over each user's own turns; `docs[user][dia_id]` and `queries[text]` are lexemes."""
    index = {user: Bm25(turns) for user, turns in docs.items()}
    return lambda user, question: index[user].rank(queries[question], depth)


def dense_rank_fn(
    turns: Mapping[str, tuple[list[str], np.ndarray]],
    queries: Mapping[str, np.ndarray],
    depth: int = DEPTH,
    owners: Mapping[str, np.ndarray] | None = None,
) -> RankFn:
    """Cosine over each user's own turns: `turns[user]` = (dia_ids, one row per turn), or with
    `owners[user]` (the turn index of each row) several rows per turn, a turn scoring its best."""

    def unit(matrix: np.ndarray) -> np.ndarray:
        norms = np.linalg.norm(matrix, axis=-1, keepdims=True)
        return matrix / np.where(norms == 0, 1, norms)

    index = {user: (ids, unit(np.asarray(m, dtype=np.float32))) for user, (ids, m) in turns.items()}
    vectors = {q: unit(np.asarray(v, dtype=np.float32)) for q, v in queries.items()}

    def rank(user: str, question: str) -> list[str]:
        ids, matrix = index[user]
        rows = matrix @ vectors[question]
        if owners is None:
            scores = rows
        else:
            scores = np.full(len(ids), -np.inf, dtype=np.float32)
            np.maximum.at(scores, owners[user], rows)
        order = np.argsort(-scores, kind="stable")[:depth]
        return [ids[int(i)] for i in order]

    return rank


def rrf(rankings: Iterable[Sequence[str]], k: int = RRF_K) -> list[str]:
    """Reciprocal-rank fusion: sum of 1 / (k + rank) over the rankings, rank from 1."""
    fused: dict[str, float] = {}
    for ranking in rankings:
        for rank, key in enumerate(ranking, start=1):
            fused[key] = fused.get(key, 0.0) + 1 / (k + rank)
    return sorted(fused, key=lambda key: -fused[key])


def rrf_rank_fn(fns: Sequence[RankFn], depth: int = DEPTH, k: int = RRF_K) -> RankFn:
    return lambda user, question: rrf((fn(user, question) for fn in fns), k)[:depth]
