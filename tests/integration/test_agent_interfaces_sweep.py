"""An adversarial sweep of the agent-facing interfaces: MCP tools, the Python SDK and the CLI,
used the way a careless or hostile agent, developer or operator would.

Every case talks to real services: the API under uvicorn with an in-process ingest consumer
and `engram mcp --transport http` as a subprocess (test_mcp.py's fixtures), real Postgres and
Redis. A slow server is a real socket that accepts and never answers. What each case checks is
the interfaces' contract: bad input is refused naming what is wrong (a tool error, a typed SDK
exception, one CLI line), nothing reaches a route it was not meant for, and nothing crosses
tenants, users or agents.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest
from engram_memory_client import (
    AsyncEngramClient,
    EngramClient,
    NotFoundError,
    UnavailableError,
    ValidationError,
)

from tests.integration.test_cli_mistakes_are_one_line import engram, one_line
from tests.integration.test_mcp import (
    INITIALIZE,
    Api,
    api,
    call,
    http_session,
    mcp_http,
    mcp_settings,
    refused,
    run,
)

__all__ = ["api", "mcp_http", "mcp_settings"]  # the real API and MCP server of test_mcp

ENGRAM = str(Path(sys.executable).parent / "engram")
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def new_user() -> str:
    return f"u-{uuid.uuid4().hex[:8]}"


# -- MCP ---------------------------------------------------------------------------------------


def test_mcp_http_says_nothing_when_clients_hang_up(api: Api, tmp_path: Path) -> None:
    """Every session a client ended printed the MCP library's ClosedResourceError traceback
    on the server's stderr, where an operator reads real errors."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = tmp_path / "mcp.stderr"
    endpoint = f"http://127.0.0.1:{port}/mcp"
    with log.open("w") as stderr:
        process = subprocess.Popen(
            [ENGRAM, "mcp", "--transport", "http", "--port", str(port), "--url", api.url],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
        try:
            deadline = time.monotonic() + 60
            while not _answers(endpoint):
                assert process.poll() is None and time.monotonic() < deadline, log.read_text()

            async def sessions() -> None:
                for _ in range(3):
                    async with http_session(endpoint, api.key_a) as session:
                        assert (await session.list_tools()).tools

            anyio.run(sessions)
            time.sleep(0.5)  # the server's side of the last hang-up
        finally:
            process.send_signal(signal.SIGINT)
            process.wait(timeout=15)
    said = log.read_text()
    assert "Traceback" not in said and "ClosedResourceError" not in said, said
    assert "Error" not in said, said


def _answers(endpoint: str) -> bool:
    try:
        httpx.get(endpoint, timeout=2)
    except httpx.TransportError:
        time.sleep(0.1)
        return False
    return True


def test_mcp_refuses_arguments_a_tool_does_not_take(api: Api, mcp_http: str) -> None:
    """A misspelt argument is refused, never dropped: `agentid` instead of `agent_id` would
    otherwise store a memory meant to be the planner's own in the user's shared map."""
    user = new_user()

    async def scenario() -> None:
        async with http_session(mcp_http, api.key_a) as session:
            text = await refused(
                session,
                "remember",
                user_id=user,
                agentid="planner",
                memories=[{"content": "The planner's private note"}],
            )
            assert "invalid arguments to remember: agentid: unexpected argument" in text
            assert "agent_id" in text  # what it does take
            assert "bogus: unexpected argument" in await refused(session, "stats", bogus=1)
            assert "limt: unexpected argument" in await refused(
                session, "search", user_id=user, query="x", limt=3
            )
            listed = await call(session, "list_memories", user_id=user)
            assert listed["memories"] == []  # nothing was stored by the refused call

    run(scenario)


def test_mcp_bad_values_are_tool_errors_naming_the_argument(api: Api, mcp_http: str) -> None:
    """Negative and huge limits, NUL bytes, over-long text, empty lists: each a tool error
    naming the argument, never an internal error."""
    user = new_user()

    async def scenario() -> None:
        async with http_session(mcp_http, api.key_a) as session:
            cases = [
                ("search", {"user_id": user, "query": "x", "limit": -1}, "invalid limit"),
                ("search", {"user_id": user, "query": "x", "limit": 2**70}, "invalid limit"),
                ("search", {"user_id": user, "query": "a\x00b"}, "invalid query"),
                ("search", {"user_id": user, "query": "x" * 100_000}, "invalid query"),
                ("search", {"user_id": user, "query": "x", "tags": ["t"] * 1000}, "invalid tags"),
                ("search", {"user_id": user, "query": "x", "agent_id": ""}, "invalid agent_id"),
                ("list_memories", {"user_id": user, "cursor": "garbage"}, "invalid cursor"),
                ("list_memories", {"user_id": user, "cursor": "c" * 100_000}, "cursor"),
                ("entity_graph", {"user_id": user, "name": "n" * 100_000}, "name"),
                ("entity_graph", {"user_id": user, "name": "x", "depth": 99}, "invalid depth"),
                ("get_memory", {"memory_id": str(uuid.uuid4()), "recall": -1}, "invalid recall"),
                ("remember", {"user_id": user, "memories": []}, "invalid memories"),
                ("record_turns", {"user_id": user, "turns": []}, "invalid turns"),
                ("record_events", {"events": [1]}, "events[0]"),
                ("forget_user", {"user_id": ""}, "invalid user_id"),
            ]
            for tool, arguments, named in cases:
                text = await refused(session, tool, **arguments)
                assert named in text, (tool, arguments, text)
                assert "Error handling" not in text and "Traceback" not in text

    run(scenario)


def test_mcp_lone_surrogates_and_broken_json_are_refused(api: Api, mcp_http: str) -> None:
    """Raw JSON-RPC (the SDK's client cannot even send a lone surrogate): a surrogate is a
    tool error naming the argument; malformed or absurdly nested JSON is a 400 parse error,
    not a 500."""
    headers = {**ACCEPT, "Authorization": f"Bearer {api.key_a}"}
    opened = httpx.post(mcp_http, json=INITIALIZE, headers=headers, timeout=30)
    assert opened.status_code == 200
    session = {**headers, "mcp-session-id": opened.headers["mcp-session-id"]}
    done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    httpx.post(mcp_http, json=done, headers=session, timeout=30)

    def tool_call(arguments: str) -> httpx.Response:
        body = (
            '{"jsonrpc": "2.0", "id": 2, "method": "tools/call", '
            f'"params": {{"name": "search", "arguments": {arguments}}}}}'
        )
        return httpx.post(mcp_http, content=body, headers=session, timeout=30)

    answer = tool_call('{"user_id": "u-1", "query": "a\\ud800b"}')
    assert answer.status_code == 200
    assert '"isError":true' in answer.text and "invalid query" in answer.text

    for body in (b"\xff\xfe not json", b'{"jsonrpc": "2.0", "id": 3, "meth', b"[" * 100_000):
        answer = httpx.post(mcp_http, content=body, headers=session, timeout=30)
        assert answer.status_code == 400, (body[:20], answer.status_code, answer.text[:200])
        assert answer.json()["error"]["code"] == -32700


def test_mcp_sessions_stay_with_their_key(api: Api, mcp_http: str) -> None:
    """A session opened with tenant A's key cannot be used with tenant B's key or none, and
    a malformed bearer (spaces, non-ASCII) is a 401 like any refused key."""
    opened = httpx.post(
        mcp_http,
        json=INITIALIZE,
        headers={**ACCEPT, "Authorization": f"Bearer {api.key_a}"},
        timeout=30,
    )
    session_id = opened.headers["mcp-session-id"]
    stats = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "stats"}}
    for auth in (f"Bearer {api.key_b}", None, "Bearer égk_not_ascii".encode(), "Bearer a b"):
        headers: dict[str, str | bytes] = {**ACCEPT, "mcp-session-id": session_id}
        if auth:
            headers["Authorization"] = auth
        answer = httpx.post(mcp_http, json=stats, headers=headers, timeout=30)
        assert answer.status_code in (401, 404), (auth, answer.status_code)
        assert api.tenant_a not in answer.text


