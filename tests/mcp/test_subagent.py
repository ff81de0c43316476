"""Subagents under `dsh serve`: the `subagent` tool drives the client's own model through
MCP sampling (`sampling/createMessage` with tools). The "model" here is the Python SDK
client's `sampling_callback`, scripted: it asks for tools deterministically, then answers.

Covered: a foreground run (its answer and turns, the tools offered, each step's tool call
run through the pipeline as the caller and logged with the subagent's id and the call that
started it); a background run read through `job_output` with `wait_ms` from cursors; a
guard denying one step (the denial in the transcript, the loop goes on); a tool outside
`tools` refused; the depth limit; `max_turns` and the timeout; a client without sampling
getting `SAMPLING_UNAVAILABLE`; `job_kill` during a long `bash` step killing its process;
over HTTP, foreground and background sampling on the calls' streams, and the owner's
going away killing a running subagent's step; a sampling request the client refuses
ending the subagent with the error in its transcript; `max_running_per_owner`."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import asynccontextmanager
from typing import Any

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

SAMPLING_WITH_TOOLS = types.SamplingCapability(tools=types.SamplingToolsCapability())


def use(name: str, args: dict[str, Any], id: str = "use-1") -> types.CreateMessageResultWithTools:
    """The model asks for one tool call."""
    return types.CreateMessageResultWithTools(
        role="assistant",
        content=[types.ToolUseContent(type="tool_use", id=id, name=name, input=args)],
        model="scripted",
        stop_reason="toolUse",
    )


def answer(words: str) -> types.CreateMessageResult:
    """The model's final answer."""
    return types.CreateMessageResult(
        role="assistant", content=types.TextContent(type="text", text=words), model="scripted", stop_reason="endTurn"
    )


class Model:
    """A scripted model: each sampling request takes the next step of the script (a result,
    or a function of the request's params giving one); past the script it keeps asking
    for `ls`. It records every request."""

    def __init__(self, *script: Any) -> None:
        self.script = list(script)
        self.requests: list[types.CreateMessageRequestParams] = []

    async def __call__(self, context: Any, params: types.CreateMessageRequestParams) -> Any:
        self.requests.append(params)
        if not self.script:
            return use("bash", {"command": "ls", "description": "list"}, id=f"use-{len(self.requests)}")
        step = self.script.pop(0)
        return step(params) if callable(step) else step

    def tool_results(self, n: int) -> list[str]:
        """The texts of the tool results the `n`-th request (0-based) carried last."""
        last = self.requests[n].messages[-1]
        blocks = last.content if isinstance(last.content, list) else [last.content]
        return [
            "".join(getattr(c, "text", "") for c in block.content)
            for block in blocks
            if getattr(block, "type", None) == "tool_result"
        ]


def serve(dsh_bin, dsh_env, dsh_dirs, config: str | None = None) -> StdioServerParameters:
    args = [] if config is None else ["--config", str(write_config(dsh_dirs, config))]
    return StdioServerParameters(command=dsh_bin, args=[*args, "serve"], env=dsh_env, cwd=str(dsh_dirs.work))


@asynccontextmanager
async def Session(params: StdioServerParameters, model: Callable | None, capabilities=SAMPLING_WITH_TOOLS):
    """`async with Session(...) as session:` an initialized client whose model is `model`
    (none: a client without sampling)."""
    kwargs: dict[str, Any] = {}
    if model is not None:
        kwargs = {"sampling_callback": model, "sampling_capabilities": capabilities}
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, read_timeout_seconds=30, **kwargs) as session:
            with anyio.fail_after(30):
                await session.initialize()
            yield session


LS = {"command": "ls", "description": "list the workspace"}


async def transcript_of(session: ClientSession, job: str, wait_ms: int = 10_000, reads: int = 40) -> tuple[str, int, str]:
    """Reads `job`'s transcript through `job_output` with `wait_ms`, from the returned cursor
    each time, until it has ended; the transcript, the number of reads, the last status."""
    cursor, whole, status = 0, "", ""
    for n in range(1, reads + 1):
        read = await session.call_tool("job_output", {"id": job, "since": cursor, "wait_ms": wait_ms})
        assert not read.is_error, show(None, read)
        body, _, status = text(read).rpartition("\n[")
        if not status.startswith(f"{job}:"):
            body, status = "", text(read).lstrip("[")
        whole += body + ("\n" if body and not body.endswith("\n") else "")
        cursor = int(status.rsplit("next cursor: ", 1)[1].rstrip("]"))
        if "running" not in status:
            return whole, n, status
    pytest.fail(f"{job} still running after {reads} reads:\n{whole}\n{status}")


