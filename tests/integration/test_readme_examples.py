"""Every code example in README.md runs, as written, against a real server.

Each ```python / ```bash block of the README is preceded by a marker comment:
`<!-- example: NAME … -->` (run here, by name) or `<!-- not run by the tests: why -->`. A block
without one, or a named example without a test, fails `test_every_readme_code_block_is_marked`,
so a new example cannot slip in untested.

The examples run as a user would run them: each Python block in a fresh interpreter, the
shell block under bash with the real `curl`, against the API served by uvicorn in this process,
a real Celery worker (stream consumer, extraction and embedding) and real Postgres and Redis.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import select

from app.cli.supervisor import worker_command
from app.config import PROJECT_ROOT, Settings
from app.db.session import unit_of_work
from app.layers.episodic.models import Turn
from app.services.tenants import mint_key
from tests.conftest import worker_env
from tests.integration.api_server import prefixed, serve
from tests.integration.helpers import wait_for

README = PROJECT_ROOT / "README.md"
RUN_LANGUAGES = ("python", "bash", "sh", "shell", "console")
NAMED = {"sdk", "producer", "curl", "migrate", "agents", "knowledge", "editing"}

_FENCE = re.compile(r"^```(\w*)\s*$")
_MARK = re.compile(r"^<!-- (?:example: (?P<name>[\w-]+)\b.*|not run by the tests\b.*)-->\s*$")


@dataclass(frozen=True)
class Block:
    language: str
    code: str
    line: int
    marker: str | None
    name: str | None


def readme_blocks(text: str) -> list[Block]:
    """The fenced blocks of a Markdown text (top level or indented), with the marker comment on
    the line before each, if any."""
    lines = text.splitlines()
    blocks: list[Block] = []
    index = 0
    while index < len(lines):
        opened = _FENCE.match(lines[index].strip())
        if not opened:
            index += 1
            continue
        start = index
        index += 1
        body: list[str] = []
        while index < len(lines) and lines[index].strip() != "```":
            body.append(lines[index])
            index += 1
        previous = lines[start - 1].strip() if start else ""
        mark = _MARK.match(previous)
        blocks.append(
            Block(
                language=opened.group(1),
                code="\n".join(body) + "\n",
                line=start + 1,
                marker=previous if mark else None,
                name=mark.group("name") if mark else None,
            )
        )
        index += 1
    return blocks


def example(name: str) -> Block:
    found = [b for b in readme_blocks(README.read_text(encoding="utf-8")) if b.name == name]
    assert len(found) == 1, f"README.md must hold exactly one example {name!r}"
    return found[0]


def test_every_readme_code_block_is_marked() -> None:
    blocks = readme_blocks(README.read_text(encoding="utf-8"))
    runnable = [b for b in blocks if b.language in RUN_LANGUAGES]
    unmarked = [f"line {b.line}" for b in runnable if b.marker is None]
    assert not unmarked, f"README code blocks without an example marker: {unmarked}"
    names = [b.name for b in runnable if b.name]
    assert len(names) == len(set(names)), names
    assert set(names) == NAMED, "each named example needs its test here (and vice versa)"


def test_marked_blocks_are_found_with_their_markers() -> None:
    text = (
        "intro\n<!-- example: one (run here) -->\n```python\nprint(1)\n```\n"
        "  <!-- not run by the tests: needs a cluster -->\n  ```bash\n  make\n  ```\n"
        "```\nplain diagram\n```\n"
    )
    one, two, three = readme_blocks(text)
    assert (one.name, one.language, one.code, one.line) == ("one", "python", "print(1)\n", 3)
    assert (two.name, two.language, two.marker) == (None, "bash", two.marker)
    assert two.marker is not None and "needs a cluster" in two.marker
    assert (three.language, three.marker) == ("", None)


# -- the examples, against a real server ---------------------------------------------------


@dataclass(frozen=True)
class Stack:
    url: str
    key: str
    tenant: str
    env: dict[str, str]


@pytest.fixture(scope="module")
def readme_settings(base_settings: Settings) -> Iterator[Settings]:
    with prefixed(
        base_settings, "readme", consumer_block_ms=50, claim_min_idle_ms=1000
    ) as settings:
        yield settings


@pytest.fixture(scope="module")
def stack(
    database: None, readme_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """The API (uvicorn, in this process), a worker process and a fresh tenant's key."""
    env = {**os.environ, **worker_env(readme_settings)}
    log = tmp_path_factory.mktemp("readme") / "worker.log"
    with log.open("wb") as sink:
        worker = subprocess.Popen(
            worker_command(queues=("ingest", "extract", "embed"), concurrency=2, consumers=1),
            cwd=PROJECT_ROOT,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    tenant = f"t-readme-{uuid.uuid4().hex[:8]}"
    try:
        with serve(readme_settings) as url:
            yield Stack(
                url=url,
                key=mint_key(tenant, "readme").key,
                tenant=tenant,
                env={**env, "ENGRAM_URL": url},
            )
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=60)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


