"""Flower behind basic auth on every path, with the password never on a command line.

Flower 2 checks credentials only in handlers that ask for the current user, so /metrics,
/healthcheck, /static and /login answer anyone even with --basic-auth. Engram gates Flower's
router instead (`Flower.find_handler`): no path is served without the password. The gate is
installed from Celery's `import_modules` signal, which Flower's constructor sends when it loads
the app, so every way of starting Flower on Engram's app has it: `engram up`, a plain
`celery -A workers.celery_app flower`, the compose service.

Credentials (first found wins): Flower's own `basic_auth` option — the FLOWER_BASIC_AUTH
environment variable or a Flower config file (FLOWER_CONF); --basic-auth works too but shows in
`ps`, so Engram never uses it — else ENGRAM_FLOWER_USER with the password read from
ENGRAM_FLOWER_PASSWORD_FILE or ENGRAM_FLOWER_PASSWORD. They are resolved at the first request,
so a worker process, which loads the same app, never reads them; if none can be had, every
request is refused.
"""

from __future__ import annotations

import binascii
import hmac
import logging
from base64 import b64decode
from collections.abc import Sequence
from typing import Any

from app.config import Settings, get_settings

_log = logging.getLogger(__name__)

REALM = 'Basic realm="flower"'


def engram_credentials(settings: Settings) -> str | None:
    """`user:password` from Engram's settings, or None if the password is empty or unreadable."""
    password = settings.flower_password.get_secret_value()
    if settings.flower_password_file is not None:
        try:
            password = settings.flower_password_file.read_text().rstrip("\r\n")
        except OSError as exc:
            _log.error("cannot read the Flower password file: %s", exc)
            return None
    if not settings.flower_user or not password:
        return None
    return f"{settings.flower_user}:{password}"


def authorized(allowed: Sequence[str], header: str) -> bool:
    """Whether an Authorization header carries one of the allowed `user:password` pairs."""
    scheme, _, encoded = header.strip().partition(" ")
    if scheme.lower() != "basic" or not allowed:
        return False
    try:
        given = b64decode(encoded.strip(), validate=True)
    except (binascii.Error, ValueError):
        return False
    # Compare with every pair, in constant time each, so timing tells nothing about which.
    matches = [hmac.compare_digest(given, pair.encode()) for pair in allowed]
    return any(matches)


def install_gate() -> None:
    """Put every Flower path behind basic auth (idempotent; only if Flower is loaded)."""
    import tornado.web
    from flower.app import Flower

    if getattr(Flower, "_engram_gate", False):
        return
    route = Flower.find_handler

    class Unauthorized(tornado.web.RequestHandler):
        def check_xsrf_cookie(self) -> None:
            """Refused before any XSRF question arises: the answer is 401 for every method."""

        def prepare(self) -> None:
            self.set_status(401)
            self.set_header("WWW-Authenticate", REALM)
            self.finish("Access denied")

    def find_handler(self: Any, request: Any, **kwargs: Any) -> Any:
        options = self.options
        if not getattr(self, "_engram_credentials", False):
            self._engram_credentials = True
            if not options.basic_auth:
                found = engram_credentials(get_settings())
                # Set on Flower's options too: its cross-site checks apply only with auth on.
                options.basic_auth = [found] if found else []
            if not options.basic_auth:
                _log.error("Flower has no credentials: every request is refused")
        if authorized(options.basic_auth, request.headers.get("Authorization", "")):
            return route(self, request, **kwargs)
        return self.get_handler_delegate(request, Unauthorized)

    Flower.find_handler = find_handler
    Flower._engram_gate = True
