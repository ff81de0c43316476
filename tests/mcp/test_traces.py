"""OpenTelemetry traces: `[traces] endpoint` in dsh.toml sends one span per call, a child
per pipeline stage and per host call, over OTLP/HTTP (protobuf) to a receiver here,
built on the OpenTelemetry project's own protocol definitions (`opentelemetry-proto`):
the OpenTelemetry Collector is in none of the registries these tests install from.

The client's `traceparent` (in the request's `_meta`) is the call span's parent; the
owner, tool and code are its attributes; an error is its status. Traces are off without
an endpoint (the OTEL_* variables alone do not turn them on), and a collector that is
gone slows no call and holds no exit.
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

import anyio
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

pytestmark = pytest.mark.anyio


@dataclass
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    attributes: dict[str, Any]
    status: int
    start: int
    end: int
    resource: dict[str, Any]


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


@dataclass
class Receiver:
    """An OTLP/HTTP traces receiver on 127.0.0.1: every span of every export request."""

    url: str
    spans: list[ReceivedSpan] = field(default_factory=list)
    requests: list[tuple[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        with self.lock:
            for resource_spans in request.resource_spans:
                resource = _attributes(resource_spans.resource.attributes)
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        self.spans.append(
                            ReceivedSpan(
                                name=span.name,
                                trace_id=span.trace_id.hex(),
                                span_id=span.span_id.hex(),
                                parent_span_id=span.parent_span_id.hex(),
                                kind=span.kind,
                                attributes=_attributes(span.attributes),
                                status=span.status.code,
                                start=span.start_time_unix_nano,
                                end=span.end_time_unix_nano,
                                resource=resource,
                            )
                        )

    def trace(self, trace_id: str) -> list[ReceivedSpan]:
        with self.lock:
            return [span for span in self.spans if span.trace_id == trace_id]

    async def wait_for(self, find: Any, what: str, timeout: float = 20) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if found := find():
                return found
            await anyio.sleep(0.05)
        with self.lock:
            names = [(s.name, s.trace_id) for s in self.spans]
        pytest.fail(f"no {what} within {timeout} s; received: {names}")


@pytest.fixture
def otlp_receiver() -> Iterator[Receiver]:
    receiver: Receiver

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (the http.server name)
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            receiver.requests.append((self.path, self.headers.get("Content-Type", "")))
            receiver.take(body)
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver = Receiver(url=f"http://127.0.0.1:{server.server_port}")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()


def traceparent() -> tuple[str, str, str]:
    trace_id, parent_id = secrets.token_hex(16), secrets.token_hex(8)
    return f"00-{trace_id}-{parent_id}-01", trace_id, parent_id


def children(spans: list[ReceivedSpan], parent: ReceivedSpan) -> list[ReceivedSpan]:
    return sorted((s for s in spans if s.parent_span_id == parent.span_id), key=lambda s: s.start)


def one(spans: list[ReceivedSpan], name: str) -> ReceivedSpan:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, (name, [(s.name, s.parent_span_id) for s in spans])
    return found[0]


OPENED_RE = re.compile(r"\Aopened (?P<id>term-\d+) ")

# Spans are batched: sent every 200 ms here (the default is 5 s), so they come while the
# server still serves.
LIVE_EXPORT = {"OTEL_BSP_SCHEDULE_DELAY": "200"}


async def test_a_call_is_a_span_tree_under_the_clients_traceparent(
    start_http_server, open_http_session, otlp_receiver, text_of, dsh_dirs
):
    """A `bash` call sent with `_meta.traceparent` is one server span `tools/call bash`
    whose parent is the client's span, in the client's trace, with the tool, owner,
    call id and code as attributes; under it, the admission and the five stages in
    order; under `guards`, one span per guard; under `execute`, the host call
    `process.run`. A `terminal_send` has `terminal.send` and an `lsp` query `lsp.query`
    under their `execute`; a failed call's span says its code and has the error status;
    a call without a trace context starts a trace of its own."""
    config = f"""
[pipeline]
guards = ["deny_destructive", "workspace_only"]
filters = ["redact_secrets"]

