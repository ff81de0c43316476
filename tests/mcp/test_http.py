"""`dsh serve --http` (MCP streamable HTTP at /mcp), driven by the MCP Python SDK and raw HTTP.

Covers: one owner per MCP session in the event log, calls of different
sessions running concurrently, progress and cancellation over HTTP, bearer
token authentication (401 without or with a wrong token), and robustness:
malformed JSON, unknown methods and oversized bodies are rejected while an
already-initialized client keeps getting correct answers.
"""

from __future__ import annotations

import json
import re
import select
import socket
import time
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx2
import pytest
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

    def __init__(self, http: httpx2.AsyncClient, url: str, token: str) -> None:
        self.http = http
        self.url = url
        self.token = token
        self.session_id: str | None = None

    def headers(self) -> dict[str, str]:
        headers = MCP_HEADERS | {"Authorization": f"Bearer {self.token}"}
        if self.session_id:
            headers |= {"Mcp-Session-Id": self.session_id, "Mcp-Protocol-Version": PROTOCOL_VERSION}
        return headers

    async def post(self, body: bytes) -> httpx2.Response:
        return await self.http.post(self.url, content=body, headers=self.headers())

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


# --------------------------------------------------------------------------- progress and cancellation


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
        assert 400 <= status < 500, what
        assert not event_log.calls_with_command_containing("x" * 1000), "the oversized call was executed"

        await echo_works(session, "after", text_of)
