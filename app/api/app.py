"""The Engram REST API (FastAPI): `engram api` serves it, OpenAPI at /openapi.json, Swagger UI
at /docs and ReDoc at /redoc.

The docs pages load their scripts and styles from this server (`/docs-assets`, the Swagger UI
and ReDoc bundles the `fastapi-offline` package ships), never from a CDN: an API on a machine
without internet still shows its docs.

Route handlers are plain functions, so FastAPI runs them in its thread pool: the services
they call (SQLAlchemy, redis-py, onnxruntime) block, and must not block the event loop.
"""

from __future__ import annotations

import gc
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import redis
from fastapi import FastAPI, HTTPException, Request, status
from fastapi.encoders import jsonable_encoder
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi_offline import FastAPIOffline
from sqlalchemy import text
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api import console_routes, event_routes, insight_routes, knowledge_routes, schemas
from app.api.memory_routes import router as memory_router
from app.api.observability import observe
from app.api.outage import RETRY_AFTER_S, install_outage_handlers
from app.api.routes import router
from app.config import Settings, get_settings
from app.db.migrate import SchemaState, current_revision, head_revision
from app.db.session import app_engine, owner_engine, unit_of_work
from app.embedding.base import Embedder, EmbeddingError
from app.embedding.factory import check_dimension, get_embedder
from app.redis_client import get_redis
from app.services.quota import TenantQuota
from app.streams.producer import EventProducer

DOCS_ASSETS = "/docs-assets"


@dataclass
class ApiState:
    settings: Settings
    redis: redis.Redis
    embedder: Embedder
    producer: EventProducer
    events_quota: TenantQuota
    reads_quota: TenantQuota
    calls_quota: TenantQuota


