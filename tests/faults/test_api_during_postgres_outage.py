"""The real API process while Postgres is down: every route answers 503 (with Retry-After; the
health check says "degraded") or succeeds — never 500 — including after the API-key cache has
expired; events keep being accepted while Redis takes them and the key is known, and once
Postgres is back everything accepted is stored exactly once."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import redis

from app.api.auth import CACHE_TTL_S
from app.config import Settings
from tests.faults.stack import Stack, private_env
from tests.faults.tally import Tally, pending, stored_turns, tally, wait_until_stored
from tests.faults.traffic import ApiClient
from tests.integration.helpers import turn, wait_for
from tests.integration.workers import celery_worker

USER = "patient"


def _round(
    api_client: ApiClient, start: int, refused: list[list[dict[str, Any]]]
) -> dict[str, int]:
    """Every kind of route once (route → status); refused events go to `refused`."""
    events = [turn(api_client.tenant, USER, n) for n in range(start, start + 20)]
    calls = {
        "search": ("POST", "/v1/search", {"user_id": USER, "query": "quarterly plan"}),
        "context": ("POST", "/v1/context", {"user_id": USER, "query": "quarterly plan"}),
        "remember": (
            "POST",
            "/v1/memories",
            {"user_id": USER, "memories": [{"content": "The plan is due in March."}]},
        ),
        "list": ("GET", f"/v1/memories?user_id={USER}", None),
        "memory": ("GET", f"/v1/memories/{uuid.uuid4()}", None),
        "stats": ("GET", "/v1/stats", None),
        "extraction": ("GET", f"/v1/users/{USER}/extraction", None),
        "healthz": ("GET", "/healthz", None),
    }
    if not api_client.send(events):
        refused.append(events)
    statuses = {"events": api_client.answers[-1].status}
    for name, (method, path, body) in calls.items():
        statuses[name] = api_client.call(method, path, body)
    return statuses


def test_api_during_a_postgres_outage_answers_503_and_loses_nothing(
    fault_settings: Settings,
    private_redis: redis.Redis,
    stack: Stack,
    api_client: ApiClient,
    report: Callable[[Tally], None],
) -> None:
    settings = fault_settings
    tenant = api_client.tenant
    refused: list[list[dict[str, Any]]] = []
    with celery_worker(settings, **private_env(settings)) as ingest:
        before = _round(api_client, 0, refused)
        # The worker is up and has stored what came before: the outage meets a running system.
        wait_until_stored(settings, tenant, ingest, at_least=20)
        stack.postgres.kill()
        api_client.during_fault = True
        try:
            during = _round(api_client, 100, refused)
            time.sleep(CACHE_TTL_S + 0.5)  # the key must now be looked up in the database
            later = _round(api_client, 200, refused)
        finally:
            stack.postgres.start()
        still_refused = api_client.send_until_taken(refused)
        recovered = wait_for(lambda: api_client.search(USER) == 200, timeout=60, every=0.5)
        api_client.during_fault = False
        after = _round(api_client, 300, refused)
        wait_for(
            lambda: (
                stored_turns(settings, tenant) >= len(api_client.sent)
                and pending(private_redis, settings) == 0
            ),
            timeout=90,
        )

    result = tally("api_postgres_outage", settings, tenant, api_client.sent)
    report(result)
    assert api_client.server_errors() == [], (before, during, later, after)
    assert during["healthz"] == 503 and during["search"] == 503, during
    assert later["search"] == 503, later
    assert recovered, "search did not come back after Postgres did"
    assert not still_refused, "the API never took events again after Postgres came back"
    assert set(after.values()) <= {200, 201, 202, 404}, after
    assert result.lost == 0 and result.duplicated == 0, result
    assert result.sent == result.stored == 80
