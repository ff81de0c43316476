"""Guards under `dsh serve`: a guard's `ask` becomes an MCP elicitation, over stdio and
HTTP (accept runs the call, decline denies it, a client without elicitation gets
"approval required"); a guard
that fails denies the calls it sees while the server carries on; replacing a guard's
`.wasm` flips its decision on the next call, with no restart."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import anyio
import pytest
from conftest import write_config
from mcp import types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from tool_results import expect_error, show, text

pytestmark = pytest.mark.anyio

PUSH = {"command": "git push --dry-run nowhere 2>/dev/null; echo push-ran", "description": "push"}


def built(name: str) -> Path:
    return Path(os.environ["DSH_PLUGIN_WASM_DIR"]) / f"{name}.wasm"


def serve(dsh_bin, dsh_env, dsh_dirs, config: str, plugins: Path | None = None) -> StdioServerParameters:
    args = ["--config", str(write_config(dsh_dirs, config))]
    if plugins is not None:
        args += ["--plugins", str(plugins)]
    return StdioServerParameters(command=dsh_bin, args=[*args, "serve"], env=dsh_env, cwd=str(dsh_dirs.work))


async def test_an_ask_is_put_to_the_client_as_an_elicitation(dsh_bin, dsh_env, dsh_dirs, event_log):
    params = serve(dsh_bin, dsh_env, dsh_dirs, '[pipeline]\nguards = ["ask_git_push"]\n')
    asked: list[str] = []
    answers = ["accept", "decline"]

    async def answer(context, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action=answers.pop(0), content={})

    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, elicitation_callback=answer) as session:
            await session.initialize()
            accepted = await session.call_tool("bash", PUSH)
            assert not accepted.is_error and "push-ran" in text(accepted), show(("bash", PUSH), accepted)
            declined = await session.call_tool("bash", PUSH)
            message = expect_error(("bash", PUSH), declined, "DENIED")
            assert "refused" in message, message
            plain = await session.call_tool("bash", {"command": "echo no push", "description": "plain"})
            assert not plain.is_error, show(None, plain)
    assert len(asked) == 2, asked
    assert "ask_git_push" in asked[0] and "git push" in asked[0], asked[0]
    decisions = [(e["decision"], e["channel"]) for e in event_log.events() if e["event"] == "approval"]
    assert decisions == [("approved", "elicitation"), ("denied", "elicitation")], decisions


async def test_a_client_without_elicitation_gets_approval_required(dsh_bin, dsh_env, dsh_dirs):
    params = serve(dsh_bin, dsh_env, dsh_dirs, '[pipeline]\nguards = ["ask_git_push"]\n')
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            result = await session.call_tool("bash", PUSH)
            message = expect_error(("bash", PUSH), result, "DENIED")
            assert message.startswith("approval required: guard ask_git_push"), message
            assert "does not support elicitation" in message, message


async def test_a_failing_guard_denies_and_the_server_carries_on(dsh_bin, dsh_env, dsh_dirs, tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    shutil.copy(built("test_guard"), plugins / "spinner.wasm")
    shutil.copy(built("echo"), plugins / "echo.wasm")
    config = """
