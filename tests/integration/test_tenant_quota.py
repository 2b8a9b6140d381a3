"""Each tenant's share of the API's doors (app/services/quota.py), on the real Redis, through
the app and through the SDK over HTTP: a batch of events over the share is refused whole with
429 and Retry-After, a search or context over the reads' share likewise, any other route over
the calls' share likewise, another tenant is not held back, and a client that waits is let
in."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from engram_memory_client import EngramClient, RateLimitedError
from fastapi.testclient import TestClient

from app.api.app import create_app
from app.config import Settings
from app.keys import RedisKeys
from app.services.tenants import mint_key
from tests.integration.api_server import prefixed, serve

PER_S = 20.0
BURST = 1000
READS_PER_S = 0.2  # a token every five seconds: the burst is spent well before one refills
READS_BURST = 5
CALLS_PER_S = 0.05  # a token every twenty seconds: no refill while a test walks every route
CALLS_BURST = 3
# The routes that charge a door of their own, in the route.
OWN_DOORS = {("POST", "/v1/events"), ("POST", "/v1/search"), ("POST", "/v1/context")}


@pytest.fixture(scope="module")
def quota_settings(base_settings: Settings) -> Iterator[Settings]:
    update = {
        "tenant_events_per_s": PER_S,
        "tenant_events_burst": BURST,
        "tenant_reads_per_s": READS_PER_S,
        "tenant_reads_burst": READS_BURST,
        "tenant_calls_per_s": CALLS_PER_S,
        "tenant_calls_burst": CALLS_BURST,
    }
    with prefixed(base_settings, "quota", **update) as settings:
        yield settings


@pytest.fixture(scope="module")
def api(quota_settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(quota_settings), raise_server_exceptions=False) as client:
        yield client


def _caller() -> tuple[str, dict[str, str]]:
    tenant = f"t-quota-{uuid.uuid4().hex[:8]}"
    return tenant, {"Authorization": f"Bearer {mint_key(tenant).key}"}


def _events(n: int, tag: str) -> list[dict[str, Any]]:
    return [
        {
            "type": "turn",
            "user_id": "u",
            "role": "user",
            "content": f"hello {i}",
            "external_id": f"{tag}-{i}",
        }
        for i in range(n)
    ]


def _queued(api: TestClient, settings: Settings) -> int:
    client = api.app.state.engram.redis  # type: ignore[attr-defined]
    keys = RedisKeys.from_settings(settings).partitions(settings.stream_partitions)
    return sum(int(client.xlen(key)) for key in keys)


def test_a_batch_over_the_share_is_refused_whole_and_others_go_on(
    api: TestClient, quota_settings: Settings
) -> None:
    noisy, noisy_headers = _caller()
    _, quiet_headers = _caller()
    first = api.post("/v1/events", json={"events": _events(BURST, "a")}, headers=noisy_headers)
    assert first.status_code == 202, first.text
    before = _queued(api, quota_settings)
    refused = api.post("/v1/events", json={"events": _events(60, "b")}, headers=noisy_headers)
    assert refused.status_code == 429, refused.text
    detail = refused.json()["detail"]
    # 60 events at 20 a second: up to three seconds, less what refilled since the first batch.
    assert refused.headers["Retry-After"] == str(detail["retry_after_s"])
    assert 1 <= detail["retry_after_s"] <= 3
    assert noisy in detail["message"] and "20 per second" in detail["message"]
    assert _queued(api, quota_settings) == before  # nothing of the batch was queued

    other = api.post("/v1/events", json={"events": _events(500, "c")}, headers=quiet_headers)
    assert other.status_code == 202, other.text

    time.sleep(int(refused.headers["Retry-After"]))
    again = api.post("/v1/events", json={"events": _events(60, "b")}, headers=noisy_headers)
    assert again.status_code == 202, again.text
    assert _queued(api, quota_settings) == before + 500 + 60


def test_the_bucket_is_the_tenants_key_and_expires(
    api: TestClient, quota_settings: Settings
) -> None:
    tenant, headers = _caller()
    assert api.post("/v1/events", json={"events": _events(5, "d")}, headers=headers).is_success
    client = api.app.state.engram.redis  # type: ignore[attr-defined]
    key = RedisKeys.from_settings(quota_settings).tenant_quota("events", tenant)
    assert key.endswith(f"{{{tenant}}}")
    assert 0 < client.pttl(key) <= (BURST / PER_S + 1) * 1000
    assert float(client.hget(key, "tokens")) == pytest.approx(BURST - 5, abs=1)


def test_the_schema_says_a_request_may_be_refused_for_its_rate(api: TestClient) -> None:
    paths = api.get("/openapi.json").json()["paths"]
    for path, operations in paths.items():
        if path.startswith("/v1/"):
            for method, operation in operations.items():
                assert "429" in operation["responses"], (method, path)


def test_every_other_tenant_route_takes_a_call(api: TestClient) -> None:
    """Every operation the schema lists, routes added later included, is refused once the
    tenant's calls are spent, unless it charges a door of its own (the bucket is charged
    before the request's fields are read, so placeholders do)."""
    _, spent = _caller()
    for _ in range(CALLS_BURST):
        assert api.get("/v1/stats", headers=spent).status_code == 200
    paths = api.get("/openapi.json").json()["paths"]
    operations = [
        (method.upper(), path)
        for path, methods in paths.items()
        if path.startswith("/v1/")
        for method in methods
    ]
    assert len(operations) > 20
    for method, path in operations:
        url = re.sub(r"\{[^}]+\}", "x", path)
        answer = api.request(method, url, headers=spent, json={})
        if (method, path) in OWN_DOORS:
            assert answer.status_code != 429, (method, path, answer.text)
        else:
            assert answer.status_code == 429, (method, path, answer.text)