def test_mcp_concurrent_calls_of_two_tenants_stay_apart(api: Api, mcp_http: str) -> None:
    """Thirty tool calls at once over two sessions (tenants A and B, same user id): every one
    succeeds and each tenant sees only its own memories."""
    user = new_user()

    async def scenario() -> None:
        async with (
            http_session(mcp_http, api.key_a) as a,
            http_session(mcp_http, api.key_b) as b,
        ):

            async def remember(session: object, tag: str, i: int) -> None:
                memory = {"content": f"{tag} fact number {i} about llamas"}
                await call(session, "remember", user_id=user, memories=[memory])  # type: ignore[arg-type]

            async with anyio.create_task_group() as group:
                for i in range(15):
                    group.start_soon(remember, a, "Alpha", i)
                    group.start_soon(remember, b, "Beta", i)
            for session, tag in ((a, "Alpha"), (b, "Beta")):
                listed = await call(session, "list_memories", user_id=user, limit=500)
                contents = [m["content"] for m in listed["memories"]]
                assert len(contents) == 15
                assert all(c.startswith(tag) for c in contents), contents

    run(scenario)


# -- SDK ---------------------------------------------------------------------------------------


def test_sdk_dot_segments_never_reach_another_route(api: Api) -> None:
    """`clear_session("alice", "..")` was `DELETE /v1/users/alice` once httpx resolved the dot
    segment: the whole user erased. Empty, `.` and `..` ids are refused before sending."""
    user = new_user()
    with EngramClient(api.url, api.key_a, backoff=0.01) as engram:
        engram.remember(user, ["Alice keeps her notes in Obsidian"])
        for attempt, field in (
            (lambda: engram.clear_session(user, ".."), "session_id"),
            (lambda: engram.clear_session(user, "."), "session_id"),
            (lambda: engram.forget_user(".."), "user_id"),
            (lambda: engram.forget_user(""), "user_id"),
            (lambda: engram.get_memory(""), "memory_id"),
            (lambda: engram.delete_memory(".."), "memory_id"),
            (lambda: engram.memory_history("."), "memory_id"),
            (lambda: engram.entity_graph(user, ".."), "name"),
            (lambda: engram.extraction_status("."), "user_id"),
            (lambda: engram.delete_knowledge(""), "memory_id"),
        ):
            with pytest.raises(ValidationError) as refused_:
                attempt()
            assert refused_.value.fields == [field]
            assert field in str(refused_.value)
        assert len(engram.list_memories(user).memories) == 1  # alice is still there


