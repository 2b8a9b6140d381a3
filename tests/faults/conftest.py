"""Fixtures of the fault suite: one private stack per session, settings pointed at it, and the
`fault … sent=N stored=N lost=N duplicated=N` line each scenario prints, captured or not."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import redis

from app.config import Settings
from tests.faults.stack import Stack, api, mint_key
from tests.faults.tally import Tally
from tests.faults.traffic import ApiClient


@pytest.fixture(scope="session")
def stack(base_settings: Settings) -> Iterator[Stack]:
    root = base_settings.data_dir / "faults" / uuid.uuid4().hex[:8]
    root.mkdir(parents=True)
    started = Stack.start(base_settings, root)
    yield started
    started.close()


@pytest.fixture
def fault_settings(settings: Settings, stack: Stack) -> Settings:
    """The test's settings (own Redis prefix, fast reclaim) on the private services."""
    stack.ensure_up()
    return stack.settings_for(settings)


@pytest.fixture
def private_redis(stack: Stack) -> Iterator[redis.Redis]:
    client = stack.redis.client()
    yield client
    client.close()


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    """Where the test's processes write their output (kept by pytest for a failed run)."""
    return tmp_path


@pytest.fixture
def api_client(fault_settings: Settings, logs: Path) -> Iterator[ApiClient]:
    """A real API process on the private services, and a client of a tenant of its own."""
    tenant = f"t-fault-{uuid.uuid4().hex[:8]}"
    headers = {"Authorization": f"Bearer {mint_key(fault_settings, tenant)}"}
    with (
        api(fault_settings, logs / "api.log") as base,
        httpx.Client(base_url=base, headers=headers, timeout=60) as http,
    ):
        yield ApiClient(http, tenant)


@pytest.fixture
def report(request: pytest.FixtureRequest) -> Callable[[Tally], None]:
    """Print the scenario's tally line past pytest's capture, so it shows in every run."""

    def emit(tally: Tally) -> None:
        capture = request.config.pluginmanager.getplugin("capturemanager")
        if capture is None:
            print(tally.line(), flush=True)
            return
        with capture.global_and_fixture_disabled():
            print(f"\n{tally.line()}", flush=True)

    return emit