def test_other_routes_share_the_calls_bucket(api: TestClient) -> None:
    tenant, greedy = _caller()
    _, other = _caller()
    asked = [
        ("GET", "/v1/memories?user_id=u"),
        ("GET", "/v1/users/u/extraction"),
        ("GET", "/v1/stats"),
        ("GET", f"/v1/memories/{uuid.uuid4()}"),
    ]
    answers = [api.request(method, path, headers=greedy) for method, path in asked]
    assert [a.status_code for a in answers] == [200, 200, 200, 429], [a.text for a in answers]
    refused = answers[-1]
    assert 1 <= int(refused.headers["Retry-After"]) <= 20
    assert f"tenant {tenant} is sending requests faster" in refused.json()["detail"]["message"]
    assert api.get("/v1/stats", headers=other).status_code == 200
    # Reads are another bucket.
    searched = {"user_id": "u", "query": "anything"}
    assert api.post("/v1/search", json=searched, headers=greedy).status_code == 200


def test_searches_and_contexts_share_the_reads_bucket(api: TestClient) -> None:
    _, greedy = _caller()
    _, other = _caller()
    asked = {"user_id": "u", "query": "where did we go hiking?"}
    answers = [
        api.post("/v1/search" if n % 2 else "/v1/context", json=asked, headers=greedy)
        for n in range(READS_BURST + 1)
    ]
    assert [a.status_code for a in answers] == [200] * READS_BURST + [429]
    refused = answers[-1]
    assert 1 <= int(refused.headers["Retry-After"]) <= 5
    assert "searches and context requests" in refused.json()["detail"]["message"]
    assert api.post("/v1/search", json=asked, headers=other).status_code == 200
    # The events door is another bucket.
    sent = api.post("/v1/events", json={"events": _events(3, "g")}, headers=greedy)
    assert sent.status_code == 202, sent.text


def test_the_sdk_waits_out_a_429_or_says_so(quota_settings: Settings) -> None:
    tenant, _ = _caller()
    key = mint_key(tenant).key
    with serve(quota_settings) as url:
        with EngramClient(url, key, retries=0) as impatient:
            impatient.send_events(_events(BURST, "e"))
            with pytest.raises(RateLimitedError) as refused:
                impatient.send_events(_events(60, "f"))
            assert refused.value.status == 429
            assert refused.value.retry_after_s in (1, 2, 3)
        with EngramClient(url, key, retries=3, backoff=0.05) as patient:
            accepted = patient.send_events(_events(60, "f"))
            assert accepted.accepted == 60


def test_a_rate_of_zero_is_no_limit(quota_settings: Settings, redis_client: Any) -> None:
    from app.services.quota import TenantQuota

    unlimited = quota_settings.model_copy(
        update={"tenant_events_per_s": 0.0, "tenant_reads_per_s": 0.0, "tenant_calls_per_s": 0.0}
    )
    tenant, _ = _caller()
    keys = RedisKeys.from_settings(unlimited)
    for door in ("events", "reads", "calls"):
        assert TenantQuota(redis_client, unlimited, door).take(tenant, 10**9) is None
        assert not redis_client.exists(keys.tenant_quota(door, tenant))


def test_events_the_streams_refused_are_given_back(base_settings: Settings) -> None:
    """A 503 at the streams' cap queued nothing, so it costs the tenant nothing: a client
    resending the batch is charged once."""
    update = {
        "stream_partitions": 1,
        "stream_max_len": 1000,
        "tenant_events_per_s": 0.001,  # no refill to speak of while the test runs
        "tenant_events_burst": 5000,
    }
    with (
        prefixed(base_settings, "quota-full", **update) as settings,
        TestClient(create_app(settings), raise_server_exceptions=False) as api,
    ):
        tenant, headers = _caller()
        client = api.app.state.engram.redis  # type: ignore[attr-defined]
        key = RedisKeys.from_settings(settings).tenant_quota("events", tenant)
        filled = api.post("/v1/events", json={"events": _events(1000, "h")}, headers=headers)
        assert filled.status_code == 202, filled.text
        assert float(client.hget(key, "tokens")) == pytest.approx(4000, abs=1)
        full = api.post("/v1/events", json={"events": _events(50, "i")}, headers=headers)
        assert full.status_code == 503, full.text
        assert float(client.hget(key, "tokens")) == pytest.approx(4000, abs=1)


def test_a_batch_of_memories_takes_a_call_per_memory(api: TestClient) -> None:
    """Remembering embeds every memory in the API process: a batch costs its size."""
    _, headers = _caller()
    memories = [{"content": f"fact number {n} about the garden"} for n in range(CALLS_BURST + 1)]
    whole = api.post("/v1/memories", json={"user_id": "u", "memories": memories}, headers=headers)
    assert whole.status_code == 429, whole.text
    assert api.get("/v1/stats", headers=headers).status_code == 200  # its call was given back
    fits = {"user_id": "u", "memories": memories[: CALLS_BURST - 1]}
    assert api.post("/v1/memories", json=fits, headers=headers).status_code == 201
    knowledge = {"memories": memories[:2]}
    assert api.post("/v1/knowledge", json=knowledge, headers=headers).status_code == 429
