"""The plugin sandbox seen through `dsh serve`: hostile plugin calls (an endless loop, a
memory bomb, runaway recursion, a panic, a 100 MiB result) each end in their structured
error while the server and every other call carry on, and the next call to the same
plugin works."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import anyio
import pytest
from conftest import write_config
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from tool_results import expect_error, show, text

pytestmark = pytest.mark.anyio

HOSTILE_BOUNDS = """
[plugins.hostile]
cpu_ms = 300
memory_mb = 32
"""


async def test_hostile_calls_fail_alone_and_the_server_carries_on(dsh_bin, dsh_env, dsh_dirs, tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    shutil.copy(Path(os.environ["DSH_PLUGIN_WASM_DIR"]) / "hostile.wasm", plugins / "hostile.wasm")
    config = write_config(dsh_dirs, HOSTILE_BOUNDS)
    params = StdioServerParameters(
        command=dsh_bin,
        args=["--config", str(config), "--plugins", str(plugins), "serve"],
        env=dsh_env,
        cwd=str(dsh_dirs.work),
    )
    hostile = [
        (("spin", {}), "PLUGIN_CPU_LIMIT"),
        (("grow_memory", {}), "PLUGIN_OUT_OF_MEMORY"),
        (("recurse", {}), "PLUGIN_TRAP"),
        (("panic", {"message": "on purpose"}), "PLUGIN_TRAP"),
        (("huge_output", {"mb": 100}), "PLUGIN_OUT_OF_MEMORY"),
    ]
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            outcomes: dict[str, object] = {}
            ordinary: list[str] = []

            async def misbehave(request, code) -> None:
                result = await session.call_tool(*request)
                message = expect_error(request, result, code)
                assert "hostile" in message, message
                outcomes[request[0]] = code

            async def behave() -> None:
                for n in range(10):
                    result = await session.call_tool("bash", {"command": f"echo ok-{n}", "description": "ordinary"})
                    assert not result.is_error, show(None, result)
                    ordinary.append(text(result))

            async with anyio.create_task_group() as tasks:
                for request, code in hostile:
                    tasks.start_soon(misbehave, request, code)
                tasks.start_soon(behave)
            assert len(outcomes) == len(hostile), outcomes
            assert [line.split()[0] for line in ordinary] == [f"ok-{n}" for n in range(10)], ordinary

            # The same plugin answers its next call.
            burned = await session.call_tool("burn", {"iterations": 10000})
            assert not burned.is_error and text(burned).strip().isdigit(), show(None, burned)
