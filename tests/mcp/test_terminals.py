"""Terminal sessions: `terminal_open`, `terminal_send`, `terminal_read`, `terminal_signal`,
`terminal_close`, `terminal_list`.

Covers: state that lives across sends (a Python REPL, `cd` and exported variables),
answering an interactive prompt, interrupting the foreground program with
`terminal_signal`, the send gate (one unsettled send per session: `SEND_ACTIVE`),
owner isolation between HTTP connections (another owner's id is indistinguishable
from one that never existed), `terminal_close` and a connection that goes away
leaving no process of the session behind, the `screen` view of a full-screen
program, background sends read with `job_output`, argument validation, shells that
exit (reaped at once, listed as `exited (code N)`, readable, holding no slot),
pattern waits that look past the echo of the input, and the default caps (16 live
sessions per owner, 64 in all: `LIMIT_EXCEEDED`).
"""

from __future__ import annotations

import contextlib
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from tool_results import call, expect_error, show, text

pytestmark = pytest.mark.anyio

OPENED_RE = re.compile(r"\Aopened (?P<id>term-\d+) \(bash in (?P<cwd>[^\n]+), (?P<cols>\d+)x(?P<rows>\d+)\)\Z")
# The last line of every terminal_send result (foreground).
SETTLED_RE = re.compile(
    r"(?s)\A(?P<body>.*)\[settled: (?P<how>quiet|pattern|timeout|exited); cursor: (?P<cursor>\d+)"
    r"(?:; the shell has exited(?: \(code (?P<code>\d+)\))?)?\]\Z"
)
# The last line of every terminal_read result.
READ_RE = re.compile(r"(?s)\A(?P<body>.*)\[cursor: (?P<cursor>\d+)(?:; exited \(code (?P<code>\d+)\))?\]\Z")
BACKGROUND_RE = re.compile(r"\Astarted background job (?P<id>terminal-\d+)\b")
CLOSED_RE = re.compile(r"\Aclosed (?P<id>term-\d+); (?P<killed>\d+) processes of its session were killed\Z")
# The last line of every job_output result (see test_jobs.py).
JOB_STATUS_RE = re.compile(r"(?s)\A(?P<body>.*?)\[(?P<id>[a-z]+-\d+): (?P<state>[^\n]*); next cursor: (?P<cursor>\d+)\]\Z")
NO_SESSIONS = "no terminal sessions"


# --------------------------------------------------------------------------- helpers










async def open_terminal(session: Any, **options: Any) -> str:
    """Opens a terminal session; returns its id (`term-N`)."""
    result = await call(session, "terminal_open", options)
    assert result.is_error is False, show(("terminal_open", options), result)
    match = OPENED_RE.match(text(result))
    assert match, show(("terminal_open", options), result)
    return match["id"]


@dataclass
class Sent:
    request: dict[str, Any]
    body: str
    how: str
    cursor: int
    raw: str
    took: float

    @property
    def lines(self) -> list[str]:
        """The output's lines (the echo of the input included), without the settled line."""
        return self.body.rstrip("\n").split("\n")

    def __str__(self) -> str:
        return f"request: terminal_send {self.request}\nresponse ({self.took:.2f}s): {self.raw!r}"


def parse_sent(args: dict[str, Any], result: Any, took: float) -> Sent:
    assert result.is_error is False, show(("terminal_send", args), result)
    raw = text(result)
    match = SETTLED_RE.match(raw)
    assert match, f"no [settled: HOW; cursor: N] last line\n{show(('terminal_send', args), result)}"
    return Sent(request=args, body=match["body"], how=match["how"], cursor=int(match["cursor"]), raw=raw, took=took)


async def send(session: Any, term: str, input: str, **options: Any) -> Sent:
    """A foreground send that must succeed."""
    args = {"id": term, "input": input} | options
    begin = time.monotonic()
    result = await call(session, "terminal_send", args)
    return parse_sent(args, result, time.monotonic() - begin)


async def read(session: Any, term: str, **options: Any) -> tuple[str, int]:
    args = {"id": term} | options
    result = await call(session, "terminal_read", args)
    assert result.is_error is False, show(("terminal_read", args), result)
    match = READ_RE.match(text(result))
    assert match, f"no [cursor: N] last line\n{show(('terminal_read', args), result)}"
    return match["body"], int(match["cursor"])