def test_sdk_refuses_what_no_url_can_carry(api: Api) -> None:
    """Lone surrogates and over-long values in a path or query are a ValidationError naming
    the argument, not a UnicodeEncodeError or httpx.InvalidURL from inside the client."""
    user = new_user()
    with EngramClient(api.url, api.key_a, backoff=0.01) as engram:
        for attempt, field in (
            (lambda: engram.list_memories("u\ud800"), "user_id"),
            (lambda: engram.entity_graph(user, "\udfff"), "name"),
            (lambda: engram.list_memories(user, cursor="c" * 70_000), "cursor"),
            (lambda: engram.entity_graph(user, "n" * 70_000), "name"),
            (lambda: engram.suggest_procedure(user, "q" * 70_000), "query"),
        ):
            with pytest.raises(ValidationError) as refused_:
                attempt()
            assert refused_.value.fields == [field]
        # In a JSON body the same text reaches the API, which names the field.
        with pytest.raises(ValidationError) as body:
            engram.remember(user, ["lone \ud800 surrogate"])
        assert body.value.status == 422 and body.value.fields == ["memories[0].content"]
        with pytest.raises(TypeError, match=r"memories\[0\]: expected a str or a mapping"):
            engram.remember(user, [b"bytes"])  # type: ignore[list-item]


def test_sdk_refuses_a_url_or_key_no_request_can_use() -> None:
    """A key with a newline or non-ASCII, an empty key, a URL without http(s): refused when
    the client is made, instead of each call failing as "no answer" after every retry."""
    for url, key in (
        ("http://127.0.0.1:8080", "egk_x\nInjected: 1"),
        ("http://127.0.0.1:8080", "égk_x"),
        ("http://127.0.0.1:8080", ""),
        ("127.0.0.1:8080", "egk_x"),
        ("ftp://127.0.0.1", "egk_x"),
        ("http://[::1", "egk_x"),
    ):
        with pytest.raises(ValueError):
            EngramClient(url, key)
        with pytest.raises(ValueError):
            AsyncEngramClient(url, key)


