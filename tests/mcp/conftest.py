"""Shared fixtures for the `dsh serve` end-to-end tests.

The server under test is the binary named by the `DSH_BIN` environment variable.
Every test gets its own state directory and workspace (`DSH_STATE_DIR`,
`DSH_WORKDIR`), so the event log a test reads holds only its own calls. The state
directory starts empty, as a user's first start finds it (the embedded plugins' code is
precompiled in the binary: nothing compiles).

Fixtures:

- `dsh_bin`: the binary path (fails the test with a clear message if unset).
- `dsh_env`: the environment every `dsh` process is started with.
- `event_log`: reads `$DSH_STATE_DIR/sessions/*/events.jsonl`.
- `markers` / `procs`: unique command-line markers and a /proc scanner, to
  prove a process tree is gone (leftovers are killed at teardown).
- `text_of`: the text of a tool result.
- `open_stdio_session`: an initialized MCP `ClientSession` over `dsh serve`.
- `raw_stdio_server`: `dsh serve` driven with hand-written JSON-RPC lines, for
  the tests that must see the process exit code.
- `http_server`: `dsh serve --http 127.0.0.1:0`, started and parsed.
- `start_http_server`: the same, started on demand, optionally with a `dsh.toml` and a
  descriptor limit.
- `open_http_session`: an initialized MCP `ClientSession` over streamable HTTP.
- `config=` (on `open_stdio_session`, `raw_stdio_server`, `start_http_server`):
  the text of a `dsh.toml`, written outside the workspace and passed with `--config`.
- `process_memory`: a process's VmRSS/VmHWM (and resetting the peak) from /proc.
"""

from __future__ import annotations

import json
import os
import queue
import re
import secrets
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from tool_results import text

LISTENING_RE = re.compile(r"dsh: listening on (http://127\.0\.0\.1:(\d+)/mcp)\s*$")
SERVER_START_TIMEOUT = 30.0
REQUEST_TIMEOUT = 20.0
PROTOCOL_VERSION = "2025-06-18"


# --------------------------------------------------------------------------- anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# --------------------------------------------------------------------------- binary and env


@pytest.fixture(scope="session")
def dsh_bin() -> str:
    path = os.environ.get("DSH_BIN")
    if not path:
        pytest.fail(
            "DSH_BIN is not set: point it at the dsh binary, e.g. "
            "DSH_BIN=/work/main/target/debug/dsh python3 -m pytest tests/mcp",
            pytrace=False,
        )
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        pytest.fail(f"DSH_BIN={path!r} is not an executable file", pytrace=False)
    return path


def dsh_copy(dsh_bin: str, at: Path) -> Path:
    """dsh under another name, as a next binary for `dsh upgrade --binary`: a hard link
    where the filesystem allows one (the debug binary is over 100 MB, and the upgrade tests
    would otherwise write a copy each), a copy where it does not."""
    at.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(dsh_bin, at)
    except OSError:
        shutil.copy2(dsh_bin, at)
    return at


@dataclass
class DshDirs:
    state: Path
    work: Path
    logs: Path


@pytest.fixture
def dsh_dirs(tmp_path: Path) -> DshDirs:
    dirs = DshDirs(state=tmp_path / "state", work=tmp_path / "work", logs=tmp_path / "logs")
    for d in (dirs.state, dirs.work, dirs.logs):
        d.mkdir()
    return dirs


@pytest.fixture
def dsh_env(dsh_dirs: DshDirs) -> dict[str, str]:
    """The variables each dsh process gets on top of a minimal inherited environment."""
    env = {
        "DSH_STATE_DIR": str(dsh_dirs.state),
        "DSH_WORKDIR": str(dsh_dirs.work),
    }
    for passthrough in ("RUST_LOG", "RUST_BACKTRACE", "DSH_PLUGINS", "DSH_PLUGIN_WASM_DIR"):
        if passthrough in os.environ:
            env[passthrough] = os.environ[passthrough]
    return env


