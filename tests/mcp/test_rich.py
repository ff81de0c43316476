"""What a contract 0.2.0 tool gives an MCP client beyond one string, with the `rich`
test plugin (plugins/rich): a result's text, image, audio, resource link and embedded
resource arrive as those MCP content items; a tool with an output schema lists it as
`outputSchema` and returns `structuredContent` that matches it, and one that breaks it
gets the error `INVALID_OUTPUT` as text alone (no `structuredContent`, which would break
the tool's schema); a plugin's progress reports arrive as
progress notifications for the call's token; after `logging/setLevel info` a plugin's
info line arrives as `notifications/message` and its debug line does not, and before
any level is set nothing does."""

from __future__ import annotations

import base64
import os
import shutil
import warnings
from pathlib import Path

import anyio
import pytest
from conftest import REQUEST_TIMEOUT, write_config
from mcp import types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from tool_results import show, text

pytestmark = pytest.mark.anyio

# The plugin imports `log` and `progress`, which a plugin outside the embedded set gets
# only when granted.
CONFIG = '[plugins.rich]\ninterfaces = ["log", "progress"]\n'

# The 1×1 PNG the plugin returns.
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
    "0000000d49444154789c63000100000500010d0a2db40000000049454e44ae426082"
)


def serve(dsh_bin, dsh_env, dsh_dirs, tmp_path: Path) -> StdioServerParameters:
    plugins = tmp_path / "plugins"
    plugins.mkdir(exist_ok=True)
    shutil.copy(Path(os.environ["DSH_PLUGIN_WASM_DIR"]) / "rich.wasm", plugins / "rich.wasm")
    args = ["--config", str(write_config(dsh_dirs, CONFIG)), "--plugins", str(plugins), "serve"]
    return StdioServerParameters(command=dsh_bin, args=args, env=dsh_env, cwd=str(dsh_dirs.work))


async def test_text_image_audio_and_resources_arrive_as_mcp_content_items(dsh_bin, dsh_env, dsh_dirs, tmp_path):
    async with stdio_client(serve(dsh_bin, dsh_env, dsh_dirs, tmp_path)) as (read, write):
        async with ClientSession(read, write, read_timeout_seconds=REQUEST_TIMEOUT) as session:
            await session.initialize()
            result = await session.call_tool("rich_media", {})
    where = show(("rich_media", {}), result)
    assert not result.is_error, where
    kinds = [item.type for item in result.content]
    assert kinds == ["text", "image", "audio", "resource_link", "resource"], where
    words, image, audio, link, embedded = result.content
    assert words.text == "a picture, a sound and two resources", where
    assert image.mime_type == "image/png", where
    assert base64.b64decode(image.data) == PNG, "the image's bytes, base64 on the wire"
    assert audio.mime_type == "audio/wav" and base64.b64decode(audio.data).startswith(b"RIFF"), where
    assert str(link.uri) == "file:///tmp/rich/report.txt" and link.name == "report.txt", where
    assert link.description == "the full report" and link.mime_type == "text/plain", where
    assert str(embedded.resource.uri) == "file:///tmp/rich/note.txt", where
    assert embedded.resource.text == "an embedded note", where


async def test_structured_output_matches_the_listed_output_schema_or_is_an_error(dsh_bin, dsh_env, dsh_dirs, tmp_path):
    async with stdio_client(serve(dsh_bin, dsh_env, dsh_dirs, tmp_path)) as (read, write):
        async with ClientSession(read, write, read_timeout_seconds=REQUEST_TIMEOUT) as session:
            await session.initialize()
            tools = {tool.name: tool for tool in (await session.list_tools()).tools}
            valid = await session.call_tool("rich_structured", {"valid": True})
            broken = await session.call_tool("rich_structured", {"valid": False})
    schema = tools["rich_structured"].output_schema
    assert schema is not None and schema["required"] == ["count", "label"], schema
    assert tools["rich_media"].output_schema is None, "a tool that declares none lists none"

    assert not valid.is_error, show(("rich_structured", {"valid": True}), valid)
    assert valid.structured_content == {"count": 3, "label": "three"}, show(None, valid)
    # The plugin gave no text: its JSON is the text item, for clients without structured content.
    assert text(valid).replace(" ", "") == '{"count":3,"label":"three"}', show(None, valid)

    # The error is text alone: `{code, message}` as `structuredContent` would break the
    # tool's own output schema (clients check it even on errors).
    where = show(("rich_structured", {"valid": False}), broken)
    assert broken.is_error is True and broken.structured_content is None, where
    assert text(broken).startswith("INVALID_OUTPUT: "), where
    assert "rich_structured" in text(broken) and "/count" in text(broken), where


