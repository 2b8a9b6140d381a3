"""How long the API takes to answer, per route, for Prometheus (a latency histogram).

Requests are labelled by the route's template (`/v1/users/{user_id}`), never by the raw
path: ids in paths, or a scanner probing made-up URLs, would otherwise mint a time series
each. Methods outside HTTP's own set are counted as `other` for the same reason.
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# Seconds: from a cached capture (milliseconds) to a cold model load or a slow search.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
UNMATCHED = "unmatched"


def request_histogram(registry: CollectorRegistry) -> Histogram:
    return Histogram(
        "engram_api_request_duration_seconds",
        "Time to answer an API request, by method, route template and status",
        ["method", "route", "status"],
        registry=registry,
        buckets=BUCKETS,
    )


class RequestTiming:
    """Observes every HTTP request's duration, errors included (a raised error counts as
    500, what the client gets)."""

    def __init__(self, app: ASGIApp, histogram: Histogram) -> None:
        self.app = app
        self.histogram = histogram

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def timed_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, timed_send)
        finally:
            method = scope.get("method", "")
            route = getattr(scope.get("route"), "path", None) or UNMATCHED
            self.histogram.labels(
                method if method in METHODS else "other", route, str(status)
            ).observe(time.perf_counter() - started)