[traces]
endpoint = "{otlp_receiver.url}"
"""
    server = start_http_server(config=config, env=LIVE_EXPORT)
    assert any(f"traces to {otlp_receiver.url}/v1/traces" in line for line in server.stderr_lines), server.stderr()
    (dsh_dirs.work / "calc.c").write_text("int twice(int x) { return 2 * x; }\n")
    header, trace_id, client_span = traceparent()
    async with open_http_session(server) as session:
        ran = await session.call_tool(
            "bash", {"command": "echo traced", "description": "a traced call"}, meta={"traceparent": header}
        )
        assert ran.is_error is False and "traced" in text_of(ran), ran
        missing_header, missing_trace, _ = traceparent()
        missing = await session.call_tool("read", {"path": "no-such-file.txt"}, meta={"traceparent": missing_header})
        assert missing.is_error is True and text_of(missing).startswith("NOT_FOUND"), missing
        opened = await session.call_tool("terminal_open", {})
        assert opened.is_error is False, opened
        terminal = OPENED_RE.match(text_of(opened))["id"]
        send_header, send_trace, _ = traceparent()
        sent = await session.call_tool(
            "terminal_send", {"id": terminal, "input": "echo hi"}, meta={"traceparent": send_header}
        )
        assert sent.is_error is False, sent
        lsp_header, lsp_trace, _ = traceparent()
        hover = await session.call_tool(
            "lsp",
            {"op": "hover", "path": "calc.c", "line": 1, "symbol": "twice"},
            meta={"traceparent": lsp_header},
        )
        assert hover.is_error is False, hover
        untraced = await session.call_tool("bash", {"command": "echo untraced", "description": "no trace context"})
        assert untraced.is_error is False, untraced

        stages = ["admission", "gate", "guards", "execute", "filters", "finalize"]
        spans = await otlp_receiver.wait_for(
            lambda: (s := otlp_receiver.trace(trace_id))
            and any(x.name == "tools/call bash" for x in s)
            and len(s) >= 1 + len(stages) + 2 + 1 + 1
            and s,
            "span tree of the traced bash call",
        )
    root = one(spans, "tools/call bash")
    assert root.parent_span_id == client_span, "the client's traceparent is not the call's parent"
    assert root.kind == Span.SPAN_KIND_SERVER
    assert root.attributes["dsh.tool"] == "bash"
    assert root.attributes["dsh.code"] == "ok"
    assert root.attributes["dsh.owner"], root.attributes
    assert root.attributes["dsh.call_id"], root.attributes
    assert set(root.attributes) == {"dsh.tool", "dsh.owner", "dsh.call_id", "dsh.code"}, root.attributes
    assert root.status != Status.STATUS_CODE_ERROR
    assert root.resource["service.name"] == "dsh", root.resource
    under_root = children(spans, root)
    assert [s.name for s in under_root] == stages, [s.name for s in under_root]
    for span in under_root:
        assert root.start <= span.start <= span.end <= root.end, (span.name, span, root)
    guards = one(spans, "guards")
    assert [s.name for s in children(spans, guards)] == ["guard deny_destructive", "guard workspace_only"]
    assert [s.name for s in children(spans, one(spans, "filters"))] == ["filter redact_secrets"]
    assert [s.name for s in children(spans, one(spans, "execute"))] == ["process.run"]
    assert {s.trace_id for s in spans} == {trace_id}

    failed = await otlp_receiver.wait_for(
        lambda: [s for s in otlp_receiver.trace(missing_trace) if s.name == "tools/call read"], "the failed call's span"
    )
    assert failed[0].attributes["dsh.code"] == "NOT_FOUND", failed[0].attributes
    assert failed[0].status == Status.STATUS_CODE_ERROR

    for trace, tool, host_call in [
        (send_trace, "terminal_send", "terminal.send"),
        (lsp_trace, "lsp", "lsp.query"),
    ]:
        spans = await otlp_receiver.wait_for(
            lambda: (s := otlp_receiver.trace(trace)) and any(x.name == host_call for x in s) and s,
            f"{host_call} under {tool}",
        )
        execute = [s for s in spans if s.name == "execute"]
        assert len(execute) == 1, [s.name for s in spans]
        assert [s.name for s in children(spans, execute[0])] == [host_call]
        assert one(spans, f"tools/call {tool}").attributes["dsh.code"] == "ok"

    # The call without a trace context is the root of a trace of its own.
    known = {trace_id, missing_trace, send_trace, lsp_trace}
    roots = await otlp_receiver.wait_for(
        lambda: [
            s
            for s in otlp_receiver.spans
            if s.name == "tools/call bash" and s.trace_id not in known and s.parent_span_id == ""
        ],
        "the untraced call's root span",
    )
    assert len(roots) == 1, roots
    assert all(path == "/v1/traces" and kind == "application/x-protobuf" for path, kind in otlp_receiver.requests), (
        otlp_receiver.requests
    )


async def test_each_middleware_is_a_span_under_the_one_around_it(
    start_http_server, open_http_session, otlp_receiver, text_of, tmp_path
):
    """With two middleware, a call's `execute` span holds `middleware outer`, which holds
    `middleware inner`, which holds the tool's host call (`process.run`)."""
    import shutil
    from pathlib import Path

    plugins = tmp_path / "plugins"
    plugins.mkdir()
    built = Path(os.environ["DSH_PLUGIN_WASM_DIR"]) / "test_middleware.wasm"
    for name in ("outer", "inner"):
        shutil.copy(built, plugins / f"{name}.wasm")
    config = f"""
[pipeline]
middleware = ["outer", "inner"]

[traces]
endpoint = "{otlp_receiver.url}"
"""
    server = start_http_server(config=config, env={**LIVE_EXPORT, "DSH_PLUGINS": str(plugins)})
    header, trace_id, _ = traceparent()
    async with open_http_session(server) as session:
        ran = await session.call_tool(
            "bash", {"command": "echo wrapped", "description": "a wrapped call"}, meta={"traceparent": header}
        )
        assert ran.is_error is False and "wrapped" in text_of(ran), ran
        spans = await otlp_receiver.wait_for(
            lambda: (s := otlp_receiver.trace(trace_id)) and any(x.name == "process.run" for x in s) and s,
            "the wrapped call's spans",
        )
    outer = one(spans, "middleware outer")
    inner = one(spans, "middleware inner")
    assert outer.parent_span_id == one(spans, "execute").span_id
    assert inner.parent_span_id == outer.span_id
    assert [s.name for s in children(spans, inner)] == ["process.run"]