async def test_a_foreground_subagent_runs_bash_through_the_pipeline_and_answers(dsh_bin, dsh_env, dsh_dirs, event_log):
    (dsh_dirs.work / "retry_policy.toml").write_text("attempts = 3\n")
    model = Model(use("bash", LS), lambda p: answer("the workspace holds " + model.tool_results(1)[0].strip()))
    async with Session(serve(dsh_bin, dsh_env, dsh_dirs), model) as session:
        listed = {tool.name for tool in (await session.list_tools()).tools}
        assert "subagent" in listed
        request = ("subagent", {"prompt": "What files are in the workspace?"})
        result = await session.call_tool(*request)
        assert not result.is_error, show(request, result)
        words = text(result)
        assert words.startswith("the workspace holds retry_policy.toml"), show(request, result)
        assert "answered in 2 turns" in words, words
        job = words.rsplit("[", 1)[1].split(":")[0]
        assert job.startswith("subagent-"), words
        transcript, _, status = await transcript_of(session, job)
    # What the model was sent: the prompt, the caller's tools but subagent, maxTokens.
    first = model.requests[0]
    offered = {tool.name for tool in first.tools or []}
    assert "bash" in offered and "read" in offered and "subagent" not in offered, offered
    assert first.max_tokens == 4096
    assert "retry_policy.toml" in model.tool_results(1)[0]
    assert "[turn 1] call bash: " in transcript and '"command":"ls"' in transcript, transcript
    assert "[turn 1] result bash: ok" in transcript and "retry_policy.toml" in transcript, transcript
    assert "[turn 2] answer: the workspace holds" in transcript, transcript
    assert "exited with code 0" in status, status
    # The step ran through the pipeline as the caller, logged with the subagent and the call that started it.
    started = event_log.calls(lambda e: e["tool"] == "subagent")
    assert len(started) == 1
    steps = event_log.calls(lambda e: e["tool"] == "bash")
    assert len(steps) == 1 and steps[0]["subagent"] == job and steps[0]["started_by"] == started[0]["call_id"], steps
    assert steps[0]["owner"] == started[0]["owner"] and steps[0]["scope"] == started[0]["scope"]
    kinds = [e["step"] for e in event_log.events() if e["event"] == "subagent/step" and e["subagent"] == job]
    assert kinds == ["call", "result", "answer"], kinds


async def test_a_background_subagent_works_inside_job_output_waits_and_its_transcript_reads_by_cursor(
    dsh_bin, dsh_env, dsh_dirs
):
    model = Model(use("bash", {"command": "echo one; echo two", "description": "two lines"}), use("bash", LS, "use-2"), answer("done: two steps"))
    async with Session(serve(dsh_bin, dsh_env, dsh_dirs), model) as session:
        started = await session.call_tool("subagent", {"prompt": "count", "run_in_background": True})
        assert not started.is_error, show(None, started)
        job = text(started).split()[0]
        assert job.startswith("subagent-"), text(started)
        # Nobody waits on it: it has not asked the model, and says why.
        await anyio.sleep(0.3)
        assert model.requests == []
        listed = text(await session.call_tool("job_list", {}))
        line = next(l for l in listed.splitlines() if l.startswith(job))
        assert "subagent" in line and "waiting for job_output" in line, listed
        transcript, reads, status = await transcript_of(session, job)
    assert reads >= 2, (reads, transcript)
    assert len(model.requests) == 3
    entries = [line for line in transcript.splitlines() if line.startswith("[turn")]
    assert entries == [
        '[turn 1] call bash: {"command":"echo one; echo two","description":"two lines"}',
        "[turn 1] result bash: ok: one",
        '[turn 2] call bash: {"command":"ls","description":"list the workspace"}',
        "[turn 2] result bash: ok",
        "[turn 3] answer: done: two steps",
    ] or entries[:2] == [
        '[turn 1] call bash: {"command":"echo one; echo two","description":"two lines"}',
        "[turn 1] result bash: ok: one",
    ], transcript
    assert "    two" in transcript and entries[-1] == "[turn 3] answer: done: two steps", transcript
    assert "exited with code 0" in status, status


