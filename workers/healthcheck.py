"""Container healthchecks (docker/compose.yaml): `python -m workers.healthcheck <service> ...`
exits 0 when the service answers, 1 with one line on stderr saying what does not.

In Python rather than curl in the compose file: the image has no curl, Flower wants the
password that only Engram's settings know how to read (variable or file), and a worker is
alive when it answers Celery's ping, not when its process merely exists.

    api [URL]             GET /healthz answers 200 (database, Redis and schema at head)
    flower [URL]          GET /healthcheck answers OK, with Flower's credentials
    worker NODE           the Celery node (e.g. ingest@$HOSTNAME) answers a ping
    beat PIDFILE          the process named by beat's pidfile is running
"""

from __future__ import annotations

import base64
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

TIMEOUT_S = 10.0


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"not an http(s) URL: {url}")
    request = urllib.request.Request(url, headers=headers or {})  # noqa: S310 - checked above
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:  # noqa: S310
            return int(response.status), response.read(4096).decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read(4096).decode("utf-8", "replace")


def check_api(url: str = "http://127.0.0.1:8080") -> str | None:
    """None when /healthz says ok, else what it says."""
    status, body = _get(f"{url.rstrip('/')}/healthz")
    return None if status == 200 else f"api /healthz answered {status}: {body[:300]}"


def flower_credentials() -> str | None:
    """`user:password` as Flower's gate takes them: FLOWER_BASIC_AUTH first, else Engram's."""
    from_flower = os.environ.get("FLOWER_BASIC_AUTH", "").split(",")[0].strip()
    if from_flower:
        return from_flower
    from app.config import get_settings
    from workers.flower_auth import engram_credentials

    return engram_credentials(get_settings())


def check_flower(url: str = "http://127.0.0.1:5555") -> str | None:
    credentials = flower_credentials()
    if credentials is None:
        return "no Flower credentials (ENGRAM_FLOWER_USER and ENGRAM_FLOWER_PASSWORD[_FILE])"
    token = base64.b64encode(credentials.encode()).decode()
    status, body = _get(
        f"{url.rstrip('/')}/healthcheck", headers={"Authorization": f"Basic {token}"}
    )
    if status == 200 and body.strip() == "OK":
        return None
    return f"flower /healthcheck answered {status}: {body[:300]}"


def check_worker(node: str) -> str | None:
    """None when the Celery node answers a ping through the broker."""
    from workers.celery_app import app

    replies = app.control.ping(destination=[node], timeout=TIMEOUT_S / 2)
    if any(node in reply for reply in replies):
        return None
    return f"celery node {node} did not answer a ping"


def check_beat(pidfile: str) -> str | None:
    """None when the pidfile names a running process."""
    try:
        pid = int(Path(pidfile).read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError) as exc:
        return f"beat is not running ({pidfile}: {exc})"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    checks = {"api": check_api, "flower": check_flower, "worker": check_worker, "beat": check_beat}
    if not args or args[0] not in checks:
        sys.stderr.write(f"usage: python -m workers.healthcheck {{{','.join(checks)}}} [ARG]\n")
        return 2
    try:
        problem = checks[args[0]](*args[1:2])
    except Exception as exc:  # any failure is the answer: unhealthy, and why
        problem = f"{args[0]} check failed: {type(exc).__name__}: {exc}"
    if problem:
        sys.stderr.write(problem + "\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
