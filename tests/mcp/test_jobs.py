"""Background jobs: `bash` with `run_in_background`, `job_list`, `job_output`, `job_kill`.

Covers: a job's life seen through `job_list` and `job_output` (cursor reads,
server-side `wait_ms`), `job_kill` leaving no process of a job's tree (and
escalating to KILL when TERM is ignored), owner isolation between HTTP sessions
(another owner's id is indistinguishable from one that never existed), jobs of a
closed HTTP session killed after the grace period, bounded server memory for a
job printing 100 MB (tail in the result, whole output in the spill file), no job
outliving `dsh serve` on SIGTERM, argument validation, and the per-owner limit
on running jobs.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from tool_results import call, expect_error, show, text
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

pytestmark = pytest.mark.anyio

# job_output's default max_bytes: what fits the 30000-byte result budget beside the
# marker and the status line (30000 - 1024).
DEFAULT_MAX_BYTES = 28976

STARTED_RE = re.compile(r"\Astarted background job (bash-\d+)\b")
# The last line of every job_output result.
STATUS_RE = re.compile(r"(?s)\A(?P<body>.*?)\[(?P<id>[a-z]+-\d+): (?P<state>[^\n]*); next cursor: (?P<cursor>\d+)\]\Z")
OMITTED_RE = re.compile(r"\A… (?P<omitted>\d+) bytes omitted \(full output: (?P<path>[^\n]+)\) …\n")
LIST_FIELDS = ("id", "kind", "state", "started_at_ms", "runtime_ms", "description", "command")


# --------------------------------------------------------------------------- helpers








async def start_job(session: Any, command: str, description: str = "background job") -> str:
    """Starts `command` as a background job; returns its id (`bash-N`)."""
    args = {"command": command, "description": description, "run_in_background": True}
    result = await call(session, "bash", args)
    assert result.is_error is False, show(("bash", args), result)
    match = STARTED_RE.match(text(result))
    assert match, show(("bash", args), result)
    return match.group(1)


@dataclass
class Output:
    body: str
    job_id: str
    state: str
    cursor: int
    raw: str


def parse_output(job_id: str, request: dict[str, Any], result: Any) -> Output:
    assert result.is_error is False, show(("job_output", request), result)
    raw = text(result)
    match = STATUS_RE.match(raw)
    assert match, f"no [id: state; next cursor: C] last line\n{show(('job_output', request), result)}"
    assert match["id"] == job_id, show(("job_output", request), result)
    return Output(body=match["body"], job_id=match["id"], state=match["state"], cursor=int(match["cursor"]), raw=raw)


async def job_output(session: Any, job_id: str, **options: Any) -> Output:
    args = {"id": job_id} | options
    return parse_output(job_id, args, await call(session, "job_output", args))


async def wait_for_end(session: Any, job_id: str, timeout: float = 10.0, **options: Any) -> tuple[str, Output]:
    """Reads the job with `wait_ms` from cursor to cursor until it is no longer running.

    Returns everything read and the last read.
    """
    deadline = time.monotonic() + timeout
    cursor, collected = 0, []
    while True:
        wait_ms = max(1, min(5000, int((deadline - time.monotonic()) * 1000)))
        out = await job_output(session, job_id, since=cursor, wait_ms=wait_ms, **options)
        collected.append(out.body)
        cursor = out.cursor
        if out.state != "running":
            return "".join(collected), out
        if time.monotonic() >= deadline:
            pytest.fail(f"{job_id} still running after {timeout}s of job_output wait_ms reads: {out.raw[-300:]!r}")


async def list_jobs(session: Any) -> list[dict[str, str]]:
    result = await call(session, "job_list", {})
    assert result.is_error is False, show(("job_list", {}), result)
    raw = text(result)
    if raw == "no background jobs":
        return []
    jobs = []
    for line in raw.split("\n"):
        fields = line.split("\t")
        assert len(fields) == len(LIST_FIELDS), f"job_list line has {len(fields)} tab-separated fields: {line!r}"
        job = dict(zip(LIST_FIELDS, fields))
        assert re.fullmatch(r"started_at_ms=\d+", job["started_at_ms"]), line
        assert re.fullmatch(r"runtime_ms=\d+", job["runtime_ms"]), line
        assert job["command"].startswith("$ "), line
        job["command"] = job["command"][2:]
        jobs.append(job)
    return jobs




# --------------------------------------------------------------------------- a job's life


async def test_job_runs_then_exits_and_its_output_is_read_by_cursor(open_stdio_session, dsh_dirs):
    # The job ends when the test says so (not after a sleep a loaded machine could outlast
    # before the list below).
    command = "until [ -e go ]; do sleep 0.02; done; echo done"
    async with open_stdio_session() as session:
        job = await start_job(session, command, "short job")

        jobs = await list_jobs(session)
        assert [(j["id"], j["kind"], j["state"], j["description"], j["command"]) for j in jobs] == [
            (job, "bash", "running", "short job", command)
        ], jobs
        (dsh_dirs.work / "go").touch()

        output, last = await wait_for_end(session, job, timeout=10)
        assert last.state == "exited with code 0", last.raw
        assert output == "done\n", (output, last.raw)

        (listed,) = await list_jobs(session)
        assert (listed["id"], listed["state"]) == (job, "exited with code 0"), listed

        whole = await job_output(session, job)
        assert (whole.body, whole.state, whole.cursor) == ("done\n", "exited with code 0", 5), whole.raw

        again = await job_output(session, job, since=whole.cursor)
        assert again.raw == f"[{job}: exited with code 0; next cursor: {whole.cursor}]", again.raw


async def test_job_output_wait_ms_returns_the_output_as_soon_as_it_comes(open_stdio_session):
    async with open_stdio_session() as session:
        job = await start_job(session, "sleep 0.2; echo late")
        begin = time.monotonic()
        out = await job_output(session, job, wait_ms=5000)
        took = time.monotonic() - begin

    assert out.body == "late\n", out.raw
    assert took < 2.0, f"job_output with wait_ms=5000 answered after {took:.2f}s for output printed after 0.2s"


async def test_job_output_without_since_waits_for_what_is_new_and_returns_it_all(open_stdio_session):
    """A model that reads with `wait_ms` and no `since` (as models do) gets a wait for
    output newer than the job had, not the output so far at once, again and again."""
    async with open_stdio_session() as session:
        job = await start_job(session, "echo early; sleep 1; echo late")
        first = await job_output(session, job, wait_ms=5000)
        if first.body == "":
            first = await job_output(session, job, wait_ms=5000)
        assert first.body.startswith("early\n"), first.raw
        if first.body == "early\n":
            # Waited for news past "early", and returns everything from the start.
            again = await call(session, "job_output", {"id": job, "wait_ms": 5000})
            assert text(again).startswith("early\nlate\n"), text(again)
        else:
            assert first.body == "early\nlate\n", first.raw


# --------------------------------------------------------------------------- job_kill


async def test_job_kill_leaves_no_process_of_the_job_or_its_tree(open_stdio_session, markers, procs):
    single, child_1, child_2 = markers("1000"), markers("1000"), markers("1000")
    async with open_stdio_session() as session:
        one = await start_job(session, f"sleep {single}", "one process")
        tree = await start_job(session, f"bash -c 'sleep {child_1} & sleep {child_2}'", "a tree")
        for marker in (single, child_1, child_2):
            await procs.wait_until_present(marker, timeout=10)

        for job in (one, tree):
            args = {"id": job}
            result = await call(session, "job_kill", args)
            assert result.is_error is False, show(("job_kill", args), result)
            sent = f"{job}: sent SIGTERM to its process group"
            assert text(result).startswith(sent), show(("job_kill", args), result)

        for marker in (single, child_1, child_2):
            await procs.wait_until_gone(marker, timeout=3)

        states = {j["id"]: j["state"] for j in await list_jobs(session)}
        for job in (one, tree):
            assert states.get(job, "").startswith("killed by signal 15"), states


async def test_job_kill_follows_an_ignored_term_with_kill(open_stdio_session, markers, procs):
    marker = markers("1000")
    async with open_stdio_session() as session:
        # SIGTERM stays ignored across fork and exec: neither the shell nor the sleep dies of it.
        job = await start_job(session, f"trap '' TERM; sleep {marker} & wait", "ignores TERM")
        await procs.wait_until_present(marker, timeout=10)
        begin = time.monotonic()
        args = {"id": job}
        result = await call(session, "job_kill", args)
        assert result.is_error is False, show(("job_kill", args), result)
        await procs.wait_until_gone(marker, timeout=5)
        took = time.monotonic() - begin
        _, last = await wait_for_end(session, job, timeout=5)

    assert last.state.startswith("killed by signal 9"), (last.raw, text(result))
    assert took >= 1.5, f"the TERM-ignoring job was gone {took:.2f}s after job_kill: no grace before KILL"


# --------------------------------------------------------------------------- owners


async def test_http_sessions_see_only_their_own_jobs(http_server, open_http_session, markers, procs):
    marker = markers("1000")
    never = "bash-999"

    def masked(message: str, job_id: str) -> str:
        assert job_id in message, f"the message does not name the id {job_id}: {message!r}"
        return message.replace(job_id, "<ID>")

    async with open_http_session(http_server) as a, open_http_session(http_server) as b:
        job = await start_job(a, f"sleep {marker}", "A's job")
        await procs.wait_until_present(marker, timeout=10)

        assert await list_jobs(b) == [], "B's job_list shows A's job"

        attempts = [
            ("job_output", {}),
            ("job_output", {"wait_ms": 100}),
            ("job_kill", {}),
            ("job_kill", {"signal": "KILL"}),
        ]
        for tool, extra in attempts:
            theirs_args = {"id": job} | extra
            theirs = await call(b, tool, theirs_args)
            theirs_message = expect_error((tool, theirs_args), theirs, "NOT_FOUND")
            missing_args = {"id": never} | extra
            missing = await call(b, tool, missing_args)
            missing_message = expect_error((tool, missing_args), missing, "NOT_FOUND")
            assert masked(theirs_message, job) == masked(missing_message, never), (
                f"{tool}: A's id and a never-existing id get different answers:\n"
                f"{show((tool, theirs_args), theirs)}\n{show((tool, missing_args), missing)}"
            )

        # B's attempts changed nothing.
        assert procs.matching(marker), "A's job process died after B's job_kill attempts"
        jobs = await list_jobs(a)
        assert [(j["id"], j["state"]) for j in jobs] == [(job, "running")], jobs
        mine = await job_output(a, job)
        assert mine.state == "running", mine.raw


async def test_closed_http_session_has_its_jobs_killed_after_the_grace_period(
    start_http_server, open_http_session, markers, procs, text_of
):
    server = start_http_server(config="[serve]\nowner_grace_ms = 500\n")
    gone_marker, kept_marker = markers("1000"), markers("1000")

    async with open_http_session(server) as other:
        kept = await start_job(other, f"sleep {kept_marker}", "the other session's job")
        async with open_http_session(server) as leaving:
            await start_job(leaving, f"sleep {gone_marker}", "dies with its session")
            await procs.wait_until_present(gone_marker, timeout=10)
            closed_at = time.monotonic()  # the close (DELETE) starts now
        # Closing sent DELETE: the session is gone, its grace period runs.
        await procs.wait_until_gone(gone_marker, timeout=5)
        since_close = time.monotonic() - closed_at

        assert server.proc.poll() is None, f"the server exited\n{server.stderr()}"
        result = await other.call_tool("bash", {"command": "echo still-here", "description": "d"})
        assert text_of(result) == "still-here\n[exit code: 0]", result
        assert procs.matching(kept_marker), "the other session's job was killed too"
        jobs = await list_jobs(other)
        assert [(j["id"], j["state"]) for j in jobs] == [(kept, "running")], jobs

    assert since_close >= 0.4, f"the job was killed {since_close:.2f}s after its session closed: no 500 ms grace"


async def test_vanished_http_client_has_its_jobs_killed_after_idle_and_grace(
    start_http_server, open_http_session, markers, procs, text_of
):
    # A client that goes away without DELETE: the session closes after it has been
    # idle for http_session_idle_ms, then its owner's grace period runs.
    server = start_http_server(config="[serve]\nowner_grace_ms = 300\nhttp_session_idle_ms = 1000\n")
    marker = markers("1000")
    async with create_mcp_http_client(headers=server.auth_headers) as http:
        async with streamable_http_client(server.url, http_client=http, terminate_on_close=False) as (read, write):
            async with ClientSession(read, write) as vanishing:
                await vanishing.initialize()
                await start_job(vanishing, f"sleep {marker}", "outlives its client")
                await procs.wait_until_present(marker, timeout=10)
    await procs.wait_until_gone(marker, timeout=8)
    assert server.proc.poll() is None, f"the server exited\n{server.stderr()}"
    async with open_http_session(server) as other:
        result = await other.call_tool("bash", {"command": "echo still-here", "description": "d"})
        assert text_of(result) == "still-here\n[exit code: 0]", result


# --------------------------------------------------------------------------- memory


async def test_job_printing_100_mb_keeps_server_memory_bounded(
    http_server, open_http_session, process_memory, event_log
):
    total = 100_000_000
    pid = http_server.proc.pid
    async with open_http_session(http_server) as session:
        # Warm up: the bash and jobs plugins are loaded before the baseline.
        warm = await start_job(session, "echo warm")
        await wait_for_end(session, warm, timeout=10)
        await list_jobs(session)

        peak_reset = process_memory.reset_peak(pid)
        before = process_memory.read(pid)
        samples: list[int] = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                try:
                    samples.append(process_memory.read(pid)["VmRSS"])
                except (OSError, KeyError):
                    return
                time.sleep(0.005)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            job = await start_job(session, f"yes | head -c {total}", "100 MB")
            _, last = await wait_for_end(session, job, timeout=30, max_bytes=1)
        finally:
            stop.set()
            sampler.join(timeout=5)
        after = process_memory.read(pid)
        assert (last.state, last.cursor) == ("exited with code 0", total), last.raw

        request = {"id": job}
        tail = await job_output(session, job)

    peak = max([after["VmRSS"], *samples] + ([after["VmHWM"]] if peak_reset else []))
    growth = peak - before["VmRSS"]
    memory = (
        f"before {before}, after {after}, peak reset: {peak_reset}, "
        f"{len(samples)} samples up to {max(samples, default=0)}"
    )
    print(f"server RSS growth while a job printed 100 MB: {growth / 2**20:.1f} MiB ({memory})")
    assert growth < 40 * 2**20, f"server RSS grew by {growth / 2**20:.1f} MiB while a job printed 100 MB ({memory})"

    assert (tail.state, tail.cursor) == ("exited with code 0", total), tail.raw
    match = OMITTED_RE.match(tail.body)
    assert match, f"no '… K bytes omitted (full output: PATH) …' line first: {tail.raw[:300]!r}"

    spill = Path(match["path"])
    assert spill.is_file(), f"the spill file named in the marker does not exist: {spill}"
    assert spill.stat().st_size == total, f"{spill} holds {spill.stat().st_size} bytes, not {total}"
    chunk = b"y\n" * 2**19
    with open(spill, "rb") as f:
        offset = 0
        while block := f.read(len(chunk)):
            assert block == chunk[: len(block)], f"{spill}: unexpected bytes at offset {offset}"
            offset += len(block)

    # What follows the marker is the newest DEFAULT_MAX_BYTES of the output, whole.
    shown = tail.body[match.end():]
    newest_whole = int(match["omitted"]) == total - DEFAULT_MAX_BYTES and shown == "y\n" * (DEFAULT_MAX_BYTES // 2)
    assert newest_whole, (
        f"after '{match.group(0).strip()}' come {len(shown)} bytes, not the newest {DEFAULT_MAX_BYTES} of the output "
        f"(other lines: {[line for line in shown.splitlines() if line != 'y']})"
    )

    # The result's spill path (event log) is that same file.
    calls = event_log.calls(lambda e: e.get("tool") == "job_output" and e.get("args") == request)
    assert len(calls) == 1, event_log.dump()[-3000:]
    result = event_log.result_for(calls[0])
    assert result is not None, event_log.dump()[-3000:]
    assert result.get("full_output_path") == str(spill), (
        f"the job_output result's spill path is {result.get('full_output_path')!r}, "
        f"not the job's spill file {str(spill)!r} named in its marker\n{result}"
    )


async def test_job_output_of_max_bytes_is_returned_whole(open_stdio_session):
    # Exactly the default max_bytes of output, so nothing is omitted.
    assert DEFAULT_MAX_BYTES % 4 == 0
    expected = "abc\n" * (DEFAULT_MAX_BYTES // 4)
    async with open_stdio_session() as session:
        job = await start_job(
            session,
            f"yes abc | head -n {DEFAULT_MAX_BYTES // 4}",
            f"{DEFAULT_MAX_BYTES} bytes",
        )
        _, last = await wait_for_end(session, job, timeout=10, max_bytes=1)
        assert (last.state, last.cursor) == ("exited with code 0", len(expected)), last.raw
        whole = await job_output(session, job)

    assert whole.cursor == len(expected), whole.raw[-200:]
    if whole.body != expected:
        odd = [line for line in whole.body.splitlines() if line != "abc"]
        pytest.fail(
            f"job_output {{'id': {job!r}}} on a job that printed exactly {len(expected)} bytes returned "
            f"{len(whole.body.encode())} bytes that are not its output as printed; "
            f"lines that are not from the job: {odd}"
        )


# --------------------------------------------------------------------------- server exit


def wait_for_exit(proc: subprocess.Popen, timeout: float, stderr: str) -> int:
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"dsh serve still running {timeout}s after SIGTERM\n{stderr}")


async def test_sigterm_to_http_server_kills_its_background_jobs(http_server, open_http_session, markers, procs):
    first, second = markers("1000"), markers("1000")
    async with open_http_session(http_server) as session:
        # `sleep & wait`: the sleep is a child of the job's shell, not of dsh.
        await start_job(session, f"sleep {first} & wait", "first")
        await start_job(session, f"sleep {second} & wait", "second")
        for marker in (first, second):
            await procs.wait_until_present(marker, timeout=10)

        http_server.proc.send_signal(signal.SIGTERM)
        code = wait_for_exit(http_server.proc, 5, http_server.stderr())
        for marker in (first, second):
            await procs.wait_until_gone(marker, timeout=3)
    # Not part of the interface, but shown when the test is run with -rA.
    print(f"dsh serve --http exit status after SIGTERM: {code}")


def test_sigterm_to_stdio_server_kills_its_background_jobs(raw_stdio_server, markers, procs):
    first, second = markers("1000"), markers("1000")
    server = raw_stdio_server()
    server.initialize()
    for request_id, marker in ((2, first), (3, second)):
        args = {"command": f"sleep {marker} & wait", "description": "job", "run_in_background": True}
        result = server.call_tool(request_id, "bash", args)
        assert not result.get("isError") and STARTED_RE.match(result["content"][0]["text"]), result
    for marker in (first, second):
        procs.wait_until_present_sync(marker, timeout=10)

    os.kill(server.proc.pid, signal.SIGTERM)
    code = wait_for_exit(server.proc, 5, server.stderr())
    for marker in (first, second):
        procs.wait_until_gone_sync(marker, timeout=3)
    print(f"dsh serve (stdio) exit status after SIGTERM: {code}")


# --------------------------------------------------------------------------- validation and limits


async def test_invalid_job_arguments_are_invalid_arguments(open_stdio_session, text_of):
    async with open_stdio_session() as session:
        job = await start_job(session, "echo four", "prints 5 bytes")
        await wait_for_end(session, job, timeout=10)

        bad = [
            ("job_output", {"id": "nope"}),
            ("job_output", {"id": "bash-x"}),
            ("job_output", {"id": ""}),
            ("job_kill", {"id": "nope"}),
            ("job_kill", {"id": "BASH-1"}),
            ("job_output", {"id": job, "max_bytes": -1}),
            ("job_output", {"id": job, "max_bytes": 0}),
            ("job_output", {"id": job, "since": 6}),
            ("job_output", {"id": job, "since": 10**9}),
            ("job_kill", {"id": job, "signal": "FOO"}),
            ("job_kill", {"id": job, "signal": "term"}),
        ]
        wrong = []
        for tool, args in bad:
            result = await call(session, tool, args)
            structured = result.structured_content or {}
            if not (result.is_error and structured.get("code") == "INVALID_ARGUMENTS"
                    and text(result).startswith(f"INVALID_ARGUMENTS: {structured.get('message')}")):
                wrong.append(show((tool, args), result))
        assert not wrong, "not INVALID_ARGUMENTS:\n" + "\n".join(wrong)

        # The server still answers, and the job is intact.
        out = await job_output(session, job)
        assert (out.body, out.state) == ("four\n", "exited with code 0"), out.raw
        result = await session.call_tool("bash", {"command": "echo still-here", "description": "d"})
        assert text_of(result) == "still-here\n[exit code: 0]", result


async def test_running_jobs_limit_per_owner(open_stdio_session, markers, procs):
    first, second, refused, after = (markers("1000") for _ in range(4))
    async with open_stdio_session(config="[jobs]\nmax_running_per_owner = 2\n") as session:
        one = await start_job(session, f"sleep {first}")
        two = await start_job(session, f"sleep {second}")

        args = {"command": f"sleep {refused}", "description": "one too many", "run_in_background": True}
        result = await call(session, "bash", args)
        expect_error(("bash", args), result, "LIMIT_EXCEEDED")
        # A job is registered before its answer: a started one would be listed.
        assert sorted(j["id"] for j in await list_jobs(session)) == sorted([one, two])
        assert not procs.matching(refused), "the refused job's command was started anyway"

        kill = await call(session, "job_kill", {"id": one})
        assert kill.is_error is False, show(("job_kill", {"id": one}), kill)
        await procs.wait_until_gone(first, timeout=3)

        three = await start_job(session, f"sleep {after}", "fits again")
        await procs.wait_until_present(after, timeout=10)
        states = {j["id"]: j["state"] for j in await list_jobs(session)}
        assert states.get(two) == "running" and states.get(three) == "running", states