async def test_a_guard_denying_one_step_shows_in_the_transcript_and_the_loop_goes_on(dsh_bin, dsh_env, dsh_dirs):
    model = Model(
        use("bash", {"command": "rm -rf /", "description": "wipe"}),
        lambda p: use("bash", LS, "use-2") if "DENIED" in model.tool_results(1)[0] else answer("not denied?"),
        answer("listed after the denial"),
    )
    params = serve(dsh_bin, dsh_env, dsh_dirs, '[pipeline]\nguards = ["deny_destructive"]\n')
    async with Session(params, model) as session:
        result = await session.call_tool("subagent", {"prompt": "clean up"})
        assert not result.is_error, show(None, result)
        assert text(result).startswith("listed after the denial"), text(result)
        job = text(result).rsplit("[", 1)[1].split(":")[0]
        transcript, _, _ = await transcript_of(session, job)
    assert "[turn 1] result bash: DENIED: " in transcript and "deny_destructive" in transcript, transcript
    assert "[turn 2] result bash: ok" in transcript, transcript


async def test_a_tool_outside_tools_is_refused_and_the_depth_limit_holds(dsh_bin, dsh_env, dsh_dirs):
    model = Model(
        use("bash", LS),
        use("subagent", {"prompt": "go deeper"}, "use-2"),
        answer("refused twice"),
    )
    async with Session(serve(dsh_bin, dsh_env, dsh_dirs), model) as session:
        result = await session.call_tool("subagent", {"prompt": "look", "tools": ["job_list", "subagent"]})
        assert not result.is_error, show(None, result)
    assert {t.name for t in model.requests[0].tools or []} == {"job_list", "subagent"}
    refused = model.tool_results(1)[0]
    assert refused.startswith("DENIED: bash is not among this subagent's tools"), refused
    deeper = model.tool_results(2)[0]
    assert deeper.startswith("LIMIT_EXCEEDED: a subagent cannot start another"), deeper


async def test_max_turns_ends_a_subagent_that_never_answers(dsh_bin, dsh_env, dsh_dirs):
    model = Model()  # asks for `ls` for ever
    async with Session(serve(dsh_bin, dsh_env, dsh_dirs), model) as session:
        request = ("subagent", {"prompt": "loop", "max_turns": 3})
        result = await session.call_tool(*request)
        message = expect_error(request, result, "LIMIT_EXCEEDED")
    assert "reached its 3 turns" in message, message
    assert len(model.requests) == 3


async def test_a_client_without_sampling_with_tools_gets_sampling_unavailable(dsh_bin, dsh_env, dsh_dirs):
    async with Session(serve(dsh_bin, dsh_env, dsh_dirs), None) as session:
        assert "subagent" in {tool.name for tool in (await session.list_tools()).tools}
        for background in (False, True):
            request = ("subagent", {"prompt": "anything", "run_in_background": background})
            result = await session.call_tool(*request)
            message = expect_error(request, result, "SAMPLING_UNAVAILABLE")
            assert "did not declare sampling with tools" in message, message
        assert "subagent" not in text(await session.call_tool("job_list", {}))
    # Sampling without tools is not enough.
    plain = Model(answer("never asked"))
    async with Session(serve(dsh_bin, dsh_env, dsh_dirs), plain, types.SamplingCapability()) as session:
        request = ("subagent", {"prompt": "anything"})
        expect_error(request, await session.call_tool(*request), "SAMPLING_UNAVAILABLE")
    assert plain.requests == []


async def test_job_kill_during_a_long_bash_step_kills_its_process(dsh_bin, dsh_env, dsh_dirs, markers, procs):
    marker = markers()
    model = Model(use("bash", {"command": f"sleep {marker}", "description": "long"}), answer("too late"))
    async with Session(serve(dsh_bin, dsh_env, dsh_dirs), model) as session:
        started = await session.call_tool("subagent", {"prompt": "wait", "run_in_background": True})
        job = text(started).split()[0]
        read = await session.call_tool("job_output", {"id": job, "wait_ms": 10_000})
        assert "[turn 1] call bash" in text(read), text(read)
        await procs.wait_until_present(marker, 10)
        listed = text(await session.call_tool("job_list", {}))
        assert "running bash" in listed, listed
        killed = await session.call_tool("job_kill", {"id": job})
        assert not killed.is_error, show(None, killed)
        gone = await procs.wait_until_gone(marker, 10)
        transcript, _, status = await transcript_of(session, job, wait_ms=1000)
    assert gone < 10
    assert "killed" in status and "job_kill" in status, status
    assert "[turn 1] killed" in transcript, transcript
    assert len(model.requests) == 1


async def test_the_timeout_ends_a_subagent_and_its_step(dsh_bin, dsh_env, dsh_dirs, markers, procs):
    marker = markers()
    model = Model(use("bash", {"command": f"sleep {marker}", "description": "long"}), answer("too late"))
    async with Session(serve(dsh_bin, dsh_env, dsh_dirs), model) as session:
        request = ("subagent", {"prompt": "wait", "timeout_ms": 1500})
        result = await session.call_tool(*request)
        message = expect_error(request, result, "TIMEOUT")
        assert "did not finish within 1500 ms" in message, message
        await procs.wait_until_gone(marker, 10)


