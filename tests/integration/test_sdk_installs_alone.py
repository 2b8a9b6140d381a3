"""The SDK installs alone: its wheel, built from sdk/, goes into a fresh virtualenv with nothing
but what it declares (httpx, pydantic and theirs, from the package index), and from there it
talks to a real Engram API. None of the server's packages can be imported in that venv, so an
agent's project with its own `app/` package is never shadowed or burdened by Engram's."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from app.config import PROJECT_ROOT, Settings
from app.redis_client import get_redis
from app.services.tenants import mint_key
from tests.integration.api_server import serve

SDK = PROJECT_ROOT / "sdk"
# Packages of the server distribution and of its heavy dependencies: none may come along.
SERVER_MODULES = (
    "app",
    "tasks",
    "workers",
    "celery",
    "onnxruntime",
    "sqlalchemy",
    "redis",
    "psycopg",
    "fastapi",
    "uvicorn",
    "numpy",
)
MAX_VENV_BYTES = 50 * 1024 * 1024  # the whole venv; the server's is some 470 MB
STEP_TIMEOUT_S = 600

PROBE = """
import importlib.metadata, importlib.util, json, sys
import engram_memory_client
names = sys.argv[1:]
print(json.dumps({
    "importable": [n for n in names if importlib.util.find_spec(n) is not None],
    "distributions": sorted(d.metadata["Name"].lower() for d in importlib.metadata.distributions()),
    "sdk_file": engram_memory_client.__file__,
    "version": engram_memory_client.__version__,
}))
"""

SCENARIO = """
import asyncio, json, sys, uuid
from engram_memory_client import AsyncEngramClient, EngramClient, NotFoundError, ValidationError

url, key, user = sys.argv[1:4]
out = {}
with EngramClient(url, key, backoff=0.05) as engram:
    out["health"] = engram.health().status
    stored = engram.remember(user, ["Grace keeps bees on the roof of her flat in Ghent"])
    out["stored"] = [s.status for s in stored]
    hits = engram.search(user, "what does Grace keep on her roof?").hits
    out["top_is_stored"] = bool(hits) and hits[0].id == stored[0].id
    out["memory_user"] = engram.get_memory(stored[0].id).user_id
    try:
        engram.get_memory(uuid.uuid4())
    except NotFoundError as exc:
        out["not_found"] = exc.status
    try:
        engram.search(user, "")
    except ValidationError as exc:
        out["invalid_fields"] = exc.fields


async def listed():
    async with AsyncEngramClient(url, key, backoff=0.05) as engram:
        return [m.content async for m in engram.iter_memories(user)]


out["listed"] = asyncio.run(listed())
out["loaded"] = sorted({name.split(".")[0] for name in sys.modules})
print(json.dumps(out))
"""


@dataclass(frozen=True)
class Installed:
    wheel: Path
    python: Path
    venv: Path
    workdir: Path


def _run(args: list[str | Path], cwd: Path) -> str:
    """Run a step; a failure shows its output, not only its exit status."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    done = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=STEP_TIMEOUT_S,
    )
    assert done.returncode == 0, f"{args[:4]} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """The SDK's wheel, built from a copy of sdk/ (the tree is left as it is), installed by
    pip into a venv made from the base interpreter, not from the server's venv."""
    root = tmp_path_factory.mktemp("sdk-alone")
    source = root / "sdk"
    shutil.copytree(
        SDK, source, ignore=shutil.ignore_patterns("*.egg-info", "build", "dist", "__pycache__")
    )
    wheels = root / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", wheels, source], root)
    (wheel,) = wheels.glob("engram_memory_client-*.whl")
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv], root)
    python = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", python, "install", "-q", wheel], root)
    workdir = root / "agent"
    workdir.mkdir()
    return Installed(wheel=wheel, python=python, venv=venv, workdir=workdir)


def _in_venv(installed: Installed, script: str, *args: str) -> dict[str, object]:
    """Run a script with the venv's Python, isolated (no cwd, no PYTHON* variables)."""
    path = installed.workdir / f"script-{uuid.uuid4().hex[:8]}.py"
    path.write_text(script)
    return json.loads(_run([installed.python, "-I", path, *args], installed.workdir))


def test_the_wheel_holds_only_the_sdk_and_asks_for_httpx_and_pydantic(
    installed: Installed,
) -> None:
    with zipfile.ZipFile(installed.wheel) as wheel:
        names = wheel.namelist()
        (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        headers = Parser().parsestr(wheel.read(metadata).decode())
    assert {n.split("/")[0].split("-")[0] for n in names} == {"engram_memory_client"}
    assert "engram_memory_client/py.typed" in names
    assert headers["Name"] == "engram-memory-client"
    requires = {Requirement(r).name for r in headers.get_all("Requires-Dist") or []}
    assert requires == {"httpx", "pydantic"}


def test_installed_alone_none_of_the_server_comes_along(installed: Installed) -> None:
    found = _in_venv(installed, PROBE, *SERVER_MODULES)
    assert found["importable"] == []
    assert Path(str(found["sdk_file"])).is_relative_to(installed.venv)
    distributions = set(found["distributions"])  # type: ignore[call-overload]
    assert {"engram-memory-client", "httpx", "pydantic"} <= distributions
    assert "engram" not in distributions
    size = sum(p.lstat().st_size for p in installed.venv.rglob("*") if not p.is_symlink())
    assert size < MAX_VENV_BYTES, f"the SDK's venv holds {size / 2**20:.1f} MB"


@pytest.fixture(scope="module")
def api(database: None, base_settings: Settings) -> Iterator[tuple[str, str]]:
    """The real API and a key of a tenant of its own."""
    settings = base_settings.model_copy(update={"redis_prefix": f"test-alone-{uuid.uuid4().hex}"})
    try:
        with serve(settings) as url:
            yield url, mint_key(f"t-alone-{uuid.uuid4().hex[:8]}").key
    finally:
        client = get_redis(settings)
        keys = list(client.scan_iter(match=f"{settings.redis_prefix}:*", count=1000))
        if keys:
            client.delete(*keys)


def test_installed_alone_it_talks_to_a_real_server(
    installed: Installed, api: tuple[str, str]
) -> None:
    url, key = api
    user = f"u-{uuid.uuid4().hex[:8]}"
    out = _in_venv(installed, SCENARIO, url, key, user)
    assert out["health"] == "ok"
    assert out["stored"] == ["created"]
    assert out["top_is_stored"] is True
    assert out["memory_user"] == user
    assert out["not_found"] == 404
    assert out["invalid_fields"] == ["query"]
    assert out["listed"] == ["Grace keeps bees on the roof of her flat in Ghent"]
    loaded = set(out["loaded"])  # type: ignore[call-overload]
    assert {"engram_memory_client", "httpx", "pydantic"} <= loaded
    assert not loaded & set(SERVER_MODULES)
