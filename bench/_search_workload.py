"""bench/search.py's workload: queries on the users' own topics, live conversations for
the context and prefetch phases, the timed search loop, and the dense query's plan (also
used by bench/scale.py's search phase)."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import psycopg
from _search_corpus import (
    ASSISTANT_LINES,
    BIG_USER,
    TENANT,
    TOPICS,
    BenchEmbedder,
    TextGen,
    user_name,
)

from app.config import Settings
from app.db.session import unit_of_work
from app.layers.semantic.search import MemoryFilter, dense_candidates
from app.layers.working.store import WorkingMemoryStore, WorkingTurn
from app.services.search import SearchRequest, search
from app.text.tokens import count_tokens


@dataclass(frozen=True)
class Query:
    user: int
    topic: int
    text: str
    picked: str  # "uniform" | "by size"


class Workload:
    def __init__(
        self,
        sizes: np.ndarray,
        topics_by_user: list[np.ndarray],
        embedder: BenchEmbedder,
        seed: int,
    ) -> None:
        self.sizes = sizes
        self.topics_by_user = topics_by_user
        self.embedder = embedder
        self.rng = np.random.default_rng(seed)
        self.gen = TextGen(seed)

    def users(self, count: int, picked: str) -> list[int]:
        if picked == "uniform":
            return [int(u) for u in self.rng.integers(0, len(self.sizes), size=count)]
        p = self.sizes / self.sizes.sum()
        return [int(u) for u in self.rng.choice(len(self.sizes), size=count, p=p)]

    def query(self, user: int, picked: str, topic: int | None = None) -> Query:
        if topic is None:  # the topic of one of the user's memories
            topics = self.topics_by_user[user]
            topic = int(topics[self.rng.integers(0, len(topics))])
        text_ = self.gen.query(topic)
        self.embedder.register(text_, topic)
        return Query(user=user, topic=topic, text=text_, picked=picked)

    def mixed(self, count: int) -> list[Query]:
        """First half for uniformly drawn users, second half drawn by size."""
        half = count // 2
        uniform = [self.query(u, "uniform") for u in self.users(half, "uniform")]
        by_size = [self.query(u, "by size") for u in self.users(count - half, "by size")]
        return uniform + by_size

    def conversation(self, user: int) -> tuple[list[WorkingTurn], int]:
        """A few live turns on one of the user's topics (registered as prefetch will embed
        them: its query is the last user turns joined), and that topic."""
        topics = self.topics_by_user[user]
        topic = int(topics[self.rng.integers(0, len(topics))])
        now = datetime.now(UTC)
        lines = []
        for i in range(3):
            said = self.gen.query(topic) if i % 2 else self.gen.memory(topic)[1]
            lines.append(("user", "User", said))
            lines.append(("assistant", "Assistant", self.gen.rng.choice(ASSISTANT_LINES)))
        turns = [
            WorkingTurn(
                id=str(uuid.uuid4()),
                role=role,
                speaker=speaker,
                channel="web",
                content=content,
                tokens=count_tokens(content),
                at=now - timedelta(minutes=len(lines) - i),
            )
            for i, (role, speaker, content) in enumerate(lines)
        ]
        said = " ".join(t.content for t in turns if t.role == "user")[:4000]
        self.embedder.register(said, topic)
        return turns, topic


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, int(q * len(ordered)))])


def size_bucket(size: int) -> str:
    if size > BIG_USER:
        return f">{BIG_USER}"
    return "101-2000" if size > 100 else "<=100"


BUCKETS = ("<=100", "101-2000", f">{BIG_USER}")


def run_searches(
    queries: list[Query], settings: Settings, embedder: BenchEmbedder
) -> tuple[list[float], int, int]:
    """Latency (ms) per query; how many returned nothing; how many had a top hit on topic."""
    latencies = []
    empty = on_topic = 0
    for q in queries:
        request = SearchRequest(user_id=user_name(q.user), query=q.text, limit=10)
        started = time.perf_counter()
        result = search(
            TENANT, request, settings=settings, embedder=embedder, client=None, record=False
        )
        latencies.append((time.perf_counter() - started) * 1000)
        if not result.hits:
            empty += 1
        elif TOPICS[q.topic][1].lower() in result.hits[0].content.lower():
            on_topic += 1
    return latencies, empty, on_topic


def push_conversations(
    store: WorkingMemoryStore, workload: Workload, users: set[int], done: set[int]
) -> None:
    batch = {}
    for user in sorted(users - done):
        batch[(TENANT, user_name(user))] = workload.conversation(user)[0]
        done.add(user)
    for start in range(0, len(batch), 200):
        keys = list(batch)[start : start + 200]
        store.push({key: batch[key] for key in keys})


class StatementTrap:
    """Catches the dense query's SQL and parameters as the driver receives them (the
    search path's reads go to psycopg directly: app/db/rows.py)."""

    def __init__(self) -> None:
        self.caught: tuple[str, Any] | None = None
        self._execute = psycopg.Cursor.execute

    def __enter__(self) -> StatementTrap:
        execute = self._execute

        def trapping(cursor: Any, statement: Any, parameters: Any = None, **kw: Any) -> Any:
            text_of = str(statement)
            if self.caught is None and "<=>" in text_of and not text_of.startswith("EXPLAIN"):
                self.caught = (text_of, parameters)
            return execute(cursor, statement, parameters, **kw)

        psycopg.Cursor.execute = trapping  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        psycopg.Cursor.execute = self._execute  # type: ignore[method-assign]


INDEX_IN_PLAN = re.compile(
    r"((?:Parallel )?(?:Index Only Scan|Index Scan|Bitmap Index Scan))"
    r" (?:Backward )?(?:using|on) (\S+)"
)


def explain_dense(settings: Settings, user: int, vector: list[float]) -> tuple[list[str], str]:
    """(index scans in the plan, execution time) of the search's dense query for a user."""
    with unit_of_work(TENANT) as session:
        with StatementTrap() as trap:
            dense_candidates(
                session,
                MemoryFilter(tenant_id=TENANT, user_id=user_name(user)),
                vector,
                limit=max(settings.search_candidates, 10),
                ef_search=max(settings.search_ef_search, settings.search_candidates),
            )
        assert trap.caught is not None
        statement, parameters = trap.caught
        plan = [
            row[0]
            for row in session.connection().exec_driver_sql(
                "EXPLAIN (ANALYZE, BUFFERS) " + statement, parameters
            )
        ]
    scans = [f"{name} ({node})" for node, name in INDEX_IN_PLAN.findall("\n".join(plan))]
    if any("Seq Scan" in line for line in plan):
        scans.append("Seq Scan")
    took = next((line.split(":", 1)[1].strip() for line in plan if "Execution Time" in line), "?")
    return scans, took