async def test_progress_reported_by_the_plugin_arrives_as_progress_notifications(dsh_bin, dsh_env, dsh_dirs, tmp_path):
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        seen.append((value, total, message))

    async with stdio_client(serve(dsh_bin, dsh_env, dsh_dirs, tmp_path)) as (read, write):
        async with ClientSession(read, write, read_timeout_seconds=REQUEST_TIMEOUT) as session:
            await session.initialize()
            result = await session.call_tool("rich_progress", {"steps": 4}, progress_callback=on_progress)
            assert text(result) == "4 steps done", show(None, result)
            with anyio.fail_after(5):
                while len([s for s in seen if s[2] and s[2].startswith("step ")]) < 4:
                    await anyio.sleep(0.02)
    reported = [s for s in seen if s[2] and s[2].startswith("step ")]
    assert [s[2] for s in reported] == [f"step {i} of 4" for i in range(1, 5)], seen
    assert [s[0] for s in reported] == [25.0, 50.0, 75.0, 100.0], seen
    assert all(s[1] == 100.0 for s in reported), f"a fraction goes as a percentage of 100: {seen}"
    values = [s[0] for s in seen]
    assert values == sorted(values) and len(set(values)) == len(values), f"progress must increase: {values}"


async def test_log_lines_arrive_at_or_above_the_level_the_client_set(dsh_bin, dsh_env, dsh_dirs, tmp_path):
    lines: list[types.LoggingMessageNotificationParams] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        lines.append(params)

    async with stdio_client(serve(dsh_bin, dsh_env, dsh_dirs, tmp_path)) as (read, write):
        async with ClientSession(read, write, read_timeout_seconds=REQUEST_TIMEOUT, logging_callback=on_log) as session:
            init = await session.initialize()
            assert init.capabilities.logging is not None, "dsh declares the logging capability"
            before = await session.call_tool("rich_log", {})
            assert text(before) == "logged", show(None, before)
            # dsh sends a call's notifications before its result, so none can still come.
            assert lines == [], f"no log lines before the client sets a level: {lines}"
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the SDK marks logging deprecated (SEP-2577)
                await session.set_logging_level("info")
            after = await session.call_tool("rich_log", {})
            assert text(after) == "logged", show(None, after)
            with anyio.fail_after(5):
                while len(lines) < 3:
                    await anyio.sleep(0.02)
            # A ping's answer comes after every notification sent before it: a debug
            # line, were one (wrongly) sent, has arrived by then.
            await session.send_ping()
    got = [(line.level, line.logger, line.data) for line in lines]
    assert got == [
        ("info", "rich", "rich info line"),
        ("warning", "rich", "rich warn line"),
        ("error", "rich", "rich error line"),
    ], got


async def test_under_2026_07_28_a_request_opts_in_to_its_own_log_lines(dsh_bin, dsh_env, dsh_dirs, tmp_path):
    """No `logging/setLevel` in the stateless revision: a request carrying
    `io.modelcontextprotocol/logLevel` in its `_meta` gets its call's lines at or above
    that level, before its result; a request without it gets none."""
    from mcp.client.client import Client

    warnings.simplefilter("ignore")
    for level, expected in [(None, []), ("warning", ["rich warn line", "rich error line"])]:
        lines: list[types.LoggingMessageNotificationParams] = []

        async def on_log(params: types.LoggingMessageNotificationParams) -> None:
            lines.append(params)

        params = serve(dsh_bin, dsh_env, dsh_dirs, tmp_path)
        async with Client(
            params, mode="2026-07-28", log_level=level, logging_callback=on_log, read_timeout_seconds=REQUEST_TIMEOUT
        ) as client:
            result = await client.call_tool("rich_log", {})
            assert text(result) == "logged", show(None, result)
            await client.list_tools()  # answered after every line the call sent
        assert [line.data for line in lines] == expected, (level, lines)
