"""A worker whose embedding model does not fit the schema refuses to start, saying why."""

from __future__ import annotations

import os
import subprocess

import pytest

from app.cli.supervisor import worker_command
from app.config import PROJECT_ROOT, Settings
from tests.conftest import worker_env

pytestmark = pytest.mark.slow


def test_worker_with_a_mismatched_model_dimension_exits_with_the_reason(
    settings: Settings,
) -> None:
    result = subprocess.run(
        worker_command(queues=("extract",), concurrency=1, consumers=0),
        cwd=PROJECT_ROOT,
        env={**os.environ, **worker_env(settings, ENGRAM_EMBEDDING_DIM="512")},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode != 0
    assert "gives 384 dims, schema has 512 (ENGRAM_EMBEDDING_DIM)" in result.stderr