async def list_terminals(session: Any) -> str:
    result = await call(session, "terminal_list", {})
    assert result.is_error is False, show(("terminal_list", {}), result)
    return text(result)


async def close_terminal(session: Any, term: str) -> int:
    """Closes a session; returns how many processes the server says it killed."""
    args = {"id": term}
    result = await call(session, "terminal_close", args)
    assert result.is_error is False, show(("terminal_close", args), result)
    match = CLOSED_RE.match(text(result))
    assert match and match["id"] == term, show(("terminal_close", args), result)
    return int(match["killed"])


async def settle_shell(session: Any, term: str) -> None:
    """Waits for the shell's first prompt, so later sends are not typed ahead of it."""
    sent = await send(session, term, "echo $((20+22))-ready", wait={"pattern": r"42-ready\n\$ ", "timeout_ms": 5000})
    assert sent.how == "pattern", f"the shell did not show its prompt after a first command\n{sent}"


# --------------------------------------------------------------------------- state across sends


async def test_python_repl_keeps_its_state_across_sends(open_stdio_session):
    async with open_stdio_session() as session:
        term = await open_terminal(session)
        await settle_shell(session, term)

        started = await send(session, term, "python3 -q", wait={"pattern": ">>> ", "timeout_ms": 10000})
        assert started.how == "pattern", f"no >>> prompt from python3 -q\n{started}"

        assign = await send(session, term, "x = 41")
        assert assign.how == "quiet", str(assign)
        assert assign.lines[-1] == ">>> ", f"no >>> prompt after x = 41\n{assign}"

        # Only `x + 1` is sent: x must still be defined in the same interpreter.
        use = await send(session, term, "x + 1")
        assert "42" in use.lines, f"x + 1 did not print 42 (the REPL lost x?)\n{use}"
        assert not any("NameError" in line for line in use.lines), str(use)

        left = await send(session, term, "exit()")
        assert left.lines[-1] == "$ ", f"no shell prompt '$ ' after exit() from python\n{left}"
        back = await send(session, term, "echo $((6*7))-shell")
        assert "42-shell" in back.lines, f"the shell does not answer after python exited\n{back}"


async def test_cd_and_export_persist_to_the_next_send(open_stdio_session):
    async with open_stdio_session() as session:
        term = await open_terminal(session)
        await settle_shell(session, term)

        first = await send(session, term, "cd /tmp && export FOO=bar")
        assert first.lines[-1] == "$ ", str(first)

        second = await send(session, term, "pwd; echo $FOO")
        assert second.how == "quiet", str(second)
        shown = second.lines
        assert "/tmp" in shown, f"pwd in the next send is not /tmp\n{second}"
        assert "bar" in shown, f"$FOO in the next send is not bar\n{second}"


async def test_interactive_prompt_is_answered_by_the_next_send(open_stdio_session):
    async with open_stdio_session() as session:
        term = await open_terminal(session)
        await settle_shell(session, term)

        asked = await send(
            session, term, "read -p 'name? ' n; echo hello $n", wait={"pattern": r"name\? ", "timeout_ms": 5000}
        )
        assert asked.how == "pattern", f"the read prompt 'name? ' did not appear\n{asked}"
        assert "hello" not in asked.body.replace("echo hello $n", ""), f"read did not wait for input\n{asked}"

        answered = await send(session, term, "world")
        assert "hello world" in answered.lines, f"the answer did not reach read\n{answered}"
        assert answered.lines[-1] == "$ ", f"no prompt after the read was answered\n{answered}"


# --------------------------------------------------------------------------- signals


async def test_signal_int_interrupts_the_foreground_program(open_stdio_session, markers, procs):
    marker = markers("100")
    async with open_stdio_session() as session:
        term = await open_terminal(session)
        await settle_shell(session, term)

        running = await send(session, term, f"sleep {marker}", wait={"timeout_ms": 300})
        assert running.how in ("timeout", "quiet"), str(running)
        await procs.wait_until_present(marker, timeout=5)

        args = {"id": term, "signal": "INT"}
        signalled_at = time.monotonic()
        result = await call(session, "terminal_signal", args)
        assert result.is_error is False, show(("terminal_signal", args), result)

        # With the sleep still in the foreground, `true` would only be typed ahead: no prompt.
        prompt = await send(session, term, "true", wait={"pattern": r"\$ ", "timeout_ms": 2000})
        prompt_after = time.monotonic() - signalled_at
        assert prompt.how == "pattern", f"no '$ ' prompt after SIGINT\n{show(('terminal_signal', args), result)}\n{prompt}"
        assert prompt_after < 1.0, f"the prompt came back {prompt_after:.2f}s after SIGINT\n{prompt}"
        await procs.wait_until_gone(marker, timeout=1)

        back = await send(session, term, "echo back")
        assert "back" in back.lines, f"echo back after the interrupt\n{back}"
        assert back.took < 3.0, str(back)


