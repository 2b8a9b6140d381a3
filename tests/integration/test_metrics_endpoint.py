"""GET /metrics on a real API (uvicorn, real Redis and Postgres): a stream's pending count
rises while nobody acks, the backlog and job runs show, and only the operator token opens it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest
import redis
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr

from app.config import Settings
from app.keys import RedisKeys, partition_of
from app.metrics import DeploymentCollector
from app.services.jobs import run_job
from app.services.status import stream_status
from app.services.tenants import mint_key
from app.streams.consumer import StreamConsumer
from app.streams.producer import EventProducer
from tests.integration.api_server import serve
from tests.integration.helpers import ingest_consumer, turn
from tests.unit.test_compose_in_step import dashboard_metrics

TOKEN = "metrics-" + uuid.uuid4().hex


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str, token: str = TOKEN) -> Samples:
    response = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return parse(response.text)


def parse(exposition: str) -> Samples:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(exposition)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


@pytest.fixture
def metrics_settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"metrics_token": SecretStr(TOKEN)})


@pytest.fixture
def api(metrics_settings: Settings, redis_client: redis.Redis) -> Iterator[str]:
    with serve(metrics_settings) as url:
        yield url


def test_pending_count_rises_while_no_worker_acks(
    api: str, metrics_settings: Settings, redis_client: redis.Redis, tenant: str
) -> None:
    settings = metrics_settings
    index = partition_of(tenant, "ada", settings.stream_partitions)
    stream = RedisKeys.from_settings(settings).partition(index)
    part = str(index)
    producer = EventProducer(redis_client, settings)
    # A stalled worker: its group reads the entries and never acks them.
    stalled = StreamConsumer(
        client=redis_client, settings=settings, handler=lambda _: None, name="stalled"
    )
    stalled.ensure_groups()

    producer.send_many([turn(tenant, "ada", n) for n in range(3)])
    before = scrape(api)
    assert value(before, "engram_stream_length", partition=part) == 3
    assert value(before, "engram_stream_lag", partition=part) == 3
    assert value(before, "engram_stream_pending", partition=part) == 0
    assert value(before, "engram_stream_oldest_pending_age_seconds", partition=part) == 0

    group = settings.consumer_group
    redis_client.xreadgroup(group, "stalled", {stream: ">"}, count=100)
    first = scrape(api)
    assert value(first, "engram_stream_pending", partition=part) == 3
    assert value(first, "engram_stream_lag", partition=part) == 0
    assert value(first, "engram_stream_oldest_pending_age_seconds", partition=part) >= 0

    producer.send_many([turn(tenant, "ada", n) for n in range(3, 8)])
    redis_client.xreadgroup(group, "stalled", {stream: ">"}, count=100)
    second = scrape(api)
    assert value(second, "engram_stream_pending", partition=part) == 8
    assert value(second, "engram_stream_length", partition=part) == 8
    others = [str(i) for i in range(settings.stream_partitions) if i != index]
    assert all(value(second, "engram_stream_pending", partition=p) == 0 for p in others)
    assert value(second, "engram_metrics_source_up", source="redis") == 1
    assert value(second, "engram_metrics_source_up", source="postgres") == 1


def test_backlog_dead_letters_and_job_runs(
    api: str, metrics_settings: Settings, redis_client: redis.Redis, tenant: str
) -> None:
    settings = metrics_settings
    before = scrape(api)
    producer = EventProducer(redis_client, settings)
    producer.send_many([turn(tenant, "bo", n) for n in range(4)])
    consumer = ingest_consumer(redis_client, settings, name="metrics-test")
    assert consumer.step(block_ms=None) == 4  # stored in L2, nobody scores them
    redis_client.xadd(RedisKeys.from_settings(settings).dead_letters(), {"error": "poison"})
    job = f"metrics-test-{uuid.uuid4().hex[:6]}"
    with run_job(job, tenant) as run:
        assert run is not None
    with pytest.raises(RuntimeError), run_job(job, tenant):
        raise RuntimeError("the job broke")

    after = scrape(api)
    unscored = ("engram_extraction_backlog_turns", {"stage": "unscored"})
    grew = value(after, unscored[0], **unscored[1]) - value(before, unscored[0], **unscored[1])
    assert grew == 4
    assert value(after, "engram_dead_letters") == 1
    assert value(after, "engram_job_runs", job=job, status="done") == 1
    assert value(after, "engram_job_runs", job=job, status="failed") == 1
    assert value(after, "engram_job_last_started_timestamp_seconds", job=job, status="failed") > 0
    assert value(after, "engram_extraction_batches", state="failed") >= 0
    assert not any(
        name == "engram_job_runs" and dict(labels)["job"].startswith("beat:")
        for name, labels in after
    )
    # The consumer recorded XADD-to-ack delays for what it acked.
    assert value(after, "engram_ingest_delay_seconds", quantile="0.5") >= 0
    # Every metric the Grafana dashboard queries is one the API serves.
    assert dashboard_metrics() - {name for name, _ in after} == set()


def test_request_latencies_by_route_template(api: str, tenant: str) -> None:
    for _ in range(3):
        assert httpx.get(f"{api}/healthz", timeout=30).status_code == 200
    headers = {"Authorization": f"Bearer {mint_key(tenant).key}"}
    for _ in range(2):  # the same question twice: embedded once, then found in the cache
        asked = httpx.post(
            f"{api}/v1/search", json={"user_id": "di", "query": "red kayak"}, headers=headers
        )
        assert asked.status_code == 200, asked.text
    assert httpx.get(f"{api}/no/such/{uuid.uuid4().hex}", timeout=30).status_code == 404
    samples = scrape(api)
    count = "engram_api_request_duration_seconds_count"
    assert value(samples, count, method="GET", route="/healthz", status="200") >= 3
    assert value(samples, count, method="GET", route="unmatched", status="404") == 1
    assert value(samples, count, method="POST", route="/v1/search", status="200") == 2
    lookups = "engram_embedding_cache_lookups_total"
    assert value(samples, lookups, result="miss") >= 1
    assert value(samples, lookups, result="hit") >= 1
    assert not any("/no/such" in dict(labels).get("route", "") for _, labels in samples)


def test_scrape_needs_the_operator_token(api: str) -> None:
    url = f"{api}/metrics"
    missing = httpx.get(url, timeout=30)
    assert missing.status_code == 401
    assert "ENGRAM_METRICS_TOKEN" in missing.json()["detail"]
    assert missing.headers["www-authenticate"] == "Bearer"
    wrong = httpx.get(url, headers={"Authorization": f"Bearer {TOKEN}x"}, timeout=30)
    assert wrong.status_code == 401
    # A tenant's API key is no operator token: the numbers are deployment-wide.
    key = mint_key(f"t-{uuid.uuid4().hex[:8]}").key
    tenant_key = httpx.get(url, headers={"Authorization": f"Bearer {key}"}, timeout=30)
    assert tenant_key.status_code == 401
    assert "engram_stream" not in tenant_key.text


def test_no_token_configured_means_no_metrics(
    settings: Settings, redis_client: redis.Redis
) -> None:
    with serve(settings) as url:
        response = httpx.get(f"{url}/metrics", headers={"Authorization": "Bearer x"}, timeout=30)
        bare = httpx.get(f"{url}/metrics", timeout=30)
    assert response.status_code == 404
    assert "ENGRAM_METRICS_TOKEN" in response.json()["detail"]
    # The header is required whether or not metrics are on: its absence is a 401 first.
    assert bare.status_code == 401
    assert bare.headers["www-authenticate"] == "Bearer"


def test_a_source_that_does_not_answer_is_reported_not_raised(settings: Settings) -> None:
    down = settings.model_copy(update={"redis_url": "redis://127.0.0.1:1/0"})
    registry = CollectorRegistry()
    registry.register(DeploymentCollector(down))
    samples = parse(generate_latest(registry).decode())
    assert value(samples, "engram_metrics_source_up", source="redis") == 0
    assert value(samples, "engram_metrics_source_up", source="postgres") == 1
    assert not any(name.startswith("engram_stream_") for name, _ in samples)


def test_lag_is_counted_where_redis_cannot_tell(
    settings: Settings, redis_client: redis.Redis, tenant: str
) -> None:
    """A deletion past the last delivered entry leaves Redis without a lag for the group
    (as Redis 6 never has one): it is counted instead."""
    index = partition_of(tenant, "cy", settings.stream_partitions)
    receipts = EventProducer(redis_client, settings).send_many(
        [turn(tenant, "cy", n) for n in range(5)]
    )
    stream = RedisKeys.from_settings(settings).partition(index)
    redis_client.xgroup_create(stream, settings.consumer_group, id="0")
    redis_client.xdel(stream, receipts[2].entry_id)
    group = redis_client.xinfo_groups(stream)[0]
    assert group.get("lag") is None
    part = stream_status(redis_client, settings, consumers=False).partitions[index]
    assert (part.length, part.lag, part.pending) == (4, 4, 0)
