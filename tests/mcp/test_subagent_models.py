"""Subagents on the operator's model (`[subagent.models.NAME]`): dsh itself asks a model
endpoint, so the client needs no sampling (the MCP clients here declare none) and `dsh
call subagent` works with no client at all.

The endpoint is this file's own HTTP server on loopback, speaking each API's wire format
as the providers document it (OpenAI's chat completions with `tool_calls`, Anthropic's
Messages with `tool_use` blocks), its replies scripted per test; it records every request
with its headers. Covered, for both APIs: a foreground run whose model runs `bash`, a file
tool and a step a guard denies, and answers (what went over the wire, the tokens in the
transcript and the answer); a background run that works and ends while nobody reads it;
retries after a 429 with `Retry-After` and after a dropped connection; a 401 ending the run
with `MODEL_UNAVAILABLE` that holds no key; `max_tokens_per_subagent` ending a run with
`LIMIT_EXCEEDED`; the key in no command's environment (even one `[process.env]` asks to
pass), no transcript, event log or spill file, and no plugin grant. And on the client's
own model: a background subagent advances when its owner calls `job_output {id, wait_ms}`
with no `since`, over stdio and over HTTP."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from contextlib import asynccontextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

import anyio
import pytest
from conftest import write_config
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from test_subagent import LS, SAMPLING_WITH_TOOLS, Model, answer, use
from test_traces import otlp_receiver  # noqa: F401 (a fixture)
from tool_results import expect_error, show, text

pytestmark = pytest.mark.anyio

APIS = ["openai-chat", "anthropic-messages"]
KEY = "sk-dsh-test-3b1f9e0c7d2a4e6f8a1b"


def tool_call(api: str, name: str, args: dict[str, Any], id: str, tokens: tuple[int, int] = (100, 10)) -> dict:
    """A reply asking for one tool call, in `api`'s wire format."""
    if api == "openai-chat":
        return {
            "id": f"chatcmpl-{id}",
            "object": "chat.completion",
            "model": "scripted-model",
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [{"id": id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}],
                    },
                    "finish_reason": "tool_calls",
                }
            ],
            "usage": {"prompt_tokens": tokens[0], "completion_tokens": tokens[1], "total_tokens": sum(tokens)},
        }
    return {
        "id": f"msg_{id}",
        "type": "message",
        "role": "assistant",
        "model": "scripted-model",
        "content": [{"type": "tool_use", "id": id, "name": name, "input": args}],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": tokens[0], "output_tokens": tokens[1]},
    }