# --------------------------------------------------------------------------- the send gate


async def test_concurrent_sends_to_one_session_one_gets_send_active(open_stdio_session):
    async with open_stdio_session() as session:
        term = await open_terminal(session)
        await settle_shell(session, term)

        requests = {
            "one": {"id": term, "input": "sleep 1; echo $((40+2))-one", "wait": {"pattern": "42-one", "timeout_ms": 5000}},
            "two": {"id": term, "input": "echo $((1+1))-two"},
        }
        results: dict[str, tuple[Any, float]] = {}

        async def fire(name: str) -> None:
            begin = time.monotonic()
            results[name] = (await call(session, "terminal_send", requests[name]), time.monotonic() - begin)

        async with anyio.create_task_group() as tg:
            tg.start_soon(fire, "one")
            tg.start_soon(fire, "two")

        everything = "\n".join(f"{show(('terminal_send', requests[n]), r)} ({t:.2f}s)" for n, (r, t) in results.items())
        refused = [n for n, (r, _) in results.items() if r.is_error]
        assert len(refused) == 1, f"expected exactly one SEND_ACTIVE of two concurrent sends:\n{everything}"
        (loser,) = refused
        (winner,) = {"one", "two"} - {loser}
        expect_error(("terminal_send", requests[loser]), results[loser][0], "SEND_ACTIVE")

        done = parse_sent(requests[winner], *results[winner])
        expected = {"one": "42-one", "two": "2-two"}[winner]
        assert expected in done.lines, f"the send that got through did not run\n{done}\n{everything}"
        if winner == "one":
            assert done.how == "pattern", str(done)

        after = await send(session, term, "echo $((1+2))-three", wait={"pattern": "3-three", "timeout_ms": 5000})
        assert after.how == "pattern" and "3-three" in after.lines, f"a send after the settled one\n{after}"
        refused_output = {"one": "42-one", "two": "2-two"}[loser]
        whole, _ = await read(session, term, since=0)
        assert refused_output not in whole.split("\n"), f"the refused send's input was typed and ran:\n{whole!r}"


async def test_background_send_is_a_job_and_holds_the_session_until_it_settles(open_stdio_session):
    async with open_stdio_session() as session:
        term = await open_terminal(session)
        await settle_shell(session, term)

        # The sleep prints nothing for 0.5 s, longer than the default quiet_ms: the send
        # waits for its pattern instead.
        args = {
            "id": term,
            "input": "sleep 0.5; echo bg-$((1+1))-done",
            "background": True,
            "wait": {"pattern": "(?m)^bg-2-done"},
        }
        begin = time.monotonic()
        result = await call(session, "terminal_send", args)
        assert result.is_error is False, show(("terminal_send", args), result)
        match = BACKGROUND_RE.match(text(result))
        assert match, show(("terminal_send", args), result)
        job = match["id"]
        assert time.monotonic() - begin < 0.5, f"a background send did not return at once\n{show(('terminal_send', args), result)}"

        # The send has not settled (the sleep is still running): the session is busy.
        meanwhile = {"id": term, "input": "echo meanwhile"}
        busy = await call(session, "terminal_send", meanwhile)
        expect_error(("terminal_send", meanwhile), busy, "SEND_ACTIVE")

        # Read the job from cursor to cursor until it ends. The send settles when
        # `bg-2-done` is printed, about 0.5 s in.
        cursor, collected, reads = 0, [], []
        deadline = time.monotonic() + 5.0
        while True:
            request = {"id": job, "since": cursor, "wait_ms": 1000}
            out = await call(session, "job_output", request)
            assert out.is_error is False, show(("job_output", request), out)
            parsed = JOB_STATUS_RE.match(text(out))
            assert parsed and parsed["id"] == job, show(("job_output", request), out)
            reads.append(f"{time.monotonic() - begin:.2f}s {request} -> {text(out)!r}")
            collected.append(parsed["body"])
            cursor = int(parsed["cursor"])
            if parsed["state"] != "running":
                break
            if time.monotonic() >= deadline:
                pytest.fail(
                    f"{job} still running 5 s after a send of {args['input']!r} that should have settled "
                    f"(on its pattern) about 0.5 s in:\n" + "\n".join(reads)
                )
        ended = time.monotonic() - begin
        output = "".join(collected)
        assert "bg-2-done" in output.split("\n"), f"the job's output lacks bg-2-done:\n" + "\n".join(reads)
        assert parsed["state"] == "exited with code 0", "\n".join(reads)
        assert ended >= 0.5, f"the job ended {ended:.2f}s in, before its sleep 0.5 was done:\n" + "\n".join(reads)

        after = await send(session, term, "echo $((2+2))-after")
        assert "4-after" in after.lines, f"a send after the background send ended\n{after}"


