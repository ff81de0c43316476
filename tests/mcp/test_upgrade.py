"""`dsh upgrade`: the running `dsh serve` executes another binary in its own process and
hands over its live state. Over stdio, with the official Python SDK as the client: a
Python REPL keeps its variable, a terminal printing a line every 50 ms loses and repeats
no line, a `bash` call running through the upgrade returns its result, the pid stays and
`/proc/PID/exe` names the new binary, and no descriptor is left behind. Then what must
fail safely: a binary that exits at start, one that cannot read the snapshot (the old
binary keeps serving, every session intact), SIGKILL of dsh in the middle of an upgrade
(nothing survives), a command inside a run asking for an upgrade, and what is not handed
over yet (a background job, an HTTP server) refused by name. And the limits: a call
running past `upgrade_drain_ms` is answered `CANCELLED` and its process killed; a binary
whose check of the snapshot outlasts `upgrade_check_ms` is refused; an HTTP session whose
client never comes back after an upgrade is forgotten and its owner released.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import stat
import subprocess
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import dsh_copy
from tool_results import call, show, text

pytestmark = [
    pytest.mark.anyio,
    # dsh speaks 2025-11-25, where resources/subscribe is current.
    pytest.mark.filterwarnings("ignore:resources/(un)?subscribe is removed"),
]

OPENED_RE = re.compile(r"\Aopened (?P<id>term-\d+) ")
SETTLED_RE = re.compile(r"(?s)\A(?P<body>.*)\[settled: (?P<how>\w+); cursor: (?P<cursor>\d+)")
READ_RE = re.compile(r"(?s)\A(?P<body>.*)\[cursor: (?P<cursor>\d+)")
JOB_STATUS_RE = re.compile(r"(?s)\A(?P<body>.*?)\[(?P<id>[a-z]+-\d+): (?P<state>[^\n]*); next cursor: (?P<cursor>\d+)\]\Z")
STARTED_RE = re.compile(r"\Astarted background job (?P<id>[a-z]+-\d+)\b")


def server_pid(state: Path) -> int:
    """The pid of the one `dsh serve` on `state` (from its control socket's name)."""
    sockets = sorted((state / "run").glob("*.sock"))
    assert len(sockets) == 1, f"expected one server socket, found {sockets}"
    return int(sockets[0].name.removesuffix(".sock"))


class Updates:
    """The `resources/updated` notifications a client heard (its `message_handler`)."""

    def __init__(self) -> None:
        self.uris: list[str] = []

    async def __call__(self, message: Any) -> None:
        from mcp import types

        message = getattr(message, "root", message)
        if isinstance(message, types.ResourceUpdatedNotification):
            self.uris.append(str(message.params.uri))

    async def heard(self, uri: str, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while uri not in self.uris:
            assert time.monotonic() < deadline, f"no resources/updated for {uri}; heard {self.uris}"
            await anyio.sleep(0.02)


def server_version(state: Path) -> dict[str, Any]:
    """The running server's `version` answer on its control socket."""
    import json
    import socket

    pid = server_pid(state)
    with socket.socket(socket.AF_UNIX) as control:
        control.connect(str(state / "run" / f"{pid}.sock"))
        control.sendall(b"version\n")
        answer = control.makefile().readline()
    return json.loads(answer)["ok"]


def descriptors(pid: int) -> list[str]:
    """What the process's descriptors point at (dsh is non-dumpable: root reads these),
    inode numbers left out. The cgroup directories of runs prepared ahead of calls are left
    out too: a pool refilled on its own schedule (before the upgrade runs had been taken
    from it; the new binary fills it at start)."""
    fd_dir = Path(f"/proc/{pid}/fd")
    targets = (os.readlink(fd_dir / name) for name in os.listdir(fd_dir))
    return sorted(re.sub(r":\[\d+\]$", "", t) for t in targets if not t.startswith("/sys/fs/cgroup/"))


def descendants_named(pid: int, name: str) -> list[int]:
    """The pids of `pid`'s descendants whose command starts with `name` (Debian's
    clangd is `clangd-14`)."""
    parents: dict[int, int] = {}
    names: dict[int, str] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        comm_end = stat.rindex(")")
        names[int(entry.name)] = stat[stat.index("(") + 1 : comm_end]
        parents[int(entry.name)] = int(stat[comm_end + 2 :].split()[1])

    def descends(p: int) -> bool:
        for _ in range(64):
            p = parents.get(p, 0)
            if p == pid:
                return True
            if p <= 1:
                return False
        return False

    return sorted(p for p, n in names.items() if n.startswith(name) and descends(p))


def upgrade(dsh_bin: str, env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    full = {k: os.environ[k] for k in ("HOME", "PATH") if k in os.environ} | env
    return subprocess.run([dsh_bin, "upgrade", *args], env=full, capture_output=True, text=True, timeout=timeout)


def executable(path: Path, text_: str) -> Path:
    path.write_text(text_)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def reading_snapshot(dsh_bin: str, tmp_path: Path, version: int) -> Path:
    """The real dsh, handed at its snapshot check a snapshot of `version` in place of the
    one it was given: a binary that reads another snapshot version than this one."""
    snapshot = tmp_path / f"snapshot-v{version}.json"
    snapshot.write_text(f'{{"version": {version}, "written_by": "{version}.0.0"}}')
    return executable(
        tmp_path / f"reads-v{version}",
        f'#!/bin/sh\n[ "$DSH_UPGRADE_CHECK" = snapshot ] && exec 9<"{snapshot}" && export DSH_UPGRADE_FD=9\n'
        f'exec "{dsh_bin}" "$@"\n',
    )


async def upgrade_during_a_call(session: Any, *upgrade_args: str) -> tuple[subprocess.CompletedProcess, Any]:
    """Runs `dsh upgrade ARGS` while a 1 s `bash` call of `session` runs; returns the
    upgrade's outcome and the call's result."""
    running: dict[str, Any] = {}

    async def long_call() -> None:
        running["result"] = await call(
            session, "bash", {"command": "sleep 1; echo slow-call-done", "description": "a call across the upgrade"}
        )

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(long_call)
        await anyio.sleep(0.3)
        done = await anyio.to_thread.run_sync(lambda: upgrade(*upgrade_args))
    return done, running["result"]


async def open_terminal(session: Any) -> str:
    result = await call(session, "terminal_open", {})
    match = OPENED_RE.match(text(result))
    assert result.is_error is False and match, show(("terminal_open", {}), result)
    return match["id"]


async def send(session: Any, term: str, line: str, pattern: str) -> str:
    args = {"id": term, "input": line, "wait": {"pattern": pattern, "timeout_ms": 10000}}
    result = await call(session, "terminal_send", args)
    match = SETTLED_RE.match(text(result))
    assert result.is_error is False and match and match["how"] == "pattern", show(("terminal_send", args), result)
    return match["body"]


async def read_plain(session: Any, term: str) -> str:
    args = {"id": term, "since": 0, "view": "plain", "max_bytes": 1000000}
    result = await call(session, "terminal_read", args)
    match = READ_RE.match(text(result))
    assert result.is_error is False and match, show(("terminal_read", args), result)
    return match["body"]


async def start_repl(session: Any) -> str:
    """A terminal running a Python REPL where `x = 42`."""
    term = await open_terminal(session)
    await send(session, term, "python3 -q", r">>> ")
    await send(session, term, "x = 41 + 1", r">>> ")
    return term


def counted_lines(output: str, marker: str) -> list[int]:
    return [int(n) for n in re.findall(rf"^{marker}-(\d+)\r?$", output, re.M)]


async def job_output(session: Any, job: str, since: int) -> tuple[str, int, str]:
    """A job's output from `since`: (text, next cursor, state)."""
    args = {"id": job, "since": since, "max_bytes": 1000000}
    result = await call(session, "job_output", args)
    match = JOB_STATUS_RE.match(text(result))
    assert result.is_error is False and match and match["id"] == job, show(("job_output", args), result)
    return match["body"], int(match["cursor"]), match["state"]


async def test_terminals_a_running_call_and_the_connection_survive_an_upgrade(
    open_stdio_session, dsh_bin, dsh_env, dsh_dirs, tmp_path
):
    next_binary = dsh_copy(dsh_bin, tmp_path / "next" / "dsh-next")
    updates = Updates()
    async with open_stdio_session(message_handler=updates) as session:
        repl = await start_repl(session)
        await session.subscribe_resource(f"terminal://{repl}/screen")
        ticker = await open_terminal(session)
        # A line every 50 ms, numbered: a gap or a repeat shows a lost or doubled byte.
        await send(
            session,
            ticker,
            "for i in $(seq 1 100000); do echo tick-$i; sleep 0.05; done",
            r"tick-3\r?\n",
        )
        # A background job printing a line every 50 ms, read with cursors across the upgrade.
        started = await call(
            session,
            "bash",
            {
                "command": "for i in $(seq 1 100000); do echo job-$i; sleep 0.05; done",
                "description": "a job across the upgrade",
                "run_in_background": True,
            },
        )
        job = STARTED_RE.match(text(started))
        assert started.is_error is False and job, show(None, started)
        job_text, cursor, _ = await job_output(session, job["id"], 0)
        # A language server, warmed by a first query.
        (dsh_dirs.work / "calc.c").write_text("int twice(int x) { return 2 * x; }\nint main(void) { return twice(21); }\n")
        query = {"op": "hover", "path": "calc.c", "line": 2, "symbol": "twice"}
        hover = await call(session, "lsp", query)
        assert hover.is_error is False and "twice" in text(hover), show(("lsp", query), hover)
        pid = server_pid(dsh_dirs.state)
        clangd = descendants_named(pid, "clangd")
        assert len(clangd) == 1, clangd
        before = descriptors(pid)
        done, slow = await upgrade_during_a_call(session, dsh_bin, dsh_env, "--binary", str(next_binary))
        assert done.returncode == 0, f"dsh upgrade failed: {done.stdout}{done.stderr}"
        assert str(next_binary) in done.stdout, done.stdout
        assert "slow-call-done" in text(slow), show(None, slow)
        assert slow.is_error is False, show(None, slow)

        assert server_pid(dsh_dirs.state) == pid
        assert os.readlink(f"/proc/{pid}/exe") == str(next_binary)

        # The REPL kept its state; the connection goes on without a new initialize, its
        # subscription with it.
        updates.uris.clear()
        body = await send(session, repl, "print(x * 2)", r"84\r?\n>>> ")
        assert "84" in body
        await updates.heard(f"terminal://{repl}/screen")
        # The ticker printed through the upgrade: every line once, in order.
        await anyio.sleep(0.3)
        ticks = counted_lines(await read_plain(session, ticker), "tick")
        assert len(ticks) > 10, ticks
        assert ticks == list(range(1, len(ticks) + 1)), f"lines lost or repeated: {ticks}"
        # The language server answers without a restart: the same process.
        query = {"op": "definition", "path": "calc.c", "line": 2, "symbol": "twice"}
        found = await call(session, "lsp", query)
        assert found.is_error is False and "calc.c:1:" in text(found), show(("lsp", query), found)
        assert descendants_named(pid, "clangd") == clangd
        # The job's output goes on from the cursor read before the upgrade: no gap, no repeat.
        more, cursor, state = await job_output(session, job["id"], cursor)
        assert state.startswith("running"), state
        lines = counted_lines(job_text + more, "job")
        assert len(lines) > 10 and lines == list(range(1, len(lines) + 1)), f"job lines lost or repeated: {lines}"
        after = descriptors(pid)
        assert after == before, f"descriptors before: {before}\nafter: {after}"

        # And again, back to the first binary: the snapshot the new one writes is read too.
        done = await anyio.to_thread.run_sync(lambda: upgrade(dsh_bin, dsh_env, "--binary", dsh_bin))
        assert done.returncode == 0, f"the second upgrade failed: {done.stdout}{done.stderr}"
        assert os.readlink(f"/proc/{pid}/exe") == os.path.realpath(dsh_bin)
        body = await send(session, repl, "print(x + 1)", r"43\r?\n>>> ")
        assert "43" in body
        ticks = counted_lines(await read_plain(session, ticker), "tick")
        assert ticks == list(range(1, len(ticks) + 1)), f"lines lost or repeated: {ticks}"
        whole, _, _ = await job_output(session, job["id"], 0)
        lines = counted_lines(whole, "job")
        assert lines == list(range(1, len(lines) + 1)), f"job lines lost or repeated: {lines}"
        killed = await call(session, "job_kill", {"id": job["id"]})
        assert killed.is_error is False, show(None, killed)


async def test_a_binary_that_fails_leaves_the_old_one_serving(open_stdio_session, dsh_bin, dsh_env, dsh_dirs, tmp_path):
    exits = executable(tmp_path / "exits", "#!/bin/sh\necho 'no such luck' >&2\nexit 3\n")
    # A binary that cannot read the snapshot: it reads a future version.
    unreadable = reading_snapshot(dsh_bin, tmp_path, 99)
    async with open_stdio_session() as session:
        repl = await start_repl(session)
        pid = server_pid(dsh_dirs.state)
        exe = os.readlink(f"/proc/{pid}/exe")
        before = descriptors(pid)
        for binary, said in [(exits, "no such luck"), (unreadable, "version 99")]:
            done = await anyio.to_thread.run_sync(lambda: upgrade(dsh_bin, dsh_env, "--binary", str(binary)))
            assert done.returncode != 0, done.stdout
            assert "refused to take over" in done.stderr and said in done.stderr, done.stderr
            assert os.readlink(f"/proc/{pid}/exe") == exe
            body = await send(session, repl, "print(x)", r"42\r?\n>>> ")
            assert "42" in body
        missing = await anyio.to_thread.run_sync(
            lambda: upgrade(dsh_bin, dsh_env, "--binary", str(tmp_path / "nothing-here"))
        )
        assert missing.returncode != 0 and "is not a file" in missing.stderr, missing.stderr
        assert len(descriptors(pid)) == len(before), "a refused upgrade left descriptors behind"


async def test_sigkill_of_dsh_during_an_upgrade_leaves_nothing(
    open_stdio_session, dsh_bin, dsh_env, dsh_dirs, tmp_path, markers, procs
):
    marker, pause = markers(), markers("30")
    # The new binary takes its time over its read of the snapshot (the terminals paused,
    # the descriptors written down): dsh is killed meanwhile.
    slow = executable(
        tmp_path / "slow",
        f'#!/bin/sh\n[ "$DSH_UPGRADE_CHECK" = snapshot ] && sleep {pause}\nexec "{dsh_bin}" "$@"\n',
    )
    async with open_stdio_session() as session:
        term = await open_terminal(session)
        await send(session, term, f"(setsid sleep {marker} &) ; sleep {marker} & echo star''ted", r"started")
        procs.wait_until_present_sync(marker, 5)
        pid = server_pid(dsh_dirs.state)
        asking = subprocess.Popen(
            [dsh_bin, "upgrade", "--binary", str(slow)],
            env={k: os.environ[k] for k in ("HOME", "PATH") if k in os.environ} | dsh_env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            # Wait until the snapshot's check runs (its `sleep`).
            deadline = time.monotonic() + 10
            while not procs.matching(pause):
                assert time.monotonic() < deadline, "the upgrade's check never started"
                await anyio.sleep(0.02)
            os.kill(pid, signal.SIGKILL)
            await procs.wait_until_gone(marker, 5)
        finally:
            asking.kill()
            asking.wait()
            for leftover, _ in procs.matching(str(slow)) + procs.matching(pause):
                try:
                    os.kill(leftover, signal.SIGKILL)
                except OSError:
                    pass


async def test_a_command_in_a_run_may_not_upgrade_dsh(open_stdio_session, dsh_bin, dsh_dirs):
    async with open_stdio_session() as session:
        command = f'"{dsh_bin}" --state-dir "{dsh_dirs.state}" upgrade --binary "{dsh_bin}" 2>&1; echo "exit=$?"'
        result = await call(session, "bash", {"command": command, "description": "try to upgrade dsh"})
        said = text(result)
        assert "upgrade refused" in said and "started by this dsh" in said, said
        assert "exit=0" not in said, said
        # SIGUSR2 from a run, even from a process that left its session, is refused too.
        pid = server_pid(dsh_dirs.state)
        command = f"kill -USR2 {pid}; setsid -f kill -USR2 {pid}; sleep 1; echo sent"
        result = await call(session, "bash", {"command": command, "description": "signal dsh"})
        assert "sent" in text(result), show(None, result)
        assert server_version(dsh_dirs.state)["generation"] == 0
        # From outside (this test), SIGUSR2 upgrades to the binary at dsh's own path.
        os.kill(pid, signal.SIGUSR2)
        deadline = time.monotonic() + 30
        while True:
            try:
                if server_version(dsh_dirs.state)["generation"] == 1:
                    break
            except (OSError, ValueError, KeyError, AssertionError):
                pass  # between the exec and the new binary's socket
            assert time.monotonic() < deadline, "SIGUSR2 from outside did not upgrade dsh"
            await anyio.sleep(0.05)
        result = await call(session, "bash", {"command": "echo still-here", "description": "after"})
        assert "still-here" in text(result), show(None, result)


async def test_what_is_not_handed_over_yet_is_refused_by_name(
    open_stdio_session, dsh_bin, dsh_env, dsh_dirs, markers
):
    async with open_stdio_session() as session:
        marker = markers()
        term = await open_terminal(session)
        args = {"id": term, "input": f"sleep {marker}", "background": True}
        sent = await call(session, "terminal_send", args)
        assert sent.is_error is False, show(("terminal_send", args), sent)
        done = await anyio.to_thread.run_sync(lambda: upgrade(dsh_bin, dsh_env, "--binary", dsh_bin))
        assert done.returncode != 0 and "terminal-1" in done.stderr, done.stderr
        # The connection is served on after the refusal, the send still running.
        listed = await call(session, "job_list", {})
        assert "terminal-1" in text(listed) and "running" in text(listed), show(None, listed)


@pytest.mark.parametrize("mode", ["cgroup", "subreaper"])
async def test_after_an_upgrade_the_keeper_still_kills_everything(
    mode, open_stdio_session, dsh_bin, dsh_env, dsh_dirs, tmp_path, markers, procs
):
    next_binary = dsh_copy(dsh_bin, tmp_path / "dsh-next")
    before, after = markers(), markers()
    async with open_stdio_session(config=f'[process]\ncontainment = "{mode}"\n') as session:
        term = await open_terminal(session)
        await send(session, term, f"setsid -f sleep {before}; sleep {before} & echo star''ted", r"started")
        procs.wait_until_present_sync(before, 5)
        pid = server_pid(dsh_dirs.state)
        done = await anyio.to_thread.run_sync(lambda: upgrade(dsh_bin, dsh_env, "--binary", str(next_binary)))
        assert done.returncode == 0, f"dsh upgrade failed: {done.stdout}{done.stderr}"
        # A run started by the new binary, beside those it inherited.
        job = await call(
            session, "bash", {"command": f"setsid -f sleep {after}; sleep {after}", "description": "after", "run_in_background": True}
        )
        assert job.is_error is False, show(None, job)
        procs.wait_until_present_sync(after, 5)
        os.kill(pid, signal.SIGKILL)
        await procs.wait_until_gone(before, 5)
        await procs.wait_until_gone(after, 5)


async def test_over_http_sessions_their_terminals_and_the_listener_survive_an_upgrade(
    start_http_server, open_http_session, dsh_bin, dsh_env, dsh_dirs, tmp_path
):
    import socket
    import threading

    next_binary = dsh_copy(dsh_bin, tmp_path / "dsh-next")
    server = start_http_server()
    pid = server_pid(dsh_dirs.state)
    updates = Updates()
    async with open_http_session(server, message_handler=updates) as first, open_http_session(server) as second:
        mine = await start_repl(first)
        await first.subscribe_resource(f"terminal://{mine}/screen")
        theirs = await open_terminal(second)
        await send(second, theirs, "y=7; echo set-$y", r"set-7")
        # Knocks at the listener all through the upgrade: it is never closed.
        refused: list[str] = []
        stop = threading.Event()

        def knock() -> None:
            while not stop.is_set():
                try:
                    socket.create_connection(("127.0.0.1", server.port), timeout=2).close()
                except OSError as error:
                    refused.append(repr(error))
                time.sleep(0.002)

        # And sends whole requests on connections opened all through it (a 2026-07-28
        # `server/discover`, which needs no session): each is answered, by whichever binary
        # accepts its connection; none is lost.
        answered: list[int] = []

        def ask() -> None:
            import json
            import urllib.request

            body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "knock", "version": "0"}}}}).encode()
            headers = server.auth_headers | {
                "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
                "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "server/discover"}
            while not stop.is_set():
                request = urllib.request.Request(server.url, data=body, headers=headers, method="POST")
                try:
                    with urllib.request.urlopen(request, timeout=30) as response:
                        answered.append(response.status)
                except Exception as error:  # any failure is a lost request
                    refused.append(f"request: {error!r}")
                time.sleep(0.02)

        knocking = threading.Thread(target=knock)
        asking = threading.Thread(target=ask)
        knocking.start()
        asking.start()
        try:
            done, slow = await upgrade_during_a_call(first, dsh_bin, dsh_env, "--binary", str(next_binary))
        finally:
            stop.set()
            knocking.join()
            asking.join()
        assert "slow-call-done" in text(slow), show(None, slow)
        assert done.returncode == 0, f"dsh upgrade failed: {done.stdout}{done.stderr}\n{server.stderr()}"
        assert refused == [], refused
        assert answered and set(answered) == {200}, answered
        assert server_pid(dsh_dirs.state) == pid
        assert os.readlink(f"/proc/{pid}/exe") == str(next_binary)
        # Each client goes on in its session (the same id, the same token), with its own
        # terminal and not the other's.
        # Its subscription is kept: the screen's updates reach it again once its client's
        # GET stream is back (one sent while it reconnects is not replayed, so the REPL is
        # asked until one is heard).
        for attempt in range(5):
            updates.uris.clear()
            body = await send(first, mine, "print(x * 2)", r"84\r?\n>>> ")
            assert "84" in body
            try:
                await updates.heard(f"terminal://{mine}/screen", timeout=2.0 * (attempt + 1))
                break
            except AssertionError:
                if attempt == 4:
                    raise
        body = await send(second, theirs, "echo again-$y", r"again-7")
        assert "again-7" in body
        foreign = await call(second, "terminal_read", {"id": mine})
        assert foreign.is_error is True and "NOT_FOUND" in text(foreign), show(None, foreign)


async def test_an_owners_grace_period_runs_on_across_an_upgrade(
    start_http_server, open_http_session, dsh_bin, dsh_env, dsh_dirs, markers, procs
):
    server = start_http_server(config="[serve]\nowner_grace_ms = 2500\n")
    marker = markers()
    async with open_http_session(server) as leaving:
        term = await open_terminal(leaving)
        await send(leaving, term, f"sleep {marker} & echo star''ted", r"started")
    # The client closed its session (DELETE): its grace period runs.
    procs.wait_until_present_sync(marker, 5)
    done = await anyio.to_thread.run_sync(lambda: upgrade(dsh_bin, dsh_env, "--binary", dsh_bin))
    assert done.returncode == 0, f"dsh upgrade failed: {done.stdout}{done.stderr}"
    assert procs.matching(marker), "released before its grace period ended"
    # The new binary releases the owner when the grace period the old one started ends.
    await procs.wait_until_gone(marker, 8)


async def test_a_binary_that_would_not_load_a_serving_plugin_is_refused(
    open_stdio_session, dsh_bin, dsh_env, dsh_dirs, tmp_path
):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    shutil.copy(Path(os.environ["DSH_PLUGIN_WASM_DIR"]) / "echo.wasm", plugins / "echo.wasm")
    dsh_env["DSH_PLUGINS"] = str(plugins)
    # The new binary, as it would start, finds no plugin directory: `echo` would go.
    empty = tmp_path / "empty"
    empty.mkdir()
    without = executable(tmp_path / "without-plugins", f'#!/bin/sh\nDSH_PLUGINS="{empty}" exec "{dsh_bin}" "$@"\n')
    async with open_stdio_session() as session:
        echoed = await call(session, "echo", {"text": "before"})
        assert echoed.is_error is False, show(None, echoed)
        pid = server_pid(dsh_dirs.state)
        done = await anyio.to_thread.run_sync(lambda: upgrade(dsh_bin, dsh_env, "--binary", str(without)))
        assert done.returncode != 0, done.stdout
        assert "would not load" in done.stderr and "echo" in done.stderr, done.stderr
        assert os.readlink(f"/proc/{pid}/exe") == os.path.realpath(dsh_bin)
        echoed = await call(session, "echo", {"text": "after"})
        assert echoed.is_error is False and "after" in text(echoed), show(None, echoed)


async def test_a_principals_terminal_and_job_survive_an_upgrade(start_http_server, dsh_bin, dsh_env, dsh_dirs, tmp_path):
    """Under 2026-07-28 over HTTP: a named principal's terminal (its shell's state) and
    background job are there after `dsh upgrade`, for its token, and not for another's."""
    import re
    import warnings

    from mcp.client.client import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    warnings.filterwarnings("ignore")
    tokens = {"TEST_ALICE_TOKEN": "alice-token-0123456789", "TEST_BOB_TOKEN": "bob-token-9876543210"}
    config = """
[serve.http_principals]
alice = { scope = "default", token_env = "TEST_ALICE_TOKEN" }
bob = { scope = "default", token_env = "TEST_BOB_TOKEN" }
"""
    server = start_http_server(config, env=tokens)
    next_binary = dsh_copy(dsh_bin, tmp_path / "dsh-next")
    pid = server_pid(dsh_dirs.state)

    def client(token: str):
        return create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})

    async def text_of(result) -> str:
        return "".join(getattr(block, "text", "") for block in result.content)

    async with client(tokens["TEST_ALICE_TOKEN"]) as http:
        async with Client(streamable_http_client(server.url, http_client=http), mode="2026-07-28") as alice:
            opened = await text_of(await alice.call_tool("terminal_open", {}))
            term = re.search(r"term-\d+", opened).group(0)
            await alice.call_tool("terminal_send", {"id": term, "input": "KEPT=41", "wait": {"quiet_ms": 200}})
            started = await text_of(await alice.call_tool(
                "bash", {"command": "sleep 2; echo job-$((6*7))", "description": "x", "run_in_background": True}
            ))
            job = re.search(r"bash-\d+", started).group(0)
    done = upgrade(dsh_bin, dsh_env, "--binary", str(next_binary))
    assert done.returncode == 0, f"dsh upgrade failed: {done.stdout}{done.stderr}\n{server.stderr()}"
    assert server_pid(dsh_dirs.state) == pid and os.readlink(f"/proc/{pid}/exe") == str(next_binary)
    async with client(tokens["TEST_BOB_TOKEN"]) as http:
        async with Client(streamable_http_client(server.url, http_client=http), mode="2026-07-28") as bob:
            foreign = await bob.call_tool("terminal_read", {"id": term})
            assert foreign.is_error and "NOT_FOUND" in await text_of(foreign)
    async with client(tokens["TEST_ALICE_TOKEN"]) as http:
        async with Client(streamable_http_client(server.url, http_client=http), mode="2026-07-28") as alice:
            again = await alice.call_tool(
                "terminal_send", {"id": term, "input": "echo kept-$((KEPT + 1))", "wait": {"pattern": "kept-42"}}
            )
            assert "kept-42" in await text_of(again), await text_of(again)
            output = await alice.call_tool("job_output", {"id": job, "wait_ms": 10000})
            assert "job-42" in await text_of(output), await text_of(output)


