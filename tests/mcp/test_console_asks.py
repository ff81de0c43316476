"""The console's edges that need no browser: a guard's ask put to the client's elicitation
and to the console at once (whichever answers first decides, and the `approval` event
names it), a console login that expires, and a console token that must be its own.

The client is the MCP Python SDK over HTTP (it speaks 2026-07-28 first, so its asks
are round trips); the console is reached with raw HTTP, as its page does.
"""

from __future__ import annotations

import secrets
import subprocess
import time

import anyio
import httpx2
import pytest
from mcp import types
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from conftest import _full_env
from test_guards import PUSH
from tool_results import expect_error, show, text

pytestmark = pytest.mark.anyio

ASK_PUSH = '[pipeline]\nguards = ["ask_git_push"]\n'


def base(server) -> str:
    return f"http://127.0.0.1:{server.port}"


async def logged_in(http: httpx2.AsyncClient, server, token: str) -> None:
    response = await http.post(
        f"{base(server)}/console/login", data={"token": token}, headers={"Origin": base(server)}
    )
    assert response.status_code == 303 and response.headers["location"] == "/console", response.text
    assert http.cookies.get("dsh_console"), response.headers


async def waiting(http: httpx2.AsyncClient, server, timeout: float = 15.0) -> list[dict]:
    """The asks the console shows, once there is one."""
    deadline = time.monotonic() + timeout
    while True:
        state = (await http.get(f"{base(server)}/console/api/state")).json()
        if state["approvals"] or time.monotonic() > deadline:
            return state["approvals"]
        await anyio.sleep(0.1)


def approvals(event_log) -> list[dict]:
    return [e for e in event_log.events() if e["event"] == "approval"]


async def test_the_first_answer_decides_between_the_client_and_the_console(start_http_server, event_log):
    token = secrets.token_hex(24)
    server = start_http_server(ASK_PUSH, env={"DSH_CONSOLE_TOKEN": token})
    release_client = anyio.Event()
    asked: list[str] = []

    async def client_answers_once_the_console_shows_it(context, params: types.ElicitRequestParams):
        asked.append(params.message)
        if len(asked) == 1:
            # The console shows the ask while the client is being asked: both wait.
            async with httpx2.AsyncClient() as http:
                await logged_in(http, server, token)
                shown = await waiting(http, server)
                assert len(shown) == 1 and shown[0]["tool"] == "bash", shown
            return types.ElicitResult(action="accept", content={})
        # The second time the client never answers: the console does.
        await release_client.wait()
        return types.ElicitResult(action="decline", content={})

    async with create_mcp_http_client(headers=server.auth_headers) as client_http:
        async with streamable_http_client(server.url, http_client=client_http) as (read, write):
            async with ClientSession(
                read, write, elicitation_callback=client_answers_once_the_console_shows_it
            ) as session:
                await session.initialize()
                with anyio.fail_after(30):
                    first = await session.call_tool("bash", PUSH)
                assert not first.is_error and "push-ran" in text(first), show(("bash", PUSH), first)

                async with httpx2.AsyncClient() as console:
                    await logged_in(console, server, token)

                    async def operator_denies() -> None:
                        shown = await waiting(console, server)
                        assert len(shown) == 1, shown
                        answered = await console.post(
                            f"{base(server)}/console/api/approvals/{shown[0]['id']}",
                            json={"decision": "deny", "note": "not on a Friday"},
                            headers={"Origin": base(server), "X-Dsh-Console": "1"},
                        )
                        assert answered.status_code == 200, answered.text
                        again = await console.post(
                            f"{base(server)}/console/api/approvals/{shown[0]['id']}",
                            json={"decision": "approve"},
                            headers={"Origin": base(server), "X-Dsh-Console": "1"},
                        )
                        assert again.status_code == 404, "an ask is answered once"

                    async with anyio.create_task_group() as tasks:
                        tasks.start_soon(operator_denies)
                        with anyio.fail_after(30):
                            second = await session.call_tool("bash", PUSH)
                    message = expect_error(("bash", PUSH), second, "DENIED")
                    assert "not on a Friday" in message, message
                    assert "push-ran" not in text(second)
                    state = (await console.get(f"{base(server)}/console/api/state")).json()
                    assert state["approvals"] == [], "an answered ask leaves the console"
                release_client.set()
    decided = approvals(event_log)
    # The client's answer is an elicitation (a round trip under 2026-07-28).
    assert [(e["decision"], e["channel"].split(" ")[0]) for e in decided] == [
        ("approved", "elicitation"),
        ("denied", "console"),
    ], decided
    assert decided[1]["note"] == "not on a Friday" and decided[1]["owner"], decided[1]


async def test_a_console_login_expires(start_http_server):
    token = secrets.token_hex(24)
    server = start_http_server("[serve]\nhttp_console_login_ms = 1500\n", env={"DSH_CONSOLE_TOKEN": token})
    async with httpx2.AsyncClient() as http:
        await logged_in(http, server, token)
        assert (await http.get(f"{base(server)}/console/api/state")).status_code == 200
        await anyio.sleep(2.0)
        expired = await http.get(f"{base(server)}/console/api/state")
        assert expired.status_code == 401, expired.text
        page = await http.get(f"{base(server)}/console", follow_redirects=False)
        assert page.status_code == 303 and page.headers["location"] == "/console/login"


def test_the_console_token_must_be_its_own_and_long_enough(dsh_bin, dsh_env, dsh_dirs):
    shared = secrets.token_hex(24)
    for console_token, why in [(shared, "the token of scope"), ("short", "shorter than 16")]:
        run = subprocess.run(
            [dsh_bin, "serve", "--http", "127.0.0.1:0"],
            env=_full_env(dsh_env | {"DSH_HTTP_TOKEN": shared, "DSH_CONSOLE_TOKEN": console_token}),
            cwd=dsh_dirs.work,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=60,
        )
        assert run.returncode != 0, run.stderr.decode()
        assert why in run.stderr.decode(), run.stderr.decode()