[pipeline]
guards = ["spinner"]
[plugins.spinner]
cpu_ms = 200
[plugins.spinner.settings]
verdict = "loop"
tools = "echo"
"""
    async with stdio_client(serve(dsh_bin, dsh_env, dsh_dirs, config, plugins)) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            for _ in range(3):
                denied = await session.call_tool("echo", {"text": "x"})
                message = expect_error(("echo", {"text": "x"}), denied, "DENIED")
                assert "guard spinner failed (PLUGIN_CPU_LIMIT" in message, message
            ok = await session.call_tool("bash", {"command": "echo still serving", "description": "after"})
            assert not ok.is_error and "still serving" in text(ok), show(None, ok)

            # `dsh stats` reads the running server's metrics.
            env = {k: os.environ[k] for k in ("HOME", "PATH") if k in os.environ} | dsh_env
            listed = await anyio.to_thread.run_sync(
                lambda: subprocess.run(
                    [dsh_bin, "stats", "--json"], env=env, capture_output=True, text=True, timeout=60, check=True
                )
            )
            stats = json.loads(listed.stdout)
            assert stats["origin"].startswith("dsh serve, pid "), stats
            assert stats["tools"]["echo"]["calls"] == 3 and stats["tools"]["echo"]["errors"] == {"DENIED": 3}, stats
            assert stats["tools"]["bash"]["calls"] == 1 and stats["tools"]["bash"]["errors"] == {}, stats


async def test_replacing_a_guard_flips_its_decision_without_a_restart(dsh_bin, dsh_env, dsh_dirs, tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    shutil.copy(built("echo"), plugins / "echo.wasm")
    shutil.copy(built("test_guard"), plugins / "policy.wasm")
    config = """
[pipeline]
guards = ["policy"]
[plugins.policy.settings]
verdict = "deny"
tools = "echo"
reason = "policy v1 forbids echo"
"""

    def place(built_name: str) -> None:
        partial = plugins / "policy.wasm.partial"
        shutil.copy(built(built_name), partial)
        partial.rename(plugins / "policy.wasm")

    async def echo_denied(session: ClientSession) -> bool:
        return (await session.call_tool("echo", {"text": "x"})).is_error

    async def wait_for(session: ClientSession, denied: bool, what: str) -> None:
        with anyio.move_on_after(15):
            while await echo_denied(session) != denied:
                await anyio.sleep(0.05)
            return
        pytest.fail(f"timed out waiting for {what}")

    async with stdio_client(serve(dsh_bin, dsh_env, dsh_dirs, config, plugins)) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            first = await session.call_tool("echo", {"text": "x"})
            assert "policy v1 forbids echo" in expect_error(("echo", {}), first, "DENIED")
            # Another build answers for `policy`: it has no objection to echo.
            place("ask_git_push")
            await wait_for(session, denied=False, what="the new policy to allow echo")
            assert text(await session.call_tool("echo", {"text": "now"})) == "now"
            place("test_guard")
            await wait_for(session, denied=True, what="the first policy to deny echo again")


async def test_an_ask_over_http_is_an_elicitation_too(start_http_server):
    server = start_http_server('[pipeline]\nguards = ["ask_git_push"]\n')
    asked: list[str] = []

    async def accept(context, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={})

    async with create_mcp_http_client(headers=server.auth_headers) as http:
        async with streamable_http_client(server.url, http_client=http) as (read, write):
            async with ClientSession(read, write, elicitation_callback=accept) as session:
                await session.initialize()
                result = await session.call_tool("bash", PUSH)
                assert not result.is_error and "push-ran" in text(result), show(("bash", PUSH), result)
    assert len(asked) == 1 and "git push" in asked[0], asked


async def test_an_elicitation_not_answered_within_approval_timeout_ms_is_a_denial(dsh_bin, dsh_env, dsh_dirs, event_log):
    params = serve(
        dsh_bin, dsh_env, dsh_dirs, '[pipeline]\nguards = ["ask_git_push"]\n[serve]\napproval_timeout_ms = 2000\n'
    )
    # Long enough for the client to be asked on a loaded machine: the ask must reach it.
    asked = anyio.Event()

    async def never(context, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, elicitation_callback=never) as session:
            await session.initialize()
            with anyio.fail_after(15):
                result = await session.call_tool("bash", PUSH)
            assert asked.is_set(), "the client was never asked"
            message = expect_error(("bash", PUSH), result, "DENIED")
            assert "approval required: guard ask_git_push" in message, message
            assert "timeout" in message, message
            assert "push-ran" not in text(result)
    # Logged as no answer to be had, not as the client's refusal.
    decisions = [e["decision"] for e in event_log.events() if e["event"] == "approval"]
    assert decisions == ["unavailable"], decisions
