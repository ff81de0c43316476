"""`dsh serve --http` (MCP streamable HTTP at /mcp), driven by the MCP Python SDK and raw HTTP.

Covers: one owner per MCP session in the event log, calls of different
sessions running concurrently, progress and cancellation over HTTP, a call's
plugin log lines on that call's own response stream before its result (for a
client that never opens the standalone GET stream), bearer
token authentication (401 without or with a wrong token, the scheme in any
case), robustness: malformed JSON, unknown methods and oversized bodies are
rejected while an already-initialized client keeps getting correct answers;
and a server that keeps its results and its head: a call longer than the
session idle time returns its result (an idle session still ends), silent
connections do not starve a valid client (header timeout, connection cap),
a body that never arrives gets 408, the `Origin` check (403), and the session
cap (503); and scopes served side by side, each to its own token, a session of one
scope unreachable with another's token.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import secrets
import select
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx2
import pytest
from conftest import _full_env, _launch_http_server, _stop_http_server, write_config
from mcp.types import METHOD_NOT_FOUND, PARSE_ERROR

pytestmark = pytest.mark.anyio

PROTOCOL_VERSION = "2025-06-18"
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": PROTOCOL_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "dsh-e2e-raw", "version": "0"},
    },
}


# --------------------------------------------------------------------------- raw HTTP helpers


def jsonrpc_messages(response: httpx2.Response) -> list[dict[str, Any]]:
    """The JSON-RPC messages in a response body, whether plain JSON or an SSE stream."""
    body = response.text
    content_type = response.headers.get("content-type", "")
    if content_type.startswith("text/event-stream"):
        messages = []
        for event in body.replace("\r\n", "\n").split("\n\n"):
            data = "\n".join(line[5:].lstrip() for line in event.split("\n") if line.startswith("data:"))
            if data.strip():
                messages.append(json.loads(data))
        return messages
    if body.strip():
        try:
            parsed = json.loads(body)
        except json.JSONDecodeError:
            return []
        return parsed if isinstance(parsed, list) else [parsed]
    return []


def describe(response: httpx2.Response) -> str:
    return f"HTTP {response.status_code} {dict(response.headers)}\n{response.text[:2000]}"


class RawSession:
    """An MCP session over streamable HTTP made of hand-written requests."""

    def __init__(
        self, http: httpx2.AsyncClient, url: str, token: str, scheme: str = "Bearer", extra: dict[str, str] | None = None
    ) -> None:
        self.http = http
        self.url = url
        self.token = token
        self.scheme = scheme
        self.extra = extra or {}
        self.session_id: str | None = None

    def headers(self) -> dict[str, str]:
        headers = MCP_HEADERS | self.extra | {"Authorization": f"{self.scheme} {self.token}"}
        if self.session_id:
            headers |= {"Mcp-Session-Id": self.session_id, "Mcp-Protocol-Version": PROTOCOL_VERSION}
        return headers

    async def post(self, body: bytes) -> httpx2.Response:
        return await self.http.post(self.url, content=body, headers=self.headers())

    async def call(self, request_id: int, method: str, params: dict[str, Any] | None = None) -> httpx2.Response:
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            body["params"] = params
        return await self.post(json.dumps(body).encode())

    async def initialize(self) -> None:
        response = await self.post(json.dumps(INITIALIZE).encode())
        assert response.status_code == 200, describe(response)
        messages = jsonrpc_messages(response)
        assert any("result" in m and m.get("id") == 1 for m in messages), describe(response)
        self.session_id = response.headers.get("mcp-session-id")
        initialized = await self.post(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode())
        assert initialized.status_code in (200, 202), describe(initialized)


def post_reading_early(url: str, headers: dict[str, str], body: bytes, timeout: float = 20.0) -> tuple[int | None, str]:
    """POST `body` over a plain socket, reading while it is sent (as curl does).

    A server may answer before it has read the whole body (413) and then close
    the connection; a client that only reads after sending everything (httpx)
    sees a reset instead of that answer. Returns the final status (None if no
    response came) and a description of what happened.
    """
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    head = f"POST {parts.path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Length: {len(body)}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    received, sent, send_error, recv_error = b"", 0, None, None
    deadline = time.monotonic() + timeout
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(head.encode())
        sock.setblocking(False)
        while time.monotonic() < deadline:
            sending = sent < len(body) and send_error is None
            readable, writable, _ = select.select([sock], [sock] if sending else [], [], 0.5)
            if readable:
                try:
                    chunk = sock.recv(65536)
                except OSError as exc:
                    recv_error = exc
                    break
                if not chunk:
                    break
                received += chunk
                # Skip interim 1xx responses; stop once a final response head is in.
                while re.match(rb"HTTP/1\.[01] 1\d\d", received) and b"\r\n\r\n" in received:
                    received = received.split(b"\r\n\r\n", 1)[1]
                if b"\r\n\r\n" in received:
                    break
            if writable:
                try:
                    sent += sock.send(body[sent : sent + 65536])
                except OSError as exc:
                    send_error = exc
    status_line = received.split(b"\r\n", 1)[0].decode(errors="replace")
    match = re.match(r"HTTP/1\.[01] (\d{3})", status_line)
    what = (
        f"sent {sent} of {len(body)} body bytes; send error {send_error!r}; receive error {recv_error!r}; "
        f"response: {received[:300]!r}"
    )
    return (int(match.group(1)) if match else None), what


async def echo_works(session: Any, word: str, text_of) -> None:
    """The already-initialized SDK client still gets a correct tools/call answer."""
    result = await session.call_tool("bash", {"command": f"echo {word}", "description": "check"})
    assert result.is_error is False, result
    assert text_of(result) == f"{word}\n[exit code: 0]", result


# --------------------------------------------------------------------------- sessions and owners


async def test_two_http_sessions_are_two_owners(http_server, open_http_session, event_log, markers):
    tag_a, tag_b = markers("a"), markers("b")

    async with open_http_session(http_server) as a, open_http_session(http_server) as b:
        await a.list_tools()
        await b.list_tools()

        async def two_calls(session: Any, tag: str) -> None:
            for i in range(2):
                result = await session.call_tool("bash", {"command": f"echo {tag}-{i}", "description": "owner"})
                assert result.is_error is False, result

        async with anyio.create_task_group() as tg:
            tg.start_soon(two_calls, a, tag_a)
            tg.start_soon(two_calls, b, tag_b)

    calls_a = event_log.calls_with_command_containing(tag_a)
    calls_b = event_log.calls_with_command_containing(tag_b)
    assert len(calls_a) == 2 and len(calls_b) == 2, event_log.dump()
    owners_a = {c.get("owner") for c in calls_a}
    owners_b = {c.get("owner") for c in calls_b}
    assert len(owners_a) == 1 and len(owners_b) == 1, f"one owner per session expected: {owners_a} {owners_b}"
    (owner_a,), (owner_b,) = owners_a, owners_b
    assert owner_a != owner_b, f"two HTTP sessions share owner {owner_a!r}\n{event_log.dump()}"
    for owner in (owner_a, owner_b):
        assert isinstance(owner, str) and owner.startswith("http"), f"unexpected owner {owner!r}"


async def test_http_call_is_not_blocked_by_another_sessions_call(
    http_server, open_http_session, event_log, markers, text_of
):
    slow_tag = markers("3")  # `sleep 3.<digits>`: three seconds and a unique command line

    async with open_http_session(http_server) as a, open_http_session(http_server) as b:
        await a.list_tools()
        await b.list_tools()
        a_done = anyio.Event()
        a_timing: dict[str, Any] = {}

        async def slow_call() -> None:
            start = time.monotonic()
            a_timing["result"] = await a.call_tool(
                "bash", {"command": f"sleep {slow_tag}; echo slow", "description": "slow"}
            )
            a_timing["elapsed"] = time.monotonic() - start
            a_done.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(slow_call)
            # B starts only once the server is running A's call.
            await event_log.wait_for(lambda: event_log.calls_with_command_containing(slow_tag), 5, "A's tool/call")
            start = time.monotonic()
            fast = await b.call_tool("bash", {"command": "echo fast", "description": "fast"})
            b_elapsed = time.monotonic() - start
            a_was_running = not a_done.is_set()

    assert text_of(fast) == "fast\n[exit code: 0]", fast
    assert a_was_running, "B's result only came after A's call had finished"
    assert b_elapsed < 2.0, f"B took {b_elapsed:.2f}s while A was running"
    assert text_of(a_timing["result"]) == "slow\n[exit code: 0]", a_timing["result"]
    assert a_timing["elapsed"] >= 3.0, f"A finished after {a_timing['elapsed']:.2f}s, before its sleep 3 could"


# --------------------------------------------------------------------------- progress, log lines and cancellation


async def test_http_progress_notifications_arrive_before_the_result(http_server, open_http_session, text_of):
    progress: list[tuple[float, bool]] = []
    returned = False

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, returned))

    async with open_http_session(http_server) as session:
        await session.list_tools()
        result = await session.call_tool(
            "bash", {"command": "sleep 1; echo done", "description": "wait a second"}, progress_callback=on_progress
        )
        returned = True

    assert text_of(result) == "done\n[exit code: 0]", result
    assert [p for p in progress if not p[1]], f"no notifications/progress before the result (all: {progress})"


async def test_http_log_lines_go_on_the_calls_own_stream_before_its_result(start_http_server, tmp_path):
    # A client that never opens the standalone GET stream still gets a call's log lines:
    # on the POST response stream of that call, ahead of its result (the `rich` test
    # plugin's `rich_log` writes one line at each level, debug to error).
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    shutil.copy(Path(os.environ["DSH_PLUGIN_WASM_DIR"]) / "rich.wasm", plugins / "rich.wasm")
    server = start_http_server(
        config='[plugins.rich]\ninterfaces = ["log", "progress"]\n', env={"DSH_PLUGINS": str(plugins)}
    )
    async with httpx2.AsyncClient(timeout=20) as http:
        raw = RawSession(http, server.url, server.token)
        await raw.initialize()
        level = await raw.call(2, "logging/setLevel", {"level": "info"})
        assert any(m.get("id") == 2 and "result" in m for m in jsonrpc_messages(level)), describe(level)

        response = await raw.call(3, "tools/call", {"name": "rich_log", "arguments": {}})
        assert response.status_code == 200, describe(response)
        assert response.headers.get("content-type", "").startswith("text/event-stream"), describe(response)
        messages = jsonrpc_messages(response)
    got = [
        ("log", m["params"]["level"], m["params"].get("logger"), m["params"]["data"])
        if m.get("method") == "notifications/message"
        else ("result", m.get("id"), "".join(c.get("text", "") for c in m.get("result", {}).get("content", [])))
        for m in messages
    ]
    assert got == [
        ("log", "info", "rich", "rich info line"),
        ("log", "warning", "rich", "rich warn line"),
        ("log", "error", "rich", "rich error line"),
        ("result", 3, "logged"),
    ], f"{got}\n{describe(response)}\n{server.stderr()}"


async def test_http_cancelled_call_leaves_no_process(
    http_server, open_http_session, event_log, markers, procs, text_of
):
    marker = markers("600")

    async with open_http_session(http_server) as session:
        await session.list_tools()
        async with anyio.create_task_group() as tg:
            tg.start_soon(session.call_tool, "bash", {"command": f"sleep {marker}", "description": "long"})
            await procs.wait_until_present(marker, timeout=10)
            # Cancelling the task running call_tool makes the SDK send notifications/cancelled.
            tg.cancel_scope.cancel()

        await procs.wait_until_gone(marker, timeout=3)
        call = (await event_log.wait_for(lambda: event_log.calls_with_command_containing(marker), 3, "the call"))[0]
        result = await event_log.wait_for(lambda: event_log.result_for(call), 3, "the cancelled call's tool/result")
        assert result.get("code") == "CANCELLED", f"{result}\n{event_log.dump()}"
        await echo_works(session, "still-here", text_of)


# --------------------------------------------------------------------------- authentication


async def test_http_request_without_token_is_401(http_server):
    async with httpx2.AsyncClient(timeout=10) as http:
        response = await http.post(http_server.url, json=INITIALIZE, headers=MCP_HEADERS)
        assert response.status_code == 401, describe(response)
        # The same request with the token is accepted: the 401 was about the token alone.
        accepted = await http.post(http_server.url, json=INITIALIZE, headers=MCP_HEADERS | http_server.auth_headers)
        assert accepted.status_code == 200, describe(accepted)


async def test_http_request_with_wrong_token_is_401(http_server):
    token = http_server.token
    wrong_tokens = {
        "different token": "0" * len(token) if token != "0" * len(token) else "1" * len(token),
        "token prefix": token[:-1],
        "token plus a suffix": token + "0",
    }
    async with httpx2.AsyncClient(timeout=10) as http:
        for label, wrong in wrong_tokens.items():
            response = await http.post(
                http_server.url, json=INITIALIZE, headers=MCP_HEADERS | {"Authorization": f"Bearer {wrong}"}
            )
            assert response.status_code == 401, f"{label}: {describe(response)}"
        accepted = await http.post(http_server.url, json=INITIALIZE, headers=MCP_HEADERS | http_server.auth_headers)
        assert accepted.status_code == 200, describe(accepted)


# --------------------------------------------------------------------------- robustness


async def test_http_malformed_json_is_rejected_and_server_keeps_serving(http_server, open_http_session, text_of):
    async with open_http_session(http_server) as session, httpx2.AsyncClient(timeout=10) as http:
        await echo_works(session, "before", text_of)
        raw = RawSession(http, http_server.url, http_server.token)
        await raw.initialize()

        response = await raw.post(b'{"jsonrpc": "2.0", "id": 7, "method": "tools/list", ')
        if 400 <= response.status_code < 500:
            pass
        else:
            codes = [m.get("error", {}).get("code") for m in jsonrpc_messages(response)]
            assert PARSE_ERROR in codes, f"malformed JSON got neither a 4xx nor a parse error: {describe(response)}"

        await echo_works(session, "after", text_of)


async def test_http_unknown_method_is_method_not_found(http_server, open_http_session, text_of):
    async with open_http_session(http_server) as session, httpx2.AsyncClient(timeout=10) as http:
        await echo_works(session, "before", text_of)
        raw = RawSession(http, http_server.url, http_server.token)
        await raw.initialize()

        response = await raw.post(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "dsh/no_such_method"}).encode())
        errors = [m for m in jsonrpc_messages(response) if m.get("id") == 2 and "error" in m]
        assert errors, f"no JSON-RPC error for an unknown method: {describe(response)}"
        assert errors[0]["error"].get("code") == METHOD_NOT_FOUND, describe(response)

        # The raw session itself survives its bad request too.
        listed = await raw.post(json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}).encode())
        assert any(m.get("id") == 3 and "result" in m for m in jsonrpc_messages(listed)), describe(listed)

        await echo_works(session, "after", text_of)


async def test_http_oversized_request_is_rejected_and_server_keeps_serving(
    http_server, open_http_session, event_log, text_of
):
    async with open_http_session(http_server) as session, httpx2.AsyncClient(timeout=30) as http:
        await echo_works(session, "before", text_of)
        raw = RawSession(http, http_server.url, http_server.token)
        await raw.initialize()

        filler = "x" * (10 * 1024 * 1024)
        body = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 5,
                "method": "tools/call",
                "params": {"name": "bash", "arguments": {"command": f"echo {filler}", "description": "huge"}},
            }
        ).encode()
        status, what = await anyio.to_thread.run_sync(post_reading_early, http_server.url, raw.headers(), body)
        assert status is not None, f"no HTTP response to a 10 MiB body: {what}"
        assert status == 413, what
        assert not event_log.calls_with_command_containing("x" * 1000), "the oversized call was executed"

        await echo_works(session, "after", text_of)


# --------------------------------------------------------------------------- keeping results and head


def tool_text(response: httpx2.Response, request_id: int) -> str:
    """The text of a tools/call result in a raw response."""
    for message in jsonrpc_messages(response):
        if message.get("id") == request_id and "result" in message:
            return "".join(c.get("text", "") for c in message["result"].get("content", []))
    raise AssertionError(f"no result for request {request_id}: {describe(response)}")


def read_until_closed(sock: socket.socket, timeout: float) -> tuple[bytes, float | None]:
    """Everything `sock` receives until the peer closes it, and the seconds that took (None: still open)."""
    start = time.monotonic()
    received = b""
    sock.settimeout(0.2)
    while time.monotonic() - start < timeout:
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            continue
        except OSError:  # reset by the peer: closed
            return received, time.monotonic() - start
        if not chunk:
            return received, time.monotonic() - start
        received += chunk
    return received, None


def read_response_head(sock: socket.socket, timeout: float) -> bytes:
    """Reads until a response head (and whatever came with it) is in, or the peer closes."""
    deadline = time.monotonic() + timeout
    received = b""
    sock.settimeout(0.2)
    while b"\r\n\r\n" not in received and time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            continue
        if not chunk:
            break
        received += chunk
    return received


def count_closed_by_peer(socks: list[socket.socket], at_least: int, timeout: float) -> int:
    """How many of `socks` the peer has closed, waiting up to `timeout` for `at_least` of them."""
    import selectors

    closed: set[int] = set()
    with selectors.DefaultSelector() as selector:
        for index, sock in enumerate(socks):
            sock.setblocking(False)
            selector.register(sock, selectors.EVENT_READ, index)
        deadline = time.monotonic() + timeout
        while len(closed) < at_least and time.monotonic() < deadline:
            for key, _ in selector.select(timeout=0.2):
                sock, index = key.fileobj, key.data
                try:
                    data = sock.recv(4096)  # type: ignore[union-attr]
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    closed.add(index)
                    selector.unregister(sock)
    return len(closed)


def raw_head(server: Any, content_length: int, extra: str = "") -> bytes:
    return (
        f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nAuthorization: Bearer {server.token}\r\n"
        f"Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
        f"Content-Length: {content_length}\r\n{extra}\r\n"
    ).encode()


async def test_http_call_longer_than_the_session_idle_time_returns_its_result(
    start_http_server, open_http_session, text_of
):
    server = start_http_server(config="[serve]\nhttp_session_idle_ms = 2000\n")
    async with open_http_session(server) as session:
        await session.list_tools()
        start = time.monotonic()
        # No progress token: nothing reaches the session while the call runs.
        result = await session.call_tool("bash", {"command": "sleep 4; echo done", "description": "longer than idle"})
        elapsed = time.monotonic() - start
        assert text_of(result) == "done\n[exit code: 0]", result
        assert elapsed >= 4.0, f"the call returned after {elapsed:.2f}s, before its sleep 4 could"
        # The session outlived its idle time while the call ran, and still serves.
        await echo_works(session, "after-the-long-call", text_of)


async def test_http_session_idle_after_its_last_call_is_closed(start_http_server, markers, procs):
    server = start_http_server(config="[serve]\nhttp_session_idle_ms = 2000\nowner_grace_ms = 0\n")
    marker = markers("600")
    async with httpx2.AsyncClient(timeout=20) as http:
        raw = RawSession(http, server.url, server.token)
        await raw.initialize()
        arguments = {"command": f"sleep {marker}", "description": "held by the session", "run_in_background": True}
        started = await raw.call(2, "tools/call", {"name": "bash", "arguments": arguments})
        last_call_ended = time.monotonic()
        assert tool_text(started, 2).startswith("started background job"), describe(started)
        await procs.wait_until_present(marker, timeout=10)
        # Nothing more is sent: the session ends once idle, and its owner's job with it.
        await procs.wait_until_gone(marker, timeout=15)
        quiet = time.monotonic() - last_call_ended
        assert quiet >= 1.9, f"the session was closed {quiet:.2f}s after its last call, before its 2 s idle time"
        listed = await raw.call(3, "tools/list")
        assert listed.status_code == 404, describe(listed)


async def test_http_silent_connections_do_not_starve_a_valid_client(start_http_server, open_http_session, text_of):
    # 256 descriptors: 300 connections that never send a byte would exhaust them.
    server = start_http_server(nofile=256)
    silent: list[socket.socket] = []
    try:
        for _ in range(300):
            silent.append(socket.create_connection(("127.0.0.1", server.port), timeout=5))
        start = time.monotonic()
        with anyio.fail_after(10):
            async with open_http_session(server) as session:
                await echo_works(session, "answered", text_of)
        answered = time.monotonic() - start
        assert answered < 5.0, f"the valid client was answered only after {answered:.2f}s"
        # At most half the descriptor limit goes to connections: the server closed the
        # oldest silent ones to make room.
        closed = await anyio.to_thread.run_sync(count_closed_by_peer, silent, 300 - 128, 10.0)
        assert closed >= 300 - 128, f"only {closed} of 300 silent connections were closed\n{server.stderr()}"
    finally:
        for sock in silent:
            sock.close()


async def test_http_request_head_not_finished_in_time_closes_the_connection(start_http_server):
    server = start_http_server(config="[serve]\nhttp_header_timeout_ms = 1000\n")

    def unfinished_head() -> tuple[bytes, float | None]:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never finished
            return read_until_closed(sock, 10.0)

    received, closed_after = await anyio.to_thread.run_sync(unfinished_head)
    assert closed_after is not None, "a connection with an unfinished request head was held 10 s"
    assert 0.8 <= closed_after <= 5.0, f"closed after {closed_after:.2f}s with a 1 s header timeout"
    assert b"200" not in received.split(b"\r\n", 1)[0], received


async def test_http_request_body_not_sent_in_time_gets_408(start_http_server, open_http_session, text_of):
    server = start_http_server(config="[serve]\nhttp_body_timeout_ms = 1000\n")

    def unfinished_body() -> tuple[bytes, float]:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(raw_head(server, 100) + b'{"jsonrpc": "2.0"')
            start = time.monotonic()
            return read_response_head(sock, 10.0), time.monotonic() - start

    received, elapsed = await anyio.to_thread.run_sync(unfinished_body)
    assert received.startswith(b"HTTP/1.1 408"), received
    assert b"http_body_timeout_ms" in received, received
    assert 0.8 <= elapsed <= 5.0, f"408 after {elapsed:.2f}s with a 1 s body timeout"
    async with open_http_session(server) as session:
        await echo_works(session, "after-408", text_of)


async def test_http_connection_past_the_cap_with_every_connection_busy_gets_503(start_http_server):
    server = start_http_server(config="[serve]\nhttp_max_connections = 3\n")

    def fill_and_knock() -> tuple[bytes, list[socket.socket]]:
        busy = []
        for _ in range(3):
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            busy.append(sock)
            # A finished request first (404), so the server knows this connection talks;
            # then a request whose body is still coming: busy.
            sock.sendall(
                f"GET /elsewhere HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
                f"Authorization: Bearer {server.token}\r\n\r\n".encode()
            )
            assert read_response_head(sock, 10.0).startswith(b"HTTP/1.1 404")
            sock.sendall(raw_head(server, 100) + b"{")
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as fourth:
            fourth.sendall(raw_head(server, len(json.dumps(INITIALIZE))) + json.dumps(INITIALIZE).encode())
            received, _ = read_until_closed(fourth, 10.0)
        return received, busy

    received, busy = await anyio.to_thread.run_sync(fill_and_knock)
    try:
        assert received.startswith(b"HTTP/1.1 503"), received
        assert b"http_max_connections" in received, received
        busy.pop().close()  # one slot frees up: a valid client gets in
        async with httpx2.AsyncClient(timeout=10) as http:
            deadline = time.monotonic() + 5
            while True:
                response = await http.post(server.url, json=INITIALIZE, headers=MCP_HEADERS | server.auth_headers)
                if response.status_code != 503 or time.monotonic() > deadline:
                    break
                await anyio.sleep(0.05)
            assert response.status_code == 200, describe(response)
    finally:
        for sock in busy:
            sock.close()


async def test_http_foreign_origin_is_403_while_loopback_and_no_origin_pass(http_server):
    async with httpx2.AsyncClient(timeout=10) as http:
        for origin in ("http://evil.example", f"http://localhost.evil.example:{http_server.port}", "null"):
            for auth in (http_server.auth_headers, {}):
                response = await http.post(
                    http_server.url, json=INITIALIZE, headers=MCP_HEADERS | auth | {"Origin": origin}
                )
                assert response.status_code == 403, f"{origin} {bool(auth)}: {describe(response)}"
                assert "http_allowed_origins" in response.text, describe(response)
        port = http_server.port
        for origin in (None, f"http://127.0.0.1:{port}", f"http://localhost:{port}", f"http://[::1]:{port}"):
            raw = RawSession(http, http_server.url, http_server.token, extra={"Origin": origin} if origin else {})
            await raw.initialize()
            listed = await raw.call(2, "tools/list")
            assert any(m.get("id") == 2 and "result" in m for m in jsonrpc_messages(listed)), describe(listed)


async def test_http_allowlisted_origin_passes(start_http_server):
    server = start_http_server(config='[serve]\nhttp_allowed_origins = ["https://app.example"]\n')
    async with httpx2.AsyncClient(timeout=10) as http:
        raw = RawSession(http, server.url, server.token, extra={"Origin": "https://app.example"})
        await raw.initialize()
        echoed = await raw.call(2, "tools/call", {"name": "bash", "arguments": {"command": "echo app", "description": "x"}})
        assert tool_text(echoed, 2) == "app\n[exit code: 0]", describe(echoed)
        for origin in ("https://app.example:8443", "http://app.example", "http://evil.example"):
            response = await http.post(server.url, json=INITIALIZE, headers=MCP_HEADERS | server.auth_headers | {"Origin": origin})
            assert response.status_code == 403, f"{origin}: {describe(response)}"


async def test_http_bearer_scheme_is_accepted_in_any_case(http_server):
    async with httpx2.AsyncClient(timeout=10) as http:
        for scheme in ("bearer", "BEARER"):
            raw = RawSession(http, http_server.url, http_server.token, scheme=scheme)
            await raw.initialize()
            echoed = await raw.call(
                2, "tools/call", {"name": "bash", "arguments": {"command": f"echo {scheme}", "description": "x"}}
            )
            assert tool_text(echoed, 2) == f"{scheme}\n[exit code: 0]", describe(echoed)
        wrong = RawSession(http, http_server.url, http_server.token, scheme="Basic")
        response = await wrong.post(json.dumps(INITIALIZE).encode())
        assert response.status_code == 401, describe(response)


async def test_http_session_past_the_cap_gets_503(start_http_server):
    server = start_http_server(config="[serve]\nhttp_max_sessions = 2\n")
    async with httpx2.AsyncClient(timeout=10) as http:
        first, second = (RawSession(http, server.url, server.token) for _ in range(2))
        await first.initialize()
        await second.initialize()
        third = RawSession(http, server.url, server.token)
        refused = await third.post(json.dumps(INITIALIZE).encode())
        assert refused.status_code == 503, describe(refused)
        assert "http_max_sessions" in refused.text, describe(refused)
        # The sessions already open are served; closing one makes room.
        listed = await first.call(2, "tools/list")
        assert any(m.get("id") == 2 and "result" in m for m in jsonrpc_messages(listed)), describe(listed)
        closed = await http.delete(server.url, headers=first.headers())
        assert closed.status_code in (200, 202, 204), describe(closed)
        await third.initialize()


async def test_http_each_token_reaches_its_own_scope_and_executor(
    start_http_server, open_http_session, text_of, tmp_path
):
    """One server, two scopes: the default one runs commands `local`, `untrusted` (its
    own token) `sandbox`; each call runs under its token's scope and the marker says so."""
    untrusted_token = secrets.token_hex(24)
    config = (
        '[scopes]\nuntrusted = ["*"]\n'
        '[process.executor]\nscopes = { untrusted = "sandbox" }\n'
        '[serve]\nhttp_scope_tokens = { untrusted = "DSH_UNTRUSTED_TOKEN" }\n'
    )
    server = start_http_server(config=config, env={"DSH_UNTRUSTED_TOKEN": untrusted_token})
    untrusted = dataclasses.replace(server, token=untrusted_token)
    outside = tmp_path / "outside"
    outside.mkdir()
    probe = {"command": f"touch {outside}/$MARK && echo wrote", "description": "probe"}

    def run(scope: str) -> dict[str, Any]:
        return {"name": "bash", "arguments": probe | {"command": probe["command"].replace("$MARK", scope)}}

    async with open_http_session(server) as local, open_http_session(untrusted) as sandboxed:
        local_result = await local.call_tool(**run("local"))
        sandboxed_result = await sandboxed.call_tool(**run("sandboxed"))
        # And again in the other order, the two sessions open side by side.
        local_again = await local.call_tool(**run("local-again"))
    local_text, sandboxed_text, again_text = (text_of(r) for r in (local_result, sandboxed_result, local_again))
    assert "wrote" in local_text and "[sandbox:" not in local_text, local_text
    assert "wrote" in again_text and "[sandbox:" not in again_text, again_text
    assert "wrote" not in sandboxed_text, sandboxed_text
    assert "[sandbox: fs=workspace net=off]" in sandboxed_text, sandboxed_text
    assert sorted(p.name for p in outside.iterdir()) == ["local", "local-again"]

    async with httpx2.AsyncClient(timeout=10) as http:
        # A session opened with one scope's token does not exist for the other's.
        mine = RawSession(http, server.url, server.token)
        await mine.initialize()
        theirs = RawSession(http, server.url, untrusted_token)
        theirs.session_id = mine.session_id
        listed = await theirs.call(2, "tools/list")
        assert listed.status_code == 404, describe(listed)
        closed = await http.delete(server.url, headers=theirs.headers())
        still = await mine.call(3, "tools/list")
        assert any(m.get("id") == 3 and "result" in m for m in jsonrpc_messages(still)), (
            f"another scope's DELETE closed the session: {describe(closed)}\n{describe(still)}"
        )
        wrong = RawSession(http, server.url, "not-a-token")
        assert (await wrong.post(json.dumps(INITIALIZE).encode())).status_code == 401


