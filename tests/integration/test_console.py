"""The memory console end to end: the real API under uvicorn (real Postgres and Redis), a
tenant with users, memories (one made from real ingested turns), entities and a decay run,
and Debian's Chromium in headless mode rendering /console. The rendered DOM must show the
users, the memory rows, the source turns, the entity graph, the decay curve and the job
runs, with untrusted text escaped; a screenshot must be the expected size and not blank.
The endpoints the console reads are tested over plain HTTP too (tenancy, bad input).

Browser tests skip, saying why, when no Chromium binary is installed (.ci/run installs one).
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import tempfile
import uuid
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from app.config import Settings
from app.db.session import unit_of_work
from app.embedding.factory import get_embedder
from app.extraction.base import Gem
from app.layers.conceptual.service import record_entities
from app.layers.semantic.service import store_gems
from app.redis_client import get_redis
from app.scoring.decay import decayed, half_life_days
from app.services.access import apply_pending
from app.services.decay import decay_pass
from app.services.ingest import IngestService
from app.services.insight import importance_curve
from app.services.memories import MemoryIn, RememberRequest, remember
from app.services.tenants import mint_key
from app.streams.consumer import StreamConsumer
from tests.integration.api_server import prefixed, serve

STATIC = Path(__file__).resolve().parents[2] / "app" / "console" / "static"
WINDOW = (1400, 1000)
HOSTILE = '<img src="x" onerror="document.title=1"><b>bold claim</b>'
TURNS = [
    "We are planning the kitchen renovation this spring.",
    "What wood do you want for the cabinets?",
    "I want oak cabinets, and Henrik the carpenter starts in April.",
    "Noted: oak cabinets, Henrik starts in April.",
]


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None


@dataclass(frozen=True)
class World:
    url: str
    tenant: str
    key: str
    other_key: str
    user: str
    turn_memory: uuid.UUID
    explicit: list[uuid.UUID]
    hostile: uuid.UUID
    other_memory: uuid.UUID

    def headers(self, key: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {key or self.key}"}


@pytest.fixture(scope="module")
def console_settings(base_settings: Settings) -> Iterator[Settings]:
    with prefixed(base_settings, "console") as settings:
        yield settings


def _ingest_turns(settings: Settings, url: str, key: str, tenant: str, user: str) -> list[Any]:
    """Send turns through POST /v1/events and let the real ingest service persist them."""
    start = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
    events = [
        {
            "type": "turn",
            "user_id": user,
            "role": "user" if n % 2 == 0 else "assistant",
            "speaker": "Ana" if n % 2 == 0 else "Assistant",
            "content": line,
            "external_id": f"{user}-{n}",
            "channel": "web",
            "timestamp": (start + timedelta(minutes=n)).isoformat(),
        }
        for n, line in enumerate(TURNS)
    ]
    sent = httpx.post(
        f"{url}/v1/events", json={"events": events}, headers={"Authorization": f"Bearer {key}"}
    )
    assert sent.status_code == 202, sent.text
    client = get_redis(settings)
    consumer = StreamConsumer(
        client=client,
        settings=settings,
        handler=IngestService(client=client, settings=settings),
        name="console-test",
    )
    consumer.ensure_groups()
    while consumer.step(block_ms=10):
        pass
    with unit_of_work(tenant) as session:
        rows = session.execute(
            text(
                "SELECT id, session_id, occurred_at, channel FROM episodic.turns"
                " WHERE user_id = :user ORDER BY occurred_at"
            ),
            {"user": user},
        ).all()
    assert len(rows) == len(TURNS)
    return rows


def _memory_from_turns(settings: Settings, tenant: str, user: str, turns: list[Any]) -> uuid.UUID:
    """A gem from the turns, stored and linked into L4 the way extraction does."""
    content = "Ana wants oak cabinets for the kitchen; Henrik the carpenter starts in April."
    gem = Gem(
        kind="preference",
        content=content,
        summary=content,
        topics=["kitchen"],
        importance=0.7,
        source_turn_ids=[str(turns[2].id)],
        occurred_at=turns[2].occurred_at,
    )
    embedder = get_embedder(settings, get_redis(settings))
    with unit_of_work(tenant) as session:
        stored = store_gems(
            session=session,
            settings=settings,
            tenant_id=tenant,
            user_id=user,
            batch_id=uuid.uuid4(),
            extractor="offline",
            gems=[gem],
            vectors=embedder.embed([content]),
            turn_scores={},
            session_of_turn={str(t.id): t.session_id for t in turns},
            channel_of_turn={str(t.id): t.channel for t in turns},
        )
        record_entities(session=session, tenant_id=tenant, user_id=user, memories=stored.created)
    return stored.created[0][0]


def _remember(url: str, key: str, user: str, contents: list[str]) -> list[uuid.UUID]:
    response = httpx.post(
        f"{url}/v1/memories",
        json={"user_id": user, "memories": [{"content": c} for c in contents]},
        headers={"Authorization": f"Bearer {key}"},
        timeout=60,
    )
    assert response.status_code == 201, response.text
    return [uuid.UUID(m["id"]) for m in response.json()["memories"]]


@pytest.fixture(scope="module")
def world(database: None, console_settings: Settings) -> Iterator[World]:
    tenant = f"t-console-{uuid.uuid4().hex[:8]}"
    other = f"t-console-{uuid.uuid4().hex[:8]}"
    key = mint_key(tenant, name="console test").key
    other_key = mint_key(other, name="console test").key
    with serve(console_settings) as url:
        user = "ana"
        turns = _ingest_turns(console_settings, url, key, tenant, user)
        turn_memory = _memory_from_turns(console_settings, tenant, user, turns)
        explicit = _remember(
            url,
            key,
            user,
            [
                "Ana works at Nordhaus in Berlin.",
                "Henrik prefers walnut veneer for his own furniture.",
            ],
        )
        hostile = _remember(url, key, user, [HOSTILE])[0]
        _remember(url, key, "bruno", ["Bruno keeps bees on the roof of the office."])
        other_memory = _remember(url, other_key, "ana", ["The other tenant's secret plan."])[0]
        # One decay pass for this tenant: a job run to list, and a decay clock to draw from.
        assert decay_pass(console_settings, datetime.now(UTC), tenant_id=tenant) is not None
        # A search that returns the turn memory, its access applied: an access point.
        found = httpx.post(
            f"{url}/v1/search",
            json={"user_id": user, "query": "oak cabinets for the kitchen", "unit": "memories"},
            headers={"Authorization": f"Bearer {key}"},
            timeout=60,
        )
        assert found.status_code == 200, found.text
        assert str(turn_memory) in {h["id"] for h in found.json()["hits"]}
        assert apply_pending(console_settings, get_redis(console_settings)) >= 1
        yield World(
            url=url,
            tenant=tenant,
            key=key,
            other_key=other_key,
            user=user,
            turn_memory=turn_memory,
            explicit=explicit,
            hostile=hostile,
            other_memory=other_memory,
        )


# -- the page and its assets --------------------------------------------------------------


def test_console_page_and_assets_are_served_with_a_strict_policy(world: World) -> None:
    page = httpx.get(f"{world.url}/console")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "default-src 'none'" in policy
    assert "connect-src 'self'" in policy and "'unsafe-inline'" not in policy
    assert page.headers["x-content-type-options"] == "nosniff"
    for name, kind in (("console.js", "text/javascript"), ("console.css", "text/css")):
        asset = httpx.get(f"{world.url}/console/static/{name}")
        assert asset.status_code == 200
        assert asset.headers["content-type"].startswith(kind)
        assert asset.content == (STATIC / name).read_bytes()
    for bad in ("missing.js", "..%2Fconsole_routes.py", "%2E%2E%2F%2E%2E%2Fapp.py"):
        assert httpx.get(f"{world.url}/console/static/{bad}").status_code == 404, bad
    assert httpx.get(f"{world.url}/console/", follow_redirects=True).status_code == 200


def test_console_assets_load_nothing_from_elsewhere_and_never_use_markup_sinks() -> None:
    for path in STATIC.iterdir():
        body = path.read_text()
        assert "http://" not in body.replace("http://www.w3.org/2000/svg", ""), path.name
        assert "https://" not in body and "//cdn" not in body, path.name
    script = (STATIC / "console.js").read_text()
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert sink not in script, sink
    assert "<script>" not in (STATIC / "index.html").read_text()  # no inline script


# -- the endpoints the console reads ------------------------------------------------------


def test_users_are_listed_with_counts_and_paged(world: World) -> None:
    response = httpx.get(f"{world.url}/v1/users", headers=world.headers())
    assert response.status_code == 200, response.text
    users = {u["user_id"]: u for u in response.json()["users"]}
    assert set(users) == {"ana", "bruno"}
    assert users["ana"]["memories"] == 4 and users["ana"]["turns"] == len(TURNS)
    assert users["bruno"]["memories"] == 1 and users["bruno"]["turns"] == 0

    first = httpx.get(f"{world.url}/v1/users?limit=1", headers=world.headers()).json()
    assert [u["user_id"] for u in first["users"]] == ["ana"]
    assert first["next_cursor"] == "ana"
    second = httpx.get(
        f"{world.url}/v1/users?limit=1&cursor={first['next_cursor']}", headers=world.headers()
    ).json()
    assert [u["user_id"] for u in second["users"]] == ["bruno"]
    assert second["next_cursor"] is None

    theirs = httpx.get(f"{world.url}/v1/users", headers=world.headers(world.other_key)).json()
    assert [(u["user_id"], u["memories"]) for u in theirs["users"]] == [("ana", 1)]


def test_importance_curve_is_the_decay_formula_from_the_decay_clock(world: World) -> None:
    response = httpx.get(
        f"{world.url}/v1/memories/{world.turn_memory}/importance?points=5&days=30",
        headers=world.headers(),
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["user_id"] == world.user and body["archived_at"] is None
    assert body["decayed_at"] is not None  # the fixture's pass, then a search, moved the clock
    assert body["access_count"] == 1 and len(body["accesses"]) == 1
    assert body["clock_from"] == body["last_accessed_at"] == body["accesses"][0]
    assert body["last_accessed_at"] > body["decayed_at"]
    curve = body["curve"]
    assert len(curve) == 5
    assert curve[0]["at"] == body["clock_from"]
    assert curve[0]["importance"] == pytest.approx(body["importance"])
    half_life = half_life_days(
        body["base_half_life_days"],
        access_count=body["access_count"],
        emotional_intensity=0.0,
        consolidation=0.0,
    )
    assert body["half_life_days"] == pytest.approx(half_life)
    start = datetime.fromisoformat(body["clock_from"])
    for point in curve:
        idle = (datetime.fromisoformat(point["at"]) - start).total_seconds() / 86400
        expected = decayed(body["importance"], idle_days=idle, half_life=half_life)
        assert point["importance"] == pytest.approx(expected)
    values = [p["importance"] for p in curve]
    assert values == sorted(values, reverse=True) and values[-1] < values[0]
    assert datetime.fromisoformat(body["archive_at"]) > start


def test_importance_curve_is_what_the_decay_job_then_stores(
    settings: Settings, tenant: str
) -> None:
    """Projected at a tick, then the real pass at that tick: the same number."""
    mint_key(tenant, name="console decay")
    embedder = get_embedder(settings, get_redis(settings))
    stored = remember(
        tenant,
        RememberRequest(
            user_id="dee", memories=[MemoryIn(content="Dee's bike is a red cargo bike.")]
        ),
        settings=settings,
        embedder=embedder,
    )
    memory_id = stored[0].id
    with unit_of_work(tenant) as session:
        session.execute(
            text(
                "UPDATE semantic.memories SET importance = 0.8, access_count = 3,"
                " emotional_intensity = 0.4, consolidation_strength = 0.25 WHERE id = :id"
            ),
            {"id": memory_id},
        )
    now = datetime.now(UTC)
    curve = importance_curve(settings, tenant, memory_id, horizon_days=45, points=2, now=now)
    assert curve is not None
    tick = curve.curve[-1].at
    assert tick == now + timedelta(days=45)
    assert decay_pass(settings, tick, tenant_id=tenant) is not None
    with unit_of_work(tenant) as session:
        after = session.execute(
            text("SELECT importance FROM semantic.memories WHERE id = :id"), {"id": memory_id}
        ).scalar_one()
    assert after == pytest.approx(curve.curve[-1].importance, rel=1e-9)
    assert after < 0.8


def test_memory_entities_name_what_the_memory_mentions(world: World) -> None:
    response = httpx.get(
        f"{world.url}/v1/memories/{world.turn_memory}/entities", headers=world.headers()
    )
    assert response.status_code == 200, response.text
    names = {e["name"].lower() for e in response.json()["entities"]}
    assert {"ana", "henrik"} <= names


def test_jobs_list_the_tenants_own_runs(world: World) -> None:
    response = httpx.get(f"{world.url}/v1/jobs?limit=5", headers=world.headers())
    assert response.status_code == 200, response.text
    jobs = response.json()["jobs"]
    assert [j["job"] for j in jobs] == ["decay"]
    assert jobs[0]["status"] == "done" and jobs[0]["rows"] >= 4
    theirs = httpx.get(f"{world.url}/v1/jobs", headers=world.headers(world.other_key))
    assert theirs.json()["jobs"] == []


@pytest.mark.parametrize("suffix", ["importance", "entities"])
def test_another_tenants_memory_is_not_found(world: World, suffix: str) -> None:
    response = httpx.get(
        f"{world.url}/v1/memories/{world.other_memory}/{suffix}", headers=world.headers()
    )
    assert response.status_code == 404
    mine = httpx.get(
        f"{world.url}/v1/memories/{world.other_memory}/{suffix}",
        headers=world.headers(world.other_key),
    )
    assert mine.status_code == 200


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/v1/users?limit=0", "limit"),
        ("/v1/users?limit=501", "limit"),
        ("/v1/users?cursor=%21%21", "cursor"),
        ("/v1/jobs?limit=0", "limit"),
        ("/v1/jobs?limit=x", "limit"),
        ("/v1/memories/not-a-uuid/importance", "memory_id"),
        ("/v1/memories/{id}/importance?points=1", "points"),
        ("/v1/memories/{id}/importance?days=0", "days"),
        ("/v1/memories/{id}/importance?days=99999", "days"),
        ("/v1/memories/not-a-uuid/entities", "memory_id"),
    ],
)
def test_bad_parameters_are_named(world: World, path: str, field: str) -> None:
    response = httpx.get(
        world.url + path.replace("{id}", str(world.turn_memory)), headers=world.headers()
    )
    assert response.status_code == 422, response.text
    assert response.json()["detail"]["fields"] == [field]


@pytest.mark.parametrize(
    "path", ["/v1/users", "/v1/jobs", "/v1/memories/{id}/importance", "/v1/memories/{id}/entities"]
)
def test_console_endpoints_need_a_key(world: World, path: str) -> None:
    response = httpx.get(world.url + path.replace("{id}", str(world.turn_memory)))
    assert response.status_code == 401


# -- the page in a real browser -----------------------------------------------------------


class _Dom(HTMLParser):
    """The rendered DOM as (tag, attributes, text within the element)."""

    VOID = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta"})

    def __init__(self) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str], list[str]]] = []
        self.stack: list[int] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, {k: v or "" for k, v in attrs}, []))
        if tag not in self.VOID:
            self.stack.append(len(self.elements) - 1)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, {k: v or "" for k, v in attrs}, []))

    def handle_endtag(self, tag: str) -> None:
        if any(self.elements[i][0] == tag for i in self.stack):
            while self.elements[self.stack.pop()][0] != tag:
                pass

    def handle_data(self, data: str) -> None:
        for index in self.stack:
            self.elements[index][2].append(data)

    def having(self, tag: str, cls: str | None = None) -> list[tuple[dict[str, str], str]]:
        return [
            (attrs, "".join(texts))
            for name, attrs, texts in self.elements
            if name == tag and (cls is None or cls in attrs.get("class", "").split())
        ]


def _browse(url: str, *mode: str) -> subprocess.CompletedProcess[str]:
    binary = chromium()
    if binary is None:
        pytest.skip("no Chromium binary (install Debian's `chromium` to run the console tests)")
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [
                binary,
                "--headless",
                "--no-sandbox",  # CI runs as root
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--disable-background-networking",
                "--disable-component-update",
                "--no-first-run",
                "--hide-scrollbars",
                f"--user-data-dir={profile}",
                f"--window-size={WINDOW[0]},{WINDOW[1]}",
                "--virtual-time-budget=20000",
                *mode,
                url,
            ],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )


def _dom(url: str) -> _Dom:
    result = _browse(url, "--dump-dom")
    assert result.returncode == 0, result.stderr[-2000:]
    dom = _Dom()
    dom.feed(result.stdout)
    return dom


def test_console_shows_users_memories_turns_graph_curve_and_jobs(world: World) -> None:
    url = f"{world.url}/console#key={world.key}&user=ana&memory={world.turn_memory}"
    dom = _dom(url)
    body = dom.having("body")[0][0]
    status = "".join(t for a, t in dom.having("p") if a.get("id") == "status")
    assert body.get("data-ready") == "true", status

    users = [text for attrs, text in dom.having("tr", "pick") if "data-user" in attrs]
    assert users[0].startswith("ana") and users[1].startswith("bruno")
    assert [a["data-user"] for a, _ in dom.having("tr", "selected") if "data-user" in a] == ["ana"]

    rows = {a["data-memory"]: t for a, t in dom.having("tr", "memory-row")}
    assert set(rows) == {str(world.turn_memory), str(world.hostile), *map(str, world.explicit)}
    assert "Ana works at Nordhaus in Berlin." in rows[str(world.explicit[0])]
    assert "oak cabinets" in rows[str(world.turn_memory)]

    detail = [t for a, t in dom.having("p", "content")]
    assert detail == [
        "Ana wants oak cabinets for the kitchen; Henrik the carpenter starts in April."
    ]
    turns = [t for _, t in dom.having("tr", "turn")]
    assert len(turns) == len(TURNS)  # the source turn ± 2: the whole short session
    assert all(line in text for line, text in zip(TURNS, turns, strict=True))
    sources = [t for _, t in dom.having("tr", "source")]
    assert len(sources) == 1 and TURNS[2] in sources[0]

    graph = [a for a in dom.elements if a[0] == "svg" and a[1].get("id") == "entity-graph"]
    assert graph
    nodes = dom.having("circle", "node")
    labels = {t.lower() for _, t in dom.having("text", "node-label")}
    assert len(nodes) >= 2 and len(dom.having("line", "edge")) >= 1
    assert {"ana", "nordhaus"} <= labels  # Ana works at Nordhaus (another memory)
    picks = {t.lower() for _, t in dom.having("option")}
    assert {"ana", "henrik"} <= picks  # every entity the memory names can be drawn

    curve = [a for a, _ in dom.having("path") if a.get("id") == "importance-curve"]
    assert len(curve) == 1
    d = curve[0]["d"]
    assert d.startswith("M") and d.count("L") == 79  # points=80 the page asks for

    jobs = [t for _, t in dom.having("tr", "job-row")]
    assert len(jobs) == 1 and "decay" in jobs[0] and "done" in jobs[0]
    assert world.key not in "".join(t for _, _, ts in dom.elements for t in ts)
    assert all(world.key not in v for _, attrs, _ in dom.elements for v in attrs.values())


def test_console_search_and_untrusted_text_stays_text(world: World) -> None:
    query = "q=bold%20claim%20image"
    url = f"{world.url}/console#key={world.key}&user=ana&{query}&memory={world.hostile}"
    dom = _dom(url)
    assert dom.having("body")[0][0].get("data-ready") == "true"
    rows = {a["data-memory"]: t for a, t in dom.having("tr", "memory-row")}
    assert str(world.hostile) in rows
    assert HOSTILE in rows[str(world.hostile)]  # shown as the text it is
    assert [t for _, t in dom.having("p", "content")] == [HOSTILE]
    assert not dom.having("img") and not dom.having("b")  # never parsed as markup
    status = "".join(t for a, t in dom.having("p") if a.get("id") == "status")
    assert "match" in status


def test_console_without_a_key_asks_for_one(world: World) -> None:
    dom = _dom(f"{world.url}/console")
    status = "".join(t for a, t in dom.having("p") if a.get("id") == "status")
    assert "API key" in status
    assert not dom.having("tr", "pick")


def _png(path: Path) -> tuple[int, int, set[tuple[int, ...]]]:
    """Width, height and the set of colours of an 8-bit RGB/RGBA PNG (stdlib only)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks, header = 8, [], b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            chunks.append(body)
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and colour in (2, 6) and interlace == 0
    channels = 3 if colour == 2 else 4
    raw = zlib.decompress(b"".join(chunks))
    stride = width * channels
    previous = bytearray(stride)
    colours: set[tuple[int, ...]] = set()
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up = previous[i]
            corner = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                near = left if pa <= pb and pa <= pc else (up if pb <= pc else corner)
                line[i] = (line[i] + near) & 0xFF
        if y % 4 == 0:
            for x in range(0, stride, channels * 2):
                colours.add(tuple(line[x : x + 3]))
        previous = line
    return width, height, colours


def test_console_screenshot_shows_the_page(world: World, tmp_path: Path) -> None:
    shot = tmp_path / "console.png"
    url = f"{world.url}/console#key={world.key}&user=ana&memory={world.turn_memory}"
    result = _browse(url, f"--screenshot={shot}")
    assert result.returncode == 0, result.stderr[-2000:]
    assert shot.exists() and shot.stat().st_size > 10_000
    width, height, colours = _png(shot)
    assert (width, height) == WINDOW
    assert len(colours) > 50  # text, tables, a graph and a chart: far from blank
    assert (0x1D, 0x24, 0x30) in colours  # the header bar
    assert (0xFF, 0xF4, 0xD6) in colours  # a source turn's highlight
    assert (0x2F, 0x6F, 0xDF) in colours  # the accent: the centre node, the curve
