"""Jobs as tasks (MCP 2026-07-28's Tasks extension, `io.modelcontextprotocol/tasks`).

No released SDK client drives tasks yet (the Python SDK 2.3 `Client` has no tasks API),
so these speak the revision's JSON-RPC by hand: over stdio, and over HTTP between two
principals of one scope. A client that declares the extension gets a background job as a
task whose id is the job's; `tasks/get` polls it to its result; `tasks/cancel` kills its
process tree (checked in /proc); a client that did not declare it gets the job's text as
before; and another principal's task is the same `-32602` as one that never existed.
"""

from __future__ import annotations

import json
import time

import httpx2
import pytest

from conftest import REQUEST_TIMEOUT

MODERN = "2026-07-28"
TASKS = {"extensions": {"io.modelcontextprotocol/tasks": {}}}


def _meta(capabilities: dict) -> dict:
    return {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
    }


def _background(command: str) -> dict:
    return {"name": "bash", "arguments": {"command": command, "description": "x", "run_in_background": True}}


def test_a_job_is_a_task_polled_to_its_result_and_cancelled_with_its_processes(raw_stdio_server, markers, procs):
    server = raw_stdio_server()
    next_id = iter(range(1, 1000))

    def request(method: str, params: dict, capabilities: dict = TASKS) -> dict:
        request_id = next(next_id)
        server.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": dict(params, _meta=_meta(capabilities))})
        return server.receive_response(request_id)

    created = request("tools/call", _background("sleep 0.5; echo task-$((6*7))"))["result"]
    assert created["resultType"] == "task" and created["status"] == "working", created
    task = created["taskId"]
    assert task.startswith("bash-"), created
    deadline = time.monotonic() + 10
    while (state := request("tasks/get", {"taskId": task})["result"])["status"] == "working":
        assert time.monotonic() < deadline, state
        time.sleep(0.1)
    assert state["status"] == "completed", state
    text = state["result"]["content"][0]["text"]
    assert "task-42" in text and "[exit code: 0]" in text and state["result"]["isError"] is False, state

    marker = markers()
    running = request("tools/call", _background(f"sleep {marker} & sleep {marker}; wait"))["result"]["taskId"]
    procs.wait_until_present_sync(marker, 10)
    assert request("tasks/get", {"taskId": running})["result"]["status"] == "working"
    assert request("tasks/cancel", {"taskId": running}).get("result") is not None
    procs.wait_until_gone_sync(marker, 10)
    assert request("tasks/get", {"taskId": running})["result"]["status"] == "cancelled"

    # The job tools see the task's job too.
    listed = request("tools/call", {"name": "job_list", "arguments": {}})["result"]
    assert task in listed["content"][0]["text"] and running in listed["content"][0]["text"], listed

    # Not declared: the job's text, as before.
    plain = request("tools/call", _background("true"), capabilities={})["result"]
    assert plain["resultType"] == "complete" and "started background job" in plain["content"][0]["text"], plain

    missing = request("tasks/get", {"taskId": "bash-999"})
    assert missing["error"]["code"] == -32602 and "bash-999" in missing["error"]["message"], missing


PRINCIPALS = """
[serve.http_principals]
alice = { scope = "default", token_env = "TEST_ALICE_TOKEN" }
bob = { scope = "default", token_env = "TEST_BOB_TOKEN" }
"""
ALICE, BOB = "alice-token-0123456789", "bob-token-9876543210"


@pytest.mark.anyio
async def test_another_principals_task_is_one_that_never_existed(start_http_server, markers, procs):
    server = start_http_server(PRINCIPALS, env={"TEST_ALICE_TOKEN": ALICE, "TEST_BOB_TOKEN": BOB})
    marker = markers()

    async def request(token: str, method: str, params: dict, name: str | None = None) -> dict:
        headers = {
            "Authorization": f"Bearer {token}",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": MODERN,
            "Mcp-Method": method,
        }
        if name:
            headers["Mcp-Name"] = name
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": dict(params, _meta=_meta(TASKS))}
        async with httpx2.AsyncClient(timeout=REQUEST_TIMEOUT) as http:
            response = await http.post(server.url, json=body, headers=headers)
        text = response.text
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            text = [line[5:] for line in text.splitlines() if line.startswith("data:") and line[5:].strip()][-1]
        return json.loads(text)

    created = await request(ALICE, "tools/call", _background(f"sleep {marker}"), name="bash")
    task = created["result"]["taskId"]
    await procs.wait_until_present(marker, 10)
    for method in ("tasks/get", "tasks/cancel"):
        theirs = await request(BOB, method, {"taskId": task}, name=task)
        never = await request(BOB, method, {"taskId": "bash-999"}, name="bash-999")
        assert theirs["error"]["code"] == never["error"]["code"] == -32602, (theirs, never)
        assert theirs["error"]["message"].replace(task, "ID") == never["error"]["message"].replace("bash-999", "ID")
    assert procs.matching(marker), "bob's tasks/cancel killed alice's job"
    assert (await request(ALICE, "tasks/get", {"taskId": task}, name=task))["result"]["status"] == "working"
    assert "result" in await request(ALICE, "tasks/cancel", {"taskId": task}, name=task)
    await procs.wait_until_gone(marker, 10)


def test_a_long_call_becomes_a_task_and_its_cancel_kills_it(raw_stdio_server, markers, procs):
    """With `[serve] task_after_ms`, a foreground call of a client that speaks tasks still
    running then is answered as a task (`call-N`); its result comes by `tasks/get`, and
    `tasks/cancel` ends it with its processes. A client that does not speak tasks waits
    for the result as before."""
    server = raw_stdio_server("[serve]\ntask_after_ms = 300\n")
    next_id = iter(range(1, 1000))

    def request(method: str, params: dict, capabilities: dict = TASKS) -> dict:
        request_id = next(next_id)
        server.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": dict(params, _meta=_meta(capabilities))})
        return server.receive_response(request_id)

    slow = {"name": "bash", "arguments": {"command": "sleep 1.2; echo long-$((6*7))", "description": "x"}}
    created = request("tools/call", slow)["result"]
    assert created["resultType"] == "task" and created["taskId"].startswith("call-"), created
    task = created["taskId"]
    deadline = time.monotonic() + 15
    while (state := request("tasks/get", {"taskId": task})["result"])["status"] == "working":
        assert time.monotonic() < deadline, state
        time.sleep(0.1)
    assert state["status"] == "completed" and "long-42" in state["result"]["content"][0]["text"], state

    marker = markers()
    hung = {"name": "bash", "arguments": {"command": f"sleep {marker}", "description": "x"}}
    cancelled = request("tools/call", hung)["result"]["taskId"]
    procs.wait_until_present_sync(marker, 10)
    assert "result" in request("tasks/cancel", {"taskId": cancelled})
    procs.wait_until_gone_sync(marker, 10)
    deadline = time.monotonic() + 10
    while (state := request("tasks/get", {"taskId": cancelled})["result"])["status"] == "working":
        assert time.monotonic() < deadline, state
        time.sleep(0.1)
    assert state["status"] == "cancelled", state

    plain = request("tools/call", slow, capabilities={})["result"]
    assert plain["resultType"] == "complete" and "long-42" in plain["content"][0]["text"], plain
