"""MCP resources: each terminal session's screen (`terminal://ID/screen`) and each
background job's output (`job://ID/output`), owner-scoped like the tools.

Covers: the `resources` capability declared with `subscribe` and `listChanged`, and
`completions`; `resources/templates/list` naming both URI templates; a terminal opened
and a job started through tools listed as resources (text/plain, with a name and a
description) and read back (the screen shows an `echo` marker, the job its output); a
URI of no known shape and an id that never existed are `RESOURCE_NOT_FOUND`; over HTTP
a second session (another owner) lists none of the first's resources and reading one
is the very error an id that never existed gets.

Subscriptions, over stdio and HTTP: a subscribed screen and a subscribed job output
are notified (`notifications/resources/updated`) as they change, and no longer once
unsubscribed; `notifications/resources/list_changed` comes as terminals open and close
and as jobs start and end; five screen changes within `resource_update_interval_ms` are
one notification; subscribing to a URI that names nothing is
`RESOURCE_NOT_FOUND`. Over HTTP, another owner's terminal and job changes reach no
notification of the first's, and subscribing to the other's URI is not found.
`completion/complete` gives a template's `id` from the connection's own ids only.
"""

from __future__ import annotations

import queue
import re
import time
from typing import Any

import anyio
import mcp.types as types
import pytest
from mcp.shared.exceptions import MCPError
from tool_results import call, show, text

pytestmark = [
    pytest.mark.anyio,
    # dsh speaks the protocol versions of resources/subscribe (2026-07-28 replaced it).
    pytest.mark.filterwarnings("ignore:resources/(un)?subscribe is removed"),
]

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
        assert capabilities.resources.subscribe is True, capabilities.resources
        assert capabilities.resources.list_changed is True, capabilities.resources
        assert capabilities.completions is not None, capabilities

        templates = await session.list_resource_templates()
        by_template = {t.uri_template: t for t in templates.resource_templates}
        assert set(by_template) == {
            "terminal://{id}/screen",
            "job://{id}/output",
            "checkpoint://{id}/changes",
        }, templates
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


# --------------------------------------------------------------------------- changes

INVALID_PARAMS = -32602
SCREEN_TEMPLATE = types.ResourceTemplateReference(type="ref/resource", uri="terminal://{id}/screen")
JOB_TEMPLATE = types.ResourceTemplateReference(type="ref/resource", uri="job://{id}/output")


