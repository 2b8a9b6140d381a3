"""GET /metrics: the deployment's and this API's numbers in Prometheus' text format.

Behind an operator token, not a tenant's API key: stream depth, backlogs and job outcomes
are deployment-wide, and one tenant has no business seeing the others' traffic. With no
ENGRAM_METRICS_TOKEN the route answers 404, so a deployment never exposes them by default.

One API process or several: run under several uvicorn workers, each process keeps its own
request histogram, and a scrape reaches one of them. With PROMETHEUS_MULTIPROC_DIR set (as
docker/compose.yaml does) the processes write their numbers to files there and every scrape
adds all of them up (prometheus_client's multiprocess mode).
"""

from __future__ import annotations

import hmac
import os
import threading
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Request, status
from fastapi.responses import Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.multiprocess import MultiProcessCollector

from app.api.timing import request_histogram
from app.config import Settings
from app.embedding.cache import CachedEmbedder
from app.metrics import DeploymentCollector

MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"

_bearer = HTTPBearer(auto_error=False, description="Authorization: Bearer <ENGRAM_METRICS_TOKEN>")


class ApiMetrics:
    """What one API process measures, and the deployment collector read at each scrape."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        disable_created_metrics()  # `_created` series: noise next to counters that reset
        self.deployment = DeploymentCollector(settings)
        self.multiprocess = bool(os.environ.get(MULTIPROCESS_ENV))
        self.registry = CollectorRegistry()
        self.request_seconds = request_histogram(self.registry)
        self.cache_lookups = Counter(
            "engram_embedding_cache_lookups",
            "Texts this API looked up in the embedding cache, by result (hit or miss)",
            ["result"],
            registry=self.registry,
        )
        for result in ("hit", "miss"):
            self.cache_lookups.labels(result)  # shown at 0 before the first lookup
        if not self.multiprocess:
            ProcessCollector(registry=self.registry)
            self.registry.register(self.deployment)
        self._seen = {"hit": 0, "miss": 0}
        self._lock = threading.Lock()

    def sync_cache(self, embedder: object) -> None:
        """Carry the embedder's running hit and miss counts into the counters, at each scrape
        this process serves (a count that went down was reset, and starts over). Under several
        uvicorn workers, a process's share is as recent as the last scrape it served."""
        if not isinstance(embedder, CachedEmbedder):
            return
        with self._lock:
            for result, now in (("hit", embedder.hits), ("miss", embedder.misses)):
                seen = self._seen[result]
                delta = now - seen if now >= seen else now
                if delta:
                    self.cache_lookups.labels(result).inc(delta)
                self._seen[result] = now

    def exposition(self) -> bytes:
        if not self.multiprocess:
            return generate_latest(self.registry)
        registry = CollectorRegistry()
        MultiProcessCollector(registry)
        registry.register(self.deployment)
        return generate_latest(registry)


router = APIRouter()


@router.get(
    "/metrics",
    tags=["operations"],
    response_class=Response,
    responses={
        200: {
            "content": {CONTENT_TYPE_LATEST.split(";")[0]: {"schema": {"type": "string"}}},
            "description": "Prometheus text format",
        },
        401: {"description": "missing or wrong operator token"},
        404: {"description": "metrics are off (ENGRAM_METRICS_TOKEN unset)"},
    },
)
def metrics(
    request: Request,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Response:
    """Stream depth, pending entries, lag and dead letters, the extraction backlog, job runs,
    the embedding cache and request latencies, for Prometheus. Needs
    `Authorization: Bearer <ENGRAM_METRICS_TOKEN>` (an operator's token, not an API key)."""
    observed: ApiMetrics = request.app.state.metrics
    token = observed.settings.metrics_token
    # A request without the header is told it needs one, whether metrics are on or off
    # (the schema declares it required); a token is checked only when one is configured.
    if bearer is None:
        raise _unauthorized()
    if token is None:
        raise HTTPException(
            status.HTTP_404_NOT_FOUND, "metrics are off: set ENGRAM_METRICS_TOKEN to serve them"
        )
    if not hmac.compare_digest(bearer.credentials.encode(), token.get_secret_value().encode()):
        raise _unauthorized()
    observed.sync_cache(request.app.state.engram.embedder)
    return Response(observed.exposition(), media_type=CONTENT_TYPE_LATEST)


def _unauthorized() -> HTTPException:
    return HTTPException(
        status.HTTP_401_UNAUTHORIZED,
        "missing or wrong metrics token: send 'Authorization: Bearer <ENGRAM_METRICS_TOKEN>'",
        headers={"WWW-Authenticate": "Bearer"},
    )
