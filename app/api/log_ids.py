"""Every log line written while the API serves a request carries its ids (app/logs.py):
a request id (the client's `X-Request-ID` when it sends a sane one, echoed back either way),
the tenant once its key is checked, and the user the request is about.

The tenant is read when a line is written, from the request's state where the key check
(app/api/auth.py) leaves it. The user comes from where the routes take it: the path
(`/v1/users/{user_id}`), the query (`?user_id=`), or the top-level `user_id` of a JSON body,
read as the body passes through (bodies over BODY_PEEK_BYTES are not looked into). Only
well-formed identifiers are logged: a client's junk never reaches the logs as an id.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any
from urllib.parse import parse_qs

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.logs import log_context
from app.streams.events import is_identifier

BODY_PEEK_BYTES = 64 * 1024
REQUEST_ID_HEADER = b"x-request-id"
_REQUEST_ID = re.compile(rb"^[A-Za-z0-9._:-]{1,64}$")


def request_id(scope: Scope) -> str:
    """The client's X-Request-ID if it is short and plain, else a new one."""
    for name, value in scope.get("headers") or []:
        if name == REQUEST_ID_HEADER and _REQUEST_ID.match(value):
            return value.decode()
    return uuid.uuid4().hex


def user_in_body(body: bytes) -> str | None:
    """The top-level `user_id` of a JSON object body, if it is an identifier."""
    try:
        parsed: Any = json.loads(body)
    except (ValueError, RecursionError):
        return None
    user = parsed.get("user_id") if isinstance(parsed, dict) else None
    return user if is_identifier(user) else None


class RequestLogIds:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        # The key check writes the tenant here (request.state); bound now, read per line.
        state: dict[str, Any] = scope.setdefault("state", {})
        rid = request_id(scope)
        peek = _BodyPeek(receive, scope)

        def tenant() -> str | None:
            value = state.get("tenant_id")
            return value if isinstance(value, str) else None

        def user() -> str | None:
            value = (scope.get("path_params") or {}).get("user_id")
            if is_identifier(value):
                return str(value)
            query = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("user_id")
            if query and is_identifier(query[0]):
                return query[0]
            return peek.user

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [*message.get("headers", []), (REQUEST_ID_HEADER, rid.encode())]
                message = {**message, "headers": headers}
            await send(message)

        with log_context(request_id=rid, tenant_id=tenant, user_id=user):
            await self.app(scope, peek.receive, send_with_id)


class _BodyPeek:
    """Passes the body through untouched, keeping a copy of a small JSON one to read the
    user from once it is complete."""

    def __init__(self, receive: Receive, scope: Scope) -> None:
        self._receive = receive
        headers = dict(scope.get("headers") or [])
        self._wanted = headers.get(b"content-type", b"").startswith(b"application/json")
        self._chunks: list[bytes] = []
        self._size = 0
        self.user: str | None = None

    async def receive(self) -> Message:
        message = await self._receive()
        if self._wanted and message["type"] == "http.request":
            chunk = message.get("body", b"")
            self._size += len(chunk)
            if self._size > BODY_PEEK_BYTES:
                self._wanted, self._chunks = False, []
            else:
                self._chunks.append(chunk)
                if not message.get("more_body", False):
                    self.user = user_in_body(b"".join(self._chunks))
                    self._wanted, self._chunks = False, []
        return message