@pytest.mark.parametrize(
    ("scopes", "env", "expected"),
    [
        # Two scopes reached by the same token: which scope a client gets would be a guess.
        ('[scopes]\nuntrusted = ["*"]\n', {"DSH_UNTRUSTED_TOKEN": "same-token"}, "have the same token"),
        # A scope the configuration does not define.
        ("", {"DSH_UNTRUSTED_TOKEN": "its-own-token"}, "http_scope_tokens"),
    ],
)
def test_http_scope_tokens_that_cannot_be_served_refuse_the_start(dsh_bin, dsh_env, dsh_dirs, scopes, env, expected):
    config = write_config(
        dsh_dirs, scopes + '[serve]\nhttp_scope_tokens = { untrusted = "DSH_UNTRUSTED_TOKEN" }\n'
    )
    done = subprocess.run(
        [dsh_bin, "--config", str(config), "serve", "--http", "127.0.0.1:0"],
        env=_full_env(dsh_env | {"DSH_HTTP_TOKEN": "same-token"} | env),
        cwd=dsh_dirs.work,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=30,
    )
    stderr = done.stderr.decode(errors="replace")
    assert done.returncode != 0, stderr
    assert expected in stderr, stderr
    assert "listening on" not in stderr, stderr


# --------------------------------------------------------------------------- generated tokens


