"""A running API leaves its start-up heap out of garbage collection (app/heap.py), and gives
it back when it stops."""

from __future__ import annotations

import gc

from fastapi.testclient import TestClient

from app.api.app import create_app
from app.config import Settings
from tests.integration.api_server import prefixed


def test_the_api_freezes_its_startup_heap_while_it_serves(base_settings: Settings) -> None:
    with prefixed(base_settings, "heap") as settings:
        with TestClient(create_app(settings)) as client:
            assert client.get("/healthz").status_code == 200
            assert gc.get_freeze_count() > 0
        assert gc.get_freeze_count() == 0