class BodyLimit:
    """Refuse request bodies over the limit with 413, declared or streamed, before parsing;
    and compressed ones (a Content-Encoding other than identity) with 415 saying so, rather
    than a 422 about bytes that are no UTF-8 (the limit counts what is parsed)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self._message = f"request body is larger than {max_bytes} bytes"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        encoding = headers.get(b"content-encoding", b"identity").strip().lower()
        if encoding not in (b"", b"identity"):
            name = encoding.decode("latin-1")[:40]
            message = f"Content-Encoding {name!r} is not accepted: send the body uncompressed"
            response = JSONResponse(
                {"detail": {"message": message, "fields": ["content-encoding"]}},
                status_code=415,
            )
            await response(scope, receive, send)
            return
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._too_large(scope, receive, send)
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    # An HTTPException is the one error FastAPI lets out of body parsing.
                    raise HTTPException(413, {"message": self._message})
            return message

        await self.app(scope, limited, send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = JSONResponse(
            {"detail": {"message": self._message}},
            status_code=413,
        )
        await response(scope, receive, send)


# Pydantic names the member of a union an item failed against ("str", "dict[str,any]"); that
# is no field of the request, so it is left out of the name.
_UNION_MEMBER = re.compile(r"^(str|int|float|bool|none|dict\[.*\]|list\[.*\]|function-.*)$")


def _field(location: tuple[Any, ...]) -> str:
    where = location[1:] if location and location[0] in ("body", "query", "path") else location
    parts = [str(p) for p in where if not _UNION_MEMBER.match(str(p))]
    out = ""
    for part in parts:
        out += f"[{part}]" if part.isdigit() else (f".{part}" if out else part)
    return out or ".".join(str(p) for p in location)


def create_app(settings: Settings | None = None, *, embedder: Embedder | None = None) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        client = get_redis(settings)
        model = embedder or get_embedder(settings, client)
        check_dimension(model, settings)
        app.state.engram = ApiState(
            settings=settings,
            redis=client,
            embedder=model,
            producer=EventProducer(client, settings),
            events_quota=TenantQuota(client, settings, "events"),
            reads_quota=TenantQuota(client, settings, "reads"),
            calls_quota=TenantQuota(client, settings, "calls"),
        )
        # What is loaded by now (the app, its routes and libraries, ~160k objects) lives as
        # long as the process: frozen, the collector's full passes no longer walk it. Each
        # walk took ~90 ms, stalling whichever requests were running, every few dozen
        # searches (search p99 through the API). Garbage is collected first, so none of it
        # is kept for good.
        gc.collect()
        gc.freeze()
        yield

    app = FastAPIOffline(
        title="Engram",
        version="1",
        summary="Long-term memory for LLM agents: capture, recall, forget.",
        lifespan=lifespan,
        static_url=DOCS_ASSETS,
        # Swagger UI would otherwise ask validator.swagger.io about the schema.
        swagger_ui_parameters={"validatorUrl": None},
    )
    app.add_middleware(BodyLimit, max_bytes=settings.api_max_body_bytes)
    install_outage_handlers(app)
    app.include_router(event_routes.router)
    app.include_router(router)
    app.include_router(memory_router)
    app.include_router(insight_routes.router)
    app.include_router(console_routes.router)
    app.include_router(knowledge_routes.router)
    observe(app, settings)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        fields = sorted({_field(tuple(e.get("loc", ()))) for e in errors})
        message = "invalid request: " + "; ".join(
            f"{_field(tuple(e['loc']))}: {e['msg']}" for e in errors[:10]
        )
        # `curl -d '{…}'` sends form encoding: FastAPI then reads no JSON at all, and pydantic's
        # "Input should be a valid dictionary" does not say why.
        kind = request.headers.get("content-type", "")
        if "json" not in kind.lower() and any(tuple(e.get("loc", ())) == ("body",) for e in errors):
            message = (
                "the body must be JSON sent as Content-Type: application/json (this request"
                f" said {kind or 'no content type'}); {message}"
            )
        return JSONResponse(
            {
                "detail": {
                    "message": message,
                    "fields": fields,
                    "errors": jsonable_encoder(errors, exclude={"input", "ctx", "url"}),
                }
            },
            status_code=422,
        )

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        """FastAPI answers a JSON body its parser gave up on (nested past Python's recursion
        limit, an integer of over 4,300 digits) with a bare 400 "There was an error parsing the
        body"; it is said like any other unreadable JSON: a 422 naming the body and why."""
        cause = exc.__cause__
        if exc.status_code == 400 and isinstance(cause, RecursionError | ValueError):
            why = "nested too deeply" if isinstance(cause, RecursionError) else str(cause)
            return JSONResponse(
                {
                    "detail": {
                        "message": f"the body is JSON this API cannot read: {why}",
                        "fields": ["body"],
                    }
                },
                status_code=422,
            )
        if exc.status_code == 405:
            # Starlette answers from the first route on the path, whose methods alone it
            # lists; a client reading Allow is told every method the path takes.
            exc.headers = {**(exc.headers or {}), "Allow": ", ".join(_allowed(request))}
        return await http_exception_handler(request, exc)

    @app.exception_handler(EmbeddingError)
    async def embedding_down(_: Request, exc: EmbeddingError) -> JSONResponse:
        return JSONResponse(
            {"detail": {"message": f"embedding backend unavailable: {exc}"}},
            status_code=status.HTTP_503_SERVICE_UNAVAILABLE,
            headers={"Retry-After": "5"},
        )

    @app.get(
        "/healthz",
        tags=["operations"],
        response_model=schemas.Health,
        responses={503: {"model": schemas.Health, "description": "something is down or behind"}},
    )
    def healthz(request: Request) -> JSONResponse:
        """Database and Redis reachable, and the schema at this code's head, each named (no
        key needed; reveals nothing about tenants): 200 if all hold, else 503 with the failing
        checks in `unavailable` (`schema` when the database needs `engram migrate`)."""
        checks: dict[str, str] = {}
        revision: str | None = None
        try:
            with unit_of_work(engine=app_engine(settings)) as session:
                session.execute(text("SELECT 1"))
            checks["database"] = "ok"
        except Exception as exc:  # any failure is the answer here
            checks["database"] = f"down: {type(exc).__name__}"
        if checks["database"] == "ok":
            try:
                with owner_engine(settings).connect() as connection:
                    state = SchemaState(current_revision(connection), head_revision())
                revision = state.current
                checks["schema"] = "ok" if state.at_head else state.describe()
            except Exception as exc:  # as above: unreadable is an answer, not an error
                checks["schema"] = f"unknown: {type(exc).__name__}"
        try:
            request.app.state.engram.redis.ping()
            checks["redis"] = "ok"
        except redis.RedisError as exc:
            checks["redis"] = f"down: {type(exc).__name__}"
        body: dict[str, Any] = {
            "checks": checks,
            "schema_revision": revision,
            "schema_head": head_revision(),
        }
        down = sorted(name for name, answer in checks.items() if answer != "ok")
        if not down:
            return JSONResponse({"status": "ok", **body})
        return JSONResponse(
            {"status": "degraded", **body, "unavailable": down},
            status_code=status.HTTP_503_SERVICE_UNAVAILABLE,
            headers={"Retry-After": str(RETRY_AFTER_S)},
        )

    return app


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


def _allowed(request: Request) -> list[str]:
    """The methods some route takes on the request's path (routers included in routers
    match as one route, so each method is asked rather than each route's list read)."""
    scope = request.scope
    return [
        method
        for method in _METHODS
        if any(r.matches({**scope, "method": method})[0] == Match.FULL for r in request.app.routes)
    ]
