"""Several API processes (uvicorn --workers N) answer one scrape with all their requests:
with PROMETHEUS_MULTIPROC_DIR set, each process writes its numbers there and whichever
process serves /metrics adds up every one of them, beside the deployment's own numbers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from app.config import PROJECT_ROOT, Settings
from tests.conftest import worker_env

OBSERVE = """
import sys
from app.api.metrics_route import ApiMetrics
from app.config import get_settings
metrics = ApiMetrics(get_settings())
for _ in range(int(sys.argv[1])):
    metrics.request_seconds.labels("GET", "/healthz", "200").observe(0.01)
"""

SCRAPE = """
import sys
from app.api.metrics_route import ApiMetrics
from app.config import get_settings
sys.stdout.write(ApiMetrics(get_settings()).exposition().decode())
"""


def run(script: str, env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_one_scrape_counts_every_process(settings: Settings, redis_client, tmp_path: Path) -> None:
    env = {
        **os.environ,
        **worker_env(settings),
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path),
        "ENGRAM_METRICS_TOKEN": "x" * 32,
    }
    run(OBSERVE, env, "2")
    run(OBSERVE, env, "3")
    text = run(SCRAPE, env)
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    key = (
        "engram_api_request_duration_seconds_count",
        (("method", "GET"), ("route", "/healthz"), ("status", "200")),
    )
    assert samples[key] == 5
    assert samples[("engram_metrics_source_up", (("source", "redis"),))] == 1
    assert ("engram_stream_pending", (("partition", "0"),)) in samples
