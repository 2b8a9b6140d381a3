"""`engram demo` (what `make demo` runs) reads as a demo: its tables without a worker's banner,
warnings or task log between them, exit 0, and no live API key left behind."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from app.cli.sample import TENANT
from app.config import PROJECT_ROOT, Settings
from app.redis_client import get_redis
from app.services.tenants import list_keys

CELERY_NOISE = ("celery@", "[tasks]", "[queues]", "SecurityWarning", "Task engram.", "INFO/")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_demo_shows_its_tables_alone_and_revokes_its_key(base_settings: Settings) -> None:
    prefix = f"test-demo-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "ENGRAM_DATABASE_NAME": base_settings.database_name,
        "ENGRAM_REDIS_PREFIX": prefix,
    }
    log = base_settings.data_dir / "demo-worker.log"
    logged_before = log.stat().st_size if log.exists() else 0
    engram = Path(sys.executable).parent / "engram"
    try:
        done = subprocess.run(
            [str(engram), "demo"],
            cwd=PROJECT_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=540,
            check=False,
        )
    finally:
        client = get_redis(base_settings.model_copy(update={"redis_prefix": prefix}))
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        if keys:
            client.delete(*keys)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    for title in ("L2 episodic turns", "L3 semantic memories", "search: ", "context for "):
        assert title in output, title
    noise = [line for line in output.splitlines() if any(n in line for n in CELERY_NOISE)]
    assert not noise, noise[:10]
    assert "warning" not in output.lower(), output[-4000:]
    assert str(log) in output
    assert "celery@" in log.read_text(errors="replace")[logged_before:]  # the banner went there
    demo_keys = [k for k in list_keys(TENANT) if k.name == "demo"]
    assert demo_keys, "the demo minted no key"
    assert all(k.revoked_at is not None for k in demo_keys)