def with_version(dsh_bin: str, into: Path, version: str) -> Path:
    """A copy of `dsh_bin` whose own version string (dsh's `CARGO_PKG_VERSION`, as `dsh
    --version`, the control socket and the snapshot's `written_by` say it) is `version`, of
    the same length: every occurrence of the version in the binary but the WIT interface
    names (`…@0.1.0`) and the plugin template (`version = "0.1.0"`) is rewritten."""
    data = bytearray(Path(dsh_bin).read_bytes())
    current = subprocess.run([dsh_bin, "--version"], capture_output=True, text=True, check=True).stdout.split()[-1]
    assert len(version) == len(current) and version != current, (current, version)
    old, new = current.encode(), version.encode()
    at = data.find(old)
    patched = 0
    while at != -1:
        before = data[at - 1 : at]
        if before not in (b"@", b'"') and not data[at + len(old) : at + len(old) + 1].isdigit():
            data[at : at + len(old)] = new
            patched += 1
        at = data.find(old, at + len(old))
    assert patched > 0
    into.write_bytes(bytes(data))
    into.chmod(0o755)
    said = subprocess.run([str(into), "--version"], capture_output=True, text=True, check=True).stdout
    assert said.split()[-1] == version, said
    return into


async def test_an_upgrade_between_binaries_of_two_versions_goes_both_ways(
    open_stdio_session, dsh_bin, dsh_env, dsh_dirs, tmp_path
):
    """From this binary to one whose version string differs (its snapshot is the same
    version), and back: both accepted, the REPL's state kept, the server then reporting the
    binary it runs. A snapshot of an older version than the binary reads is refused, as one
    of a newer version is (`test_a_binary_that_fails_leaves_the_old_one_serving`)."""
    current = subprocess.run([dsh_bin, "--version"], capture_output=True, text=True, check=True).stdout.split()[-1]
    major, minor, patch = current.split(".")
    other_version = f"{major}.{minor}.{(int(patch) + 1) % 10}"
    other = with_version(dsh_bin, tmp_path / "dsh-other", other_version)
    original = dsh_copy(dsh_bin, tmp_path / "dsh-original")
    reads_older = reading_snapshot(dsh_bin, tmp_path, 0)
    async with open_stdio_session() as session:
        repl = await start_repl(session)
        pid = server_pid(dsh_dirs.state)
        assert server_version(dsh_dirs.state)["version"] == current
        refused = await anyio.to_thread.run_sync(lambda: upgrade(dsh_bin, dsh_env, "--binary", str(reads_older)))
        assert refused.returncode != 0 and "version 0" in refused.stderr, refused.stderr
        for binary, version in [(other, other_version), (original, current)]:
            done = await anyio.to_thread.run_sync(lambda: upgrade(dsh_bin, dsh_env, "--binary", str(binary)))
            assert done.returncode == 0, done.stderr
            body = await send(session, repl, "print(x)", r"42\r?\n>>> ")
            assert "42" in body, body
            assert server_pid(dsh_dirs.state) == pid
            assert os.readlink(f"/proc/{pid}/exe") == str(binary)
            assert server_version(dsh_dirs.state)["version"] == version