def _full_env(extra: dict[str, str]) -> dict[str, str]:
    base = {k: os.environ[k] for k in ("HOME", "PATH", "LANG", "USER", "LOGNAME", "TMPDIR") if k in os.environ}
    return base | extra


def write_config(dirs: DshDirs, text: str) -> Path:
    """Writes `text` as a fresh configuration file (outside the workspace) and returns its path."""
    n = len(list(dirs.logs.parent.glob("dsh-config-*.toml")))
    path = dirs.logs.parent / f"dsh-config-{n}.toml"
    path.write_text(text, encoding="utf-8")
    return path


def _config_args(dirs: DshDirs, config: str | None) -> list[str]:
    return [] if config is None else ["--config", str(write_config(dirs, config))]


# --------------------------------------------------------------------------- process memory


class ProcessMemory:
    """A process's resident memory, from /proc/PID/status."""

    @staticmethod
    def read(pid: int) -> dict[str, int]:
        """`VmRSS` and `VmHWM` (peak RSS) of a live process, in bytes."""
        out: dict[str, int] = {}
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                number, unit = value.split()
                assert unit == "kB", line
                out[key] = int(number) * 1024
        return out

    @staticmethod
    def reset_peak(pid: int) -> bool:
        """Resets VmHWM to the current RSS (`5` > /proc/PID/clear_refs); False if not permitted."""
        try:
            Path(f"/proc/{pid}/clear_refs").write_text("5")
        except OSError:
            return False
        return True


@pytest.fixture
def process_memory() -> ProcessMemory:
    return ProcessMemory()


# --------------------------------------------------------------------------- event log


