"""MCP 2026-07-28 over HTTP: no sessions, so a request's owner is its token's principal.

The official Python SDK's `Client` pinned to 2026-07-28 over streamable HTTP: tools listed
with cache hints, bash, a REPL opened in one request and read in later ones, a job, a
guard's ask answered by a round trip. Two named principals of one scope
(`[serve] http_principals`) cannot reach each other's terminals, jobs or resources, and
get exactly the answer an id that never existed gets. A 2025 session under a principal's
token has an owner of its own. A principal's terminals live on between its requests, and
while a long call of it runs, and go once it has been idle for `http_session_idle_ms`
plus `owner_grace_ms`. The session cap (`http_max_sessions`) holds back handshakes only.
"""

from __future__ import annotations

import re
import warnings
from contextlib import asynccontextmanager

import anyio
import httpx2
import pytest
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from conftest import REQUEST_TIMEOUT

pytestmark = pytest.mark.anyio

MODERN = "2026-07-28"
ALICE, BOB = "alice-token-0123456789", "bob-token-9876543210"
PRINCIPALS = """
[serve.http_principals]
alice = { scope = "default", token_env = "TEST_ALICE_TOKEN" }
bob = { scope = "default", token_env = "TEST_BOB_TOKEN" }
"""
TOKENS = {"TEST_ALICE_TOKEN": ALICE, "TEST_BOB_TOKEN": BOB}


def _text(result) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


@asynccontextmanager
async def _modern(server, token: str, **options):
    """A `Client` pinned to 2026-07-28 over HTTP with `token`."""
    warnings.filterwarnings("ignore")
    headers = {"Authorization": f"Bearer {token}"}
    async with create_mcp_http_client(headers=headers) as http:
        transport = streamable_http_client(server.url, http_client=http)
        async with Client(transport, mode=MODERN, read_timeout_seconds=REQUEST_TIMEOUT, **options) as client:
            assert client.protocol_version == MODERN
            yield client


def _id(prefix: str, text: str) -> str:
    match = re.search(rf"\b{prefix}-\d+\b", text)
    assert match, text
    return match.group(0)


async def test_a_2026_client_over_http_keeps_its_repl_and_job_across_requests(start_http_server):
    server = start_http_server()
    async with _modern(server, server.token) as client:
        listed = await client.list_tools()
        assert {"bash", "terminal_open", "job_output"} <= {t.name for t in listed.tools}
        assert listed.cache_scope == "private" and listed.ttl_ms is not None, listed
        ran = await client.call_tool("bash", {"command": "echo http-$((6*7))", "description": "x"})
        assert "http-42" in _text(ran), _text(ran)
        term = _id("term", _text(await client.call_tool("terminal_open", {})))
        await client.call_tool("terminal_send", {"id": term, "input": "python3 -q", "wait": {"pattern": ">>> "}})
        await client.call_tool("terminal_send", {"id": term, "input": "x = 41", "wait": {"quiet_ms": 300}})
        answer = await client.call_tool("terminal_send", {"id": term, "input": "print(x + 1)", "wait": {"pattern": "42"}})
        assert "42" in _text(answer), _text(answer)
        started = await client.call_tool(
            "bash", {"command": "echo job-$((7*6))", "description": "x", "run_in_background": True}
        )
        job = _id("bash", _text(started))
        output = await client.call_tool("job_output", {"id": job, "wait_ms": 5000})
        assert "job-42" in _text(output), _text(output)


