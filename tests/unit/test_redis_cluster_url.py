"""How REDIS_URL names a Redis Cluster, and the start-up refusal without a separate broker."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.config import Settings
from app.redis_client import is_cluster_url


@pytest.mark.parametrize(
    ("url", "cluster"),
    [
        ("redis+cluster://10.0.0.1:7000", True),
        ("rediss+cluster://cache:7000", True),
        ("redis://127.0.0.1:6379/0", False),
        ("rediss://cache:6380/0", False),
        (None, False),
    ],
)
def test_only_the_cluster_schemes_name_a_cluster(url: str | None, cluster: bool) -> None:
    assert is_cluster_url(url) is cluster


def test_a_cluster_without_a_broker_refuses_to_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CELERY_BROKER_URL", raising=False)
    monkeypatch.setenv("REDIS_URL", "redis+cluster://127.0.0.1:7000")
    with pytest.raises(ValidationError, match="CELERY_BROKER_URL"):
        Settings()


def test_a_cluster_with_a_broker_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", "redis+cluster://127.0.0.1:7000")
    monkeypatch.setenv("CELERY_BROKER_URL", "redis://127.0.0.1:6379/1")
    assert Settings().redis_url == "redis+cluster://127.0.0.1:7000"


def test_a_plain_redis_needs_no_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CELERY_BROKER_URL", raising=False)
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:6379/0")
    assert Settings().redis_url == "redis://127.0.0.1:6379/0"