class EventLog:
    """The session event logs under one state directory."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir

    def files(self) -> list[Path]:
        return sorted((self.state_dir / "sessions").glob("*/events.jsonl"))

    def events(self) -> list[dict[str, Any]]:
        """Every complete event line, each tagged with `_file` (its log file)."""
        out: list[dict[str, Any]] = []
        for path in self.files():
            for line in path.read_text(encoding="utf-8").splitlines():
                if not line.strip():
                    continue
                try:
                    event = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line still being written
                event["_file"] = str(path)
                out.append(event)
        return out

    def calls(self, predicate: Callable[[dict[str, Any]], bool] = lambda e: True) -> list[dict[str, Any]]:
        return [e for e in self.events() if e.get("event") == "tool/call" and predicate(e)]

    def calls_with_command_containing(self, needle: str) -> list[dict[str, Any]]:
        return self.calls(lambda e: needle in str((e.get("args") or {}).get("command", "")))

    def result_for(self, call: dict[str, Any]) -> dict[str, Any] | None:
        """The `tool/result` of the call (same log file, same call_id), if written yet."""
        for e in self.events():
            if e.get("event") == "tool/result" and e["_file"] == call["_file"] and e.get("call_id") == call.get("call_id"):
                return e
        return None

    def dump(self) -> str:
        return "\n".join(f"{p}:\n{p.read_text(encoding='utf-8')}" for p in self.files()) or "(no event log files)"

    async def wait_for(self, find: Callable[[], Any], timeout: float, what: str) -> Any:
        """Poll until `find()` returns something truthy; fail with the log contents otherwise."""
        deadline = time.monotonic() + timeout
        while True:
            found = find()
            if found:
                return found
            if time.monotonic() >= deadline:
                pytest.fail(f"event log: timed out after {timeout}s waiting for {what}\n{self.dump()}")
            await anyio.sleep(0.05)


@pytest.fixture
def event_log(dsh_dirs: DshDirs) -> EventLog:
    return EventLog(dsh_dirs.state)


# --------------------------------------------------------------------------- process table


class ProcessTable:
    """Looks for live processes by a substring of their command line (via /proc/*/cmdline)."""

    def matching(self, marker: str) -> list[tuple[int, str]]:
        found = []
        me = os.getpid()
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit() or int(entry.name) == me:
                continue
            try:
                raw = Path(entry.path, "cmdline").read_bytes()
                state = Path(entry.path, "stat").read_text()
            except OSError:
                continue
            # A zombie is already dead; it just has not been reaped yet.
            if state.rsplit(")", 1)[-1].split()[0] == "Z":
                continue
            cmdline = raw.replace(b"\0", b" ").decode(errors="replace").strip()
            if marker in cmdline:
                found.append((int(entry.name), cmdline))
        return found

    async def wait_until_present(self, marker: str, timeout: float) -> list[tuple[int, str]]:
        deadline = time.monotonic() + timeout
        while not (found := self.matching(marker)):
            if time.monotonic() >= deadline:
                pytest.fail(f"no process with {marker!r} in its command line appeared within {timeout}s")
            await anyio.sleep(0.05)
        return found

    async def wait_until_gone(self, marker: str, timeout: float) -> float:
        """Seconds it took for every process with the marker to disappear; fails past `timeout`."""
        start = time.monotonic()
        while found := self.matching(marker):
            if time.monotonic() - start >= timeout:
                pytest.fail(f"processes with {marker!r} still alive {timeout}s later: {found}")
            await anyio.sleep(0.05)
        return time.monotonic() - start

    def wait_until_present_sync(self, marker: str, timeout: float) -> list[tuple[int, str]]:
        deadline = time.monotonic() + timeout
        while not (found := self.matching(marker)):
            if time.monotonic() >= deadline:
                pytest.fail(f"no process with {marker!r} in its command line appeared within {timeout}s")
            time.sleep(0.05)
        return found

    def wait_until_gone_sync(self, marker: str, timeout: float) -> float:
        start = time.monotonic()
        while found := self.matching(marker):
            if time.monotonic() - start >= timeout:
                pytest.fail(f"processes with {marker!r} still alive {timeout}s later: {found}")
            time.sleep(0.05)
        return time.monotonic() - start


@pytest.fixture
def procs() -> ProcessTable:
    return ProcessTable()


@pytest.fixture
def markers(procs: ProcessTable):
    """Makes unique markers like `600.123456789012` (a valid `sleep` duration).

    At teardown, any process still carrying one of them is killed, so a failing
    test does not leave `sleep 600` behind on the machine.
    """
    made: list[str] = []

    def make(prefix: str = "600") -> str:
        marker = f"{prefix}.{secrets.randbelow(10**12):012d}"
        made.append(marker)
        return marker

    yield make
    for marker in made:
        for pid, _ in procs.matching(marker):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


# --------------------------------------------------------------------------- results


result_text = text


@pytest.fixture
def text_of() -> Callable[[Any], str]:
    return result_text


# --------------------------------------------------------------------------- failures inside task groups


def _leaves(group: BaseExceptionGroup) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        out.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out


@contextmanager
def surface_test_failures() -> Iterator[None]:
    """Re-raise a test's own assertion/`pytest.fail` out of the SDK's nested task groups.

    Otherwise the report is an exception group several levels deep (which also
    trips pytest's assertion-rewriting reporter on Python 3.11).
    """
    try:
        yield
    except BaseExceptionGroup as group:
        for leaf in _leaves(group):
            if isinstance(leaf, (AssertionError, pytest.fail.Exception)):
                raise leaf.with_traceback(leaf.__traceback__) from None
        raise


# --------------------------------------------------------------------------- stdio


@pytest.fixture
def open_stdio_session(dsh_bin: str, dsh_env: dict[str, str], dsh_dirs: DshDirs):
    """`async with open_stdio_session() as session:` -> an initialized ClientSession over `dsh serve`."""

    @asynccontextmanager
    async def open_session(config: str | None = None, message_handler: Any = None) -> AsyncIterator[ClientSession]:
        """`config`: the text of a `dsh.toml` to start the server with (`--config`);
        `message_handler`: the ClientSession's, to see the server's notifications."""
        params = StdioServerParameters(
            command=dsh_bin, args=["serve", *_config_args(dsh_dirs, config)], env=dsh_env, cwd=str(dsh_dirs.work)
        )
        with surface_test_failures(), open(dsh_dirs.logs / "stdio-stderr.log", "a") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(
                    read, write, read_timeout_seconds=REQUEST_TIMEOUT, message_handler=message_handler
                ) as session:
                    with anyio.fail_after(REQUEST_TIMEOUT):
                        await session.initialize()
                    yield session

    return open_session


class RawStdioServer:
    """`dsh serve` spoken to with hand-written newline-delimited JSON-RPC."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path, stderr_path: Path) -> None:
        self.stderr_path = stderr_path
        self._stderr = open(stderr_path, "wb")
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
        self.messages: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read_stdout, daemon=True)
        self._reader.start()

    def _read_stdout(self) -> None:
        assert self.proc.stdout
        for line in self.proc.stdout:
            line = line.strip()
            if line:
                self.messages.put(json.loads(line))
        self.messages.put(None)

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def receive_response(self, request_id: int, timeout: float = REQUEST_TIMEOUT) -> dict[str, Any]:
        """The response to `request_id`, skipping notifications and other responses."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                pytest.fail(f"no response to request {request_id} within {timeout}s\n{self.stderr()}")
            try:
                msg = self.messages.get(timeout=remaining)
            except queue.Empty:
                continue
            if msg is None:
                pytest.fail(f"dsh serve closed stdout before answering request {request_id}\n{self.stderr()}")
            if msg.get("id") == request_id and ("result" in msg or "error" in msg):
                return msg

    def initialize(self) -> dict[str, Any]:
        self.send(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": PROTOCOL_VERSION,
                    "capabilities": {},
                    "clientInfo": {"name": "dsh-e2e-raw", "version": "0"},
                },
            }
        )
        response = self.receive_response(1)
        assert "result" in response, f"initialize failed: {response}"
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return response["result"]

    def call_tool(self, request_id: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Sends `tools/call` and returns its `result` (fails the test on a JSON-RPC error)."""
        self.send(
            {
                "jsonrpc": "2.0",
                "id": request_id,
                "method": "tools/call",
                "params": {"name": name, "arguments": arguments},
            }
        )
        response = self.receive_response(request_id)
        assert "result" in response, f"tools/call {name} failed: {response}\n{self.stderr()}"
        return response["result"]

    def close_stdin(self) -> None:
        assert self.proc.stdin
        self.proc.stdin.close()

    def stderr(self) -> str:
        self._stderr.flush()
        text = self.stderr_path.read_text(errors="replace")
        return f"--- dsh serve stderr ---\n{text[-4000:]}"

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
            self.proc.wait(timeout=5)
        self._stderr.close()


@pytest.fixture
def raw_stdio_server(dsh_bin: str, dsh_env: dict[str, str], dsh_dirs: DshDirs):
    """Starts `dsh serve` with pipes we control; killed (whole group) at teardown if still running."""
    servers: list[RawStdioServer] = []

    def start(config: str | None = None) -> RawStdioServer:
        server = RawStdioServer(
            [dsh_bin, "serve", *_config_args(dsh_dirs, config)],
            _full_env(dsh_env),
            dsh_dirs.work,
            dsh_dirs.logs / f"raw-stdio-{len(servers)}.log",
        )
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.kill()


# --------------------------------------------------------------------------- HTTP


@dataclass
class HttpServer:
    proc: subprocess.Popen[bytes]
    url: str
    port: int
    token: str
    stderr_lines: list[str] = field(default_factory=list)

    def stderr(self) -> str:
        return "--- dsh serve --http stderr ---\n" + "".join(self.stderr_lines[-60:])

    @property
    def auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


def _launch_http_server(argv: list[str], env: dict[str, str], cwd: Path) -> HttpServer:
    """Starts `dsh serve --http 127.0.0.1:0` (argv) and waits for its listening line."""
    token = secrets.token_hex(24)
    proc = subprocess.Popen(
        argv,
        # Held open (never written): the server must not depend on stdin in HTTP mode.
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=_full_env(env | {"DSH_HTTP_TOKEN": token}),
        cwd=cwd,
        start_new_session=True,
    )
    lines: list[str] = []
    found: queue.Queue[tuple[str, int] | None] = queue.Queue()

    def read_stderr() -> None:
        assert proc.stderr
        announced = False
        for raw in proc.stderr:
            line = raw.decode(errors="replace")
            lines.append(line)
            if not announced and (m := LISTENING_RE.search(line)):
                announced = True
                found.put((m.group(1), int(m.group(2))))
        if not announced:
            found.put(None)

    threading.Thread(target=read_stderr, daemon=True).start()
    try:
        announced = found.get(timeout=SERVER_START_TIMEOUT)
    except queue.Empty:
        announced = None
    server = HttpServer(proc=proc, url="", port=0, token=token, stderr_lines=lines)
    if announced is None:
        _stop_http_server(server)
        pytest.fail(
            "dsh serve --http did not print 'dsh: listening on http://127.0.0.1:PORT/mcp' "
            f"(exit status {proc.poll()}):\n" + "".join(lines[-60:]),
            pytrace=False,
        )
    server.url, server.port = announced
    if server.port == 0:
        _stop_http_server(server)
        pytest.fail(f"listening line names port 0: {server.url}")
    return server


def _stop_http_server(server: HttpServer) -> None:
    proc = server.proc
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    proc.wait(timeout=5)
    if proc.stdin:
        proc.stdin.close()


@pytest.fixture
def start_http_server(dsh_bin: str, dsh_env: dict[str, str], dsh_dirs: DshDirs):
    """`start_http_server(config=None, nofile=None, env=None)` -> a running `dsh serve --http 127.0.0.1:0` with a random token.

    `config`: the text of a `dsh.toml` to start it with (`--config`); `nofile`: its
    open file descriptor limit (`ulimit -n`); `env`: more environment variables. Every
    server started is stopped at teardown (TERM, then KILL to its group).
    """
    servers: list[HttpServer] = []

    def start(config: str | None = None, nofile: int | None = None, env: dict[str, str] | None = None) -> HttpServer:
        argv = [dsh_bin, "serve", "--http", "127.0.0.1:0", *_config_args(dsh_dirs, config)]
        if nofile is not None:
            # `ulimit -n` for dsh alone: the shell sets it, then becomes dsh (same pid).
            argv = ["sh", "-c", f'ulimit -n {int(nofile)} && exec "$@"', "sh", *argv]
        server = _launch_http_server(argv, dsh_env | (env or {}), dsh_dirs.work)
        servers.append(server)
        return server

    try:
        yield start
    finally:
        for server in servers:
            _stop_http_server(server)


@pytest.fixture
def http_server(start_http_server):
    """A running `dsh serve --http 127.0.0.1:0` with a random bearer token."""
    return start_http_server()


@pytest.fixture
def open_http_session():
    """`async with open_http_session(server) as session:` -> an initialized ClientSession over streamable HTTP."""

    @asynccontextmanager
    async def open_session(server: HttpServer, message_handler: Any = None) -> AsyncIterator[ClientSession]:
        with surface_test_failures():
            async with create_mcp_http_client(headers=server.auth_headers) as http:
                async with streamable_http_client(server.url, http_client=http) as (read, write):
                    async with ClientSession(
                        read, write, read_timeout_seconds=REQUEST_TIMEOUT, message_handler=message_handler
                    ) as session:
                        with anyio.fail_after(REQUEST_TIMEOUT):
                            await session.initialize()
                        yield session

    return open_session


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under `CI=true` everything must run: a test that was skipped fails, saying why."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get("CI") == "true" and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true, where every test must run: {report.longrepr}"
