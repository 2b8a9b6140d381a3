"""Reads survive any stored row: rows the old door let in (times psycopg cannot read back,
JSON nested past any encoder's recursion) are written at the revision before the repair, and
after `alembic upgrade head` the real API reads them with 200s.

A throwaway database of its own (named after this run's test database, so parallel runs do
not meet) is migrated to 4d7a1c9e8b20, filled as the owner, migrated to head, and then served
by the FastAPI app pointed at it through the process settings.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Connection, create_engine, text

from app.config import Settings, get_settings
from app.db.bootstrap import drop_database, resolve_urls
from app.db.migrate import upgrade
from app.db.session import dispose_engines

BEFORE_REPAIR = "4d7a1c9e8b20"
EARLIEST = "1970-01-01T00:00:00+00:00"
LATEST = "2200-01-01T00:00:00+00:00"
TENANT = "t-repair"
USER = "u-repair"
BEFORE_YEAR_ONE = "0001-01-01 00:00:00+05:00"  # 1 BC once in UTC
AFTER_YEAR_9999 = "9999-12-31 23:59:59-05:00"  # year 10000 once in UTC


def nested_json(depth: int) -> str:
    """JSON text of an object nested `depth` levels (built as text: the stdlib's encoder
    could not write the deepest ones)."""
    opening, closing = '{"top":', "}"
    for level in range(depth - 1):
        if level % 2:
            opening, closing = opening + "[", "]" + closing
        else:
            opening, closing = opening + '{"n":', "}" + closing
    return opening + '"leaf"' + closing


@pytest.fixture
def scratch(base_settings: Settings) -> Iterator[Settings]:
    if base_settings.database_url:
        pytest.skip("needs the embedded server to create a scratch database")
    name = f"{base_settings.database_name}_read_repair"
    drop_database(name, base_settings)
    yield base_settings.model_copy(update={"database_name": name})
    dispose_engines()
    drop_database(name, base_settings)


@pytest.fixture
def served(scratch: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    """The process settings pointed at the scratch database (the API's services read them)."""
    monkeypatch.setitem(os.environ, "ENGRAM_DATABASE_NAME", scratch.database_name)
    monkeypatch.setitem(os.environ, "ENGRAM_REDIS_PREFIX", f"test-repair-{uuid.uuid4().hex[:8]}")
    get_settings.cache_clear()
    settings = get_settings()
    yield settings
    monkeypatch.undo()
    get_settings.cache_clear()
    from app.redis_client import get_redis

    client = get_redis(settings)
    keys = list(client.scan_iter(match=f"{settings.redis_prefix}:*", count=1000))
    if keys:
        client.delete(*keys)


def _insert_broken_rows(conn: Connection) -> dict[str, uuid.UUID]:
    ids = {name: uuid.uuid4() for name in ("session", "turn", "late", "event", "memory", "kept")}
    params: dict[str, Any] = {
        **{k: str(v) for k, v in ids.items()},
        "t": TENANT,
        "u": USER,
        "bc": BEFORE_YEAR_ONE,
        "late_at": AFTER_YEAR_9999,
        "deep40": nested_json(40),
        "deep3000": nested_json(3000),
        "deep32": nested_json(32),
    }
    statements = [
        "INSERT INTO episodic.sessions (id, tenant_id, user_id, started_at, last_turn_at)"
        " VALUES (:session, :t, :u, CAST(:bc AS timestamptz), CAST(:late_at AS timestamptz))",
        "INSERT INTO episodic.turns (id, tenant_id, user_id, session_id, external_id, role,"
        " content, channel, occurred_at, token_count, metadata) VALUES (:turn, :t, :u,"
        " :session, 'm-1', 'user', 'The launch moved to Thursday', 'web',"
        " CAST(:bc AS timestamptz), 6, CAST(:deep40 AS jsonb))",
        "INSERT INTO episodic.turns (id, tenant_id, user_id, session_id, external_id, role,"
        " content, channel, occurred_at, token_count, metadata) VALUES (:late, :t, :u,"
        " :session, 'm-2', 'assistant', 'Thursday launch noted', 'web',"
        " CAST(:late_at AS timestamptz), 4, CAST(:deep3000 AS jsonb))",
        "INSERT INTO episodic.events (id, tenant_id, user_id, type, known_type, occurred_at,"
        " payload) VALUES (:event, :t, :u, 'tool_run', true, CAST(:bc AS timestamptz),"
        " jsonb_build_object('tool', 'grep', 'arguments', CAST(:deep40 AS jsonb)))",
        "INSERT INTO semantic.memories (id, tenant_id, user_id, kind, content, occurred_at,"
        " valid_from, content_hash, metadata) VALUES (:memory, :t, :u, 'fact',"
        " 'The launch moved to Thursday', CAST(:late_at AS timestamptz),"
        " CAST(:late_at AS timestamptz), 'h1', CAST(:deep3000 AS jsonb))",
        "INSERT INTO semantic.memories (id, tenant_id, user_id, kind, content, occurred_at,"
        " valid_from, content_hash, metadata) VALUES (:kept, :t, :u, 'fact',"
        " 'Launch party is at the office', '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z',"
        " 'h2', CAST(:deep32 AS jsonb))",
        "INSERT INTO meta.procedures (tenant_id, user_id, query_pattern, pattern_hash,"
        " tool_sequence, sequence_hash, id) VALUES (:t, :u, 'find the launch', 'p1',"
        " jsonb_build_array('search', CAST(:deep3000 AS jsonb)), 's1', gen_random_uuid())",
    ]
    for statement in statements:
        conn.execute(text(statement), params)
    return ids


def test_rows_written_before_the_repair_are_readable_after_it(
    scratch: Settings, served: Settings
) -> None:
    owner_url = resolve_urls(scratch).owner
    upgrade(owner_url, BEFORE_REPAIR)
    owner = create_engine(owner_url)
    with owner.begin() as conn:
        ids = _insert_broken_rows(conn)
    upgrade(owner_url)

    with owner.connect() as conn:
        times = conn.execute(
            text(
                "SELECT min(t), max(t) FROM ("
                " SELECT occurred_at AS t FROM episodic.turns UNION ALL"
                " SELECT occurred_at FROM episodic.events UNION ALL"
                " SELECT started_at FROM episodic.sessions UNION ALL"
                " SELECT last_turn_at FROM episodic.sessions UNION ALL"
                " SELECT occurred_at FROM semantic.memories UNION ALL"
                " SELECT valid_from FROM semantic.memories) AS all_times"
            )
        ).one()
        assert [t.isoformat() for t in times] == [EARLIEST, LATEST]
        kept = conn.execute(
            text(
                "SELECT occurred_at, valid_to, metadata::text FROM semantic.memories WHERE id = :k"
            ),
            {"k": str(ids["kept"])},
        ).one()
        assert kept[0].isoformat() == "2026-01-01T00:00:00+00:00" and kept[1] is None
        assert json.loads(kept[2]) == json.loads(nested_json(32))  # at the limit: untouched
        payload = conn.execute(
            text("SELECT payload FROM episodic.events WHERE id = :e"), {"e": str(ids["event"])}
        ).scalar_one()
        assert payload["tool"] == "grep" and set(payload["arguments"]) == {"_repaired"}
        steps = conn.execute(text("SELECT tool_sequence FROM meta.procedures")).scalar_one()
        assert steps[0] == "search" and set(steps[1]) == {"_repaired"}
    owner.dispose()

    from app.api.app import create_app
    from app.services.tenants import mint_key

    headers = {"Authorization": f"Bearer {mint_key(TENANT, name='repair').key}"}
    with TestClient(create_app(served), raise_server_exceptions=False) as api:
        listed = api.get(f"/v1/memories?user_id={USER}", headers=headers)
        assert listed.status_code == 200, listed.text[:500]
        by_id = {m["id"]: m for m in listed.json()["memories"]}
        assert set(by_id[str(ids["memory"])]["metadata"]) == {"_repaired"}
        assert by_id[str(ids["memory"])]["occurred_at"].startswith("2200-01-01")
        for response in (
            api.get(f"/v1/memories/{ids['memory']}?recall=3", headers=headers),
            api.post("/v1/search", json={"user_id": USER, "query": "launch"}, headers=headers),
            api.post("/v1/context", json={"user_id": USER, "query": "launch"}, headers=headers),
            api.get(f"/v1/users/{USER}/extraction", headers=headers),
        ):
            assert response.status_code == 200, response.text[:500]
        hits = api.post(
            "/v1/search", json={"user_id": USER, "query": "launch Thursday"}, headers=headers
        ).json()
        assert hits["hits"], hits