async def test_a_call_running_past_the_drain_is_cancelled_its_process_killed_and_the_connection_goes_on(
    open_stdio_session, dsh_bin, dsh_env, markers, procs
):
    from tool_results import expect_error

    marker = markers()
    request = ("bash", {"command": f"sleep {marker}", "description": "outlasts the drain"})
    running: dict[str, Any] = {}
    async with open_stdio_session(config="[serve]\nupgrade_drain_ms = 300\n") as session:

        async def long_call() -> None:
            running["result"] = await call(session, *request)

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(long_call)
            await procs.wait_until_present(marker, 10)
            done = await anyio.to_thread.run_sync(lambda: upgrade(dsh_bin, dsh_env, "--binary", dsh_bin))
        assert done.returncode == 0, f"dsh upgrade failed: {done.stdout}{done.stderr}"
        expect_error(request, running["result"], "CANCELLED")
        await procs.wait_until_gone(marker, 5)
        after = await call(session, "bash", {"command": "echo after-$((6*7))", "description": "after"})
        assert "after-42" in text(after), show(None, after)


async def test_a_binary_whose_snapshot_check_outlasts_upgrade_check_ms_is_refused(
    open_stdio_session, dsh_bin, dsh_env, dsh_dirs, tmp_path, markers, procs
):
    pause = markers("30")
    slow = executable(
        tmp_path / "slow",
        f'#!/bin/sh\n[ "$DSH_UPGRADE_CHECK" = snapshot ] && exec sleep {pause}\nexec "{dsh_bin}" "$@"\n',
    )
    async with open_stdio_session(config="[serve]\nupgrade_check_ms = 1000\n") as session:
        repl = await start_repl(session)
        pid = server_pid(dsh_dirs.state)
        exe = os.readlink(f"/proc/{pid}/exe")
        done = await anyio.to_thread.run_sync(lambda: upgrade(dsh_bin, dsh_env, "--binary", str(slow)))
        assert done.returncode != 0, done.stdout
        assert "refused to take over" in done.stderr and "did not finish within 1000 ms" in done.stderr, done.stderr
        assert procs.matching(pause) == [], "the check was left running"
        assert os.readlink(f"/proc/{pid}/exe") == exe
        body = await send(session, repl, "print(x)", r"42\r?\n>>> ")
        assert "42" in body


