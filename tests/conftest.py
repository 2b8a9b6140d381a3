"""Test set-up: real Postgres (+pgvector) and real Redis, built by the real migrations.

With no DATABASE_URL the embedded server is used and the test database (ENGRAM_TEST_DATABASE,
default `engram_test`) is recreated for each session and migrated with `alembic upgrade head`.
Every test gets its own Redis key prefix and its own tenant id, so tests never see each other.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from hypothesis import settings as hypothesis_settings

# No per-example deadline on a shared 2-core machine; in CI the examples are derandomized, so
# a run is reproducible and a new counterexample shows up in development, not as a CI flake.
hypothesis_settings.register_profile("engram", deadline=None)
hypothesis_settings.register_profile("ci", deadline=None, derandomize=True)
hypothesis_settings.load_profile("ci" if os.environ.get("CI") else "engram")

TEST_DATABASE = os.environ.get("ENGRAM_TEST_DATABASE", "engram_test")
os.environ.setdefault("ENGRAM_DATABASE_NAME", TEST_DATABASE)
os.environ["ENGRAM_DATABASE_NAME"] = TEST_DATABASE

from app.config import Settings, get_settings  # noqa: E402


@pytest.fixture(scope="session")
def base_settings() -> Settings:
    return get_settings()


@pytest.fixture(scope="session", autouse=True)
def database(base_settings: Settings) -> Iterator[None]:
    """A freshly migrated test database for the session."""
    from app.cli.supervisor import fresh_database
    from app.db.session import dispose_engines

    services = fresh_database(base_settings)
    yield
    dispose_engines()
    if not os.environ.get("ENGRAM_TEST_KEEP_SERVICES"):
        services.stop()


@pytest.fixture
def prefix() -> str:
    return f"test-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def settings(base_settings: Settings, prefix: str) -> Settings:
    """Settings for one test: its own Redis prefix, fast reclaim, few deliveries."""
    return base_settings.model_copy(
        update={
            "redis_prefix": prefix,
            "claim_min_idle_ms": 200,
            "max_deliveries": 3,
            "consumer_block_ms": 50,
        }
    )


@pytest.fixture
def redis_client(settings: Settings) -> Iterator[object]:
    from app.redis_client import get_redis

    client = get_redis(settings)
    yield client
    keys = list(client.scan_iter(match=f"{settings.redis_prefix}:*", count=1000))
    if keys:
        client.delete(*keys)


@pytest.fixture
def tenant() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def worker_env(settings: Settings, **extra: str) -> dict[str, str]:
    """Environment for a worker subprocess that sees this test's keys and database."""
    env = {
        "ENGRAM_DATABASE_NAME": settings.database_name,
        "ENGRAM_REDIS_PREFIX": settings.redis_prefix,
        "ENGRAM_CLAIM_MIN_IDLE_MS": str(settings.claim_min_idle_ms),
        "ENGRAM_MAX_DELIVERIES": str(settings.max_deliveries),
        "ENGRAM_CONSUMER_BLOCK_MS": str(settings.consumer_block_ms),
        "ENGRAM_STREAM_PARTITIONS": str(settings.stream_partitions),
    }
    env.update(extra)
    return env
