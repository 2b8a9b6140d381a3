"""The memory console: one static page at /console and its assets at /console/static/, all
shipped in the package (app/console/static), so it works on a machine without internet.

The page needs no key to load; it asks the operator for a tenant API key, keeps it in the
tab's sessionStorage and sends it as `Authorization: Bearer` to the /v1 routes, like any
client. Nothing here knows a key. The responses carry a Content-Security-Policy that allows
this server's own scripts, styles and API only — no inline script, no other origin — so even
a memory's text that slipped into the DOM as markup could not run or call out.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

from fastapi import APIRouter, HTTPException, status
from fastapi.responses import RedirectResponse, Response

router = APIRouter(include_in_schema=False)

ASSETS = {
    "index.html": "text/html; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
}
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
        " connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",
}


@cache
def _asset(name: str) -> bytes:
    return resources.files("app.console").joinpath("static", name).read_bytes()


def _serve(name: str) -> Response:
    return Response(_asset(name), media_type=ASSETS[name], headers=HEADERS)


@router.get("/console")
def console() -> Response:
    """The console page."""
    return _serve("index.html")


@router.get("/console/")
def console_slash() -> RedirectResponse:
    return RedirectResponse("/console", status_code=status.HTTP_308_PERMANENT_REDIRECT)


@router.get("/console/static/{name}")
def console_asset(name: str) -> Response:
    """One of the page's own files; anything else is 404 (no path is ever joined from input)."""
    if name not in ASSETS:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no console asset {name!r}")
    return _serve(name)