# --------------------------------------------------------------------------- owners


async def test_http_connections_see_only_their_own_terminals(http_server, open_http_session):
    never = "term-999"

    def masked(message: str, term_id: str) -> str:
        assert term_id in message, f"the message does not name the id {term_id}: {message!r}"
        return message.replace(term_id, "<ID>")

    async with open_http_session(http_server) as a, open_http_session(http_server) as b:
        term = await open_terminal(a)
        await settle_shell(a, term)
        before = await list_terminals(a)
        assert before.split("\t", 1)[0] == term, before

        assert await list_terminals(b) == NO_SESSIONS, "B's terminal_list shows A's session"

        attempts = [
            ("terminal_send", {"input": "echo $((7*11))-from-b"}),
            ("terminal_send", {"input": "echo $((7*11))-from-b", "background": True}),
            ("terminal_read", {}),
            ("terminal_read", {"view": "screen"}),
            ("terminal_signal", {"signal": "KILL"}),
            ("terminal_close", {}),
        ]
        for tool, extra in attempts:
            theirs_args = {"id": term} | extra
            theirs = await call(b, tool, theirs_args)
            theirs_message = expect_error((tool, theirs_args), theirs, "NOT_FOUND")
            missing_args = {"id": never} | extra
            missing = await call(b, tool, missing_args)
            missing_message = expect_error((tool, missing_args), missing, "NOT_FOUND")
            assert masked(theirs_message, term) == masked(missing_message, never), (
                f"{tool}: A's id and a never-existing id get different answers:\n"
                f"{show((tool, theirs_args), theirs)}\n{show((tool, missing_args), missing)}"
            )

        # B's attempts changed nothing: A's session is open, and nothing B sent was typed.
        assert (await list_terminals(a)).split("\t", 1)[0] == term
        mine = await send(a, term, "echo $((2+3))-alive")
        assert "5-alive" in mine.lines, f"A's session after B's attempts\n{mine}"
        whole, _ = await read(a, term, since=0)
        assert "from-b" not in whole, f"B's input reached A's terminal:\n{whole!r}"


# --------------------------------------------------------------------------- no process left behind


async def test_terminal_close_leaves_no_process_of_the_session(open_stdio_session, markers, procs):
    background, foreground = markers("1000"), markers("1000")
    async with open_stdio_session() as session:
        term = await open_terminal(session)
        await settle_shell(session, term)

        shell = await send(session, term, "echo $$")
        pids = [line for line in shell.lines if line.isdigit()]
        assert len(pids) == 1, f"no pid of the shell from echo $$\n{shell}"
        shell_pid = int(pids[0])

        await send(session, term, f"sleep {background} &")
        await send(session, term, f"sleep {foreground}", wait={"timeout_ms": 300})
        for marker in (background, foreground):
            await procs.wait_until_present(marker, timeout=5)

        killed = await close_terminal(session, term)
        for marker in (background, foreground):
            await procs.wait_until_gone(marker, timeout=3)
        deadline = time.monotonic() + 3
        while _alive(shell_pid):
            if time.monotonic() >= deadline:
                pytest.fail(f"the session's shell (pid {shell_pid}) is still alive 3 s after terminal_close")
            await anyio.sleep(0.05)
        assert killed >= 3, f"terminal_close says {killed} processes were killed; the shell and two sleeps were alive"

        assert await list_terminals(session) == NO_SESSIONS
        args = {"id": term, "input": "echo hi"}
        expect_error(("terminal_send", args), await call(session, "terminal_send", args), "NOT_FOUND")


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


