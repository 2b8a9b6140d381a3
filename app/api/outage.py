"""A dependency that does not answer is the server's state, not the client's fault, and not a
bug: it gets 503 with Retry-After, never 500, and the body names which dependency is down
(never its address or the driver's message, which are logged instead).

What counts as "down": connection-level errors of Postgres (refused, reset, pool exhausted,
server shutting down, a statement cancelled or a transaction to be retried) and of Redis. Any
other database error (bad SQL, a constraint) is a bug and stays a 500.
"""

from __future__ import annotations

import logging

import psycopg
import redis
from fastapi import FastAPI, Request, status
from fastapi.responses import JSONResponse
from sqlalchemy import exc as sa_exc
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

_log = logging.getLogger(__name__)

RETRY_AFTER_S = 5

# OperationalError covers refused and reset connections, admin shutdown, cancelled statements,
# deadlocks and serialization failures: all of them worth a retry a few seconds later.
DATABASE_DOWN: tuple[type[BaseException], ...] = (
    sa_exc.OperationalError,
    sa_exc.InterfaceError,
    sa_exc.TimeoutError,  # the connection pool gave none in time
    psycopg.OperationalError,
    psycopg.InterfaceError,
)
REDIS_DOWN: tuple[type[BaseException], ...] = (redis.ConnectionError, redis.TimeoutError)


def database_down(exc: BaseException) -> bool:
    """True for errors that mean Postgres did not answer (a retry may succeed)."""
    if isinstance(exc, DATABASE_DOWN):
        return True
    return isinstance(exc, sa_exc.DBAPIError) and bool(exc.connection_invalidated)


def unavailable(dependency: str) -> JSONResponse:
    return JSONResponse(
        {
            "detail": {
                "message": f"{dependency} unavailable; retry in a few seconds",
                "unavailable": [dependency],
            }
        },
        status_code=status.HTTP_503_SERVICE_UNAVAILABLE,
        headers={"Retry-After": str(RETRY_AFTER_S)},
    )


class RetryAfterOn503:
    """Every 503 says when to come back, including those raised by routes without the header."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_retry_after(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 503:
                headers = MutableHeaders(scope=message)
                if "retry-after" not in headers:
                    headers["Retry-After"] = str(RETRY_AFTER_S)
            await send(message)

        await self.app(scope, receive, with_retry_after)


def install_outage_handlers(app: FastAPI) -> None:
    """503 + Retry-After for Postgres and Redis outages, wherever in a request they surface."""

    async def on_database_error(request: Request, exc: Exception) -> JSONResponse:
        if not database_down(exc):
            _log.error("database error on %s", request.url.path, exc_info=exc)
            return JSONResponse(
                {"detail": {"message": "internal error"}},
                status_code=status.HTTP_500_INTERNAL_SERVER_ERROR,
            )
        _log.warning("database unavailable on %s: %s", request.url.path, exc)
        return unavailable("database")

    async def on_redis_down(request: Request, exc: Exception) -> JSONResponse:
        _log.warning("redis unavailable on %s: %s", request.url.path, exc)
        return unavailable("redis")

    # psycopg's own errors too: the search path reads on the driver (app/db/rows.py).
    for error in (sa_exc.DBAPIError, sa_exc.TimeoutError, psycopg.Error):
        app.add_exception_handler(error, on_database_error)
    for error in REDIS_DOWN:
        app.add_exception_handler(error, on_redis_down)
    app.add_middleware(RetryAfterOn503)
