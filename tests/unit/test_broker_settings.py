"""CELERY_BROKER_URL: unset means the data Redis as before; each transport gets only its own
options; anything but Redis or RabbitMQ is refused at start-up."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.config import Settings
from workers import broker


def _settings(monkeypatch: pytest.MonkeyPatch, url: str | None) -> Settings:
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:6379/0")
    if url is None:
        monkeypatch.delenv("CELERY_BROKER_URL", raising=False)
    else:
        monkeypatch.setenv("CELERY_BROKER_URL", url)
    return Settings(redis_prefix="pfx")


@pytest.mark.parametrize("url", [None, ""])
def test_unset_the_broker_is_the_data_redis_with_the_prefixed_keys(
    monkeypatch: pytest.MonkeyPatch, url: str | None
) -> None:
    settings = _settings(monkeypatch, url)
    assert settings.celery_broker_url is None
    assert broker.broker_url(settings) == "redis://127.0.0.1:6379/0"
    assert broker.transport_options(settings, broker.broker_url(settings)) == {
        "visibility_timeout": settings.visibility_timeout_s,
        "global_keyprefix": "pfx:celery:",
    }


def test_a_redis_of_its_own_keeps_the_redis_options(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = _settings(monkeypatch, "redis://broker:6380/2")
    url = broker.broker_url(settings)
    assert url == "redis://broker:6380/2"
    assert broker.transport_options(settings, url)["global_keyprefix"] == "pfx:celery:"


@pytest.mark.parametrize("url", ["amqp://guest:guest@rabbit:5672/engram", "amqps://r/v"])
def test_rabbitmq_gets_no_redis_options(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    settings = _settings(monkeypatch, url)
    assert broker.broker_url(settings) == url
    assert broker.transport_options(settings, url) == {"confirm_publish": True}


@pytest.mark.parametrize(
    "url", ["sqs://key:secret@", "redis+cluster://10.0.0.1:7000", "rabbit:5672", "memory://"]
)
def test_other_brokers_are_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    with pytest.raises(ValidationError, match="CELERY_BROKER_URL must be a Redis or RabbitMQ"):
        _settings(monkeypatch, url)