async def test_two_principals_of_one_scope_cannot_reach_each_others_terminals_jobs_or_resources(
    start_http_server, markers, procs
):
    server = start_http_server(PRINCIPALS, env=TOKENS)
    marker = markers()
    async with _modern(server, ALICE) as alice:
        term = _id("term", _text(await alice.call_tool("terminal_open", {})))
        await alice.call_tool("terminal_send", {"id": term, "input": "SECRET=alice-only", "wait": {"quiet_ms": 200}})
        job = _id("bash", _text(await alice.call_tool(
            "bash", {"command": f"echo alice-job; sleep {marker}", "description": "x", "run_in_background": True}
        )))
        await procs.wait_until_present(marker, 10)

    async with _modern(server, BOB) as bob:
        # Each of alice's ids gets what an id that never existed gets, word for word.
        for tool, args in [
            ("terminal_read", {"id": term}),
            ("terminal_send", {"id": term, "input": "echo $SECRET"}),
            ("terminal_close", {"id": term}),
            ("job_output", {"id": job}),
            ("job_kill", {"id": job}),
        ]:
            theirs = await bob.call_tool(tool, args)
            never = {k: (re.sub(r"\d+$", "999", v) if k == "id" else v) for k, v in args.items()}
            nothing = await bob.call_tool(tool, never)
            assert theirs.is_error and "NOT_FOUND" in _text(theirs), (tool, _text(theirs))
            assert _text(theirs).replace(args["id"], "ID") == _text(nothing).replace(never["id"], "ID"), tool
        listed = await bob.call_tool("job_list", {})
        assert job not in _text(listed), _text(listed)
        assert [r.uri for r in (await bob.list_resources()).resources] == []
        errors = []
        for uri in (f"job://{job}/output", f"terminal://{term}/screen"):
            for asked in (uri, re.sub(r"-\d+/", "-999/", uri)):
                try:
                    await bob.read_resource(asked)
                    errors.append((asked, "read"))
                except Exception as error:  # the SDK raises the JSON-RPC error
                    errors.append((asked, getattr(error, "error", error)))
        # The same error for alice's resource as for one that never existed (under
        # 2026-07-28 a missing resource is -32602).
        answers = {(getattr(e, "code", e), re.sub(r"-\d+/", "-N/", getattr(e, "message", ""))) for _, e in errors}
        assert len(answers) == 2 and {code for code, _ in answers} == {-32602}, errors
    assert procs.matching(marker), "bob's calls touched alice's job"

    async with _modern(server, ALICE) as alice:
        read = await alice.call_tool("terminal_send", {"id": term, "input": "echo $SECRET", "wait": {"pattern": "alice-only\\s"}})
        assert "alice-only" in _text(read), _text(read)
        killed = await alice.call_tool("job_kill", {"id": job})
        assert not killed.is_error, _text(killed)
    await procs.wait_until_gone(marker, 10)


async def test_a_2025_session_under_a_principals_token_has_an_owner_of_its_own(start_http_server, open_http_session):
    server = start_http_server(PRINCIPALS, env=TOKENS)
    async with _modern(server, ALICE) as alice:
        term = _id("term", _text(await alice.call_tool("terminal_open", {})))
    server.token = ALICE
    async with open_http_session(server) as session:
        theirs = await session.call_tool("terminal_read", {"id": term})
        assert theirs.is_error and "NOT_FOUND" in _text(theirs), _text(theirs)
        own = _id("term", _text(await session.call_tool("terminal_open", {})))
    async with _modern(server, ALICE) as alice:
        listed = _text(await alice.call_tool("terminal_list", {}))
        assert re.findall(r"\bterm-\d+\b", listed) == [term], (own, listed)


IDLE = """
[serve]
http_session_idle_ms = 600
owner_grace_ms = 300
"""


async def test_a_principals_terminal_lives_while_it_calls_and_goes_once_it_is_idle(start_http_server, markers, procs):
    server = start_http_server(IDLE)
    marker = markers()
    async with _modern(server, server.token) as client:
        term = _id("term", _text(await client.call_tool("terminal_open", {})))
        await client.call_tool("terminal_send", {"id": term, "input": f"sleep {marker} &", "wait": {"quiet_ms": 200}})
        await procs.wait_until_present(marker, 10)
        # One call longer than idle + grace: the principal is held while it runs.
        slow = await client.call_tool("bash", {"command": "sleep 2; echo slept", "description": "x"})
        assert "slept" in _text(slow), _text(slow)
        assert procs.matching(marker), "the terminal went while its principal's call ran"
        alive = await client.call_tool("terminal_send", {"id": term, "input": "echo still-$((2*21))", "wait": {"pattern": "still-42"}})
        assert "still-42" in _text(alive), _text(alive)
    # No request for idle + grace: the terminal and its processes go.
    await procs.wait_until_gone(marker, 10)


