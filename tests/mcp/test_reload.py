"""Hot reload under `dsh serve`: a plugin file added, replaced by a broken version and
deleted while a client is connected. Each change that alters the tools reaches the
client as `notifications/tools/list_changed`; a refused version leaves the old one
serving."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import anyio
import pytest
from mcp import types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from conftest import write_config
from tool_results import text

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

            # Put back: its tools return.
            changes_before = len(list_changes)
            place(plugins, "echo.wasm", echo.read_bytes())
            await wait_until(lambda: len(list_changes) > changes_before, "tools/list_changed after putting echo.wasm back")
            assert "echo" in await tool_names(session)
            assert text(await session.call_tool("echo", {"text": "back"})) == "back"
            # The embedded tools were never touched.
            assert "bash" in await tool_names(session)


def with_custom_section(component: bytes, note: bytes) -> bytes:
    """The same component with a custom section appended: another digest, same behaviour."""

    def leb(n: int) -> bytes:
        out = bytearray()
        while True:
            byte, n = n & 0x7F, n >> 7
            out.append(byte | (0x80 if n else 0))
            if not n:
                return bytes(out)

    name = b"dsh-test"
    payload = leb(len(name)) + name + note
    return component + b"\x00" + leb(len(payload)) + payload


def place(plugins: Path, name: str, data: bytes) -> None:
    """Writes `name` the way a build tool does: to a temp file, then renamed into place."""
    partial = plugins / f"{name}.partial"
    partial.write_bytes(data)
    partial.rename(plugins / name)


# A plugin loaded from a directory is granted nothing unless dsh.toml says so, even
# when it replaces an embedded plugin that had grants.
GRANT_HOST_INTERFACES = """
[plugins.bash]
interfaces = ["process"]
[plugins.jobs]
interfaces = ["jobs"]
[plugins.terminal]
interfaces = ["terminal"]
"""


def serve_params(dsh_bin, dsh_env, dsh_dirs, plugins: Path) -> StdioServerParameters:
    config = write_config(dsh_dirs, GRANT_HOST_INTERFACES)
    return StdioServerParameters(
        command=dsh_bin,
        args=["--config", str(config), "--plugins", str(plugins), "serve"],
        env=dsh_env,
        cwd=str(dsh_dirs.work),
    )


async def test_eight_callers_see_no_failure_while_a_plugin_is_swapped_twenty_times(
    dsh_bin, dsh_env, dsh_dirs, tmp_path
):
    versions = {"a": built_plugin("version_a").read_bytes(), "b": built_plugin("version_b").read_bytes()}
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    place(plugins, "version.wasm", versions["a"])
    answers: list[str] = []
    failures: list[str] = []
    swapping = True

    async with stdio_client(serve_params(dsh_bin, dsh_env, dsh_dirs, plugins)) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()

            async def caller() -> None:
                while swapping:
                    result = await session.call_tool("version", {})
                    if result.is_error:
                        failures.append(text(result))
                    else:
                        answers.append(text(result))

            async with anyio.create_task_group() as callers:
                for _ in range(8):
                    callers.start_soon(caller)
                for swap in range(20):
                    place(plugins, "version.wasm", versions["b" if swap % 2 == 0 else "a"])
                    await anyio.sleep(0.15)
                # The last swap put "a" in place; let it settle.
                await anyio.sleep(0.5)
                swapping = False

            assert failures == [], failures[:5]
            assert set(answers) <= {"a", "b"}, set(answers)
            assert {"a", "b"} <= set(answers), "the swaps were never seen"
            assert len(answers) > 100, len(answers)
            after = [text(await session.call_tool("version", {})) for _ in range(20)]
            assert after == ["a"] * 20, after


async def test_broken_versions_are_refused_and_the_serving_one_keeps_answering(
    dsh_bin, dsh_env, dsh_dirs, tmp_path
):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    good = built_plugin("version_a").read_bytes()
    place(plugins, "version.wasm", good)
    errlog_path = dsh_dirs.logs / "reload-stderr.log"
    env = dict(dsh_env, RUST_LOG="dsh=info")
    broken = {
        "truncated": (good[: len(good) // 2], "not a WebAssembly component"),
        "not a component": (b"\0asm\x01\0\0\0", "not a WebAssembly component"),
        "invalid schema": (built_plugin("bad_schema").read_bytes(), "input schema is not valid JSON Schema"),
        "colliding name": (built_plugin("collides").read_bytes(), "tool bash is already provided by plugin bash"),
    }
    with open(errlog_path, "w") as errlog:
        async with stdio_client(serve_params(dsh_bin, env, dsh_dirs, plugins), errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                assert text(await session.call_tool("version", {})) == "a"
                for label, (data, reason) in broken.items():
                    place(plugins, "version.wasm", data)
                    await wait_until(lambda: reason in errlog_path.read_text(), f"the refusal of the {label} version")
                    assert text(await session.call_tool("version", {})) == "a", label
                    errlog_path.write_text("")


async def test_a_terminal_and_a_job_outlive_a_swap_of_their_plugins(dsh_bin, dsh_env, dsh_dirs, tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    list_changes: list[object] = []

    async def on_message(message) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            list_changes.append(message)

    async with stdio_client(serve_params(dsh_bin, dsh_env, dsh_dirs, plugins)) as (read, write):
        async with ClientSession(read, write, message_handler=on_message) as session:
            await session.initialize()
            opened = text(await session.call_tool("terminal_open", {}))
            term = opened.split()[1]
            python = {"id": term, "input": "python3 -q", "wait": {"pattern": ">>> "}}
            assert "settled: pattern" in text(await session.call_tool("terminal_send", python))
            await session.call_tool("terminal_send", {"id": term, "input": "x = 41", "wait": {"pattern": ">>> "}})
            # The job runs until the test lets it go, after the swap: it cannot end before.
            go = dsh_dirs.work / "go-after-the-swap"
            waits = f"while [ ! -e {go} ]; do sleep 0.02; done; echo job-$((6*7))"
            started = text(
                await session.call_tool(
                    "bash",
                    {"command": waits, "description": "outlives the swap", "run_in_background": True},
                )
            )
            job = started.split()[3]

            # A new build of the terminal and jobs plugins (another digest) replaces the embedded ones.
            for name in ("terminal", "jobs"):
                place(plugins, f"{name}.wasm", with_custom_section(built_plugin(name).read_bytes(), b"v2"))
            await wait_until(lambda: len(list_changes) >= 2, "tools/list_changed for both swaps")

            answer = text(await session.call_tool("terminal_send", {"id": term, "input": "x + 1", "wait": {"pattern": ">>> "}}))
            assert "\n42\n" in answer, answer
            running = text(await session.call_tool("job_output", {"id": job}))
            assert "running" in running and "job-42" not in running, running
            go.touch()
            output = text(await session.call_tool("job_output", {"id": job, "wait_ms": 5000}))
            assert "job-42" in output, output


def dsh_plugins(dsh_bin: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    full_env = {k: os.environ[k] for k in ("HOME", "PATH") if k in os.environ} | env
    return subprocess.run(
        [dsh_bin, "plugins", *args], env=full_env, capture_output=True, text=True, timeout=60, check=True
    )


def plugin_status(dsh_bin: str, env: dict[str, str], name: str) -> dict:
    listed = json.loads(dsh_plugins(dsh_bin, env, "--json").stdout)
    return next(p for p in listed if p["name"] == name)


async def test_dsh_plugins_shows_a_running_servers_plugins_and_calls_on_old_versions(
    dsh_bin, dsh_env, dsh_dirs, tmp_path
):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    bash_v1 = built_plugin("bash").read_bytes()
    bash_v2 = with_custom_section(bash_v1, b"v2")
    place(plugins, "bash.wasm", bash_v1)

    async def status() -> dict:
        return await anyio.to_thread.run_sync(plugin_status, dsh_bin, dsh_env, "bash")

    async def wait_for_status(check, what: str) -> dict:
        with anyio.move_on_after(15):
            while not check(latest := await status()):
                await anyio.sleep(0.05)
            return latest
        pytest.fail(f"timed out waiting for {what}; last status: {await status()}")

    async with stdio_client(serve_params(dsh_bin, dsh_env, dsh_dirs, plugins)) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            await session.list_tools()  # as clients do; answered once the plugins have loaded
            first = await status()
            assert first["status"] == "serving" and first["source"] == str(plugins / "bash.wasm"), first
            assert first["calls_in_flight"] == 0 and first["calls_in_flight_on_old_versions"] == 0, first

            async with anyio.create_task_group() as tasks:
                results: list[str] = []

                async def slow_call() -> None:
                    results.append(text(await session.call_tool("bash", {"command": "sleep 2; echo slept", "description": "slow"})))

                tasks.start_soon(slow_call)
                await wait_for_status(lambda s: s["calls_in_flight"] == 1, "the slow call in flight")

                # A new version arrives while the call runs: the call stays on the old one.
                place(plugins, "bash.wasm", bash_v2)
                swapped = await wait_for_status(lambda s: s["digest"] != first["digest"], "the swap")
                assert swapped["calls_in_flight"] == 0, swapped
                assert swapped["calls_in_flight_on_old_versions"] == 1, swapped
                assert swapped["loaded_at"] >= first["loaded_at"]

                # A refused version is listed with its reason beside the one serving.
                place(plugins, "bash.wasm", bash_v1[: len(bash_v1) // 2])
                refused = await wait_for_status(lambda s: True, "a status")
                with anyio.move_on_after(15):
                    while True:
                        listed = json.loads((await anyio.to_thread.run_sync(lambda: dsh_plugins(dsh_bin, dsh_env, "--json"))).stdout)
                        refused = [p for p in listed if p["name"] == "bash" and p["status"] == "refused"]
                        if refused:
                            break
                        await anyio.sleep(0.05)
                assert refused and "not a WebAssembly component" in refused[0]["reason"], listed
            assert len(results) == 1 and results[0].startswith("slept"), results
            done = await status()
            assert done["digest"] == swapped["digest"] and done["calls_in_flight_on_old_versions"] == 0, done

            table = (await anyio.to_thread.run_sync(lambda: dsh_plugins(dsh_bin, dsh_env))).stdout
            assert table.startswith("dsh serve, pid "), table
            assert "refused" in table and "serving" in table, table
