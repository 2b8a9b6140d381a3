"""Procedural memory against real Postgres (pgvector, RLS) and the real local embedding model."""

from __future__ import annotations

import itertools
import math
import uuid
from collections.abc import Sequence
from typing import Any

import pytest
import redis
from sqlalchemy import text

from app.config import Settings
from app.db.session import unit_of_work
from app.embedding.base import Embedder, Owner
from app.embedding.factory import get_embedder
from app.layers.meta import procedures as repository
from app.scoring.procedural import ProcedureStats, confidence
from app.services import procedures

DEPLOY = "deploy the web app to staging"
DEPLOY_STEPS: list[Any] = [
    {"tool": "git.pull", "args": {"branch": "main"}},
    {"tool": "docker.build", "args": {"tag": "web:staging"}},
    "kubectl.apply",
]


@pytest.fixture
def embedder(settings: Settings, redis_client: redis.Redis) -> Embedder:
    return get_embedder(settings, redis_client)


@pytest.fixture
def user() -> str:
    return f"u-{uuid.uuid4().hex[:8]}"


def record(
    tenant: str,
    user: str,
    embedder: Embedder,
    settings: Settings,
    *,
    query: str = DEPLOY,
    steps: list[Any] | None = None,
    success: float = 1.0,
    duration_ms: float = 1200.0,
) -> procedures.ProcedureView:
    return procedures.record(
        tenant_id=tenant,
        user_id=user,
        query=query,
        tool_sequence=DEPLOY_STEPS if steps is None else steps,
        success=success,
        duration_ms=duration_ms,
        embedder=embedder,
        settings=settings,
    )


def suggest(
    tenant: str, user: str, query: str, embedder: Embedder, settings: Settings, **kw: Any
) -> procedures.Suggestion | None:
    return procedures.suggest(
        tenant_id=tenant, user_id=user, query=query, embedder=embedder, settings=settings, **kw
    )


# -- the SQL formula is the Python formula ---------------------------------------------------


def test_sql_confidence_matches_python() -> None:
    grid = list(
        itertools.product(
            [0.0, 0.05, 0.1, 1 / 3, 0.5, 0.6, 0.7, 0.75, 0.8, 0.9, 0.95, 0.999, 1.0, 1.2, -0.1],
            [-1, 0, 1, 2, 3, 4, 5, 7, 9, 10, 11, 50, 10_000],
        )
    )
    sql = repository.confidence_sql("a", "n")
    with unit_of_work() as session:
        rows = session.execute(
            text(
                f"SELECT a, n, {sql} FROM unnest(CAST(:a AS float8[]), CAST(:n AS int[]))"
                " AS g(a, n)"
            ),
            {"a": [a for a, _ in grid], "n": [n for _, n in grid]},
        ).all()
    assert len(rows) == len(grid)
    for a, n, stored in rows:
        assert stored == confidence(a, n), (a, n)


def test_outcomes_accumulate_with_the_same_maths_as_python(
    tenant: str, user: str, embedder: Embedder, settings: Settings
) -> None:
    outcomes = [(1.0, 100.0), (0.5, 200.0), (0.75, 300.0), (0.3, 50.5), (0.9, 1e6)]
    expected = ProcedureStats()
    views = []
    # The same pattern however it is typed, and the same steps however they are spelled.
    queries = [DEPLOY, "Deploy the web app to staging!", "  deploy the WEB app  to staging. "]
    steps = [DEPLOY_STEPS, [*DEPLOY_STEPS[:2], {"tool": "kubectl.apply"}]]
    for i, (success, duration) in enumerate(outcomes):
        views.append(
            record(
                tenant,
                user,
                embedder,
                settings,
                query=queries[i % len(queries)],
                steps=steps[i % len(steps)],
                success=success,
                duration_ms=duration,
            )
        )
        expected = expected.after(success, duration)
        view = views[-1]
        assert view.created is (i == 0)
        assert view.id == views[0].id
        assert view.executions == expected.executions == i + 1
        assert view.avg_success == expected.avg_success
        assert view.avg_duration_ms == expected.avg_duration_ms
        assert view.confidence == expected.confidence
    last = views[-1]
    assert last.avg_success == pytest.approx(sum(s for s, _ in outcomes) / 5)
    assert last.confidence == pytest.approx(min(last.avg_success * 1.5, 1.0))
    assert last.query_pattern == DEPLOY
    assert last.tool_sequence[2] == {"tool": "kubectl.apply"}  # stored in canonical form
    assert last.last_executed_at is not None
    assert last.last_executed_at >= views[0].last_executed_at

    with unit_of_work(tenant) as session:
        rows = repository.list_for_user(session, user, 10, 0)
    assert [r.id for r in rows] == [last.id]
    assert rows[0].executions == 5