async def test_the_session_cap_holds_back_handshakes_not_2026_requests(start_http_server, open_http_session):
    server = start_http_server("[serve]\nhttp_max_sessions = 1\n")
    async with open_http_session(server) as first:
        await first.list_tools()
        async with httpx2.AsyncClient(headers=server.auth_headers | {"Accept": "application/json, text/event-stream"}) as http:
            refused = await http.post(server.url, json={
                "jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "x", "version": "0"}},
            })
            assert refused.status_code == 503, refused.text
        async with _modern(server, server.token) as client:
            ran = await client.call_tool("bash", {"command": "echo beyond-the-cap", "description": "x"})
            assert "beyond-the-cap" in _text(ran), _text(ran)


ASKING = '[pipeline]\nguards = ["ask_git_push"]\n'
PUSH = {"command": "echo would-push; git push origin main 2>/dev/null; true", "description": "push"}


async def test_a_guards_ask_over_http_is_a_round_trip_across_two_requests(start_http_server):
    from mcp import types

    server = start_http_server(ASKING)
    answers = ["decline", "accept"]

    async def answer(context, params):
        return types.ElicitResult(action=answers.pop(0), content={})

    async with _modern(server, server.token, elicitation_callback=answer) as client:
        declined = await client.call_tool("bash", PUSH)
        assert declined.is_error and "DENIED" in _text(declined), _text(declined)
        accepted = await client.call_tool("bash", PUSH)
        assert not accepted.is_error and "would-push" in _text(accepted), _text(accepted)
    assert answers == []