async def test_closed_http_connection_has_its_terminals_killed_after_the_grace_period(
    start_http_server, open_http_session, markers, procs
):
    server = start_http_server(config="[serve]\nowner_grace_ms = 500\n")
    gone_marker, kept_marker = markers("1000"), markers("1000")

    async with open_http_session(server) as other:
        kept = await open_terminal(other)
        await settle_shell(other, kept)
        await send(other, kept, f"sleep {kept_marker} &")

        async with open_http_session(server) as leaving:
            term = await open_terminal(leaving)
            await settle_shell(leaving, term)
            await send(leaving, term, f"sleep {gone_marker} &")
            await procs.wait_until_present(gone_marker, timeout=5)
            closed_at = time.monotonic()  # the close (DELETE) starts now
        await procs.wait_until_gone(gone_marker, timeout=5)
        since_close = time.monotonic() - closed_at

        assert server.proc.poll() is None, f"the server exited\n{server.stderr()}"
        assert procs.matching(kept_marker), "the other connection's terminal process was killed too"
        still = await send(other, kept, "echo $((3+4))-still-here")
        assert "7-still-here" in still.lines, f"the other connection's terminal after the close\n{still}"
        fresh = await open_terminal(other)
        assert fresh != kept

    assert since_close >= 0.4, f"the terminal's process was killed {since_close:.2f}s after its connection closed: no 500 ms grace"


# --------------------------------------------------------------------------- views


async def test_screen_view_shows_a_full_screen_program_as_rows_of_text(open_stdio_session, dsh_dirs):
    numbers = dsh_dirs.work / "numbers.txt"
    numbers.write_text("".join(f"line {n}\n" for n in range(1, 201)), encoding="utf-8")
    rows = 24
    async with open_stdio_session() as session:
        term = await open_terminal(session, cols=80, rows=rows)
        await settle_shell(session, term)

        await send(session, term, f"less -S {numbers}")
        await anyio.sleep(0.2)
        screen, _ = await read(session, term, view="screen")
        shown = screen.rstrip("\n").split("\n")
        assert "\x1b" not in screen, f"ESC in the screen view of less:\n{screen!r}"
        assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", screen), f"control characters in the screen view:\n{screen!r}"
        assert len(shown) <= rows, f"{len(shown)} rows on a {rows}-row screen:\n{screen!r}"
        assert [line.rstrip() for line in shown[: rows - 1]] == [f"line {n}" for n in range(1, rows)], (
            f"the screen view of less does not show line 1 to line {rows - 1} as its rows:\n{screen!r}"
        )

        # It is the current screen, not the output so far: after G (end of file) the
        # first lines are gone and the last ones are shown.
        await send(session, term, "G", enter=False)
        await anyio.sleep(0.2)
        screen, _ = await read(session, term, view="screen")
        shown = [line.rstrip() for line in screen.rstrip("\n").split("\n")]
        assert "line 200" in shown and "line 1" not in shown, f"the screen view after G in less:\n{screen!r}"
        assert "\x1b" not in screen, f"ESC in the screen view of less:\n{screen!r}"

        quit_ = await send(session, term, "q", enter=False)
        assert quit_.lines[-1] == "$ ", f"no prompt after q in less\n{quit_}"
        back = await send(session, term, "echo $((5*5))-after-less")
        assert "25-after-less" in back.lines, str(back)


# --------------------------------------------------------------------------- validation


async def test_invalid_terminal_arguments_are_invalid_arguments(open_stdio_session):
    async with open_stdio_session() as session:
        term = await open_terminal(session)
        await settle_shell(session, term)
        _, cursor = await read(session, term)

        invalid = [
            ("terminal_signal", {"id": term, "signal": "FOO"}),
            ("terminal_send", {"id": "nope", "input": "echo $((3*5))-typed"}),
            ("terminal_read", {"id": "nope"}),
            ("terminal_signal", {"id": "nope", "signal": "INT"}),
            ("terminal_close", {"id": "nope"}),
            ("terminal_send", {"id": term, "input": "echo $((3*5))-typed", "wait": {"pattern": "("}}),
        ]
        missing = [
            ("terminal_send", {"id": "term-999", "input": "echo $((3*5))-typed"}),
            ("terminal_read", {"id": "term-999"}),
            ("terminal_signal", {"id": "term-999", "signal": "INT"}),
            ("terminal_close", {"id": "term-999"}),
        ]
        wrong = []
        for expected, cases in (("INVALID_ARGUMENTS", invalid), ("NOT_FOUND", missing)):
            for tool, args in cases:
                result = await call(session, tool, args)
                structured = result.structured_content or {}
                if not (
                    result.is_error
                    and structured.get("code") == expected
                    and text(result).startswith(f"{expected}: {structured.get('message')}")
                ):
                    wrong.append(f"expected {expected}:\n{show((tool, args), result)}")
        assert not wrong, "\n".join(wrong)

        # Nothing was typed, and the session still takes a send.
        since, _ = await read(session, term, since=cursor)
        assert "typed" not in since, f"a refused send's input reached the terminal:\n{since!r}"
        after = await send(session, term, "echo $((4*4))-fine")
        assert "16-fine" in after.lines, f"a send after the refused ones\n{after}"


