"""`dsh serve` over stdio, driven by the official MCP Python SDK.

Covers: the handshake and `tools/list` (the `bash` tool and its input schema),
`tools/call` results (text, `[exit code: N]`, `isError`, structured errors),
unknown tools as JSON-RPC errors, progress notifications, cancellation (the
call's process tree dies and the event log records `CANCELLED`), and a clean
exit with no process left behind when stdin closes.
"""

from __future__ import annotations

import subprocess
import time

import anyio
import pytest
from mcp.shared.exceptions import MCPError
from mcp.types import CONNECTION_CLOSED, REQUEST_TIMEOUT

pytestmark = pytest.mark.anyio


async def test_tools_list_shows_bash_with_its_schema(open_stdio_session):
    async with open_stdio_session() as session:
        listing = await session.list_tools()

    tools = {tool.name: tool for tool in listing.tools}
    assert "bash" in tools, f"tools/list has no bash tool: {sorted(tools)}"
    schema = tools["bash"].input_schema
    assert schema.get("type") == "object", schema
    assert sorted(schema.get("required", [])) == ["command", "description"], schema
    props = schema.get("properties", {})
    assert props.get("command", {}).get("type") == "string", schema
    assert props.get("description", {}).get("type") == "string", schema
    assert props.get("timeoutMs", {}).get("type") == "integer", schema
    assert props.get("workdir", {}).get("type") == "string", schema
    assert schema.get("additionalProperties") is False, schema


async def test_bash_call_returns_output_and_exit_code(open_stdio_session, text_of):
    async with open_stdio_session() as session:
        result = await session.call_tool("bash", {"command": "echo hi", "description": "d"})

    assert result.is_error is False, result
    assert text_of(result) == "hi\n[exit code: 0]", result


async def test_bash_call_missing_description_is_invalid_arguments(open_stdio_session, text_of):
    async with open_stdio_session() as session:
        result = await session.call_tool("bash", {"command": "echo hi"})

    assert result.is_error is True, result
    text = text_of(result)
    assert text.startswith("INVALID_ARGUMENTS: "), text
    assert "description" in text, text
    structured = result.structured_content
    assert isinstance(structured, dict), result
    assert structured.get("code") == "INVALID_ARGUMENTS", structured
    assert structured.get("message"), structured
    assert text.startswith(f"INVALID_ARGUMENTS: {structured['message']}"), (text, structured)


async def test_unknown_tool_is_a_jsonrpc_error(open_stdio_session, text_of):
    async with open_stdio_session() as session:
        # A JSON-RPC error, not a tool result: the SDK raises instead of returning.
        with pytest.raises(MCPError) as raised:
            await session.call_tool("no_such_tool", {"command": "echo hi", "description": "d"})
        # Codes the SDK makes up itself (the server died or never answered) do not count.
        assert raised.value.code not in (CONNECTION_CLOSED, REQUEST_TIMEOUT), raised.value.error
        # MCP: an unknown tool is "invalid params" (-32602), naming the tool.
        assert raised.value.code == -32602, raised.value.error
        assert "no_such_tool" in raised.value.error.message, raised.value.error
        after = await session.call_tool("bash", {"command": "echo ok", "description": "d"})
        assert text_of(after) == "ok\n[exit code: 0]", after


async def test_progress_notifications_arrive_before_the_result(open_stdio_session, text_of):
    progress: list[tuple[float, float | None, str | None, bool]] = []
    returned = False

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message, returned))

    async with open_stdio_session() as session:
        result = await session.call_tool(
            "bash", {"command": "sleep 1; echo done", "description": "wait a second"}, progress_callback=on_progress
        )
        returned = True

    assert text_of(result) == "done\n[exit code: 0]", result
    before = [p for p in progress if not p[3]]
    assert before, f"no notifications/progress arrived before the result (all: {progress})"
    values = [p[0] for p in progress]
    assert values == sorted(values) and len(set(values)) == len(values), f"progress must increase: {values}"


def escaping(marker: str) -> str:
    """A command that leaves `sleep MARKER` processes every way a shell can: a new session
    (`setsid`, `setsid -f`), a double fork, `nohup … & disown`, then waits itself."""
    return (
        f"setsid sleep {marker} & setsid -f sleep {marker}; ( sleep {marker} & ) ; "
        f"nohup sleep {marker} >/dev/null 2>&1 & disown; sleep {marker}"
    )


async def test_cancelled_call_leaves_no_process(open_stdio_session, event_log, markers, procs, text_of):
    marker = markers("600")
    command = escaping(marker)

    async with open_stdio_session() as session:
        await session.list_tools()
        call_finished = anyio.Event()

        async with anyio.create_task_group() as tg:

            async def long_call() -> None:
                try:
                    await session.call_tool("bash", {"command": command, "description": "long"})
                finally:
                    call_finished.set()

            tg.start_soon(long_call)
            await procs.wait_until_present(marker, timeout=10)
            with anyio.fail_after(10):
                while len(procs.matching(marker)) < 5:
                    await anyio.sleep(0.02)
            cancelled_at = time.monotonic()
            # Cancelling the task running call_tool makes the SDK send notifications/cancelled.
            tg.cancel_scope.cancel()

        with anyio.fail_after(5):
            await call_finished.wait()
        await procs.wait_until_gone(marker, timeout=3)
        assert time.monotonic() - cancelled_at < 5, "cancellation took too long"

        call = (await event_log.wait_for(lambda: event_log.calls_with_command_containing(marker), 3, "the call"))[0]
        result = await event_log.wait_for(lambda: event_log.result_for(call), 3, "the cancelled call's tool/result")
        assert result.get("code") == "CANCELLED", f"{result}\n{event_log.dump()}"
        assert result.get("is_error") is True, result

        # The server is still serving after a cancellation.
        after = await session.call_tool("bash", {"command": "echo still-here", "description": "d"})
        assert text_of(after) == "still-here\n[exit code: 0]", after


async def test_a_call_past_its_timeout_leaves_no_process(open_stdio_session, event_log, markers, procs, text_of):
    """`timeoutMs` ends the call with `TIMEOUT` and kills everything it started, escapees too."""
    marker = markers("600")
    async with open_stdio_session() as session:
        result = await session.call_tool(
            "bash", {"command": escaping(marker), "description": "escapes, then times out", "timeoutMs": 1500}
        )
        assert result.is_error and "TIMEOUT" in text_of(result), text_of(result)
        await procs.wait_until_gone(marker, timeout=3)


def test_closing_stdin_exits_cleanly_and_leaves_no_process(raw_stdio_server, markers, procs):
    marker = markers("600")
    server = raw_stdio_server()
    server.initialize()
    # A long call still running when stdin closes.
    server.send(
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "bash", "arguments": {"command": f"sleep {marker}", "description": "long"}},
        }
    )
    procs.wait_until_present_sync(marker, timeout=10)

    server.close_stdin()
    closed_at = time.monotonic()
    try:
        # Waits past the limit only to report how long the exit really took.
        exit_code = server.proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        pytest.fail(f"dsh serve still running 15s after its stdin closed\n{server.stderr()}")
    took = time.monotonic() - closed_at
    assert exit_code == 0, f"dsh serve exited with {exit_code}\n{server.stderr()}"
    # MCP clients give a server a short grace after closing stdin before they
    # SIGTERM it (the Python SDK: 2 s); 5 s is generous.
    assert took < 5.0, f"dsh serve took {took:.2f}s to exit after its stdin closed during a call"
    procs.wait_until_gone_sync(marker, timeout=3)
