"""A search with `record: false` (the console's) is a look, not the user's retrieval.

Through the SDK against the real API: such a search leaves the access buffer, the Hebbian
co-activation buffer and (after the apply) the access counts exactly as they were, while the
same search by default records the access once; the request model documents the flag.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest
import redis
from engram_memory_client import EngramClient
from sqlalchemy import text

from app.config import Settings
from app.db.session import unit_of_work
from app.keys import RedisKeys
from app.services import hebbian
from app.services.access import apply_pending
from app.services.tenants import mint_key
from tests.integration.api_server import serve

USER = "rosa"
QUERY = "what does Rosa grow on the balcony?"


@pytest.fixture
def url(settings: Settings) -> Iterator[str]:
    with serve(settings) as base:
        yield base


def _accesses(tenant: str, ids: list[uuid.UUID]) -> dict[uuid.UUID, tuple[int, bool]]:
    """Each memory's access count, and whether an access restarted its decay clock."""
    with unit_of_work(tenant) as session:
        rows = session.execute(
            text(
                "SELECT id, access_count, last_accessed_at IS NOT NULL FROM semantic.memories"
                " WHERE id = ANY(CAST(:ids AS uuid[]))"
            ),
            {"ids": ids},
        ).all()
    return {r[0]: (int(r[1]), bool(r[2])) for r in rows}


def test_a_search_with_record_false_changes_nothing_and_the_default_records(
    url: str, settings: Settings, redis_client: redis.Redis, tenant: str
) -> None:
    keys = RedisKeys.from_settings(settings)
    access_buffer = keys.access_buffer(tenant, USER)
    pairs_buffer = hebbian.buffer_key(keys, tenant, USER)
    with EngramClient(url, mint_key(tenant, name="console").key, timeout=60) as engram:
        ids = [
            m.id
            for m in engram.remember(
                USER,
                [
                    "Rosa grows tomatoes and basil on her balcony.",
                    "Rosa waters the balcony plants every morning.",
                    "Rosa's bike has a flat tyre.",
                ],
            )
        ]
        untouched = _accesses(tenant, ids)
        assert untouched == dict.fromkeys(ids, (0, False))  # never accessed

        looked = engram.search(USER, QUERY, unit="memories", record=False)
        assert {h.id for h in looked.hits} & set(ids)
        assert redis_client.llen(access_buffer) == 0
        assert redis_client.llen(pairs_buffer) == 0
        assert not redis_client.sismember(keys.access_pending(), f"{tenant}|{USER}")
        assert apply_pending(settings, redis_client) == 0
        assert _accesses(tenant, ids) == untouched

        found = engram.search(USER, QUERY, unit="memories")
        returned = [h.id for h in found.hits if h.layer == "memory"]
        assert len(returned) >= 2
        assert redis_client.llen(access_buffer) == 1
        assert redis_client.llen(pairs_buffer) == 1
        assert apply_pending(settings, redis_client) == 1
        accessed = _accesses(tenant, ids)
        assert {i for i, state in accessed.items() if state == (1, True)} == set(returned)

    schema = httpx.get(f"{url}/openapi.json", timeout=30).json()
    record = schema["components"]["schemas"]["SearchRequest"]["properties"]["record"]
    assert record["default"] is True and "decay" in record["description"]
    bad = httpx.post(
        f"{url}/v1/search",
        json={"user_id": USER, "query": QUERY, "record": [1]},
        headers={"Authorization": f"Bearer {mint_key(tenant, name='bad').key}"},
        timeout=30,
    )
    assert bad.status_code == 422 and "record" in bad.text
