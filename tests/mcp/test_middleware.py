"""Middleware and observer components under `dsh serve`, the live cases: a middleware
replaced while calls run on it (they finish on the version they started on, the next
calls get the new one), the shipped `rate_limit`, a trapping middleware that fails only
its own calls, a slow observer that never holds a call up (its queue overflows and the
drops are counted), and an observer that sees every record of a session. The cases one
`dsh call` can show are in `tests/e2e/middleware.rs`."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest
from tool_results import expect_error, show, text

pytestmark = pytest.mark.anyio

ECHO = "echo"
BASH = "bash"


def built_plugin(name: str) -> Path:
    wasm_dir = os.environ.get("DSH_PLUGIN_WASM_DIR")
    if not wasm_dir:
        pytest.fail("DSH_PLUGIN_WASM_DIR is not set: run through `cargo test` (tests/e2e/mcp_clients.rs)")
    return Path(wasm_dir) / f"{name}.wasm"


def place(plugins: Path, name: str, data: bytes) -> None:
    """Writes `name` the way a build tool does: to a temp file, then renamed into place."""
    partial = plugins / f"{name}.partial"
    partial.write_bytes(data)
    partial.rename(plugins / name)


def toml_string(value: str | Path) -> str:
    """A TOML basic string (JSON's string escapes are TOML's)."""
    return json.dumps(str(value))


@pytest.fixture
def plugins(tmp_path: Path, dsh_env: dict[str, str]) -> Path:
    """An empty plugin directory, the one every `dsh` of the test loads (`DSH_PLUGINS`,
    the environment form of `--plugins`)."""
    directory = tmp_path / "plugins"
    directory.mkdir()
    dsh_env["DSH_PLUGINS"] = str(directory)
    return directory


def plugin_status(dsh_bin: str, dsh_env: dict[str, str], name: str) -> dict[str, Any]:
    """Plugin `name`'s serving row in `dsh plugins --json` (asked of the running server)."""
    env = {k: os.environ[k] for k in ("HOME", "PATH") if k in os.environ} | dsh_env
    listed = subprocess.run(
        [dsh_bin, "plugins", "--json"], env=env, capture_output=True, text=True, timeout=60, check=True
    )
    rows = json.loads(listed.stdout)
    serving = [row for row in rows if row["name"] == name and row["status"] == "serving"]
    assert serving, f"{name} is not serving: {rows}"
    return serving[0]


def last_text_item(result: Any) -> str:
    """The last text item the tool and the pipeline's stages gave (not the line dsh ends a
    result with when the call changed files: the `go` file these tests touch while calls
    run is a change of theirs)."""
    items = [
        c
        for c in result.content
        if getattr(c, "type", None) == "text" and not c.text.startswith("[changed: ")
    ]
    return items[-1].text if items else ""


def bash_args(command: str) -> dict[str, str]:
    return {"command": command, "description": "middleware test"}


# --------------------------------------------------------------------------- middleware