def final(api: str, words: str, tokens: tuple[int, int] = (100, 10)) -> dict:
    """The model's final answer, in `api`'s wire format."""
    if api == "openai-chat":
        return {
            "id": "chatcmpl-final",
            "object": "chat.completion",
            "model": "scripted-model",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": words}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": tokens[0], "completion_tokens": tokens[1], "total_tokens": sum(tokens)},
        }
    return {
        "id": "msg_final",
        "type": "message",
        "role": "assistant",
        "model": "scripted-model",
        "content": [{"type": "text", "text": words}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": tokens[0], "output_tokens": tokens[1]},
    }


def tool_results(api: str, body: dict) -> list[str]:
    """The tool results a request carries last, as text."""
    if api == "openai-chat":
        return [m["content"] for m in body["messages"] if m["role"] == "tool"][-1:]
    last = body["messages"][-1]["content"]
    return [block["content"] for block in last if block.get("type") == "tool_result"]


class Endpoint:
    """A model endpoint on loopback. Each request takes the next step of the script: a
    reply body (status 200), `(status, headers, body)`, `"drop"` (the connection closed
    with no answer), or a function of the request body giving one of those."""

    def __init__(self, api: str, *script: Any) -> None:
        self.api = api
        self.script = list(script)
        self.requests: list[dict[str, Any]] = []
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = json.loads(self.rfile.read(length))
                endpoint.requests.append(
                    {"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body, "at": time.monotonic()}
                )
                step = endpoint.script.pop(0) if endpoint.script else final(endpoint.api, "out of script")
                if callable(step):
                    step = step(body)
                if step == "drop":
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                status, headers, reply = step if isinstance(step, tuple) else (200, {}, step)
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def config(self, extra: str = "") -> str:
        return f"""
[subagent]
model = "local"
{extra}
[subagent.models.local]
api = "{self.api}"
base_url = "{self.base_url}"
model = "scripted-model"
api_key_env = "DSH_MODEL_KEY"
retry_base_ms = 50
"""

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def endpoints():
    made: list[Endpoint] = []

    def make(api: str, *script: Any) -> Endpoint:
        made.append(Endpoint(api, *script))
        return made[-1]

    yield make
    for endpoint in made:
        endpoint.close()


@pytest.fixture
def keyed_env(dsh_env):
    return {**dsh_env, "DSH_MODEL_KEY": KEY}


@asynccontextmanager
async def session_without_sampling(dsh_bin: str, env: dict[str, str], dsh_dirs, config: str):
    """An MCP client that declares no sampling, against `dsh serve` with `config`."""
    params = StdioServerParameters(
        command=dsh_bin, args=["--config", str(write_config(dsh_dirs, config)), "serve"], env=env, cwd=str(dsh_dirs.work)
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, read_timeout_seconds=60) as session:
            with anyio.fail_after(30):
                await session.initialize()
            yield session


async def read_until_ended(session: ClientSession, job: str, since: bool) -> tuple[str, str]:
    """`job_output` with `wait_ms` until `job` ends: from the returned cursor (`since`) or
    with no `since` at all (each read the whole transcript so far). The transcript, the
    last status line."""
    cursor, whole = 0, ""
    for _ in range(60):
        args: dict[str, Any] = {"id": job, "wait_ms": 10_000}
        if since:
            args["since"] = cursor
        read = await session.call_tool("job_output", args)
        assert not read.is_error, show(("job_output", args), read)
        body, _, status = text(read).rpartition("\n[")
        whole = whole + body if since else body
        cursor = int(status.rsplit("next cursor: ", 1)[1].rstrip("]"))
        if "running" not in status:
            return whole, status
    pytest.fail(f"{job} still running:\n{whole}")


def everything_dsh_wrote(dsh_dirs) -> str:
    """Every file under the state directory, as text (event logs, spill files, ...)."""
    out = []
    for path in dsh_dirs.state.rglob("*"):
        if path.is_file() and not path.name.endswith(".cwasm"):
            out.append(path.read_bytes().decode("utf-8", "replace"))
    return "\n".join(out)


@pytest.mark.parametrize("api", APIS)
async def test_a_foreground_subagent_on_an_operator_model_runs_bash_a_file_tool_and_a_denied_step(
    api, endpoints, dsh_bin, keyed_env, dsh_dirs
):
    (dsh_dirs.work / "notes.txt").write_text("the notes say 42\n")
    endpoint = endpoints(
        api,
        tool_call(api, "bash", {"command": "env; echo from-bash", "description": "look around"}, "call_1"),
        tool_call(api, "read", {"path": "notes.txt"}, "call_2"),
        tool_call(api, "bash", {"command": "rm -rf /", "description": "wipe"}, "call_3"),
        lambda body: final(api, "notes say 42; " + ("denied" if "DENIED" in tool_results(api, body)[0] else "not denied?")),
    )
    # `[process.env]` asks to pass every variable that looks secret: the key is still withheld.
    config = endpoint.config() + '[process.env]\ninclude = ["*KEY*", "DSH_*"]\n[pipeline]\nguards = ["deny_destructive"]\n'
    async with session_without_sampling(dsh_bin, keyed_env, dsh_dirs, config) as session:
        request = ("subagent", {"prompt": "What do the notes say?"})
        result = await session.call_tool(*request)
        assert not result.is_error, show(request, result)
        words = text(result)
        assert words.startswith("notes say 42; denied"), words
        assert "answered in 4 turns by model local, 400 tokens in, 40 out" in words, words
        job = words.rsplit("[", 1)[1].split(":")[0]
        transcript, status = await read_until_ended(session, job, since=True)
    assert "exited with code 0" in status, status
    assert "[turn 1] tokens: 100 in, 10 out (model local; 100 in, 10 out so far)" in transcript, transcript
    assert "[turn 2] result read: ok" in transcript, transcript
    assert "[turn 3] result bash: DENIED" in transcript, transcript
    # On the wire: the provider's paths and headers, the key only where it belongs.
    requests = endpoint.requests
    assert len(requests) == 4
    if api == "openai-chat":
        assert all(r["path"] == "/v1/chat/completions" for r in requests)
        assert requests[0]["headers"]["authorization"] == f"Bearer {KEY}"
        assert requests[0]["body"]["messages"][0]["role"] == "system"
        assert {t["function"]["name"] for t in requests[0]["body"]["tools"]} >= {"bash", "read"}
    else:
        assert all(r["path"] == "/v1/messages" for r in requests)
        assert requests[0]["headers"]["x-api-key"] == KEY
        assert requests[0]["headers"]["anthropic-version"] == "2023-06-01"
        assert {t["name"] for t in requests[0]["body"]["tools"]} >= {"bash", "read"}
    assert requests[0]["body"]["model"] == "scripted-model"
    env_output = tool_results(api, requests[1]["body"])[0]
    assert "from-bash" in env_output and "PATH=" in env_output, env_output
    assert KEY not in env_output and "DSH_MODEL_KEY" not in env_output, env_output
    assert "the notes say 42" in tool_results(api, requests[2]["body"])[0]
    # The key is in nothing dsh wrote.
    written = everything_dsh_wrote(dsh_dirs)
    assert "from-bash" in written and KEY not in written


@pytest.mark.parametrize("api", APIS)
async def test_a_background_subagent_on_an_operator_model_works_and_ends_while_nobody_reads(
    api, endpoints, dsh_bin, keyed_env, dsh_dirs
):
    (dsh_dirs.work / "notes.txt").write_text("background notes\n")
    endpoint = endpoints(
        api,
        tool_call(api, "bash", {"command": "echo step-one", "description": "one"}, "c1"),
        tool_call(api, "read", {"path": "notes.txt"}, "c2"),
        tool_call(api, "bash", {"command": "rm -rf /", "description": "wipe"}, "c3"),
        final(api, "finished alone"),
    )
    config = endpoint.config() + '[pipeline]\nguards = ["deny_destructive"]\n'
    async with session_without_sampling(dsh_bin, keyed_env, dsh_dirs, config) as session:
        started = await session.call_tool("subagent", {"prompt": "work", "run_in_background": True})
        assert not started.is_error, show(None, started)
        job = text(started).split()[0]
        # Nobody reads it: it ends anyway.
        with anyio.fail_after(30):
            while True:
                listed = text(await session.call_tool("job_list", {}))
                line = next(l for l in listed.splitlines() if l.startswith(job))
                if "running" not in line:
                    break
                await anyio.sleep(0.1)
        assert "exited" in line, listed
        assert len(endpoint.requests) == 4
        # job_output without `since` reads the whole transcript.
        read = await session.call_tool("job_output", {"id": job, "wait_ms": 1000})
    assert "[turn 1] result bash: ok: step-one" in text(read), text(read)
    assert "[turn 2] result read: ok" in text(read), text(read)
    assert "[turn 3] result bash: DENIED" in text(read), text(read)
    assert "[turn 4] answer: finished alone" in text(read), text(read)
    assert "background notes" in tool_results(api, endpoint.requests[2]["body"])[0]


@pytest.mark.parametrize("api", APIS)
async def test_a_429_with_retry_after_and_a_dropped_connection_are_retried(api, endpoints, dsh_bin, keyed_env, dsh_dirs):
    endpoint = endpoints(
        api,
        (429, {"retry-after": "1"}, {"error": {"type": "rate_limit_error", "message": "slow down"}}),
        "drop",
        final(api, "after two retries"),
    )
    async with session_without_sampling(dsh_bin, keyed_env, dsh_dirs, endpoint.config()) as session:
        result = await session.call_tool("subagent", {"prompt": "try"})
    assert not result.is_error and text(result).startswith("after two retries"), show(None, result)
    at = [r["at"] for r in endpoint.requests]
    assert len(at) == 3
    # The second try waited for the 429's Retry-After (1 s); the third only for the backoff.
    assert at[1] - at[0] >= 0.95, at


@pytest.mark.parametrize("api", APIS)
async def test_a_401_ends_the_run_with_a_clear_error_that_holds_no_key(api, endpoints, dsh_bin, keyed_env, dsh_dirs, event_log):
    # A provider that echoes the key it was given in its message.
    refusal = {"error": {"type": "authentication_error", "message": f"Incorrect API key provided: {KEY}"}}
    endpoint = endpoints(api, (401, {}, refusal))
    async with session_without_sampling(dsh_bin, keyed_env, dsh_dirs, endpoint.config()) as session:
        request = ("subagent", {"prompt": "try"})
        result = await session.call_tool(*request)
        message = expect_error(request, result, "MODEL_UNAVAILABLE")
    assert "HTTP 401" in message and "Incorrect API key provided" in message, message
    assert KEY not in text(result) and len(endpoint.requests) == 1, text(result)
    assert KEY not in everything_dsh_wrote(dsh_dirs)


@pytest.mark.parametrize("api", APIS)
async def test_max_tokens_per_subagent_stops_a_run_with_limit_exceeded(api, endpoints, dsh_bin, keyed_env, dsh_dirs):
    endpoint = endpoints(
        api,
        tool_call(api, "bash", {"command": "true", "description": "t"}, "c1", tokens=(100, 10)),
        tool_call(api, "bash", {"command": "true", "description": "t"}, "c2", tokens=(100, 10)),
    )
    config = endpoint.config("max_tokens_per_subagent = 150")
    async with session_without_sampling(dsh_bin, keyed_env, dsh_dirs, config) as session:
        request = ("subagent", {"prompt": "loop"})
        message = expect_error(request, await session.call_tool(*request), "LIMIT_EXCEEDED")
    assert "used 220 tokens" in message and "max_tokens_per_subagent = 150" in message, message
    assert len(endpoint.requests) == 2


async def test_dsh_call_subagent_runs_on_the_operator_model_with_no_client(endpoints, dsh_bin, keyed_env, dsh_dirs):
    api = "openai-chat"
    endpoint = endpoints(api, tool_call(api, "bash", {"command": "echo via-cli", "description": "x"}, "c1"), final(api, "cli answer"))
    config = write_config(dsh_dirs, endpoint.config())
    ran = subprocess.run(
        [dsh_bin, "--config", str(config), "call", "subagent", json.dumps({"prompt": "go"})],
        env=keyed_env,
        cwd=dsh_dirs.work,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith("cli answer") and "by model local" in ran.stdout, ran.stdout
    assert "via-cli" in tool_results(api, endpoint.requests[1]["body"])[0]


def test_no_plugin_may_be_granted_a_model_key_and_an_unknown_model_is_refused(dsh_bin, keyed_env, dsh_dirs):
    base = '[subagent.models.local]\napi = "openai-chat"\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\napi_key_env = "DSH_MODEL_KEY"\n'
    for config, says in [
        (base + '[plugins.echo]\nenv = ["DSH_MODEL_KEY"]\n', "holds a key of dsh's own"),
        ('[subagent]\nmodel = "nowhere"\n', 'model = "nowhere" names no model'),
        (base + '[subagent.scopes.default]\nallow = ["other"]\n', 'names the model "other"'),
    ]:
        path = write_config(dsh_dirs, config)
        ran = subprocess.run([dsh_bin, "--config", str(path), "tools"], env=keyed_env, capture_output=True, text=True, timeout=30)
        assert ran.returncode != 0 and says in ran.stderr, (config, ran.stderr)


async def test_a_call_may_name_only_a_model_its_scope_allows(endpoints, dsh_bin, keyed_env, dsh_dirs):
    endpoint = endpoints("openai-chat")
    async with session_without_sampling(dsh_bin, keyed_env, dsh_dirs, endpoint.config()) as session:
        request = ("subagent", {"prompt": "x", "model": "client"})
        message = expect_error(request, await session.call_tool(*request), "INVALID_ARGUMENTS")
    assert "may use: local" in message, message
    assert endpoint.requests == []


# ---- The client's own model: a background run advances on job_output without `since`


async def drive_without_since(session: ClientSession, model: Model) -> None:
    started = await session.call_tool("subagent", {"prompt": "count", "run_in_background": True})
    assert not started.is_error, show(None, started)
    job = text(started).split()[0]
    transcript, status = await read_until_ended(session, job, since=False)
    assert len(model.requests) == 3, (len(model.requests), transcript)
    assert "[turn 3] answer: done without since" in transcript, transcript
    assert "exited with code 0" in status, status


def client_model() -> Model:
    return Model(use("bash", LS), use("bash", LS, "use-2"), answer("done without since"))


async def test_over_stdio_a_background_subagent_on_the_client_model_advances_on_job_output_without_since(
    dsh_bin, dsh_env, dsh_dirs
):
    model = client_model()
    params = StdioServerParameters(command=dsh_bin, args=["serve"], env=dsh_env, cwd=str(dsh_dirs.work))
    async with stdio_client(params) as (read, write):
        async with ClientSession(
            read, write, read_timeout_seconds=60, sampling_callback=model, sampling_capabilities=SAMPLING_WITH_TOOLS
        ) as session:
            await session.initialize()
            await drive_without_since(session, model)


async def test_over_http_a_background_subagent_on_the_client_model_advances_on_job_output_without_since(
    start_http_server,
):
    server = start_http_server()
    model = client_model()
    async with create_mcp_http_client(headers=server.auth_headers) as http:
        async with streamable_http_client(server.url, http_client=http) as (read, write):
            async with ClientSession(
                read, write, sampling_callback=model, sampling_capabilities=SAMPLING_WITH_TOOLS
            ) as session:
                await session.initialize()
                await drive_without_since(session, model)


# ---- What operators see: /metrics, a span per model request, `dsh stats`


async def test_operators_see_each_model_on_metrics_in_traces_and_in_dsh_stats(
    endpoints, start_http_server, open_http_session, otlp_receiver, dsh_bin, keyed_env
):
    import secrets

    import httpx2
    from test_metrics import scrape, value
    from test_traces import one, traceparent

    api = "anthropic-messages"
    endpoint = endpoints(
        api,
        (503, {}, {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}),
        tool_call(api, "bash", {"command": "true", "description": "t"}, "c1", tokens=(120, 8)),
        final(api, "measured", tokens=(150, 5)),
    )
    receiver = otlp_receiver
    token = secrets.token_hex(16)
    config = endpoint.config() + f'[traces]\nendpoint = "{receiver.url}"\n'
    server = start_http_server(config, env={"DSH_MODEL_KEY": KEY, "DSH_METRICS_TOKEN": token})
    header, trace_id, _ = traceparent()
    async with open_http_session(server) as session:
        result = await session.call_tool("subagent", {"prompt": "measure"}, meta={"traceparent": header})
        assert not result.is_error, show(None, result)
    async with httpx2.AsyncClient() as http:
        samples = await scrape(http, server, token)
        exposition = (await http.get(server.url.removesuffix("/mcp") + "/metrics", headers={"Authorization": f"Bearer {token}"})).text
    assert "dsh_model_requests_total" in exposition and KEY not in exposition
    for name, expected in [
        ("dsh_model_requests_total", 3),
        ("dsh_model_errors_total", 1),
        ("dsh_model_retries_total", 1),
        ("dsh_model_input_tokens_total", 270),
        ("dsh_model_output_tokens_total", 13),
    ]:
        assert value(samples, name, model="local") == expected, (name, samples)
    assert value(samples, "dsh_model_answer_seconds_total", model="local") > 0
    # One span per try, under the subagent's host call.
    spans = await receiver.wait_for(
        lambda: (s := receiver.trace(trace_id)) and len([x for x in s if x.name == "model.request"]) == 3 and s,
        "three model.request spans",
    )
    host_call = one(spans, "subagent.run")
    tries = [s for s in spans if s.name == "model.request"]
    assert all(s.parent_span_id == host_call.span_id for s in tries), [(s.name, s.parent_span_id) for s in spans]
    stats = subprocess.run([dsh_bin, "stats", "--json"], env=keyed_env, capture_output=True, text=True, timeout=30)
    assert stats.returncode == 0, stats.stderr
    models = json.loads(stats.stdout)["models"]
    # Two requests answered (the 503 was retried inside the first).
    assert models["local"]["requests"] == 2 and models["local"]["input_tokens"] == 270, models


async def test_max_tokens_per_owner_per_hour_refuses_the_next_request_of_an_owner(endpoints, dsh_bin, keyed_env, dsh_dirs):
    api = "openai-chat"
    endpoint = endpoints(api, final(api, "first", tokens=(100, 10)), final(api, "never sent"))
    config = endpoint.config("max_tokens_per_owner_per_hour = 100")
    async with session_without_sampling(dsh_bin, keyed_env, dsh_dirs, config) as session:
        first = await session.call_tool("subagent", {"prompt": "one"})
        assert not first.is_error and text(first).startswith("first"), show(None, first)
        request = ("subagent", {"prompt": "two"})
        message = expect_error(request, await session.call_tool(*request), "LIMIT_EXCEEDED")
    assert "used 110 tokens" in message and "max_tokens_per_owner_per_hour = 100" in message, message
    assert len(endpoint.requests) == 1


async def test_an_endless_answer_is_cut_at_32_mib_and_ends_the_run(endpoints, dsh_bin, keyed_env, dsh_dirs):
    api = "openai-chat"
    endpoint = endpoints(api, (200, {}, {"padding": "x" * (40 << 20)}))
    async with session_without_sampling(dsh_bin, keyed_env, dsh_dirs, endpoint.config()) as session:
        request = ("subagent", {"prompt": "x"})
        message = expect_error(request, await session.call_tool(*request), "MODEL_UNAVAILABLE")
    assert "answered more than 32 MiB" in message, message


async def test_tool_arguments_that_are_not_json_are_refused_to_the_model_and_the_run_goes_on(
    endpoints, dsh_bin, keyed_env, dsh_dirs
):
    api = "openai-chat"
    slip = tool_call(api, "bash", {}, "c1")
    slip["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = '{"command": ls'
    endpoint = endpoints(
        api, slip, lambda body: final(api, "saw: " + tool_results(api, body)[0].splitlines()[0])
    )
    async with session_without_sampling(dsh_bin, keyed_env, dsh_dirs, endpoint.config()) as session:
        result = await session.call_tool("subagent", {"prompt": "x"})
    assert not result.is_error, show(None, result)
    assert text(result).startswith("saw: [error] INVALID_ARGUMENTS"), text(result)


async def test_max_in_flight_bounds_the_requests_an_endpoint_gets_at_once(endpoints, dsh_bin, keyed_env, dsh_dirs):
    api = "openai-chat"
    lock, state = threading.Lock(), {"now": 0, "most": 0}

    def slow_answer(body: dict) -> dict:
        with lock:
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
        time.sleep(0.5)
        with lock:
            state["now"] -= 1
        return final(api, "slow answer")

    endpoint = endpoints(api, slow_answer, slow_answer, slow_answer)
    config = endpoint.config().replace("retry_base_ms = 50\n", "retry_base_ms = 50\nmax_in_flight = 1\n")
    async with session_without_sampling(dsh_bin, keyed_env, dsh_dirs, config) as session:
        results = []

        async def ask() -> None:
            results.append(await session.call_tool("subagent", {"prompt": "x"}))

        async with anyio.create_task_group() as group:
            for _ in range(3):
                group.start_soon(ask)
    assert all(not r.is_error and text(r).startswith("slow answer") for r in results), [text(r) for r in results]
    assert len(endpoint.requests) == 3 and state["most"] == 1, state


async def test_a_retry_after_past_max_retry_wait_ms_and_a_request_past_timeout_ms_end_the_run(
    endpoints, dsh_bin, keyed_env, dsh_dirs
):
    api = "openai-chat"
    endpoint = endpoints(api, (429, {"retry-after": "120"}, {"error": {"message": "come back later"}}))
    async with session_without_sampling(dsh_bin, keyed_env, dsh_dirs, endpoint.config()) as session:
        request = ("subagent", {"prompt": "x"})
        message = expect_error(request, await session.call_tool(*request), "MODEL_UNAVAILABLE")
    assert "asks to wait 120 s, past max_retry_wait_ms (60000 ms)" in message, message
    assert len(endpoint.requests) == 1

    def stuck(body: dict) -> dict:
        time.sleep(3)
        return final(api, "too late")

    endpoint = endpoints(api, stuck)
    config = endpoint.config().replace("retry_base_ms = 50\n", "retry_base_ms = 50\ntimeout_ms = 300\nmax_retries = 0\n")
    async with session_without_sampling(dsh_bin, keyed_env, dsh_dirs, config) as session:
        message = expect_error(request, await session.call_tool(*request), "MODEL_UNAVAILABLE")
    assert "no answer within 300 ms" in message and "after 1 tries" in message, message
