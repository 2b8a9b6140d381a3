"""The dense leg picks its plan by the user's size (app/db/nearest.py): a user past the
threshold is walked through HNSW (nearly the exact answer, and never short), a smaller one
sorted exactly through the user index (the exact answer)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest
from sqlalchemy import text

from app.config import Settings
from app.db import nearest as nearest_module
from app.db.nearest import index_threshold, vector_literal
from app.db.session import owner_engine, unit_of_work
from app.layers.semantic.search import MemoryFilter, dense_candidates
from tests.integration.helpers import driver_statements

DIM = 384
T0 = datetime(2026, 5, 1, tzinfo=UTC)


def _unit(rng: np.random.Generator) -> list[float]:
    v = rng.normal(size=DIM)
    return (v / np.linalg.norm(v)).tolist()


def _plant(tenant: str, user: str, count: int, rng: np.random.Generator) -> None:
    with unit_of_work(tenant) as session:
        for i in range(count):
            session.execute(
                text(
                    "INSERT INTO semantic.memories (id, tenant_id, user_id, kind, content,"
                    " content_hash, occurred_at, valid_from, embedding) VALUES (:id, :t, :u,"
                    " 'fact', :c, :h, :at, :at, CAST(:v AS vector))"
                ),
                {
                    "id": uuid.uuid4(),
                    "t": tenant,
                    "u": user,
                    "c": f"{user} memory {i}",
                    "h": f"{user}-{i}",
                    "at": T0,
                    "v": vector_literal(_unit(rng)),
                },
            )


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    driver_statements(monkeypatch, seen, lambda statement: statement)
    return seen


def test_the_threshold_grows_with_the_square_root_of_the_table() -> None:
    assert index_threshold(0) == index_threshold(nearest_module.SMALLEST_TABLE)
    assert index_threshold(100_000) == pytest.approx(10_000, abs=1)
    assert index_threshold(1_000_000) == pytest.approx(31_623, abs=1)
    assert index_threshold(400_000) == pytest.approx(2 * index_threshold(100_000), abs=1)


def test_big_users_walk_the_index_small_ones_sort_and_both_are_exact(
    tenant: str, statements: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(5)
    _plant(tenant, "big", 60, rng)
    _plant(tenant, "small", 12, rng)
    # Each in a 72-row partition: the threshold is 30 rows, so "big" (60) walks and "small"
    # (12) sorts.
    monkeypatch.setattr(nearest_module, "SMALLEST_TABLE", 1)
    real_rows = nearest_module.relation_rows

    def partition_of_72(*args: Any) -> float | None:
        return None if real_rows(*args) is None else 72.0

    monkeypatch.setattr(nearest_module, "relation_rows", partition_of_72)
    monkeypatch.setattr(nearest_module, "CROSSOVER", 12.5)
    assert index_threshold(72) == 30

    for user, walks in (("big", True), ("small", False)):
        query = _unit(rng)
        memory_filter = MemoryFilter(tenant_id=tenant, user_id=user)
        statements.clear()
        with unit_of_work(tenant) as session:
            found = dense_candidates(session, memory_filter, query, limit=10, ef_search=100)
            truth = dense_candidates(
                session, memory_filter, query, limit=10, ef_search=100, exact=True
            )
        dense = next(s for s in statements if "<=>" in s)
        assert ("+ 0" not in dense) is walks, dense
        assert any("enable_sort = on" in s for s in statements) is walks
        assert len(found) == 10
        if walks:  # the index is shared with every other test's rows: approximate
            assert len(set(found) & set(truth)) >= 7
        else:
            assert found == pytest.approx(truth)


def test_a_filter_the_user_index_cannot_size_leaves_the_plan_to_postgres(
    tenant: str, statements: list[str]
) -> None:
    rng = np.random.default_rng(6)
    _plant(tenant, "tagged", 5, rng)
    memory_filter = MemoryFilter(tenant_id=tenant, user_id="tagged", kinds=("fact",))
    assert memory_filter.size_clause() is None
    with unit_of_work(tenant) as session:
        found = dense_candidates(session, memory_filter, _unit(rng), limit=10, ef_search=40)
    assert len(found) == 5
    assert not any("count(*)" in s for s in statements)


def test_a_users_size_is_counted_once_a_minute(
    tenant: str, statements: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(7)
    _plant(tenant, "asker", 3, rng)
    memory_filter = MemoryFilter(tenant_id=tenant, user_id="asker")

    def counts() -> int:
        statements.clear()
        with unit_of_work(tenant) as session:
            found = dense_candidates(session, memory_filter, _unit(rng), limit=5, ef_search=40)
        assert len(found) == 3
        return sum("count(*) FROM (SELECT 1" in s for s in statements)

    assert counts() == 1
    assert counts() == 0  # remembered: the plan is chosen without asking again
    monkeypatch.setattr(nearest_module, "USER_SIZE_TTL_S", 0.0)
    assert counts() == 1


def test_the_threshold_is_of_the_partition_holding_the_user(
    tenant: str, settings: Settings
) -> None:
    """A user's walk is of its own partition's index, so that partition's size sets the
    threshold, not the table's nor the partitions' average."""
    rng = np.random.default_rng(8)
    _plant(tenant, "owner", 4, rng)
    scope = {"tenant": tenant, "user": "owner"}
    size_where = "tenant_id = :tenant AND user_id = :user"
    with owner_engine(settings).begin() as connection:  # the catalog's estimate, made now
        connection.execute(text("ANALYZE semantic.memories"))
    with unit_of_work(tenant) as session:
        rows = nearest_module.relation_rows(session, "semantic.memories", size_where, scope)
        partition = session.execute(
            text(
                "SELECT c.reltuples FROM semantic.memories AS m JOIN pg_class AS c"
                " ON c.oid = m.tableoid WHERE m.tenant_id = :tenant AND m.user_id = :user"
                " LIMIT 1"
            ),
            scope,
        ).scalar_one()
        nobody = nearest_module.relation_rows(
            session, "semantic.memories", size_where, {**scope, "user": "nobody"}
        )
    assert rows == pytest.approx(max(float(partition), 0.0))
    assert rows >= 4
    assert nobody is None