def test_a_paraphrase_gets_the_sequence(
    tenant: str, user: str, embedder: Embedder, settings: Settings
) -> None:
    stored = record(tenant, user, embedder, settings, success=1.0, duration_ms=900)
    assert stored.confidence == 1.0  # min(1.0 * 1.1, 1)
    got = suggest(tenant, user, "push the webapp to the staging environment", embedder, settings)
    assert got is not None
    assert got.procedure_id == stored.id
    assert got.tool_sequence == stored.tool_sequence
    assert got.tool_sequence[0] == {"tool": "git.pull", "args": {"branch": "main"}}
    assert got.query_pattern == DEPLOY
    assert got.executions == 1
    assert got.confidence == 1.0
    assert settings.procedure_min_similarity <= got.similarity < 0.999
    assert got.score == pytest.approx(got.similarity * got.confidence)
    # The exact words match at similarity ~1.
    exact = suggest(tenant, user, "Deploy the web app to staging?", embedder, settings)
    assert exact is not None
    assert exact.similarity == pytest.approx(1.0, abs=1e-5)


def test_an_unrelated_query_gets_nothing(
    tenant: str, user: str, embedder: Embedder, settings: Settings
) -> None:
    record(tenant, user, embedder, settings)
    for query in ["what is the weather in Paris tomorrow", "book a table for two", "hi"]:
        assert suggest(tenant, user, query, embedder, settings) is None


class _Counting:
    """The real embedder, counting the texts it is asked for."""

    def __init__(self, inner: Embedder) -> None:
        self.inner, self.name, self.dim, self.texts = inner, inner.name, inner.dim, 0

    def embed(self, texts: Any, owners: Sequence[Owner] | None = None) -> list[list[float]]:
        self.texts += len(texts)
        return self.inner.embed(texts, owners)


def test_a_user_without_procedures_gets_nothing_and_no_query_is_embedded(
    tenant: str, user: str, embedder: Embedder, settings: Settings
) -> None:
    counting = _Counting(embedder)
    assert suggest(tenant, user, "deploy the web app to staging", counting, settings) is None
    assert counting.texts == 0
    record(tenant, user, embedder, settings)
    assert suggest(tenant, user, "deploy the web app to staging", counting, settings) is not None
    assert counting.texts == 1


def test_nothing_below_the_confidence_threshold(
    tenant: str, user: str, embedder: Embedder, settings: Settings
) -> None:
    """Half the runs succeed: 0.55 after one execution, 0.7 (suggestable) after four."""
    paraphrase = "push the webapp to the staging environment"
    for executions in range(1, 4):
        view = record(tenant, user, embedder, settings, success=0.5)
        assert view.confidence == pytest.approx(confidence(0.5, executions))
        assert view.confidence < 0.7
        assert suggest(tenant, user, paraphrase, embedder, settings) is None
    # A caller may accept less.
    lenient = suggest(tenant, user, paraphrase, embedder, settings, min_confidence=0.6)
    assert lenient is not None
    assert lenient.confidence == pytest.approx(0.65)
    view = record(tenant, user, embedder, settings, success=0.5)
    assert view.executions == 4
    assert view.confidence >= 0.7 - 1e-12
    got = suggest(tenant, user, paraphrase, embedder, settings)
    assert got is not None
    assert got.executions == 4


def test_the_most_trusted_sequence_wins(
    tenant: str, user: str, embedder: Embedder, settings: Settings
) -> None:
    shaky = ["ssh.staging", "scp.bundle", "systemctl.restart"]
    for _ in range(3):
        record(tenant, user, embedder, settings, steps=shaky, success=0.7)
    proven = record(tenant, user, embedder, settings, success=1.0)
    # A failing sequence for the same pattern is kept, counted, and never suggested.
    failed = record(tenant, user, embedder, settings, steps=["ftp.upload"], success=0.0)
    assert failed.confidence == 0.0
    got = suggest(tenant, user, "deploy the web app to the staging environment", embedder, settings)
    assert got is not None
    assert got.procedure_id == proven.id
    # The shaky one (0.7 * 1.3 = 0.91) still beats a near-identical, less trusted rival.
    for _ in range(5):
        record(tenant, user, embedder, settings, steps=["deploy.sh"], success=0.1)
    got = suggest(tenant, user, DEPLOY, embedder, settings)
    assert got is not None
    assert got.procedure_id == proven.id
    with unit_of_work(tenant) as session:
        rows = repository.list_for_user(session, user, 2, 0)
        rest = repository.list_for_user(session, user, 10, 2)
    assert rows[0].id == proven.id
    assert len(rows) + len(rest) == 4
    assert [r.confidence for r in [*rows, *rest]] == sorted(
        (r.confidence for r in [*rows, *rest]), reverse=True
    )


