"""MCP resources: each terminal session's screen (`terminal://ID/screen`) and each
background job's output (`job://ID/output`), owner-scoped like the tools.

Covers: the `resources` capability declared without `subscribe` or `listChanged`
(nothing is notified yet); `resources/templates/list` naming both URI templates; a
terminal opened and a job started through tools listed as resources (text/plain, with
a name and a description) and read back (the screen shows an `echo` marker, the job
its output); a URI of no known shape and an id that never existed are
`RESOURCE_NOT_FOUND`; and over HTTP a second session (another owner) lists none of the
first's resources and reading one is the very error an id that never existed gets.
"""

from __future__ import annotations

import re
import time
from typing import Any

import anyio
import pytest
from mcp.shared.exceptions import MCPError
from tool_results import call, show, text

pytestmark = pytest.mark.anyio

RESOURCE_NOT_FOUND = -32002
OPENED_RE = re.compile(r"\Aopened (?P<id>term-\d+) ")
STARTED_RE = re.compile(r"\Astarted background job (?P<id>bash-\d+)\b")


async def open_terminal(session: Any) -> str:
    result = await call(session, "terminal_open", {})
    assert result.is_error is False, show(("terminal_open", {}), result)
    match = OPENED_RE.match(text(result))
    assert match, show(("terminal_open", {}), result)
    return match["id"]


async def start_job(session: Any, command: str) -> str:
    args = {"command": command, "description": "resource test job", "run_in_background": True}
    result = await call(session, "bash", args)
    assert result.is_error is False, show(("bash", args), result)
    match = STARTED_RE.match(text(result))
    assert match, show(("bash", args), result)
    return match["id"]


async def read_text(session: Any, uri: str) -> str:
    result = await session.read_resource(uri)
    assert len(result.contents) == 1, result
    contents = result.contents[0]
    assert str(contents.uri) == uri, contents
    assert contents.mime_type == "text/plain", contents
    return contents.text


async def read_until(session: Any, uri: str, needle: str, timeout: float = 10.0) -> str:
    """Reads `uri` until its text contains `needle` (a shell or a job takes a moment)."""
    deadline = time.monotonic() + timeout
    while True:
        body = await read_text(session, uri)
        if needle in body:
            return body
        if time.monotonic() > deadline:
            pytest.fail(f"{uri} never showed {needle!r}; last read: {body!r}")
        await anyio.sleep(0.1)


async def listed(session: Any) -> dict[str, Any]:
    result = await session.list_resources()
    return {str(r.uri): r for r in result.resources}


async def expect_not_found(session: Any, uri: str) -> MCPError:
    with pytest.raises(MCPError) as raised:
        await session.read_resource(uri)
    assert raised.value.code == RESOURCE_NOT_FOUND, (uri, raised.value.error)
    return raised.value


def masked(error: MCPError, uri: str) -> tuple[int, str, Any]:
    """The error with the URI it names replaced, to compare errors for different URIs."""
    data = error.data
    if isinstance(data, dict):
        data = {k: (v.replace(uri, "<URI>") if isinstance(v, str) else v) for k, v in data.items()}
    return error.code, error.message.replace(uri, "<URI>"), data


async def test_capability_and_templates(open_stdio_session):
    async with open_stdio_session() as session:
        initialized = session.initialize_result
        assert initialized is not None
        capabilities = initialized.capabilities
        assert capabilities.resources is not None, capabilities
        # Declare only what works: no change is notified yet.
        assert not capabilities.resources.subscribe, capabilities.resources
        assert not capabilities.resources.list_changed, capabilities.resources

        templates = await session.list_resource_templates()
        by_template = {t.uri_template: t for t in templates.resource_templates}
        assert set(by_template) == {"terminal://{id}/screen", "job://{id}/output"}, templates
        for template in by_template.values():
            assert template.mime_type == "text/plain", template
            assert template.name and template.description, template

        assert await listed(session) == {}, "a fresh connection has no resources"


async def test_terminal_screen_and_job_output_are_listed_and_read(open_stdio_session):
    async with open_stdio_session() as session:
        term = await open_terminal(session)
        sent = await call(session, "terminal_send", {"id": term, "input": "echo screen-$((6*7))-marker"})
        assert sent.is_error is False, show(("terminal_send", {}), sent)
        job = await start_job(session, "echo job-$((5*5))-out; echo second-line")

        resources = await listed(session)
        screen_uri, output_uri = f"terminal://{term}/screen", f"job://{job}/output"
        assert set(resources) == {screen_uri, output_uri}, resources
        for uri, word in ((screen_uri, "terminal"), (output_uri, "job")):
            resource = resources[uri]
            assert resource.mime_type == "text/plain", resource
            assert resource.name, resource
            assert resource.description and word in resource.description.lower(), resource

        screen = await read_until(session, screen_uri, "screen-42-marker")
        # The rendered screen: the command line and what it printed, no escape sequences.
        assert "\x1b" not in screen, repr(screen)
        assert "echo screen-$((6*7))-marker" in screen, screen

        output = await read_until(session, output_uri, "second-line")
        assert output == "job-25-out\nsecond-line\n", repr(output)

        # An unknown shape, an id that never existed: the same error code.
        for uri in (
            "terminal://term-999/screen",
            "job://bash-999/output",
            f"terminal://{term}/plain",
            "file:///etc/passwd",
        ):
            await expect_not_found(session, uri)

        # Still listed and readable after the job ended.
        assert output_uri in await listed(session)


async def test_job_output_is_capped_with_a_note(open_stdio_session):
    async with open_stdio_session() as session:
        # 1.5 MiB of 'x' then a final line: the read keeps the newest 1 MiB.
        job = await start_job(session, "head -c 1572864 /dev/zero | tr '\\0' x; echo; echo the-end")
        uri = f"job://{job}/output"
        body = await read_until(session, uri, "the-end", timeout=20.0)
        note, _, rest = body.partition("\n")
        assert re.fullmatch(r"\[\d+ earlier bytes omitted; the whole output is in .+\]", note), note[:300]
        assert len(rest.encode()) == 1024 * 1024, len(rest)
        assert rest.endswith("x\nthe-end\n"), rest[-40:]


async def test_another_owner_neither_lists_nor_reads(http_server, open_http_session):
    async with open_http_session(http_server) as a, open_http_session(http_server) as b:
        term = await open_terminal(a)
        job = await start_job(a, "echo owner-a-secret")
        screen_uri, output_uri = f"terminal://{term}/screen", f"job://{job}/output"
        await read_until(a, output_uri, "owner-a-secret")
        assert set(await listed(a)) == {screen_uri, output_uri}

        assert await listed(b) == {}, "B lists A's resources"
        for theirs, never in (
            (screen_uri, "terminal://term-999/screen"),
            (output_uri, "job://bash-999/output"),
        ):
            theirs_error = await expect_not_found(b, theirs)
            never_error = await expect_not_found(b, never)
            assert masked(theirs_error, theirs) == masked(never_error, never), (
                theirs_error.error,
                never_error.error,
            )
            assert "owner-a-secret" not in str(theirs_error.error)

        # B's own resources are its own; A still reads its own.
        other_job = await start_job(b, "echo owner-b")
        assert set(await listed(b)) == {f"job://{other_job}/output"}
        assert "owner-a-secret" in await read_text(a, output_uri)