async def test_unset_tokens_are_generated_printed_and_the_only_ones_accepted(
    dsh_bin, dsh_env, dsh_dirs, start_http_server, open_http_session
):
    """With `DSH_HTTP_TOKEN` (or a scope's variable) unset, dsh makes the token and prints
    it on stderr; the one printed is accepted, for its scope only, and no other."""
    # `env -u` execs dsh: the token variable the launcher sets is gone.
    server = _launch_http_server(
        ["env", "-u", "DSH_HTTP_TOKEN", dsh_bin, "serve", "--http", "127.0.0.1:0"], dsh_env, dsh_dirs.work
    )
    try:
        printed = "".join(server.stderr_lines)
        main = re.search(r"^dsh: bearer token: ([0-9a-f]{32,})$", printed, re.M)
        assert main, printed
        async with httpx2.AsyncClient(timeout=30) as http:
            for token in (server.token, "wrong", main.group(1) + "0"):
                refused = await http.post(
                    server.url,
                    headers={"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"},
                    json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                )
                assert refused.status_code == 401, (token, refused.status_code, refused.text)
        server.token = main.group(1)
        async with open_http_session(server) as session:
            names = {tool.name for tool in (await session.list_tools()).tools}
            assert {"bash", "read", "terminal_open"} <= names, names
    finally:
        _stop_http_server(server)

    config = '[scopes]\nshell = ["bash"]\n[serve]\nhttp_scope_tokens = { shell = "DSH_TEST_SHELL_TOKEN" }\n'
    scoped = start_http_server(config=config)
    printed = "".join(scoped.stderr_lines)
    shell = re.search(r"^dsh: bearer token for scope shell \(\$DSH_TEST_SHELL_TOKEN unset\): (\S+)$", printed, re.M)
    assert shell and shell.group(1) != scoped.token, printed
    async with open_http_session(scoped) as session:
        names = {tool.name for tool in (await session.list_tools()).tools}
        assert "read" in names, names
    scoped.token = shell.group(1)
    async with open_http_session(scoped) as session:
        assert {tool.name for tool in (await session.list_tools()).tools} == {"bash"}