def test_other_users_and_tenants_never_see_it(
    tenant: str, user: str, embedder: Embedder, settings: Settings
) -> None:
    record(tenant, user, embedder, settings)
    other_tenant = f"t-{uuid.uuid4().hex[:10]}"
    assert suggest(tenant, user, DEPLOY, embedder, settings) is not None
    assert suggest(tenant, "someone-else", DEPLOY, embedder, settings) is None
    assert suggest(other_tenant, user, DEPLOY, embedder, settings) is None
    with unit_of_work(other_tenant) as session:
        assert repository.list_for_user(session, user, 10, 0) == []
        assert repository.nearest(session, user, embedder.embed([DEPLOY])[0], 5) == []
    # The same user id under another tenant builds its own, separate procedure.
    theirs = record(other_tenant, user, embedder, settings, success=0.2)
    ours = suggest(tenant, user, DEPLOY, embedder, settings)
    assert ours is not None
    assert theirs.id != ours.procedure_id
    assert theirs.executions == 1
    assert ours.executions == 1
    assert suggest(other_tenant, user, DEPLOY, embedder, settings) is None  # 0.22 < 0.7


def test_nearest_returns_cosine_similarity_best_first(
    tenant: str, user: str, embedder: Embedder, settings: Settings
) -> None:
    queries = [DEPLOY, "run the unit tests", "send an email to bob"]
    for query in queries:
        record(tenant, user, embedder, settings, query=query, steps=[query.split()[0]])
    vector = embedder.embed(["deploy the webapp to staging"])[0]
    with unit_of_work(tenant) as session:
        rows = repository.nearest(session, user, vector, 5)
        top = repository.nearest(session, user, vector, 1)
        none = repository.nearest(session, user, vector, 5, min_confidence=1.01)
    assert rows[0].query_pattern == DEPLOY
    assert len(rows) == 3
    similarities = [r.similarity for r in rows]
    assert similarities == sorted(similarities, reverse=True)
    assert all(-1.0 <= s <= 1.0 for s in similarities)
    assert [r.id for r in top] == [rows[0].id]
    assert none == []


GOOD: dict[str, Any] = {
    "query": DEPLOY,
    "tool_sequence": DEPLOY_STEPS,
    "success": 1.0,
    "duration_ms": 10.0,
}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("tenant_id", ""),
        ("user_id", "   "),
        ("user_id", "u" * 129),
        ("query", ""),
        ("query", "?!"),
        ("query", None),
        ("tool_sequence", []),
        ("tool_sequence", "search"),
        ("tool_sequence", {"tool": "search"}),
        ("tool_sequence", ["search", ""]),
        ("tool_sequence", [{"args": {}}]),
        ("tool_sequence", [{"tool": 3}]),
        ("tool_sequence", [{"tool": "  "}]),
        ("tool_sequence", [42]),
        ("tool_sequence", [{"tool": "x", "limit": math.inf}]),
        ("tool_sequence", [{"tool": "x", "when": object()}]),
        ("success", 1.01),
        ("success", -0.1),
        ("success", math.nan),
        ("success", "1"),
        ("duration_ms", -1),
        ("duration_ms", math.inf),
        ("duration_ms", None),
    ],
)
def test_bad_inputs_name_the_field(
    field: str, value: Any, tenant: str, user: str, embedder: Embedder, settings: Settings
) -> None:
    args: dict[str, Any] = {**GOOD, "tenant_id": tenant, "user_id": user, field: value}
    with pytest.raises(ValueError, match=rf"^{field}\b"):
        procedures.record(**args, embedder=embedder, settings=settings)
    with unit_of_work(tenant) as session:
        assert repository.list_for_user(session, user, 10, 0) == []


@pytest.mark.parametrize(
    ("field", "kw"),
    [
        ("query", {"query": "   "}),
        ("user_id", {"user_id": ""}),
        ("min_confidence", {"min_confidence": 1.5}),
        ("min_confidence", {"min_confidence": -0.1}),
    ],
)
def test_bad_suggest_inputs_name_the_field(
    field: str, kw: dict[str, Any], tenant: str, user: str, embedder: Embedder, settings: Settings
) -> None:
    args: dict[str, Any] = {"tenant_id": tenant, "user_id": user, "query": DEPLOY, **kw}
    with pytest.raises(ValueError, match=rf"^{field}\b"):
        procedures.suggest(**args, embedder=embedder, settings=settings)