async def test_the_last_spans_are_sent_when_the_server_exits(open_stdio_session, otlp_receiver, text_of):
    """With the default batching (a batch every 5 s), the spans of a call made just
    before the client goes are still sent: the server sends what it holds as it exits."""
    header, trace_id, _ = traceparent()
    config = f'[traces]\nendpoint = "{otlp_receiver.url}/v1/traces"\n'
    async with open_stdio_session(config=config) as session:
        ran = await session.call_tool(
            "bash", {"command": "echo bye", "description": "last call"}, meta={"traceparent": header}
        )
        assert ran.is_error is False and "bye" in text_of(ran), ran
    spans = await otlp_receiver.wait_for(
        lambda: [s for s in otlp_receiver.trace(trace_id) if s.name == "tools/call bash"], "the last call's span", 10
    )
    assert spans[0].attributes["dsh.code"] == "ok"


async def test_spans_held_at_an_upgrade_are_sent_before_its_exec(
    open_stdio_session, otlp_receiver, text_of, dsh_bin, dsh_env
):
    """`dsh upgrade` replaces the process image, and with it the thread that batches
    spans: what it held is sent first. The new binary sends traces too."""
    config = f'[traces]\nendpoint = "{otlp_receiver.url}"\n'
    before_header, before_trace, _ = traceparent()
    after_header, after_trace, _ = traceparent()
    env = {k: os.environ[k] for k in ("HOME", "PATH") if k in os.environ} | dsh_env
    async with open_stdio_session(config=config) as session:
        ran = await session.call_tool(
            "bash", {"command": "echo before", "description": "before"}, meta={"traceparent": before_header}
        )
        assert ran.is_error is False and "before" in text_of(ran), ran
        done = subprocess.run([dsh_bin, "upgrade"], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"dsh upgrade failed: {done.stdout}{done.stderr}"
        await otlp_receiver.wait_for(
            lambda: [s for s in otlp_receiver.trace(before_trace) if s.name == "tools/call bash"],
            "the span of the call made before the upgrade",
            10,
        )
        ran = await session.call_tool(
            "bash", {"command": "echo after", "description": "after"}, meta={"traceparent": after_header}
        )
        assert ran.is_error is False and "after" in text_of(ran), ran
    await otlp_receiver.wait_for(
        lambda: [s for s in otlp_receiver.trace(after_trace) if s.name == "tools/call bash"],
        "the span of the call made after the upgrade",
        10,
    )


async def test_traces_are_off_without_an_endpoint_even_with_otel_variables(
    start_http_server, open_http_session, otlp_receiver, text_of
):
    """No `[traces] endpoint`, no traces: the standard OTEL_* variables pointing at a
    receiver do not turn them on, and nothing is sent, during the calls or at exit."""
    server = start_http_server(
        env={
            "OTEL_EXPORTER_OTLP_ENDPOINT": otlp_receiver.url,
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{otlp_receiver.url}/v1/traces",
            **LIVE_EXPORT,
        }
    )
    header, _, _ = traceparent()
    async with open_http_session(server) as session:
        ran = await session.call_tool(
            "bash", {"command": "echo quiet", "description": "untraced"}, meta={"traceparent": header}
        )
        assert ran.is_error is False and "quiet" in text_of(ran), ran
        await anyio.sleep(1)
    server.proc.terminate()
    server.proc.wait(timeout=10)
    assert not any("traces to" in line for line in server.stderr_lines), server.stderr()
    assert otlp_receiver.requests == [] and otlp_receiver.spans == []


async def test_a_collector_that_is_gone_fails_no_call_and_holds_no_exit(
    start_http_server, open_http_session, text_of
):
    """An endpoint where nothing listens: calls work as without traces, and the server
    ends on SIGTERM within its export timeout, not waiting for the collector."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = f'[traces]\nendpoint = "http://127.0.0.1:{port}"\nexport_timeout_ms = 500\n'
    server = start_http_server(config=config, env=LIVE_EXPORT)
    async with open_http_session(server) as session:
        for index in range(5):
            ran = await session.call_tool("bash", {"command": f"echo n{index}", "description": "no collector"})
            assert ran.is_error is False and f"n{index}" in text_of(ran), ran
    server.proc.terminate()
    try:
        server.proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pytest.fail("dsh serve did not exit on SIGTERM with its collector gone:\n" + server.stderr())


async def test_a_subagents_steps_are_calls_under_its_host_call(dsh_bin, dsh_env, dsh_dirs, otlp_receiver):
    """A `subagent` call's steps are calls of their own, each a child of the
    `subagent.run` host call, all in the client's trace."""
    from test_subagent import LS, Model, Session, answer, serve, use

    model = Model(use("bash", LS), answer("done"))
    header, trace_id, _ = traceparent()
    config = f'[traces]\nendpoint = "{otlp_receiver.url}"\n'
    async with Session(serve(dsh_bin, dsh_env, dsh_dirs, config), model) as session:
        result = await session.call_tool("subagent", {"prompt": "list the workspace"}, meta={"traceparent": header})
        assert not result.is_error, result
    spans = await otlp_receiver.wait_for(
        lambda: (s := otlp_receiver.trace(trace_id)) and any(x.name == "process.run" for x in s) and s,
        "the subagent's spans",
    )
    root = one(spans, "tools/call subagent")
    execute = [s for s in children(spans, root) if s.name == "execute"]
    assert len(execute) == 1, [s.name for s in spans]
    host_call = one(spans, "subagent.run")
    assert host_call.parent_span_id == execute[0].span_id
    step = one(spans, "tools/call bash")
    assert step.parent_span_id == host_call.span_id
    step_execute = [s for s in children(spans, step) if s.name == "execute"]
    assert [s.name for s in children(spans, step_execute[0])] == ["process.run"]
