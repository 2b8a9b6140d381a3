"""The API through real outages: its own Postgres and Redis, stopped and started again.

The API runs as a real process (uvicorn) on a private embedded Postgres (its own data folder)
and a private Redis (its own port), so stopping them touches no other test. While Postgres is
down, capture goes on for keys confirmed recently, a key revoked before the outage stays
refused, and everything else answers 503 with Retry-After — never 500; the same for Redis.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from app.config import PROJECT_ROOT, Settings
from app.db.bootstrap import database_urls
from app.db.migrate import upgrade
from app.db.session import owner_engine
from app.embedded import postgres as embedded_postgres
from app.keys import RedisKeys
from app.services.tenants import MintedKey, mint_key, revoke_key
from tests.integration.helpers import stop_process, turn
from tests.private_redis import PrivateRedis, free_port

# The API's fresh-cache TTL in this test (the launcher below sets it), so the stale path is
# reached after a short wait instead of the production 5 s.
TTL_S = 0.5

# Every /v1 route but capture, with a request that passes validation: each must be 503.
NEEDS_POSTGRES: list[tuple[str, str, dict[str, Any] | None]] = [
    ("POST", "/v1/search", {"user_id": "u1", "query": "where is the key?"}),
    ("POST", "/v1/context", {"user_id": "u1", "query": "where is the key?"}),
    ("POST", "/v1/memories", {"user_id": "u1", "memories": [{"content": "The key is blue."}]}),
    ("GET", "/v1/memories?user_id=u1", None),
    ("GET", f"/v1/memories/{uuid.UUID(int=1)}", None),
    ("POST", f"/v1/memories/{uuid.UUID(int=1)}/restore", None),
    ("GET", "/v1/entities/Marcus/graph?user_id=u1", None),
    (
        "POST",
        "/v1/procedures",
        {"user_id": "u1", "query": "book", "tool_sequence": ["a"], "success": 1, "duration_ms": 1},
    ),
    ("GET", "/v1/procedures/suggest?user_id=u1&query=book", None),
    ("DELETE", "/v1/users/u1", None),
    ("GET", "/v1/users/u1/extraction", None),
    ("POST", "/v1/users/u1/extraction/flush", None),
    ("GET", "/v1/stats", None),
    ("PATCH", f"/v1/memories/{uuid.UUID(int=1)}", {"content": "The key is red."}),
    ("DELETE", f"/v1/memories/{uuid.UUID(int=1)}", None),
    ("GET", f"/v1/memories/{uuid.UUID(int=1)}/history", None),
    ("GET", f"/v1/memories/{uuid.UUID(int=1)}/related", None),
    ("GET", f"/v1/memories/{uuid.UUID(int=1)}/importance", None),
    ("GET", f"/v1/memories/{uuid.UUID(int=1)}/entities", None),
    ("DELETE", f"/v1/users/u1/sessions/{uuid.UUID(int=1)}", None),
    ("GET", "/v1/users", None),
    ("GET", "/v1/jobs", None),
    ("POST", "/v1/knowledge", {"memories": [{"content": "Refunds take 5 days."}]}),
    ("GET", "/v1/knowledge", None),
    ("DELETE", f"/v1/knowledge/{uuid.UUID(int=1)}", None),
]


@dataclass
class Api:
    url: str
    settings: Settings
    data_dir: Path
    redis: PrivateRedis
    sent: int = 0

    def call(
        self, method: str, path: str, key: str | None, body: dict[str, Any] | None = None
    ) -> httpx.Response:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.request(method, self.url + path, json=body, headers=headers, timeout=60)

    def send(self, minted: MintedKey) -> httpx.Response:
        self.sent += 1
        event = turn(minted.tenant_id, "u1", self.sent)
        return self.call("POST", "/v1/events", minted.key, {"events": [event]})

    def stop_postgres(self) -> None:
        owner_engine(self.settings).dispose()
        assert embedded_postgres.stop(self.data_dir)

    def start_postgres(self) -> None:
        embedded_postgres.ensure_running(self.data_dir)


def _launch(port: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    launcher = (
        "import sys, uvicorn\n"
        "import app.api.auth as auth\n"
        "auth.CACHE_TTL_S = float(sys.argv[1])\n"
        "uvicorn.run('app.api.app:create_app', factory=True, host='127.0.0.1',\n"
        "            port=int(sys.argv[2]), log_level='warning')\n"
    )
    return subprocess.Popen(
        [sys.executable, "-c", launcher, str(TTL_S), str(port)],
        cwd=PROJECT_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _wait_for_health(url: str, process: subprocess.Popen[bytes]) -> None:
    for _ in range(1200):  # up to about two minutes: the embedding model loads first
        if process.poll() is not None:
            raise RuntimeError(f"the API exited with {process.returncode}")
        try:
            if httpx.get(f"{url}/healthz", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError("the API did not come up")


@pytest.fixture(scope="module")
def api(base_settings: Settings) -> Iterator[Api]:
    if base_settings.database_url:
        pytest.skip("needs the embedded Postgres to run a private server")
    with ExitStack() as cleanup:  # each step undone, in reverse, even if a later one fails
        data_dir = Path(tempfile.mkdtemp(prefix="outage-", dir=base_settings.data_dir))
        cleanup.callback(shutil.rmtree, data_dir, ignore_errors=True)
        data_dir.chmod(0o755)  # the server's OS user (group root when started by root) walks in
        private_redis = PrivateRedis(data_dir, appendfsync=None)
        cleanup.callback(private_redis.stop)
        private_redis.start()
        settings = base_settings.model_copy(
            update={
                "data_dir": data_dir,
                "database_name": "engram_outage",
                "redis_url": private_redis.url,
                "redis_prefix": f"test-outage-{uuid.uuid4().hex[:8]}",
            }
        )
        cleanup.callback(embedded_postgres.stop, data_dir)
        upgrade(database_urls(settings).owner)  # starts the private server, then migrates
        cleanup.callback(owner_engine(settings).dispose)
        port = free_port()
        env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "APP_DATABASE_URL")}
        env.update(
            {
                "ENGRAM_DATA_DIR": str(data_dir),
                "ENGRAM_DATABASE_NAME": settings.database_name,
                "REDIS_URL": private_redis.url,
                "ENGRAM_REDIS_PREFIX": settings.redis_prefix,
            }
        )
        process = _launch(port, env)
        cleanup.callback(stop_process, process)
        url = f"http://127.0.0.1:{port}"
        _wait_for_health(url, process)
        yield Api(url=url, settings=settings, data_dir=data_dir, redis=private_redis)


def _key(api: Api, label: str) -> MintedKey:
    return mint_key(f"t-{label}-{uuid.uuid4().hex[:8]}", settings=api.settings)


def _queued(api: Api) -> int:
    client = redis.Redis.from_url(api.redis.url)
    keys = RedisKeys.from_settings(api.settings)
    return sum(int(client.xlen(k)) for k in keys.partitions(api.settings.stream_partitions))


def _is_503_with_retry_after(response: httpx.Response) -> bool:
    return response.status_code == 503 and int(response.headers.get("Retry-After", "0")) > 0


def test_every_v1_route_is_covered_here(api: Api) -> None:
    paths = api.call("GET", "/openapi.json", None).json()["paths"]
    covered = {path.split("?")[0] for _, path, _ in NEEDS_POSTGRES} | {"/v1/events"}
    templates = {p for p in paths if p.startswith("/v1/")}
    assert len(templates) == len(covered), sorted(templates)


def test_capture_rides_out_a_postgres_outage_and_the_rest_answers_503(api: Api) -> None:
    seen, revoked, unseen = _key(api, "seen"), _key(api, "revoked"), _key(api, "unseen")
    assert api.send(seen).status_code == 202
    assert api.send(revoked).status_code == 202
    assert revoke_key(revoked.id, settings=api.settings)

    api.stop_postgres()
    try:
        time.sleep(TTL_S + 0.2)  # every cached answer is past its TTL: Postgres is asked
        before = _queued(api)
        accepted = api.send(seen)
        assert accepted.status_code == 202, accepted.text
        assert _queued(api) == before + 1

        assert api.send(revoked).status_code == 401
        never_seen = api.send(unseen)
        assert _is_503_with_retry_after(never_seen), never_seen.text
        assert never_seen.json()["detail"]["unavailable"] == ["database"]

        for method, path, body in NEEDS_POSTGRES:
            response = api.call(method, path, seen.key, body)
            assert _is_503_with_retry_after(response), (path, response.status_code, response.text)
            assert "postgres" not in response.text.lower()  # no driver message, no address

        health = api.call("GET", "/healthz", None)
        assert _is_503_with_retry_after(health)
        assert health.json()["unavailable"] == ["database"]
        assert health.json()["checks"]["redis"] == "ok"
    finally:
        api.start_postgres()

    health = api.call("GET", "/healthz", None)
    assert health.status_code == 200, health.text
    assert api.send(unseen).status_code == 202
    assert api.call("GET", "/v1/stats", seen.key).status_code == 200
    search = {"user_id": "u1", "query": "hello"}
    assert api.call("POST", "/v1/search", seen.key, search).status_code == 200
    assert api.send(revoked).status_code == 401


def test_a_redis_outage_is_503_with_retry_after_and_passes(api: Api) -> None:
    caller = _key(api, "redis")
    assert api.send(caller).status_code == 202

    api.redis.stop()
    try:
        refused = api.send(caller)
        assert _is_503_with_retry_after(refused), refused.text
        health = api.call("GET", "/healthz", None)
        assert _is_503_with_retry_after(health)
        assert health.json()["unavailable"] == ["redis"]
        assert health.json()["checks"]["database"] == "ok"
        for method, path, body in NEEDS_POSTGRES:
            response = api.call(method, path, caller.key, body)
            assert response.status_code < 500 or _is_503_with_retry_after(response), (
                path,
                response.status_code,
                response.text,
            )
    finally:
        api.redis.start()

    assert api.call("GET", "/healthz", None).status_code == 200
    assert api.send(caller).status_code == 202
