"""Editing a memory writes a new version and keeps the old one in its history; deleting one
removes it (every version) from every layer; related memories come strongest first.

Real Postgres, real Redis, the local embedding model, the API through its test client.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy import text

from app.api.app import create_app
from app.config import Settings
from app.db.session import owner_engine, unit_of_work
from app.keys import RedisKeys
from app.layers.conceptual.hebbian import Coactivation, apply_coactivations
from app.services.access import record_retrieval
from app.services.tenants import mint_key
from tests.integration.api_server import prefixed


def uid(label: str) -> str:
    return f"{label}-{uuid.uuid4().hex[:8]}"


class Caller:
    def __init__(self) -> None:
        self.tenant = f"t-edit-{uuid.uuid4().hex[:10]}"
        self.headers = {"Authorization": f"Bearer {mint_key(self.tenant, name='edit tests').key}"}


@pytest.fixture(scope="module")
def api_settings(base_settings: Settings) -> Iterator[Settings]:
    with prefixed(base_settings, "edit") as settings:
        yield settings


@pytest.fixture(scope="module")
def client(api_settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(api_settings)) as test_client:
        yield test_client


@pytest.fixture(scope="module")
def rds(client: TestClient) -> redis.Redis:
    return client.app.state.engram.redis  # type: ignore[attr-defined,no-any-return]


@pytest.fixture(scope="module")
def alice(client: TestClient) -> Caller:
    return Caller()


@pytest.fixture(scope="module")
def bob(client: TestClient) -> Caller:
    return Caller()


def remember(client: TestClient, caller: Caller, user: str, *contents: str) -> list[str]:
    response = client.post(
        "/v1/memories",
        json={"user_id": user, "memories": [{"content": c} for c in contents]},
        headers=caller.headers,
    )
    assert response.status_code == 201, response.text
    return [m["id"] for m in response.json()["memories"]]


def patch(client: TestClient, caller: Caller, memory_id: str, **body: Any) -> Any:
    return client.patch(f"/v1/memories/{memory_id}", json=body, headers=caller.headers)


def search_ids(client: TestClient, caller: Caller, user: str, query: str) -> list[str]:
    response = client.post(
        "/v1/search",
        json={"user_id": user, "query": query, "unit": "memories", "limit": 20},
        headers=caller.headers,
    )
    assert response.status_code == 200, response.text
    return [h["id"] for h in response.json()["hits"]]


def owner_rows(sql: str, **params: Any) -> list[Any]:
    with owner_engine().connect() as connection:
        return list(connection.execute(text(sql), params))


# -- editing -----------------------------------------------------------------------------


def test_edit_writes_a_new_version_found_by_its_new_wording(
    client: TestClient, alice: Caller
) -> None:
    user = uid("editor")
    (old,) = remember(client, alice, user, "My favourite colour is turquoise blue.")
    response = patch(
        client, alice, old, user_id=user, content="My favourite colour is crimson red."
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["status"] == "updated"
    assert body["previous_id"] == old
    new = body["memory"]["id"]
    assert new != old
    assert body["memory"]["content"] == "My favourite colour is crimson red."
    assert body["memory"]["valid_to"] is None

    found = search_ids(client, alice, user, "crimson red")
    assert new in found and old not in found
    assert old not in search_ids(client, alice, user, "turquoise")
    listed = client.get("/v1/memories", params={"user_id": user}, headers=alice.headers).json()
    assert [m["id"] for m in listed["memories"]] == [new]

    # The old version is still readable, closed and pointing at its successor.
    before = client.get(f"/v1/memories/{old}", headers=alice.headers).json()
    assert before["content"] == "My favourite colour is turquoise blue."
    assert before["valid_to"] is not None and before["superseded_by"] == new
    # The full-text index holds the new wording.
    (row,) = owner_rows(
        "SELECT search_tsv @@ plainto_tsquery('english', 'crimson') AS hit,"
        " embedding IS NOT NULL AS embedded, extractor FROM semantic.memories WHERE id = :id",
        id=new,
    )
    assert row.hit and row.embedded and row.extractor == "edit"


def test_repeated_edit_writes_nothing_and_replaced_versions_conflict(
    client: TestClient, alice: Caller
) -> None:
    user = uid("repeat")
    (old,) = remember(client, alice, user, "The team standup is at nine in the morning.")
    first = patch(client, alice, old, content="The team standup is at ten in the morning.")
    assert first.status_code == 200
    new = first.json()["memory"]["id"]
    # The same edit again, to the old id (a retry) or to the new one: nothing is written.
    for target in (old, new):
        again = patch(client, alice, target, content="The team standup is at ten in the morning.")
        assert again.status_code == 200, again.text
        assert again.json()["status"] == "unchanged"
        assert again.json()["memory"]["id"] == new
    count = owner_rows("SELECT count(*) AS n FROM semantic.memories WHERE user_id = :u", u=user)
    assert count[0].n == 2
    # A different edit of the replaced version: 409 naming the current one.
    conflict = patch(client, alice, old, content="The team standup is at eleven.")
    assert conflict.status_code == 409
    assert conflict.json()["detail"]["current_id"] == new


def test_history_walks_three_versions_from_any_of_them(client: TestClient, alice: Caller) -> None:
    user = uid("history")
    (v1,) = remember(client, alice, user, "The backup server lives in rack one.")
    v2 = patch(client, alice, v1, content="The backup server lives in rack two.").json()["memory"]
    v3 = patch(
        client, alice, v2["id"], content="The backup server lives in rack three.", importance=0.9
    ).json()["memory"]
    assert v3["importance"] == pytest.approx(0.9)
    for given in (v1, v2["id"], v3["id"]):
        response = client.get(f"/v1/memories/{given}/history", headers=alice.headers)
        assert response.status_code == 200, response.text
        history = response.json()
        assert history["current_id"] == v3["id"]
        versions = history["versions"]
        assert [v["id"] for v in versions] == [v1, v2["id"], v3["id"]]
        assert [v["version"] for v in versions] == [1, 2, 3]
        assert [v["content"].split()[-1] for v in versions] == ["one.", "two.", "three."]
        assert versions[0]["supersedes"] is None
        assert versions[1]["supersedes"] == v1 and versions[2]["supersedes"] == v2["id"]
        assert versions[0]["superseded_by"] == v2["id"]
        assert versions[0]["valid_to"] == versions[1]["valid_from"]
        assert versions[2]["valid_to"] is None


def test_edit_back_to_an_earlier_wording_and_kind_changes(
    client: TestClient, alice: Caller
) -> None:
    user = uid("back")
    (v1,) = remember(client, alice, user, "I drink my coffee black.")
    v2 = patch(client, alice, v1, content="I drink my coffee with oat milk.").json()["memory"]
    back = patch(client, alice, v2["id"], content="I drink my coffee black.", kind="preference")
    assert back.status_code == 200, back.text
    v3 = back.json()["memory"]
    assert v3["kind"] == "preference" and "preference" in v3["tags"] and "fact" not in v3["tags"]
    assert search_ids(client, alice, user, "coffee black") == [v3["id"]]


def test_edit_to_what_another_memory_says_is_a_conflict(client: TestClient, alice: Caller) -> None:
    user = uid("dup")
    first, second = remember(
        client, alice, user, "The boat is moored in Porto.", "My bike is a red road bike."
    )
    response = patch(client, alice, second, content="the boat is moored in  Porto.")
    assert response.status_code == 409
    assert response.json()["detail"]["duplicate_of"] == first


def test_edit_moves_entities_and_associations_to_the_new_version(
    client: TestClient, alice: Caller
) -> None:
    user = uid("graph")
    old, other = remember(
        client, alice, user, "Alice works at Initech.", "The fridge needs new filters."
    )
    with unit_of_work(alice.tenant) as session:
        apply_coactivations(
            session, alice.tenant, user, [Coactivation(old, other, 3, _now())], rate=0.2
        )
    new = patch(client, alice, old, content="Alice works at Globex.").json()["memory"]["id"]
    names = {
        r.name
        for r in owner_rows(
            "SELECT e.name FROM conceptual.mentions AS m JOIN conceptual.entities AS e"
            " ON e.id = m.entity_id WHERE m.memory_id = :id",
            id=new,
        )
    }
    assert "Globex" in names
    assert not owner_rows("SELECT 1 FROM conceptual.mentions WHERE memory_id = :id", id=old)
    assert not owner_rows(
        "SELECT 1 FROM conceptual.entities WHERE user_id = :u AND name = 'Initech'", u=user
    )
    edges = owner_rows(
        "SELECT memory_a, memory_b FROM conceptual.associations WHERE user_id = :u", u=user
    )
    assert {str(e.memory_a) for e in edges} | {str(e.memory_b) for e in edges} == {new, other}


def test_edit_bad_input_names_the_field(client: TestClient, alice: Caller, bob: Caller) -> None:
    user = uid("bad")
    (memory,) = remember(client, alice, user, "The office plant is a fern.")
    for body, field in (
        ({}, "content"),
        ({"content": ""}, "content"),
        ({"content": 42}, "content"),
        ({"content": "ok", "importance": "high"}, "importance"),
        ({"content": "ok", "importance": 2}, "importance"),
        ({"content": "ok", "kind": "gossip"}, "kind"),
        ({"content": "ok", "surprise": 1}, "surprise"),
        ({"content": "ok", "metadata": [1]}, "metadata"),
    ):
        response = patch(client, alice, memory, **body)
        assert response.status_code == 422, (body, response.text)
        assert any(field in f for f in response.json()["detail"]["fields"]), response.json()
    bad_id = client.patch("/v1/memories/not-a-uuid", json={"content": "x"}, headers=alice.headers)
    assert bad_id.status_code == 422
    assert patch(client, alice, str(uuid.uuid4()), content="x").status_code == 404
    assert patch(client, bob, memory, content="stolen").status_code == 404
    assert patch(client, alice, memory, content="x", user_id="someone-else").status_code == 404
    unchanged = client.get(f"/v1/memories/{memory}", headers=alice.headers).json()
    assert unchanged["content"] == "The office plant is a fern." and unchanged["valid_to"] is None


# -- deleting -----------------------------------------------------------------------------


def _now() -> Any:
    from datetime import UTC, datetime

    return datetime.now(UTC)


def test_delete_removes_every_version_from_every_layer(
    client: TestClient, alice: Caller, rds: redis.Redis, api_settings: Settings
) -> None:
    user = uid("deleter")
    old, other = remember(
        client, alice, user, "Carol manages the Zurich office.", "The printer jams on Mondays."
    )
    new = patch(client, alice, old, content="Carol manages the Geneva office.").json()["memory"]
    new_id = new["id"]
    with unit_of_work(alice.tenant) as session:
        apply_coactivations(
            session, alice.tenant, user, [Coactivation(new_id, other, 2, _now())], rate=0.2
        )
    # Searches leave buffered accesses and co-activations; a prefetch entry holds content.
    record_retrieval(
        rds,
        api_settings,
        tenant_id=alice.tenant,
        user_id=user,
        channel=None,
        query="who manages geneva",
        memory_ids=[uuid.UUID(new_id), uuid.UUID(other)],
        scores=[0.9, 0.5],
        source="search",
    )
    keys = RedisKeys.from_settings(api_settings)
    prefetch_key = keys.prefetch(alice.tenant, user, "web")
    rds.set(prefetch_key, json.dumps({"memories": [{"id": new_id}]}), ex=60)

    response = client.delete(f"/v1/memories/{old}", params={"user_id": user}, headers=alice.headers)
    assert response.status_code == 200, response.text
    report = response.json()
    assert sorted(report["ids"]) == sorted([old, new_id])
    assert report["rows"]["memories"] == 2
    assert report["rows"]["associations"] == 1
    assert report["redis_keys"] >= 1

    gone = [old, new_id]
    for sql in (
        "SELECT 1 FROM semantic.memories WHERE id = ANY(CAST(:ids AS uuid[]))",
        "SELECT 1 FROM conceptual.mentions WHERE memory_id = ANY(CAST(:ids AS uuid[]))",
        "SELECT 1 FROM conceptual.relations WHERE memory_id = ANY(CAST(:ids AS uuid[]))",
        "SELECT 1 FROM conceptual.associations WHERE memory_a = ANY(CAST(:ids AS uuid[]))"
        " OR memory_b = ANY(CAST(:ids AS uuid[]))",
    ):
        assert not owner_rows(sql, ids=gone), sql
    assert not owner_rows(
        "SELECT 1 FROM conceptual.entities WHERE user_id = :u AND name IN ('Carol', 'Geneva')",
        u=user,
    )
    assert rds.exists(prefetch_key) == 0
    buffered = [
        *rds.lrange(keys.access_buffer(alice.tenant, user), 0, -1),
        *rds.lrange(f"{keys.prefix}:hebbian:{{{alice.tenant}|{user}}}", 0, -1),
    ]
    assert all(new_id.encode() not in item for item in buffered)
    assert any(other.encode() in item for item in buffered)  # the rest of the record stays
    # Gone for its owner's reads too, and the other memory is untouched.
    assert client.get(f"/v1/memories/{new_id}", headers=alice.headers).status_code == 404
    assert client.get(f"/v1/memories/{other}", headers=alice.headers).status_code == 200
    again = client.delete(f"/v1/memories/{old}", headers=alice.headers)
    assert again.status_code == 404


def test_delete_refuses_unknown_and_foreign_ids(
    client: TestClient, alice: Caller, bob: Caller
) -> None:
    user = uid("keep")
    (memory,) = remember(client, alice, user, "The spare key is under the blue pot.")
    assert client.delete(f"/v1/memories/{uuid.uuid4()}", headers=alice.headers).status_code == 404
    assert client.delete(f"/v1/memories/{memory}", headers=bob.headers).status_code == 404
    other_user = client.delete(
        f"/v1/memories/{memory}", params={"user_id": "not-the-owner"}, headers=alice.headers
    )
    assert other_user.status_code == 404
    bad = client.delete("/v1/memories/123", headers=alice.headers)
    assert bad.status_code == 422
    bad_flag = client.delete(
        f"/v1/memories/{memory}", params={"with_trace": "perhaps"}, headers=alice.headers
    )
    assert bad_flag.status_code == 422
    assert client.get(f"/v1/memories/{memory}", headers=alice.headers).status_code == 200


def test_history_and_related_refuse_unknown_and_foreign_ids(
    client: TestClient, alice: Caller, bob: Caller
) -> None:
    user = uid("lookup")
    (memory,) = remember(client, alice, user, "The kettle is descaled monthly.")
    for suffix in ("history", "related"):
        path = f"/v1/memories/{memory}/{suffix}"
        assert client.get(path, headers=alice.headers).status_code == 200
        assert client.get(path, headers=bob.headers).status_code == 404
        assert (
            client.get(path, params={"user_id": "x-other"}, headers=alice.headers).status_code
            == 404
        )
        unknown = f"/v1/memories/{uuid.uuid4()}/{suffix}"
        assert client.get(unknown, headers=alice.headers).status_code == 404
    bad_limit = client.get(
        f"/v1/memories/{memory}/related", params={"limit": 0}, headers=alice.headers
    )
    assert bad_limit.status_code == 422


# -- related ------------------------------------------------------------------------------


def test_related_memories_strongest_first(client: TestClient, alice: Caller) -> None:
    user = uid("related")
    seed, strong, weak, entity_only, unrelated = remember(
        client,
        alice,
        user,
        "Dana works at Acme.",
        "The launch budget is forty thousand euros.",
        "The venue has a projector.",
        "Dana prefers morning meetings.",
        "Gravel paths drain well after rain.",
    )
    with unit_of_work(alice.tenant) as session:
        apply_coactivations(
            session,
            alice.tenant,
            user,
            [Coactivation(seed, strong, 8, _now()), Coactivation(seed, weak, 1, _now())],
            rate=0.2,
        )
    response = client.get(
        f"/v1/memories/{seed}/related", params={"user_id": user}, headers=alice.headers
    )
    assert response.status_code == 200, response.text
    related = response.json()["related"]
    ids = [r["id"] for r in related]
    assert ids[0] == strong
    assert weak in ids and entity_only in ids and unrelated not in ids and seed not in ids
    scores = [r["score"] for r in related]
    assert scores == sorted(scores, reverse=True)
    by_id = {r["id"]: r for r in related}
    assert any("dana" in name.lower() for name in by_id[entity_only]["shared_entities"])
    assert by_id[strong]["association_weight"] > by_id[weak]["association_weight"] > 0
    limited = client.get(
        f"/v1/memories/{seed}/related", params={"limit": 1}, headers=alice.headers
    ).json()
    assert [r["id"] for r in limited["related"]] == [strong]