# --------------------------------------------------------------------------- shells that exit


def _zombie_children(parent: int) -> list[tuple[int, str]]:
    """(pid, comm) of every zombie whose parent is `parent`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat.rsplit(")", 1)[-1].split()
        if fields[0] == "Z" and int(fields[1]) == parent:
            found.append((int(entry.name), comm))
    return found


def _parent_of(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"^PPid:\s+(\d+)$", status, re.M)[1])


async def _shell_pid(session: Any, term: str) -> int:
    sent = await send(session, term, "echo pid-$$", wait={"pattern": r"pid-\d+\n", "timeout_ms": 5000})
    pids = [int(line[4:]) for line in sent.lines if re.fullmatch(r"pid-\d+", line)]
    assert sent.how == "pattern" and len(pids) == 1, f"no pid-N line from echo pid-$$\n{sent}"
    return pids[0]


async def test_a_hundred_exited_shells_leave_no_zombie_and_hold_no_slot(open_stdio_session):
    """The default [terminal] max_sessions_per_owner is 16: 100 terminals whose shell
    exited must not count, and each shell must be reaped when it exits."""
    async with open_stdio_session() as session:
        shells: dict[str, int] = {}
        server = None
        for n in range(100):
            term = await open_terminal(session)
            pid = await _shell_pid(session, term)
            server = server or _parent_of(pid)
            shells[term] = pid
            code = n % 7
            left = await send(session, term, f"exit {code}", wait={"timeout_ms": 5000})
            assert left.how == "exited", f"terminal #{n}: the send of exit did not settle as exited\n{left}"
            assert left.raw.endswith(f"; the shell has exited (code {code})]"), str(left)

        # Reaped at once: no shell of ours is left as a zombie (nor alive).
        deadline = time.monotonic() + 3
        while (zombies := _zombie_children(server)) or any(_alive(pid) for pid in shells.values()):
            if time.monotonic() >= deadline:
                pytest.fail(
                    f"3 s after 100 shells exited: zombies of dsh (pid {server}): {zombies}; "
                    f"alive: {[pid for pid in shells.values() if _alive(pid)]}"
                )
            await anyio.sleep(0.05)

        # Listed as exited with their code: the 16 that exited last are kept.
        listed = (await list_terminals(session)).split("\n")
        expected = [f"term-{n + 1}" for n in range(84, 100)]
        assert [line.split("\t")[0] for line in listed] == expected, "\n".join(listed)
        for line in listed:
            n = int(line.split("\t")[0][5:]) - 1
            assert f"\texited (code {n % 7})\t" in line, f"not listed as exited (code {n % 7}):\n{line}"

        # Their output stays readable, with the exit code.
        body, _ = await read(session, "term-100", since=0)
        args = {"id": "term-100"}
        whole = text(await call(session, "terminal_read", args))
        assert f"pid-{shells['term-100']}" in body.split("\n"), f"the exited session's output:\n{whole}"
        assert whole.endswith("; exited (code 1)]"), whole

        # The 101st open works, and its shell answers.
        fresh = await open_terminal(session)
        assert fresh == "term-101"
        answer = await send(session, fresh, "echo $((50+51))-alive", wait={"pattern": "101-alive", "timeout_ms": 5000})
        assert answer.how == "pattern" and "101-alive" in answer.lines, str(answer)
        listed = (await list_terminals(session)).split("\n")
        assert listed[-1].startswith(f"{fresh}\t") and "\talive\t" in listed[-1], "\n".join(listed)

        # An exited session is closed like any other, and then gone.
        assert await close_terminal(session, "term-100") == 0
        args = {"id": "term-100"}
        expect_error(("terminal_read", args), await call(session, "terminal_read", args), "NOT_FOUND")
        args = {"id": "term-99", "input": "echo hi"}
        expect_error(("terminal_send", args), await call(session, "terminal_send", args), "SESSION_CLOSING")


async def test_what_an_exited_shell_left_running_is_killed(open_stdio_session, markers, procs):
    marker = markers("1000")
    async with open_stdio_session() as session:
        term = await open_terminal(session)
        await settle_shell(session, term)
        await send(session, term, f"sleep {marker} &")
        await procs.wait_until_present(marker, timeout=5)
        left = await send(session, term, "exit", wait={"timeout_ms": 5000})
        assert left.how == "exited", str(left)
        await procs.wait_until_gone(marker, timeout=3)
        assert "\texited (code 0)\t" in await list_terminals(session)


# --------------------------------------------------------------------------- pattern waits and the echo


async def test_a_pattern_in_the_typed_command_waits_for_the_command_to_print_it(open_stdio_session):
    async with open_stdio_session() as session:
        term = await open_terminal(session)
        await settle_shell(session, term)

        sent = await send(
            session, term, "sleep 1; echo finished-marker", wait={"pattern": "finished-marker", "timeout_ms": 5000}
        )
        assert sent.how == "pattern", str(sent)
        assert sent.took >= 1.0, f"the pattern matched the echo of the input, before the command ran\n{sent}"
        assert "finished-marker" in sent.lines, f"the output lacks the printed line\n{sent}"

        # Two lines typed at once: the second line's echo (printed after the first line's
        # output) does not match either; the second command's output does.
        sent = await send(
            session,
            term,
            "echo first-$((1+1))\nsleep 1; echo second-marker",
            wait={"pattern": "second-marker", "timeout_ms": 5000},
        )
        assert sent.how == "pattern" and sent.took >= 1.0, str(sent)
        assert "first-2" in sent.lines and "second-marker" in sent.lines, str(sent)


async def test_a_pattern_wait_at_a_prompt_without_echo_sees_the_output(open_stdio_session):
    """`read -s` turns echo off: the typed secret is not echoed, so every line counts."""
    async with open_stdio_session() as session:
        term = await open_terminal(session)
        await settle_shell(session, term)

        asked = await send(
            session, term, "read -s -p 'pw: ' x; echo got-$x", wait={"pattern": "pw: ", "timeout_ms": 5000}
        )
        assert asked.how == "pattern", str(asked)
        answered = await send(session, term, "secret", wait={"pattern": "got-secret", "timeout_ms": 5000})
        assert answered.how == "pattern" and "got-secret" in answered.lines, str(answered)
        assert answered.took < 2.0, str(answered)


# --------------------------------------------------------------------------- caps


async def test_sixteen_live_terminals_per_owner_and_sixty_four_in_all(http_server, open_http_session):
    """The default caps: a 17th live session of one owner, and a 65th of the server, are
    `LIMIT_EXCEEDED` naming the limit; closing one makes room again."""
    async with contextlib.AsyncExitStack() as stack:
        owners = [await stack.enter_async_context(open_http_session(http_server)) for _ in range(5)]
        first = owners[0]
        mine = [await open_terminal(first) for _ in range(16)]
        args: dict[str, Any] = {}
        message = expect_error(("terminal_open", args), await call(first, "terminal_open", args), "LIMIT_EXCEEDED")
        assert "16" in message and "max_sessions_per_owner" in message, message
        # Another owner is not held by the first one's cap.
        for owner in owners[1:4]:
            for _ in range(16):
                await open_terminal(owner)
        message = expect_error(("terminal_open", args), await call(owners[4], "terminal_open", args), "LIMIT_EXCEEDED")
        assert "64" in message and "max_sessions" in message, message
        # A closed session frees its slot, in both counts.
        closed = await call(first, "terminal_close", {"id": mine[0]})
        assert closed.is_error is False, show(("terminal_close", {"id": mine[0]}), closed)
        fresh = await open_terminal(owners[4])
        answer = await send(owners[4], fresh, "echo $((60+4))-alive", wait={"pattern": "64-alive", "timeout_ms": 10000})
        assert "64-alive" in answer.lines, str(answer)
