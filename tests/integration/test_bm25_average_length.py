"""BM25's average length (app/db/fulltext.py) is measured over the user's sample once a
minute, not in every search: a search within the minute ranks with the remembered one, and
a search after it measures again. Real Postgres, real memories."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import text

from app.db import fulltext
from app.db.session import unit_of_work
from app.layers.semantic.search import MemoryFilter, lexical_candidates

T0 = datetime(2026, 5, 1, tzinfo=UTC)


def _remember(tenant: str, user: str, contents: list[str], agent: str | None = None) -> None:
    """Memories of the user (private to `agent` when given), a minute apart."""
    with unit_of_work(tenant, agent_id=agent) as session:
        for n, content in enumerate(contents):
            session.execute(
                text(
                    "INSERT INTO semantic.memories (id, tenant_id, user_id, agent_id, kind,"
                    " content, content_hash, occurred_at, valid_from) VALUES (:id, :t, :u, :a,"
                    " 'fact', :c, :h, :at, :at)"
                ),
                {
                    "id": uuid.uuid4(),
                    "t": tenant,
                    "u": user,
                    "a": agent,
                    "c": content,
                    "h": uuid.uuid4().hex,
                    "at": T0 + timedelta(minutes=n),
                },
            )


def _search(tenant: str, user: str, query: str) -> dict[Any, float]:
    with unit_of_work(tenant, generic_plans=True) as session:
        return lexical_candidates(session, MemoryFilter(tenant, user), query, limit=10)


def _mine(key: tuple[Any, ...], tenant: str, user: str) -> bool:
    return ("tenant", tenant) in key and ("user", user) in key


def _remembered(tenant: str, user: str) -> list[float]:
    return [v for k, (v, _) in fulltext._average_lengths.items() if _mine(k, tenant, user)]


def test_the_average_length_is_remembered_for_a_minute(tenant: str) -> None:
    user = "ann"
    _remember(tenant, user, ["peanut allergy", "walnut allergy", "tea"])
    first = _search(tenant, user, "peanut allergy")
    assert first and _remembered(tenant, user) == [5 / 3]  # lexemes per memory: 2, 2, 1
    long = " ".join(f"word{n}" for n in range(60))
    _remember(tenant, user, [f"{long} {n}" for n in range(3)])
    second = _search(tenant, user, "peanut allergy")
    assert _remembered(tenant, user) == [5 / 3]
    for key, (value, at) in list(fulltext._average_lengths.items()):
        if _mine(key, tenant, user):  # a minute later
            fulltext._average_lengths[key] = (value, at - fulltext.AVERAGE_LENGTH_TTL_S - 1)
    later = _search(tenant, user, "peanut allergy")
    assert _remembered(tenant, user) == [(5 + 3 * 61) / 6]
    # Over the same rows, the short memory now scores as short beside its long neighbours.
    peanut = max(first, key=lambda m: first[m])
    assert later[peanut] > second[peanut]


def test_a_user_without_rows_is_not_remembered(tenant: str) -> None:
    assert _search(tenant, "nobody", "peanut") == {}
    assert _remembered(tenant, "nobody") == []
    _remember(tenant, "nobody", ["peanut butter"])
    assert _search(tenant, "nobody", "peanut")


def test_an_agents_private_rows_do_not_reach_anothers_statistics(tenant: str) -> None:
    """Row-level security hides an agent's private memories from other agents; the
    remembered average is kept per what the transaction sees, so it hides them too."""
    user = "bo"
    _remember(tenant, user, ["peanut allergy", "walnut allergy", "tea"])
    long = " ".join(f"word{n}" for n in range(60))
    _remember(tenant, user, [f"{long} {n}" for n in range(3)], agent="alpha")

    def search_as(agent: str | None) -> dict[Any, float]:
        with unit_of_work(tenant, agent_id=agent, generic_plans=True) as session:
            return lexical_candidates(session, MemoryFilter(tenant, user), "peanut", limit=10)

    alpha = search_as("alpha")
    beta = search_as("beta")
    fulltext._average_lengths.clear()
    assert search_as("beta") == beta  # what beta ranks does not depend on who asked first
    assert search_as("alpha") == alpha
    assert alpha != beta