async def test_a_request_state_is_bound_to_its_principal(start_http_server, markers, procs):
    """Alice's `requestState` presented with Bob's token is refused, and nothing runs."""
    server = start_http_server(PRINCIPALS + ASKING, env=TOKENS)
    marker = markers()
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
    }
    arguments = {"command": f"sleep {marker}; git push origin main 2>/dev/null; true", "description": "x"}
    params = {"_meta": meta, "name": "bash", "arguments": arguments}

    async def post(token: str, body: dict) -> dict:
        headers = {
            "Authorization": f"Bearer {token}",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": MODERN,
            "Mcp-Method": "tools/call",
            "Mcp-Name": "bash",
        }
        async with httpx2.AsyncClient(timeout=REQUEST_TIMEOUT) as http:
            response = await http.post(server.url, json=body, headers=headers)
        text = response.text
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            datas = [line[5:].strip() for line in text.splitlines() if line.startswith("data:") and line[5:].strip()]
            text = datas[-1]
        import json

        return json.loads(text)

    asked = await post(ALICE, {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
    result = asked["result"]
    assert result["resultType"] == "input_required", result
    state = result["requestState"]
    (key,) = result["inputRequests"].keys()
    answer = {key: {"action": "accept", "content": {}}}
    retry = dict(params, requestState=state, inputResponses=answer)
    foreign = await post(BOB, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": retry})
    assert "error" in foreign and foreign["error"]["code"] == -32602, foreign
    await anyio.sleep(0.5)
    assert procs.matching(marker) == [], "a foreign requestState ran the call"


@pytest.mark.parametrize(
    "principals, env, expected",
    [
        ('alice = { scope = "default", token_env = "TEST_ALICE_TOKEN" }', {}, "$TEST_ALICE_TOKEN is unset"),
        (
            'alice = { scope = "default", token_env = "TEST_ALICE_TOKEN" }',
            {"TEST_ALICE_TOKEN": "main-token"},
            "have the same token",
        ),
        ('default = { scope = "default", token_env = "TEST_ALICE_TOKEN" }', {"TEST_ALICE_TOKEN": ALICE}, "name it otherwise"),
        ('alice = { scope = "nowhere", token_env = "TEST_ALICE_TOKEN" }', {"TEST_ALICE_TOKEN": ALICE}, "nowhere"),
        ('"a b" = { scope = "default", token_env = "TEST_ALICE_TOKEN" }', {"TEST_ALICE_TOKEN": ALICE}, "not a principal name"),
        ('alice = { scope = "default", token_env = "1X" }', {}, "not an environment variable name"),
    ],
)
def test_principals_that_cannot_be_served_refuse_the_start(dsh_bin, dsh_env, dsh_dirs, principals, env, expected):
    import subprocess

    from conftest import _full_env, write_config

    config = write_config(dsh_dirs, f"[serve.http_principals]\n{principals}\n")
    done = subprocess.run(
        [dsh_bin, "--config", str(config), "serve", "--http", "127.0.0.1:0"],
        env=_full_env(dsh_env | {"DSH_HTTP_TOKEN": "main-token"} | env),
        cwd=dsh_dirs.work,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=30,
    )
    stderr = done.stderr.decode(errors="replace")
    assert done.returncode != 0 and expected in stderr, stderr
    assert "listening on" not in stderr, stderr


async def test_headers_that_disagree_with_the_body_run_nothing(start_http_server, markers, procs):
    server = start_http_server()
    marker = markers()
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
    }
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"_meta": meta, "name": "bash", "arguments": {"command": f"sleep {marker}", "description": "x"}},
    }
    right = {"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": "bash"}
    async with httpx2.AsyncClient(timeout=REQUEST_TIMEOUT) as http:
        for wrong in (
            {"MCP-Protocol-Version": "2025-11-25"},
            {"Mcp-Method": "tools/list"},
            {"Mcp-Name": "read"},
        ):
            headers = server.auth_headers | {"Accept": "application/json, text/event-stream"} | right | wrong
            response = await http.post(server.url, json=body, headers=headers)
            assert response.status_code == 400, (wrong, response.status_code, response.text)
            assert "error" in response.json(), (wrong, response.text)
        unknown = dict(body, params=dict(body["params"], _meta=dict(meta, **{"io.modelcontextprotocol/protocolVersion": "2099-01-01"})))
        headers = server.auth_headers | {"Accept": "application/json, text/event-stream"} | right | {"MCP-Protocol-Version": "2099-01-01"}
        response = await http.post(server.url, json=unknown, headers=headers)
        assert response.json()["error"]["code"] == -32022, response.text
    await anyio.sleep(0.5)
    assert procs.matching(marker) == [], "a refused request started its command"


# --------------------------------------------------------------------------- subscriptions/listen


@asynccontextmanager
async def _modern_stdio(dsh_bin, dsh_env, dsh_dirs):
    from mcp.client.stdio import StdioServerParameters

    from conftest import _config_args

    warnings.filterwarnings("ignore")
    params = StdioServerParameters(
        command=dsh_bin, args=["serve", *_config_args(dsh_dirs, None)], env=dsh_env, cwd=str(dsh_dirs.work)
    )
    async with Client(params, mode=MODERN, read_timeout_seconds=REQUEST_TIMEOUT) as client:
        yield client


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_subscriptions_listen_brings_a_jobs_updates_and_the_lists_changes(
    transport, dsh_bin, dsh_env, dsh_dirs, start_http_server
):
    from mcp.shared.subscriptions import ResourcesListChanged, ResourceUpdated

    if transport == "stdio":
        opened = _modern_stdio(dsh_bin, dsh_env, dsh_dirs)
    else:
        server = start_http_server()
        opened = _modern(server, server.token)
    async with opened as client:
        started = await client.call_tool(
            "bash",
            {"command": "sleep 1; for i in 1 2 3; do echo tick-$i; sleep 0.3; done", "description": "x", "run_in_background": True},
        )
        job = _id("bash", _text(started))
        uri = f"job://{job}/output"
        async with client.listen(resources_list_changed=True, resource_subscriptions=[uri, "job://bash-999/output"]) as sub:
            assert sub.honored.resource_subscriptions == [uri], sub.honored
            events = []
            with anyio.fail_after(15):
                async for event in sub:
                    events.append(event)
                    if isinstance(event, ResourcesListChanged):  # the job's end
                        break
        assert ResourceUpdated(uri=uri) in events, events
        output = await client.read_resource(uri)
        assert "tick-3" in output.contents[0].text, output