@pytest.fixture
def black_hole() -> Iterator[tuple[str, list[socket.socket]]]:
    """A server that accepts connections and never answers; yields its URL and the
    connections it took (one per attempt the client made)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    taken: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            taken.append(conn)

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}", taken
    finally:
        server.close()
        for conn in taken:
            conn.close()


def test_sdk_a_silent_server_retries_only_what_is_safe(
    black_hole: tuple[str, list[socket.socket]],
) -> None:
    """Reads and event batches are retried after a read timeout; counting a procedure run
    and deleting are not (a repeat would count twice, or call a done delete "not found"),
    and their error says the request may have been carried out."""
    url, taken = black_hole
    memory_id = str(uuid.uuid4())
    with EngramClient(url, "egk_x", timeout=0.2, retries=2, backoff=0.01) as engram:
        for attempt, attempts, maybe in (
            (lambda: engram.stats(), 3, False),
            (lambda: engram.send_events([{"type": "typing_start", "user_id": "u"}]), 3, False),
            (lambda: engram.record_procedure("u", "q", ["a"], 1.0, 1.0), 1, True),
            (lambda: engram.delete_memory(memory_id), 1, True),
            (lambda: engram.clear_session("u", memory_id), 1, True),
        ):
            before = len(taken)
            with pytest.raises(UnavailableError) as lost:
                attempt()
            assert lost.value.status is None
            assert "no answer from the Engram API" in str(lost.value)
            assert ("may have been carried out" in str(lost.value)) is maybe
            assert len(taken) - before == attempts


def test_sdk_waits_that_never_finish_end_clearly(api: Api) -> None:
    """wait_until_indexed for an id that never arrives times out naming it; a wait with a
    negative interval, or for ids this client never sent and no query, is refused at once."""
    user = new_user()
    with EngramClient(api.url, api.key_a, backoff=0.01) as engram:
        with pytest.raises(TimeoutError, match="never-sent"):
            engram.wait_until_indexed(
                user, query="llamas", external_ids=["never-sent"], timeout=0.5, interval=0.1
            )
        with pytest.raises(ValueError, match="did not send"):
            engram.wait_until_indexed(user, external_ids=["never-sent"], timeout=0.5)
        with pytest.raises(ValueError, match="interval"):
            engram.wait_until_extracted(user, timeout=1, interval=-1)
        with pytest.raises(ValueError, match="timeout"):
            engram.wait_until_indexed(user, query="x", timeout=float("nan"))
        # A user with nothing sent is caught up at once.
        assert engram.wait_until_extracted(user, timeout=5).caught_up


def test_sdk_another_tenants_or_agents_ids_are_not_found(api: Api) -> None:
    """Tenant B reading, editing or deleting tenant A's memory gets 404; so does another agent
    for an agent's private memory, and the memory is left as it was."""
    user = new_user()
    with (
        EngramClient(api.url, api.key_a, backoff=0.01) as a,
        EngramClient(api.url, api.key_b, backoff=0.01) as b,
    ):
        shared = a.remember(user, ["Alice's locker code is 4711"])[0].id
        private = a.remember(user, ["The planner's own draft"], agent_id="planner")[0].id
        for attempt in (
            lambda: b.get_memory(shared),
            lambda: b.update_memory(shared, "hijacked"),
            lambda: b.delete_memory(shared),
            lambda: b.memory_history(shared),
            lambda: b.related_memories(shared),
            lambda: a.get_memory(private, agent_id="coder"),
            lambda: a.update_memory(private, "hijacked", agent_id="coder"),
            lambda: a.delete_memory(private, agent_id="coder"),
            lambda: a.get_memory(private),  # no agent: the shared map only
        ):
            with pytest.raises(NotFoundError):
                attempt()
        assert a.get_memory(shared).content == "Alice's locker code is 4711"
        assert a.get_memory(private, agent_id="planner").content == "The planner's own draft"


# -- CLI ---------------------------------------------------------------------------------------


