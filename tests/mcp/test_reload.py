"""Hot reload under `dsh serve`: a plugin file added, replaced by a broken version and
deleted while a client is connected. Each change that alters the tools reaches the
client as `notifications/tools/list_changed`; a refused version leaves the old one
serving."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import anyio
import pytest
from mcp import types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

pytestmark = pytest.mark.anyio


def built_plugin(name: str) -> Path:
    wasm_dir = os.environ.get("DSH_PLUGIN_WASM_DIR")
    if not wasm_dir:
        pytest.fail("DSH_PLUGIN_WASM_DIR is not set: run through `cargo test` (tests/e2e/mcp_clients.rs)")
    return Path(wasm_dir) / f"{name}.wasm"


async def tool_names(session: ClientSession) -> set[str]:
    return {tool.name for tool in (await session.list_tools()).tools}


async def wait_until(condition, what: str, timeout: float = 10.0) -> None:
    with anyio.move_on_after(timeout):
        while not condition():
            await anyio.sleep(0.02)
    if not condition():
        pytest.fail(f"timed out after {timeout}s waiting for {what}")


def text(result: types.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, types.TextContent))


async def test_a_plugin_added_broken_and_deleted_while_serving(dsh_bin, dsh_env, dsh_dirs, tmp_path):
    echo = built_plugin("echo")
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    list_changes: list[object] = []

    async def on_message(message) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            list_changes.append(message)

    params = StdioServerParameters(
        command=dsh_bin, args=["--plugins", str(plugins), "serve"], env=dsh_env, cwd=str(dsh_dirs.work)
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, message_handler=on_message) as session:
            await session.initialize()
            assert "echo" not in await tool_names(session)

            # Added: written under another name, then renamed into place.
            partial = plugins / "echo.wasm.partial"
            shutil.copy(echo, partial)
            partial.rename(plugins / "echo.wasm")
            await wait_until(lambda: len(list_changes) >= 1, "tools/list_changed after adding echo.wasm")
            assert "echo" in await tool_names(session)
            assert text(await session.call_tool("echo", {"text": "hot"})) == "hot"

            # Broken: a truncated version is refused; the one serving keeps answering.
            changes_before = len(list_changes)
            data = echo.read_bytes()
            (plugins / "echo.wasm").write_bytes(data[: len(data) // 2])
            await anyio.sleep(1.0)
            assert len(list_changes) == changes_before, "a refused version changed the tool list"
            assert text(await session.call_tool("echo", {"text": "still"})) == "still"

            # Deleted: its tools are gone.
            (plugins / "echo.wasm").unlink()
            await wait_until(lambda: len(list_changes) > changes_before, "tools/list_changed after deleting echo.wasm")
            assert "echo" not in await tool_names(session)
            # The embedded tools were never touched.
            assert "bash" in await tool_names(session)