async def test_a_principal_cannot_listen_to_anothers_resources(start_http_server):
    server = start_http_server(PRINCIPALS, env=TOKENS)
    async with _modern(server, ALICE) as alice:
        job = _id("bash", _text(await alice.call_tool(
            "bash", {"command": "sleep 5", "description": "x", "run_in_background": True}
        )))
    async with _modern(server, BOB) as bob:
        async with bob.listen(resource_subscriptions=[f"job://{job}/output", "job://bash-999/output"]) as sub:
            assert not sub.honored.resource_subscriptions, sub.honored


async def test_a_2025_session_is_bound_to_the_principal_that_opened_it(start_http_server):
    """Bob presenting the id of a session Alice's token opened gets the 404 of a session
    that does not exist, though both tokens reach the same scope."""
    server = start_http_server(PRINCIPALS, env=TOKENS)
    init = {
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "x", "version": "0"}},
    }
    accept = {"Accept": "application/json, text/event-stream"}
    async with httpx2.AsyncClient(timeout=REQUEST_TIMEOUT) as http:
        opened = await http.post(server.url, json=init, headers=accept | {"Authorization": f"Bearer {ALICE}"})
        session = opened.headers["mcp-session-id"]
        ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
        session_headers = accept | {"Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"}
        theirs = await http.post(server.url, json=ping, headers=session_headers | {"Authorization": f"Bearer {BOB}"})
        never = await http.post(
            server.url, json=ping,
            headers=session_headers | {"Authorization": f"Bearer {BOB}", "Mcp-Session-Id": "no-such-session"},
        )
        assert theirs.status_code == never.status_code == 404, (theirs.status_code, theirs.text, never.text)
        assert theirs.text == never.text, (theirs.text, never.text)
        mine = await http.post(server.url, json=ping, headers=session_headers | {"Authorization": f"Bearer {ALICE}"})
        assert mine.status_code == 200, mine.text


async def test_a_plugins_sampling_and_form_over_http_are_round_trips(start_http_server, tmp_path):
    """A plugin's `sampling` and `elicitation` host calls under 2026-07-28 over HTTP: each
    question is the request's `input_required`, answered by the retry, across requests."""
    import json

    from test_client_asks import ELICITATION, GRANTS, SAMPLING, Client as Scripted, plugins_dir

    server = start_http_server(GRANTS, env={"DSH_PLUGINS": str(plugins_dir(tmp_path))})
    scripted = Scripted()
    async with _modern(server, server.token, **scripted.callbacks()) as client:
        sampled = await client.call_tool(*SAMPLING)
        assert not sampled.is_error, _text(sampled)
        assert _text(sampled) == "LLM response: This is a test response from the client", _text(sampled)
        elicited = await client.call_tool(*ELICITATION)
        said = _text(elicited)
        assert not elicited.is_error and said.startswith("User response: action: accept, content: "), said
        assert json.loads(said.split("content: ", 1)[1]) == {"username": "testuser", "email": "test@example.com"}
    [request] = scripted.samplings
    assert request.max_tokens == 100 and not request.tools, request
    assert len(scripted.forms) == 1, scripted.forms