async def test_a_middleware_replaced_while_eight_calls_run_finishes_them_on_the_old_one(
    open_stdio_session, plugins, event_log, dsh_bin, dsh_env, dsh_dirs
):
    place(plugins, "mw.wasm", built_plugin("test_middleware").read_bytes())
    config = '[pipeline]\nmiddleware = ["mw"]\n[plugins.mw.settings]\nmode = "tag"\n'
    # The eight calls run until the test lets them go, once the new version serves: none
    # can end before the swap, however slow the machine.
    go = dsh_dirs.work / "go-after-the-swap"
    slow = bash_args(f"while [ ! -e {go} ]; do sleep 0.02; done; sleep 1; echo done")
    results: list[Any] = []

    async def status() -> dict[str, Any]:
        return await anyio.to_thread.run_sync(plugin_status, dsh_bin, dsh_env, "mw")

    async with open_stdio_session(config=config) as session:
        await session.list_tools()  # answered once the plugins have loaded
        first = await status()
        assert first["kind"] == "middleware" and first["calls_in_flight"] == 0, first

        async def slow_call() -> None:
            results.append(await session.call_tool(BASH, slow))

        try:
            async with anyio.create_task_group() as calls:
                for _ in range(8):
                    calls.start_soon(slow_call)
                await event_log.wait_for(
                    lambda: len(event_log.calls_with_command_containing(str(go))) >= 8,
                    timeout=10,
                    what="the eight slow calls to start",
                )
                place(plugins, "mw.wasm", built_plugin("test_middleware_b").read_bytes())
                with anyio.move_on_after(10):
                    while (swapped := await status())["digest"] == first["digest"]:
                        await anyio.sleep(0.05)
                assert swapped["digest"] != first["digest"], f"mw.wasm was never reloaded: {swapped}"
                # The new version serves; the eight are still inside the old one.
                assert swapped["calls_in_flight_on_old_versions"] == 8, swapped
                assert results == [], [show(None, r) for r in results]
                go.touch()  # the group waits for the eight: they must be let go inside it
        finally:
            go.touch()  # and on a failure too, so nothing is left waiting

        assert len(results) == 8
        for result in results:
            assert not result.is_error and text(result).startswith("done"), show(("bash", slow), result)
        tags = [last_text_item(r) for r in results]
        assert tags == ["middleware version a"] * 8, tags

        after = bash_args("echo after the swap")
        seen: list[str] = []
        with anyio.move_on_after(10):
            while True:
                result = await session.call_tool(BASH, after)
                assert not result.is_error, show(("bash", after), result)
                seen.append(last_text_item(result))
                if seen[-1] == "middleware version b":
                    break
                await anyio.sleep(0.1)
        assert seen and seen[-1] == "middleware version b", f"the new version never answered: {seen[-5:]}"
        # The swap was already seen: the very first call after it is on the new version.
        assert seen == ["middleware version b"], seen
        assert (await status())["calls_in_flight_on_old_versions"] == 0


async def test_the_rate_limit_refuses_past_per_minute_and_says_when_to_retry(
    open_stdio_session, plugins, event_log
):
    place(plugins, "echo.wasm", built_plugin("echo").read_bytes())
    config = '[pipeline]\nmiddleware = ["rate_limit"]\n[plugins.rate_limit.settings]\nper_minute = 2\n'
    async with open_stdio_session(config=config) as session:
        for n in range(2):
            args = {"text": f"within {n}"}
            allowed = await session.call_tool(ECHO, args)
            assert not allowed.is_error and text(allowed) == f"within {n}", show((ECHO, args), allowed)
        args = {"text": "past the limit"}
        refused = await session.call_tool(ECHO, args)
        message = expect_error((ECHO, args), refused, "LIMIT_EXCEEDED")
        assert "retry in" in message, message
        # The limit is per tool: another tool has its own count.
        other = bash_args("echo another tool")
        allowed = await session.call_tool(BASH, other)
        assert not allowed.is_error and text(allowed).startswith("another tool"), show((BASH, other), allowed)

    echoes = [e for e in event_log.events() if e["event"] == "tool/result" and e["tool"] == ECHO]
    assert len(echoes) == 3, event_log.dump()
    for ran in echoes[:2]:
        assert ran["attempts"] == 1 and ran["code"] is None and "answered_by" not in ran, ran
    last = echoes[2]
    assert last["code"] == "LIMIT_EXCEEDED", last
    assert last["attempts"] == 0, f"the refused call ran its tool: {last}"
    assert last["answered_by"] == "rate_limit", last


async def test_a_failing_middleware_fails_its_call_and_the_next_call_works(open_stdio_session, plugins):
    place(plugins, "echo.wasm", built_plugin("echo").read_bytes())
    place(plugins, "trapping.wasm", built_plugin("test_middleware").read_bytes())
    config = """
[pipeline]
middleware = ["trapping"]
[pipeline.select.trapping]
tools = ["echo"]
[plugins.trapping.settings]
mode = "trap"
"""
    args = {"text": "x"}
    async with open_stdio_session(config=config) as session:
        failed = await session.call_tool(ECHO, args)
        message = expect_error((ECHO, args), failed, "PLUGIN_TRAP")
        assert "middleware trapping" in message, message

        other = bash_args("echo not selected")
        ok = await session.call_tool(BASH, other)
        assert not ok.is_error and text(ok).startswith("not selected"), show((BASH, other), ok)

        # The host is not poisoned: the next call through the middleware fails the same way.
        again = await session.call_tool(ECHO, args)
        message_again = expect_error((ECHO, args), again, "PLUGIN_TRAP")
        assert "middleware trapping" in message_again, message_again