def test_cli_import_of_a_binary_or_broken_file(tmp_path: Path) -> None:
    """A binary file, a line that is not JSON, not an object, nested past the parser, or
    holding NUL: each bad line is reported by number, the good one is sent, exit 1."""
    binary = tmp_path / "photo.jsonl"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe\xfd binary\n")
    done = engram("import", str(binary))
    assert done.returncode == 1
    assert "UnicodeDecodeError" not in done.stdout + done.stderr
    assert "line 3: not UTF-8 text (byte 0xff at 1)" in done.stdout

    tenant = f"t-sweep-{uuid.uuid4().hex[:6]}"
    good = {"type": "turn", "tenant_id": tenant, "user_id": "u", "role": "user"}
    lines = [
        '{"type": "turn"',
        "[1, 2]",
        "[" * 50_000 + "]" * 50_000,
        json.dumps({**good, "content": "a\x00b", "external_id": "e-nul"}),
        json.dumps({**good, "content": "fine", "external_id": "e-ok"}),
    ]
    broken = tmp_path / "broken.jsonl"
    broken.write_text("\n".join(lines) + "\n", encoding="utf-8")
    done = engram("import", str(broken))
    assert done.returncode == 1
    assert "Traceback" not in done.stdout + done.stderr
    assert "sent 1 events" in done.stdout
    for number in (1, 2, 3, 4):
        assert f"line {number}:" in done.stdout


@pytest.mark.parametrize(
    "args",
    [
        ("push", "hi", "--tenant", "t-sweep", "--user", "u", "--role", "wizard"),
        ("tenant", "create", "no spaces allowed"),
        ("key", "revoke", "not-a-uuid"),
        ("key", "revoke", "00000000-0000-0000-0000-000000000000"),
        ("tail", "--tenant", "no spaces allowed", "--no-follow"),
        ("tail", "--tenant", "t-never-seen-anywhere"),
    ],
    ids=" ".join,
)
def test_cli_argument_mistakes_are_one_line_on_stderr(args: tuple[str, ...]) -> None:
    one_line(engram(*args))


def test_cli_tail_shows_a_tenant_it_knows() -> None:
    """`tail` of an unknown tenant watched nothing forever; a known one shows its trace."""
    tenant = f"t-sweep-{uuid.uuid4().hex[:6]}"
    assert engram("tenant", "create", tenant).returncode == 0
    done = engram("tail", "--tenant", tenant, "--no-follow")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


@pytest.mark.parametrize(
    "args",
    [
        ("tail", "--tenant", "t-sweep", "--last", "-1", "--no-follow"),
        ("mcp", "--transport", "http", "--port", "99999"),
        ("api", "--port", "-3"),
        ("mcp", "--url", "not-a-url"),
    ],
    ids=" ".join,
)
def test_cli_bad_option_values_are_refused_by_the_parser(args: tuple[str, ...]) -> None:
    """Out-of-range ports and row counts were a DataError or a bind() traceback; now the
    option parser refuses them (exit 2, the option named)."""
    done = engram(*args, ENGRAM_API_KEY="egk_x")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert "Invalid value for" in done.stderr


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("not-a-url", "REDIS_URL is not a Redis URL"),
        ("redis://127.0.0.1:6379/99999", "DB index is out of range"),
    ],
)
def test_cli_a_broken_redis_url_is_one_line(url: str, says: str) -> None:
    for command in (("push", "hi", "--tenant", "t-sweep", "--user", "u"), ("status",)):
        line = one_line(engram(*command, REDIS_URL=url))
        assert says in line and "unexpected error" not in line


@pytest.mark.parametrize("command", [("api",), ("mcp", "--transport", "http")], ids=" ".join)
def test_cli_server_on_a_busy_port_says_so_in_one_line(command: tuple[str, ...]) -> None:
    """The server's own start-up logged a bind error among its INFO lines and exited 3."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = str(holder.getsockname()[1])
        done = engram(*command, "--host", "127.0.0.1", "--port", port, ENGRAM_API_KEY="egk_x")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert "Started server process" not in done.stderr
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in " ".join(
        done.stderr.replace("│", " ").split()
    )