async def test_a_session_whose_client_never_comes_back_after_an_upgrade_is_forgotten_and_its_owner_released(
    start_http_server, dsh_bin, dsh_env, markers, procs
):
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    server = start_http_server(config="[serve]\nowner_grace_ms = 300\nhttp_session_idle_ms = 5000\n")
    marker = markers()
    async with create_mcp_http_client(headers=server.auth_headers) as http:
        async with streamable_http_client(server.url, http_client=http, terminate_on_close=False) as (read, write):
            async with ClientSession(read, write) as vanishing:
                await vanishing.initialize()
                args = {"command": f"sleep {marker}", "description": "outlives its client", "run_in_background": True}
                started = await call(vanishing, "bash", args)
                assert started.is_error is False, show(("bash", args), started)
    before = procs.wait_until_present_sync(marker, 10)
    done = await anyio.to_thread.run_sync(lambda: upgrade(dsh_bin, dsh_env, "--binary", dsh_bin))
    assert done.returncode == 0, f"dsh upgrade failed: {done.stdout}{done.stderr}"
    assert procs.matching(marker) == before, "the session's job did not live through the upgrade"
    # Its client never comes back: the new binary forgets the session and releases its owner.
    await procs.wait_until_gone(marker, 20)
    assert server.proc.poll() is None, f"the server exited\n{server.stderr()}"