# --------------------------------------------------------------------------- observers


async def test_a_slow_observer_never_slows_calls_and_its_drops_are_counted(
    open_stdio_session, plugins, event_log
):
    place(plugins, "echo.wasm", built_plugin("echo").read_bytes())
    place(plugins, "slow.wasm", built_plugin("test_observer").read_bytes())
    config = """
[pipeline]
observers = ["slow"]
[limits]
observer_queue = 4
[plugins.slow]
interfaces = ["log"]
[plugins.slow.settings]
mode = "sleep"
sleep_ms = 300
"""

    def drops() -> list[dict[str, Any]]:
        return [e for e in event_log.events() if e["event"] == "observer/dropped" and e.get("observer") == "slow"]

    async with open_stdio_session(config=config) as session:
        for n in range(200):
            args = {"text": f"call {n}"}
            result = await session.call_tool(ECHO, args)
            assert not result.is_error and text(result) == f"call {n}", show((ECHO, args), result)
        # Written when the observer takes its next record after the overflow.
        await event_log.wait_for(
            lambda: any(e["dropped"] > 0 for e in drops()), timeout=10, what="an observer/dropped event for slow"
        )
    dropped = drops()
    assert all(isinstance(e["dropped"], int) and e["dropped"] > 0 for e in dropped), dropped
    # 200 calls make 400 records: no more can have been dropped.
    assert sum(e["dropped"] for e in dropped) <= 400, dropped


async def test_an_observer_sees_every_call_of_a_session(open_stdio_session, plugins, event_log, tmp_path):
    place(plugins, "echo.wasm", built_plugin("echo").read_bytes())
    place(plugins, "rec.wasm", built_plugin("test_observer").read_bytes())
    sink = tmp_path / "sink"
    sink.mkdir()
    records_file = sink / "events.jsonl"
    config = f"""
[pipeline]
observers = ["rec"]
[plugins.rec]
interfaces = ["log"]
fs = [{{ path = {toml_string(sink)}, mode = "rw" }}]
[plugins.rec.settings]
mode = "record"
path = {toml_string(records_file)}
"""
    async with open_stdio_session(config=config) as session:
        for n in range(20):
            args = {"text": f"seen {n}"}
            result = await session.call_tool(ECHO, args)
            assert not result.is_error and text(result) == f"seen {n}", show((ECHO, args), result)
    # The session has ended: the host gave the observer what was queued before it exited.

    lines = records_file.read_text(encoding="utf-8").splitlines() if records_file.exists() else []
    records = [json.loads(line) for line in lines]
    logged = [
        {k: v for k, v in e.items() if k != "_file"}
        for e in event_log.events()
        if e["event"] in ("tool/call", "tool/result")
    ]
    assert [e["event"] for e in logged].count("tool/call") == 20, event_log.dump()
    assert [e["event"] for e in logged].count("tool/result") == 20, event_log.dump()

    def ids(events: list[dict[str, Any]], kind: str) -> list[str]:
        return [e["call_id"] for e in events if e["event"] == kind]

    where = f"observer saw {len(records)} records:\n" + "\n".join(lines[-10:])
    assert sorted(ids(records, "tool/call")) == sorted(ids(logged, "tool/call")), where
    assert sorted(ids(records, "tool/result")) == sorted(ids(logged, "tool/result")), where
    assert len(records) == 40, where
    # Each record is the event log's line as it was written.
    for record in logged:
        assert record in records, f"the observer was not given {record}\n{where}"