class Heard:
    """The resource notifications one client received (its `message_handler`)."""

    def __init__(self) -> None:
        self.updated: list[str] = []
        self.list_changed = 0

    async def __call__(self, message: Any) -> None:
        message = getattr(message, "root", message)
        if isinstance(message, types.ResourceUpdatedNotification):
            self.updated.append(str(message.params.uri))
        elif isinstance(message, types.ResourceListChangedNotification):
            self.list_changed += 1

    def updates_of(self, uri: str) -> int:
        return self.updated.count(uri)

    async def wait(self, condition: Any, what: str, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                pytest.fail(f"timed out after {timeout}s waiting for {what}; heard {self.updated}, "
                            f"{self.list_changed} list changes")
            await anyio.sleep(0.02)


@pytest.fixture(params=["stdio", "http"])
def open_watching(request, open_stdio_session, open_http_session, start_http_server):
    """`async with open_watching(heard) as session:` over stdio, then over HTTP."""
    if request.param == "stdio":
        return lambda heard: open_stdio_session(message_handler=heard)
    server = start_http_server()
    return lambda heard: open_http_session(server, message_handler=heard)


async def send(session: Any, term: str, line: str) -> None:
    sent = await call(session, "terminal_send", {"id": term, "input": line})
    assert sent.is_error is False, show(("terminal_send", {"input": line}), sent)


# How long to listen for a notification that must not come: several of the server's
# notification intervals (100 ms by default).
QUIET = 0.6


async def test_a_subscribed_screen_is_notified_as_it_changes_until_unsubscribed(open_watching):
    heard = Heard()
    async with open_watching(heard) as session:
        term = await open_terminal(session)
        uri = f"terminal://{term}/screen"
        await heard.wait(lambda: heard.list_changed >= 1, "list_changed for the opened terminal")
        # Not subscribed yet: its output is not notified.
        await send(session, term, "echo before-$((2*3))")
        await read_until(session, uri, "before-6")
        await anyio.sleep(QUIET)
        assert heard.updates_of(uri) == 0, heard.updated

        await session.subscribe_resource(uri)
        await send(session, term, "echo subscribed-$((6*7))")
        await heard.wait(lambda: heard.updates_of(uri) >= 1, f"resources/updated for {uri}")
        await read_until(session, uri, "subscribed-42")
        assert set(heard.updated) == {uri}, heard.updated

        await session.unsubscribe_resource(uri)
        await anyio.sleep(QUIET)  # what was already pending may still come
        count = heard.updates_of(uri)
        await send(session, term, "echo unsubscribed-$((7*7))")
        await read_until(session, uri, "unsubscribed-49")
        await anyio.sleep(QUIET)
        assert heard.updates_of(uri) == count, f"updates after unsubscribing: {heard.updated}"

        # Closing it changes the list.
        before = heard.list_changed
        closed = await call(session, "terminal_close", {"id": term})
        assert closed.is_error is False, show(("terminal_close", {}), closed)
        await heard.wait(lambda: heard.list_changed > before, "list_changed for the closed terminal")
        assert uri not in await listed(session)


async def test_changes_are_sent_at_most_once_per_interval_what_changed_in_between_together(open_stdio_session):
    # A long interval: the terminal's opening is told at once, and the next send can come
    # only 3 s later, whatever changed meanwhile.
    heard = Heard()
    config = "[serve]\nresource_update_interval_ms = 3000\n"
    async with open_stdio_session(config=config, message_handler=heard) as session:
        term = await open_terminal(session)
        uri = f"terminal://{term}/screen"
        await heard.wait(lambda: heard.list_changed >= 1, "list_changed for the opened terminal")
        await session.subscribe_resource(uri)
        for i in range(5):
            await send(session, term, f"echo burst-{i}-$((6*7))")
        await read_until(session, uri, "burst-4-42")
        await heard.wait(lambda: heard.updates_of(uri) >= 1, f"resources/updated for {uri}")
        # Five changes, one notification: the next could come 3 s after this one at the
        # earliest.
        await anyio.sleep(QUIET)
        assert heard.updates_of(uri) == 1, heard.updated
        assert heard.list_changed == 1, heard.list_changed


async def test_a_subscribed_job_output_is_notified_and_its_end_changes_the_list(open_watching):
    heard = Heard()
    async with open_watching(heard) as session:
        job = await start_job(session, "sleep 1; for i in 1 2 3; do echo tick-$i; sleep 0.3; done")
        uri = f"job://{job}/output"
        await heard.wait(lambda: heard.list_changed >= 1, "list_changed for the started job")
        await session.subscribe_resource(uri)
        await heard.wait(lambda: heard.updates_of(uri) >= 1, f"resources/updated for {uri}")
        before = heard.list_changed
        await read_until(session, uri, "tick-3")
        # The job's end changes what the list says of it (running -> exited).
        await heard.wait(lambda: heard.list_changed > before, "list_changed for the job's end")
        assert "exited" in (await listed(session))[uri].description, await listed(session)

        for uri in ("job://bash-999/output", "terminal://term-999/screen", "file:///etc/passwd"):
            with pytest.raises(MCPError) as raised:
                await session.subscribe_resource(uri)
            assert raised.value.code == RESOURCE_NOT_FOUND, (uri, raised.value.error)


async def test_another_owners_changes_notify_nothing(http_server, open_http_session):
    heard_a, heard_b = Heard(), Heard()
    async with open_http_session(http_server, heard_a) as a, open_http_session(http_server, heard_b) as b:
        mine = await open_terminal(a)
        await a.subscribe_resource(f"terminal://{mine}/screen")
        await heard_a.wait(lambda: heard_a.list_changed >= 1, "A's list_changed for its terminal")
        await anyio.sleep(QUIET)
        updated, list_changed = len(heard_a.updated), heard_a.list_changed

        # B opens a terminal, types into it, runs a job and closes the terminal.
        theirs = await open_terminal(b)
        their_uri = f"terminal://{theirs}/screen"
        await b.subscribe_resource(their_uri)
        await send(b, theirs, "echo owner-b-$((8*8))")
        job = await start_job(b, "echo owner-b-job")
        await read_until(b, f"job://{job}/output", "owner-b-job")
        await heard_b.wait(lambda: heard_b.updates_of(their_uri) >= 1, "B's own update")
        await anyio.sleep(QUIET)
        before = heard_b.list_changed
        closed = await call(b, "terminal_close", {"id": theirs})
        assert closed.is_error is False, show(("terminal_close", {}), closed)
        await heard_b.wait(lambda: heard_b.list_changed > before, "B's list change for its close")
        await anyio.sleep(QUIET)
        assert heard_a.updated[updated:] == [], f"A heard B's changes: {heard_a.updated}"
        assert heard_a.list_changed == list_changed, "A heard B's list change"

        # A cannot subscribe to B's resources: they do not exist for A.
        for uri in (f"terminal://{theirs}/screen", f"job://{job}/output"):
            with pytest.raises(MCPError) as raised:
                await a.subscribe_resource(uri)
            assert raised.value.code == RESOURCE_NOT_FOUND, (uri, raised.value.error)

        # A still hears its own.
        await send(a, mine, "echo owner-a")
        await heard_a.wait(lambda: heard_a.updates_of(f"terminal://{mine}/screen") > 0, "A's own update")


async def test_completion_gives_the_owners_own_ids(http_server, open_http_session):
    async with open_http_session(http_server) as a, open_http_session(http_server) as b:
        first, second = await open_terminal(a), await open_terminal(a)
        job = await start_job(a, "echo completed")
        theirs = await open_terminal(b)

        completed = await a.complete(SCREEN_TEMPLATE, {"name": "id", "value": "term-"})
        assert completed.completion.values == [first, second], completed
        assert completed.completion.total == 2 and completed.completion.has_more is False, completed
        exact = await a.complete(SCREEN_TEMPLATE, {"name": "id", "value": first})
        assert exact.completion.values[0] == first, exact
        assert theirs not in exact.completion.values, exact
        jobs = await a.complete(JOB_TEMPLATE, {"name": "id", "value": ""})
        assert jobs.completion.values == [job], jobs
        none = await a.complete(SCREEN_TEMPLATE, {"name": "id", "value": "bash-"})
        assert none.completion.values == [], none

        # B completes its own terminal only; A's job ids are not B's.
        seen_by_b = await b.complete(SCREEN_TEMPLATE, {"name": "id", "value": ""})
        assert seen_by_b.completion.values == [theirs], seen_by_b
        assert (await b.complete(JOB_TEMPLATE, {"name": "id", "value": ""})).completion.values == []

        for ref, argument in (
            (types.ResourceTemplateReference(type="ref/resource", uri="file:///{path}"), "path"),
            (SCREEN_TEMPLATE, "name"),
            (types.PromptReference(type="ref/prompt", name="review"), "id"),
        ):
            with pytest.raises(MCPError) as raised:
                await a.complete(ref, {"name": argument, "value": ""})
            assert raised.value.code == INVALID_PARAMS, (ref, raised.value.error)


async def test_completion_over_stdio(open_stdio_session):
    async with open_stdio_session() as session:
        term = await open_terminal(session)
        completed = await session.complete(SCREEN_TEMPLATE, {"name": "id", "value": "t"})
        assert completed.completion.values == [term], completed


def test_a_job_started_before_initialized_is_handled_is_heard(raw_stdio_server):
    """rmcp handles `notifications/initialized` on a task of its own, so a request sent
    right behind it may run before it. Here the request comes first outright (a client
    SHOULD NOT, and rmcp serves it): the job it starts must still be heard of."""
    server = raw_stdio_server()
    init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "eager", "version": "0"}}
    server.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init})
    assert "result" in server.receive_response(1)
    args = {"command": "sleep 1", "description": "started at once", "run_in_background": True}
    server.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "bash", "arguments": args}})
    assert server.receive_response(2)["result"]["isError"] is False
    server.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    heard: list[Any] = []
    deadline = time.monotonic() + 0.8  # before the job ends, which is news again
    while time.monotonic() < deadline:
        try:
            message = server.messages.get(timeout=0.05)
        except queue.Empty:
            continue
        assert message is not None, f"dsh serve ended\n{server.stderr()}"
        heard.append(message)
        if message.get("method") == "notifications/resources/list_changed":
            return
    pytest.fail(f"no resources/list_changed for the job started before initialized; heard {heard}")