async def test_over_http_a_subagent_samples_on_the_call_s_stream_and_its_owner_going_ends_it(
    start_http_server, markers, procs
):
    server = start_http_server("[serve]\nowner_grace_ms = 200\n")
    marker = markers()
    model = Model(
        use("bash", LS), answer("over http"), use("bash", {"command": f"sleep {marker}", "description": "long"})
    )
    async with create_mcp_http_client(headers=server.auth_headers) as http:
        async with streamable_http_client(server.url, http_client=http) as (read, write):
            async with ClientSession(
                read, write, sampling_callback=model, sampling_capabilities=SAMPLING_WITH_TOOLS
            ) as session:
                await session.initialize()
                result = await session.call_tool("subagent", {"prompt": "list"})
                assert not result.is_error and text(result).startswith("over http"), show(None, result)
                started = await session.call_tool("subagent", {"prompt": "wait", "run_in_background": True})
                job = text(started).split()[0]
                read_ = await session.call_tool("job_output", {"id": job, "wait_ms": 10_000})
                assert "[turn 1] call bash" in text(read_), text(read_)
                await procs.wait_until_present(marker, 10)
    # The session is gone: after the grace period its subagent and its step are killed.
    await procs.wait_until_gone(marker, 10)


async def test_a_refused_sampling_request_ends_the_subagent_with_the_error_in_its_transcript(dsh_bin, dsh_env, dsh_dirs):
    model = Model(use("bash", LS), types.ErrorData(code=-1, message="the user refused this request"))
    async with Session(serve(dsh_bin, dsh_env, dsh_dirs), model) as session:
        request = ("subagent", {"prompt": "list, then stop"})
        result = await session.call_tool(*request)
        message = expect_error(request, result, "SAMPLING_UNAVAILABLE")
        assert "did not answer" in message and "the user refused this request" in message, message
        job = next(l.split()[0] for l in text(await session.call_tool("job_list", {})).splitlines() if l.startswith("subagent-"))
        transcript, _, status = await transcript_of(session, job, wait_ms=1000)
    assert "[turn 1] call bash" in transcript, transcript
    assert "the user refused this request" in transcript, transcript
    assert "exited" not in status or "code 0" not in status, status
    assert len(model.requests) == 2


async def test_an_owner_runs_at_most_max_running_per_owner_subagents(dsh_bin, dsh_env, dsh_dirs):
    model = Model()
    params = serve(dsh_bin, dsh_env, dsh_dirs, "[subagent]\nmax_running_per_owner = 1\n")
    async with Session(params, model) as session:
        first = await session.call_tool("subagent", {"prompt": "wait", "run_in_background": True})
        assert not first.is_error, show(None, first)
        request = ("subagent", {"prompt": "second", "run_in_background": True})
        message = expect_error(request, await session.call_tool(*request), "LIMIT_EXCEEDED")
        assert "1" in message, message
        job = text(first).split()[0]
        assert not (await session.call_tool("job_kill", {"id": job})).is_error
        # Its slot is free once it has ended.
        await transcript_of(session, job, wait_ms=1000)
        again = await session.call_tool(*request)
        assert not again.is_error, show(request, again)
    assert model.requests == []


async def test_a_transcript_stops_at_max_transcript_bytes_and_the_run_goes_on(dsh_bin, dsh_env, dsh_dirs):
    seq = {"command": "seq 1 50", "description": "fifty lines"}
    model = Model(*[use("bash", seq, f"use-{n}") for n in range(1, 6)], answer("five runs seen"))
    params = serve(dsh_bin, dsh_env, dsh_dirs, "[subagent]\nmax_transcript_bytes = 300\n")
    async with Session(params, model) as session:
        result = await session.call_tool("subagent", {"prompt": "count five times"})
        assert not result.is_error and text(result).startswith("five runs seen"), show(None, result)
        job = text(result).rsplit("[", 1)[1].split(":")[0]
        transcript, _, _ = await transcript_of(session, job, wait_ms=1000)
    cut = "[transcript cut: it passed 300 bytes ([subagent] max_transcript_bytes); the run goes on]\n"
    assert transcript.endswith(cut) and transcript.count("[transcript cut") == 1, transcript
    assert len(transcript.encode()) <= 300 + len(cut), len(transcript.encode())
    # The model still got each result whole.
    lines = model.tool_results(5)[0].splitlines()
    assert lines[:50] == [str(n) for n in range(1, 51)], lines
