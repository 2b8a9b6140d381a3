"""The tenant's knowledge is no user: background cognition and the user directory leave it out.

A tenant holds knowledge (stored as the memories of the reserved KNOWLEDGE_USER) beside a
user with the very same kind of history. A dream beat, a decay pass and the Hebbian apply and
weakening passes process the user's memories and leave every knowledge row, edge, mention
and replay as it was; GET /v1/users and the tenant's user count do not name knowledge.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy import text

from app.api.app import create_app
from app.config import Settings
from app.db.session import unit_of_work
from app.keys import RedisKeys
from app.layers.scopes import KNOWLEDGE_USER
from app.services import decay
from app.services.dream import run_dream
from app.services.hebbian import apply_pending, record_coactivation, weaken
from app.services.tenants import mint_key
from tests.integration.test_dream_cycle import NOW, build, memory_rows, new_history, snapshot


def _touching(tenant: str, ids: list[uuid.UUID]) -> dict[str, int]:
    """Rows of any user of the tenant that name one of these memories."""
    with unit_of_work(tenant) as db:
        params = {"ids": ids, "user": KNOWLEDGE_USER}
        return {
            "associations": db.execute(
                text(
                    "SELECT count(*) FROM conceptual.associations"
                    " WHERE memory_a = ANY(CAST(:ids AS uuid[]))"
                    " OR memory_b = ANY(CAST(:ids AS uuid[]))"
                ),
                params,
            ).scalar_one(),
            "merged_into": db.execute(
                text(
                    "SELECT count(*) FROM semantic.memories"
                    " WHERE member_ids && CAST(:ids AS uuid[])"
                ),
                params,
            ).scalar_one(),
            "replays": db.execute(
                text(
                    "SELECT count(*) FROM semantic.replays"
                    " WHERE memory_id = ANY(CAST(:ids AS uuid[])) OR user_id = :user"
                ),
                params,
            ).scalar_one(),
            "decayed": db.execute(
                text(
                    "SELECT count(*) FROM semantic.memories WHERE user_id = :user"
                    " AND (decayed_at IS NOT NULL OR archived_at IS NOT NULL)"
                ),
                params,
            ).scalar_one(),
        }


def test_dream_decay_and_hebbian_passes_leave_knowledge_alone(
    settings: Settings, redis_client: redis.Redis, tenant: str
) -> None:
    knowledge = new_history(KNOWLEDGE_USER)  # the same history a user's cycle would work on
    build(settings, tenant, knowledge)
    dave = new_history("dave")
    build(settings, tenant, dave)
    kept = snapshot(tenant, KNOWLEDGE_USER)
    facts = list(knowledge.ids.values())
    # Hebbian edges of knowledge that have not fired for days (build writes six).
    assert sum(1 for e in kept["associations"] if e[2] == "hebbian") == 6

    # Dreaming: the beat picks dave, never knowledge, and knowledge cannot be dreamt on demand.
    report = run_dream(settings, tenant_id=tenant, now=NOW)
    assert [(c.tenant_id, c.user_id) for c in report.cycles] == [(tenant, "dave")]
    assert report.cycles[0].replays and report.cycles[0].links
    dreamt = memory_rows(tenant, "dave")
    assert any(r.kind == "consolidated" for r in dreamt.values())
    assert all(r.replay_count == 1 for r in dreamt.values() if r.kind != "consolidated")
    with pytest.raises(ValueError, match="user_id"):
        run_dream(settings, tenant_id=tenant, user_id=KNOWLEDGE_USER, now=NOW)

    # Hebbian apply: a pair naming a knowledge memory is no pair of dave's.
    keys = RedisKeys.from_settings(settings)
    mixed = [dave.ids["m4"], dave.ids["m6"], knowledge.ids["m1"], knowledge.ids["m2"]]
    assert record_coactivation(redis_client, keys, tenant, "dave", mixed, "test", at=NOW) == 6
    applied = apply_pending(settings, redis_client)
    assert (applied.pairs, applied.edges) == (6, 1)

    # Decay, a year on (rows are dated by the database clock): every live memory of dave's
    # decays, some under the floor, none of knowledge's.
    tick = decay.tick_of(datetime.now(UTC) + timedelta(days=400), settings.decay_interval_s)
    rows, archived = decay.decay_pass(settings, tick, tenant_id=tenant) or (0, 0)
    assert rows == len(dreamt) and archived > 0
    decayed = memory_rows(tenant, "dave")
    assert all(decayed[i].importance < dreamt[i].importance for i in dreamt)

    # Weakening, days on: dave's stale Hebbian edges weaken, knowledge's stay.
    weakened = weaken(settings, tenant, NOW + timedelta(days=3))
    assert weakened.weakened + weakened.pruned >= 6

    assert snapshot(tenant, KNOWLEDGE_USER) == kept
    assert _touching(tenant, facts) == {
        "associations": len(kept["associations"]),  # its own, as built
        "merged_into": 0,
        "replays": 0,
        "decayed": 0,
    }


@pytest.fixture
def api(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as client:
        yield client


def test_users_listing_and_count_leave_knowledge_out(api: TestClient, tenant: str) -> None:
    headers = {"Authorization": f"Bearer {mint_key(tenant, name='directory').key}"}
    added = api.post(
        "/v1/knowledge",
        json={"memories": [{"content": "Support answers within one business day."}]},
        headers=headers,
    )
    assert added.status_code == 201, added.text
    mine = api.post(
        "/v1/memories",
        json={"user_id": "ana", "memories": [{"content": "Ana prefers email to phone calls."}]},
        headers=headers,
    )
    assert mine.status_code == 201, mine.text

    def users(**params: Any) -> list[str]:
        page = api.get("/v1/users", params=params, headers=headers)
        assert page.status_code == 200, page.text
        return [u["user_id"] for u in page.json()["users"]]

    assert users() == ["ana"]
    assert users(cursor="ana") == []
    stats = api.get("/v1/stats", headers=headers)
    assert stats.status_code == 200, stats.text
    assert stats.json()["users"] == 1
    assert stats.json()["current_memories"] == 2  # the rows are still counted as rows
