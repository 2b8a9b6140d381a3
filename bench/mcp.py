"""MCP against REST: the latency of a search and of a context call through `engram mcp`
(streamable HTTP) and through the REST API (the Python SDK), in the same run, on the same data.

One API server (uvicorn, in this process) on its own database (`engram_bench_mcp`) and Redis
prefix; `engram mcp --transport http` as a subprocess calling that API, as an agent's host would
run it. One user gets --memories explicit memories (deterministic sentences over people, places,
tools and hobbies; stored through the SDK, searchable at once, no worker needed). Then --calls
queries, each asked four times, interleaved so both paths share the same conditions: search
through REST, search through MCP, context (1,000 tokens) through REST, context through MCP.
REST is `AsyncEngramClient` (one client, pooled connections); MCP is the MCP SDK's own
`ClientSession` over `streamable_http_client`, one session reused for every call. Times are
wall-clock at the caller, after 10 warm-up calls of each kind; the MCP figure therefore holds
the REST call it makes plus the MCP hop (JSON-RPC, the tool's validation, the structured answer).
Also printed: `engram mcp`'s own CPU per search and per context call (psutil, around each
call), and the context answer's size in tokens: the block, the text content a host hands its
model, and the structured answer as indented JSON (FastMCP's default text content).

    python bench/mcp.py --calls 200

Last line: `mcp tools=<count> search_p95_ms=<N> rest_search_p95_ms=<N> context_p95_ms=<N>
rest_context_p95_ms=<N> search_ratio=<N>` (ratio: MCP p95 over REST p95).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

# The script's own folder (sys.path[0]) would make `import mcp` find this file instead of the
# MCP SDK: put the repository root there.
sys.path[0] = str(Path(__file__).resolve().parent.parent)

from bench._api import free_port, serve  # noqa: E402

os.environ.setdefault("ENGRAM_DATABASE_NAME", "engram_bench_mcp")
os.environ["ENGRAM_REDIS_PREFIX"] = f"benchmcp-{os.getpid()}"

import anyio  # noqa: E402
import httpx  # noqa: E402
import psutil  # noqa: E402
from mcp.types import TextContent  # noqa: E402

TENANT = "bench-mcp"
USER = "bench-user"
WARMUP = 10
PEOPLE = ["Bruno", "Chiara", "Dmitri", "Esther", "Farid", "Greta", "Hiro", "Ines", "Jonas"]
PLACES = ["Lisbon", "Berlin", "Austin", "Nairobi", "Oslo", "Madrid", "Toronto", "Prague"]
TOOLS = ["Postgres", "Redis", "Kubernetes", "Terraform", "Grafana", "Kafka", "FastAPI"]
HOBBIES = ["bouldering", "sourdough baking", "trail running", "chess", "birdwatching", "pottery"]
TEMPLATES = [
    "{p} moved to {c} last spring and loves {h}.",
    "{p} runs the {t} cluster for the billing team.",
    "{p} prefers meetings in {c} on Tuesdays.",
    "The migration from {t} was led by {p}.",
    "{p} spends weekends on {h} near {c}.",
]
QUESTIONS = [
    "Where does {p} live?",
    "Who runs {t}?",
    "What does {p} do at weekends?",
    "Who led the {t} migration?",
    "Which city does {p} prefer for meetings?",
]


def sentences(rng: random.Random, template: Sequence[str], n: int) -> list[str]:
    return [
        rng.choice(template).format(
            p=rng.choice(PEOPLE), c=rng.choice(PLACES), t=rng.choice(TOOLS), h=rng.choice(HOBBIES)
        )
        for _ in range(n)
    ]


def start_mcp(api_url: str) -> tuple[subprocess.Popen[bytes], str]:
    """`engram mcp --transport http` beside this process; its endpoint once it answers."""
    port = free_port()
    engram = str(Path(sys.executable).parent / "engram")
    process = subprocess.Popen(
        [engram, "mcp", "--transport", "http", "--port", str(port), "--url", api_url],
        stdout=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}/mcp"
    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.get(endpoint, timeout=2)
            return process, endpoint
        except httpx.TransportError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError("engram mcp did not come up") from None
            time.sleep(0.1)


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def timed(fn: Callable[[], Awaitable[Any]]) -> float:
    started = time.perf_counter()
    await fn()
    return (time.perf_counter() - started) * 1000


def cpu_ms(process: psutil.Process) -> float:
    times = process.cpu_times()
    return (times.user + times.system) * 1000


async def measure(
    url: str, endpoint: str, key: str, queries: list[str], server_pid: int
) -> dict[str, Any]:
    from engram_memory_client import AsyncEngramClient
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    from app.text.tokens import count_tokens

    times: dict[str, list[float]] = {k: [] for k in ("rest_s", "mcp_s", "rest_c", "mcp_c")}
    server = psutil.Process(server_pid)
    cpu: dict[str, list[float]] = {"search": [], "assemble_context": []}
    sizes: list[tuple[int, int, int]] = []  # context: block, text content, answer as JSON

    async def mcp_call(session: ClientSession, tool: str, **arguments: Any) -> None:
        before = cpu_ms(server)
        result = await session.call_tool(tool, arguments)
        cpu[tool].append(cpu_ms(server) - before)
        if result.isError:
            raise RuntimeError(f"{tool}: {result.content}")
        if tool == "assemble_context" and result.structuredContent is not None:
            text_ = "".join(c.text for c in result.content if isinstance(c, TextContent))
            as_json = json.dumps(result.structuredContent, indent=2)
            sizes.append(
                (
                    int(result.structuredContent["tokens"]),
                    count_tokens(text_),
                    count_tokens(as_json),
                )
            )

    async with (
        AsyncEngramClient(url, key, timeout=60) as rest,
        httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http,
        streamable_http_client(endpoint, http_client=http) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        tools = len((await session.list_tools()).tools)
        for i, query in enumerate(queries):
            calls = {
                "rest_s": lambda q=query: rest.search(USER, q),
                "mcp_s": lambda q=query: mcp_call(session, "search", user_id=USER, query=q),
                "rest_c": lambda q=query: rest.context(USER, q, token_budget=1000),
                "mcp_c": lambda q=query: mcp_call(
                    session, "assemble_context", user_id=USER, query=q, token_budget=1000
                ),
            }
            for kind, fn in calls.items():
                took = await timed(fn)
                if i >= WARMUP:
                    times[kind].append(took)
    return {
        "tools": tools,
        **times,
        "server_cpu": {k: v[WARMUP:] for k, v in cpu.items()},
        "context_sizes": sizes[WARMUP:],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="measured calls of each kind")
    parser.add_argument("--memories", type=int, default=500, help="memories of the user")
    args = parser.parse_args(argv)

    from engram_memory_client import EngramClient

    from app.cli.supervisor import fresh_database
    from app.config import get_settings
    from app.db.session import dispose_engines
    from app.redis_client import get_redis
    from app.services.tenants import mint_key

    settings = get_settings()
    services = fresh_database(settings)
    key = mint_key(TENANT, "mcp benchmark").key
    rng = random.Random(7)
    server, url = serve(settings)
    process, endpoint = start_mcp(url)
    try:
        with EngramClient(url, key, timeout=120) as client:
            texts = sentences(rng, TEMPLATES, args.memories)
            for start in range(0, len(texts), 100):
                client.remember(USER, texts[start : start + 100])
        queries = sentences(rng, QUESTIONS, args.calls + WARMUP)
        result = anyio.run(measure, url, endpoint, key, queries, process.pid)
    finally:
        process.terminate()
        process.wait(timeout=15)
        server.should_exit = True
        redis = get_redis(settings)
        left = list(redis.scan_iter(match=f"{settings.redis_prefix}:*", count=1000))
        for start in range(0, len(left), 1000):
            redis.delete(*left[start : start + 1000])
        dispose_engines()
        if not os.environ.get("ENGRAM_TEST_KEEP_SERVICES"):
            services.stop()

    p95 = {k: percentile(result[k], 0.95) for k in ("rest_s", "mcp_s", "rest_c", "mcp_c")}
    for kind, label in (("s", "search"), ("c", "context")):
        rest, mcp = result[f"rest_{kind}"], result[f"mcp_{kind}"]
        print(
            f"{label}: REST p50 {percentile(rest, 0.5):.1f} ms p95 {p95[f'rest_{kind}']:.1f} ms | "
            f"MCP p50 {percentile(mcp, 0.5):.1f} ms p95 {p95[f'mcp_{kind}']:.1f} ms | "
            f"p95 ratio {p95[f'mcp_{kind}'] / p95[f'rest_{kind}']:.2f} "
            f"({len(rest)} calls each, {args.memories} memories)"
        )
    cpu = {k: sum(v) / max(1, len(v)) for k, v in result["server_cpu"].items()}
    sizes = result["context_sizes"]
    block, text_, as_json = (sum(s[i] for s in sizes) / max(1, len(sizes)) for i in range(3))
    print(
        f"engram mcp CPU per call: search {cpu['search']:.1f} ms, context "
        f"{cpu['assemble_context']:.1f} ms; context answer (1,000-token budget), mean tokens: "
        f"block {block:.0f}, text content {text_:.0f}, the answer as indented JSON {as_json:.0f}"
    )
    print(
        f"mcp tools={result['tools']} search_p95_ms={p95['mcp_s']:.1f} "
        f"rest_search_p95_ms={p95['rest_s']:.1f} context_p95_ms={p95['mcp_c']:.1f} "
        f"rest_context_p95_ms={p95['rest_c']:.1f} "
        f"search_ratio={p95['mcp_s'] / p95['rest_s']:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
