"""ENGRAM_LOG_FORMAT=json: every line a real API process, a real worker and a real consumer
batch write is one JSON object carrying the ids of the request, batch or task it belongs to.
"""

from __future__ import annotations

import io
import json
import logging
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from app.cli.supervisor import worker_command
from app.config import PROJECT_ROOT, Settings
from app.logs import JsonFormatter
from app.services.ingest import IngestService
from app.services.tenants import mint_key
from app.streams.consumer import StreamConsumer, StreamEntry
from app.streams.producer import EventProducer
from tests.conftest import worker_env
from tests.integration.helpers import turn, wait_for

JSON_ENV = {"ENGRAM_LOG_FORMAT": "json"}
REFUSED = "this turn is refused"


def json_lines(text: str) -> list[dict[str, Any]]:
    """Every line of the text, each of which must be one JSON object."""
    lines = [line for line in text.splitlines() if line.strip()]
    parsed = []
    for line in lines:
        try:
            parsed.append(json.loads(line))
        except ValueError:
            pytest.fail(f"not a JSON line: {line!r}")
    for entry in parsed:
        assert {"time", "level", "logger", "message"} <= set(entry), entry
    return parsed


@contextmanager
def process(command: list[str], settings: Settings, log: Path, *, stdout: bool) -> Iterator[None]:
    """Runs `command` with JSON logs, its stderr (and stdout, if asked) into `log`."""
    env = {**os.environ, **worker_env(settings, **JSON_ENV)}
    with log.open("wb") as sink:
        out = sink if stdout else subprocess.DEVNULL
        child = subprocess.Popen(command, cwd=PROJECT_ROOT, env=env, stdout=out, stderr=sink)
        try:
            yield
        finally:
            child.terminate()
            try:
                child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_api_lines_carry_request_tenant_and_user(
    settings: Settings, redis_client: redis.Redis, tenant: str, tmp_path: Path
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "uvicorn", "--factory", "app.api.app:create_app"]
    command += ["--host", "127.0.0.1", "--port", str(port)]
    key = mint_key(tenant).key
    headers = {"Authorization": f"Bearer {key}"}
    # uvicorn writes its access lines to stdout, the rest to log.
    log = tmp_path / "api.log"
    with process(command, settings, log, stdout=True):

        def up() -> bool:
            try:
                return httpx.get(f"{url}/healthz", timeout=5).status_code == 200
            except httpx.TransportError:
                return False

        assert wait_for(up, timeout=120, every=0.2), log.read_text()[-2000:]
        searched = httpx.post(
            f"{url}/v1/search",
            json={"user_id": "ann", "query": "where does Ann live?"},
            headers={**headers, "X-Request-ID": "req-json-1"},
            timeout=60,
        )
        assert searched.status_code == 200, searched.text
        assert searched.headers["x-request-id"] == "req-json-1"
        status = httpx.get(f"{url}/v1/users/bob/extraction", headers=headers, timeout=60)
        assert status.status_code == 200, status.text
        listed = httpx.get(f"{url}/v1/memories?user_id=cy", headers=headers, timeout=60)
        assert listed.status_code == 200, listed.text
        assert wait_for(lambda: "/v1/memories" in log.read_text(), timeout=10)
    lines = json_lines(log.read_text())
    access = [e for e in lines if e["logger"] == "uvicorn.access"]
    search = next(e for e in access if e.get("request_id") == "req-json-1")
    assert (search["tenant_id"], search["user_id"]) == (tenant, "ann")
    by_path = {e["message"].split('"')[1].split()[1]: e for e in access}
    assert by_path["/v1/users/bob/extraction"]["user_id"] == "bob"
    assert by_path["/v1/users/bob/extraction"]["tenant_id"] == tenant
    assert by_path["/v1/memories?user_id=cy"]["user_id"] == "cy"
    health = by_path["/healthz"]
    assert "tenant_id" not in health and len(health["request_id"]) == 32


class RefusesOne:
    """Ingests like the service, except that a batch holding the marked turn fails (neither
    an outage nor invalid input): the consumer splits it and counts the failure."""

    def __init__(self, service: IngestService) -> None:
        self.service = service

    def __call__(self, entries: Sequence[StreamEntry]) -> None:
        if any(REFUSED in e.fields.get("event", "") for e in entries):
            raise RuntimeError("refused by the test")
        self.service(entries)


def test_consumer_batch_lines_carry_the_batch_id(
    settings: Settings, redis_client: redis.Redis, tenant: str
) -> None:
    producer = EventProducer(redis_client, settings)
    producer.send_many([turn(tenant, "dee", n) for n in range(4)])
    producer.send(turn(tenant, "dee", 9, content=REFUSED))
    name = f"json-{uuid.uuid4().hex[:6]}"
    consumer = StreamConsumer(
        client=redis_client,
        settings=settings,
        handler=RefusesOne(IngestService(client=redis_client, settings=settings)),
        name=name,
    )
    consumer.ensure_groups()
    sink = io.StringIO()
    handler = logging.StreamHandler(sink)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("app.streams.consumer")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        assert consumer.step(block_ms=None) == 4
        logging.getLogger("app.streams.consumer").info("after the batch")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    lines = [json.loads(line) for line in sink.getvalue().splitlines()]
    inside = [e for e in lines if e["message"] != "after the batch"]
    assert any("splitting" in e["message"] for e in inside), lines
    assert any("failed (1/" in e["message"] for e in inside), lines
    assert {e["consumer"] for e in inside} == {name}
    assert len({e["batch_id"] for e in inside}) == 1
    after = next(e for e in lines if e["message"] == "after the batch")
    assert "batch_id" not in after and "consumer" not in after


@pytest.mark.slow
def test_worker_lines_are_json_with_task_ids(
    settings: Settings, redis_client: redis.Redis, tenant: str, tmp_path: Path
) -> None:
    stderr = tmp_path / "worker.log"
    command = worker_command(queues=("ingest", "extract"), concurrency=1, consumers=1)
    # Celery prints its banner on stdout (not a log line; `-q` leaves it out).
    with process(command, settings, stderr, stdout=False):
        EventProducer(redis_client, settings).send_many(
            [turn(tenant, "eve", n) for n in range(settings.extract_after_turns + 1)]
        )
        assert wait_for(
            lambda: "extract_batches" in stderr.read_text() and "succeeded" in stderr.read_text(),
            timeout=120,
            every=0.5,
        ), stderr.read_text()[-3000:]
        time.sleep(0.5)
    lines = json_lines(stderr.read_text())
    done = [e for e in lines if e["logger"] == "celery.app.trace" and "succeeded" in e["message"]]
    assert done, lines
    for entry in done:
        assert entry["task_id"] in entry["message"]
        assert entry["task_name"] in entry["message"]
    assert {e["task_name"] for e in done} >= {"engram.extract.score_turns"}
    # Lines outside any task carry no task id.
    ready = next(e for e in lines if e["message"].endswith("ready."))
    assert "task_id" not in ready


def test_cli_lines_are_json(settings: Settings) -> None:
    engram = Path(sys.executable).with_name("engram")
    done = subprocess.run(
        [str(engram), "--verbose", "migrate"],
        cwd=PROJECT_ROOT,
        env={**os.environ, **worker_env(settings, **JSON_ENV)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = json_lines(done.stderr)
    assert any(e["logger"].startswith("alembic") for e in lines), done.stderr[-2000:]
