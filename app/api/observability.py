"""What lets an operator watch the API: request latencies and GET /metrics (Prometheus), log
lines carrying each request's ids, and JSON logs when ENGRAM_LOG_FORMAT=json."""

from __future__ import annotations

from fastapi import FastAPI

from app.api.log_ids import RequestLogIds
from app.api.metrics_route import ApiMetrics
from app.api.metrics_route import router as metrics_router
from app.api.timing import RequestTiming
from app.config import Settings
from app.logs import configure_logging


def observe(app: FastAPI, settings: Settings) -> None:
    """Wire metrics and request log ids into `app`. Call after the app's own middleware:
    the last added runs first, so the ids are bound and the clock started before anything
    else sees the request (a 413 from the body limit is timed and logged with them)."""
    configure_logging(settings.log_format)
    app.state.metrics = ApiMetrics(settings)
    app.include_router(metrics_router)
    app.add_middleware(RequestTiming, histogram=app.state.metrics.request_seconds)
    app.add_middleware(RequestLogIds)