def run(block: Block, env: dict[str, str], cwd: Path = PROJECT_ROOT) -> str:
    """Run a block as its own process; its output, or a failure naming the README line."""
    if block.language == "python":
        command = [sys.executable, "-c", block.code]
    else:
        command = ["bash", "-euo", "pipefail", "-c", block.code]
    done = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, (
        f"README.md example at line {block.line} failed ({done.returncode}):\n"
        f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    print(done.stdout)  # shown when a later assertion fails
    return done.stdout


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_sdk_example_runs(stack: Stack) -> None:
    out = run(example("sdk"), {**stack.env, "ENGRAM_API_KEY": stack.key})
    lines = out.splitlines()
    # The paraphrase finds the turn, with the memory made from it attached.
    assert lines[0].startswith("Alice I prefer aisle seats. ['Alice prefers aisle seats"), out
    assert "## Conversation" in out, out
    assert "Alice —uses→ PostgreSQL" in out, out
    assert "'tool': 'ship'" in lines[-1], out
    with unit_of_work(stack.tenant) as session:  # forget_user at the end took it all
        assert session.scalars(select(Turn).where(Turn.user_id == "alice")).first() is None


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_curl_example_runs(stack: Stack) -> None:
    tenant = f"t-readme-curl-{uuid.uuid4().hex[:6]}"
    out = run(example("curl"), {**stack.env, "ENGRAM_API_KEY": mint_key(tenant).key})
    accepted, search, context = out.splitlines()[:3]
    assert '"accepted":1' in accepted, out
    assert "Our Postgres replica lags by 40 seconds at night." in search, out
    assert "replica lags" in context and '"token_budget":300' in context, out


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_agents_example_runs(stack: Stack) -> None:
    tenant = f"t-readme-agents-{uuid.uuid4().hex[:6]}"
    out = run(example("agents"), {**stack.env, "ENGRAM_API_KEY": mint_key(tenant).key})
    planner, chef = out.splitlines()[:2]
    assert planner.startswith("planner") and "2000 euros" in planner, out
    assert chef.startswith("chef") and "2000 euros" not in chef, out
    assert "Vienna" in chef and "vegetarian" in chef, out


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_knowledge_example_runs(stack: Stack) -> None:
    tenant = f"t-readme-knowledge-{uuid.uuid4().hex[:6]}"
    out = run(example("knowledge"), {**stack.env, "ENGRAM_API_KEY": mint_key(tenant).key})
    found, without = out.splitlines()[:2]
    assert "('knowledge', 'Refunds are granted within 30 days" in found, out
    assert without == "0", out


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_editing_example_runs(stack: Stack) -> None:
    tenant = f"t-readme-editing-{uuid.uuid4().hex[:6]}"
    out = run(example("editing"), {**stack.env, "ENGRAM_API_KEY": mint_key(tenant).key})
    conflict, first, second, found, deleted = out.splitlines()[:5]
    assert conflict == "edit the current version: True", out
    assert first.startswith("1 Frank's gym is on Elm Street.") and "current" not in first, out
    assert second == "2 Frank's gym is on Oak Avenue. current", out
    assert found == '["Frank\'s gym is on Oak Avenue."]', out
    assert deleted == "2", out


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_producer_example_runs(stack: Stack) -> None:
    out = run(example("producer"), stack.env)
    assert len(re.findall(r"[0-9a-f-]{36}", out)) == 2, out

    def stored() -> bool:
        with unit_of_work("acme") as session:
            rows = session.scalars(select(Turn.external_id).where(Turn.user_id == "alice")).all()
        return {"msg-1812", "msg-1813"} <= set(rows)

    assert wait_for(stored, timeout=120), "the worker did not store the README's turns"


@pytest.mark.timeout(600)
def test_the_migrate_example_runs(base_settings: Settings) -> None:
    if base_settings.database_url:
        pytest.skip("needs the embedded server to create a scratch database")
    from app.db.bootstrap import drop_database

    scratch = f"{base_settings.database_name}_readme_migrate"
    drop_database(scratch, base_settings)
    env = {**os.environ, "ENGRAM_DATABASE_NAME": scratch, "PATH": _venv_path()}
    try:
        out = run(example("migrate"), env)
    finally:
        drop_database(scratch, base_settings)
    assert "at head" in out.splitlines()[-1], out
    assert "empty (no Engram schema" in out, out


def _venv_path() -> str:
    """PATH with this interpreter's scripts first, so `engram` is the checkout's."""
    return f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
