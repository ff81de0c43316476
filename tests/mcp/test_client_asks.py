"""A tool plugin asks the caller's client during a call: its model through
`dsh:plugin/sampling` (`sampling/createMessage` without tools) and its user through
`dsh:plugin/elicitation` (`elicitation/create`, form mode). The plugin is
`plugins/conformance`, whose `test_sampling` and `test_elicitation` are the tools the MCP
conformance suite's `tools-call-sampling` and `tools-call-elicitation` scenarios call; the
client here is the Python SDK with `sampling_callback` and `elicitation_callback`, answering
as those scenarios do.

Covered: both over stdio and over HTTP (on the call's own stream); what the client is sent
(the prompt, `maxTokens`, no tools; the form's schema); a decline; a client's error answer
(`DENIED`); a model silent past `[sampling] timeout_ms` (`TIMEOUT`); clients that declared neither (`SAMPLING_UNAVAILABLE`,
`ELICITATION_UNAVAILABLE`); a load refused without each grant, and a guard refused a
grant of either, and so a result filter."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import REQUEST_TIMEOUT, write_config
from mcp import types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from tool_results import expect_error, show, text

pytestmark = pytest.mark.anyio

GRANTS = '[plugins.conformance]\ninterfaces = ["sampling", "elicitation"]\n'


class Client:
    """The client's model and user, scripted as the conformance scenarios answer; records
    what each was asked."""

    def __init__(self, action: str = "accept", refuse: bool = False) -> None:
        self.action = action
        self.refuse = refuse
        self.samplings: list[types.CreateMessageRequestParams] = []
        self.forms: list[types.ElicitRequestParams] = []

    async def model(self, context: Any, params: types.CreateMessageRequestParams) -> Any:
        self.samplings.append(params)
        if self.refuse:
            return types.ErrorData(code=-1, message="the user refused the sampling request")
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text="This is a test response from the client"),
            model="test-model",
            stop_reason="endTurn",
        )

    async def user(self, context: Any, params: types.ElicitRequestParams) -> Any:
        self.forms.append(params)
        content = {"username": "testuser", "email": "test@example.com"} if self.action == "accept" else None
        return types.ElicitResult(action=self.action, content=content)

    def callbacks(self) -> dict[str, Any]:
        return {"sampling_callback": self.model, "elicitation_callback": self.user}


def plugins_dir(tmp_path: Path) -> Path:
    plugins = tmp_path / "plugins"
    plugins.mkdir(exist_ok=True)
    shutil.copy(Path(os.environ["DSH_PLUGIN_WASM_DIR"]) / "conformance.wasm", plugins / "conformance.wasm")
    return plugins


@asynccontextmanager
async def stdio_session(dsh_bin, dsh_env, dsh_dirs, tmp_path, callbacks: dict[str, Any], config: str = ""):
    args = ["--config", str(write_config(dsh_dirs, GRANTS + config)), "--plugins", str(plugins_dir(tmp_path)), "serve"]
    params = StdioServerParameters(command=dsh_bin, args=args, env=dsh_env, cwd=str(dsh_dirs.work))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, read_timeout_seconds=REQUEST_TIMEOUT, **callbacks) as session:
            with anyio.fail_after(REQUEST_TIMEOUT):
                await session.initialize()
            yield session


SAMPLING = ("test_sampling", {"prompt": "Test prompt for sampling"})
ELICITATION = ("test_elicitation", {"message": "Please provide your information"})


async def test_a_plugin_asks_the_client_s_model_and_user_as_the_conformance_scenarios_do(
    dsh_bin, dsh_env, dsh_dirs, tmp_path
):
    client = Client()
    async with stdio_session(dsh_bin, dsh_env, dsh_dirs, tmp_path, client.callbacks()) as session:
        sampled = await session.call_tool(*SAMPLING)
        assert not sampled.is_error, show(SAMPLING, sampled)
        assert text(sampled) == "LLM response: This is a test response from the client", show(SAMPLING, sampled)
        elicited = await session.call_tool(*ELICITATION)
        assert not elicited.is_error, show(ELICITATION, elicited)
        said = text(elicited)
        assert said.startswith("User response: action: accept, content: "), said
        assert json.loads(said.split("content: ", 1)[1]) == {"username": "testuser", "email": "test@example.com"}
    # What the model was sent: the prompt alone (one content block, as the scenario has
    # it), 100 tokens, no tools.
    [request] = client.samplings
    assert request.max_tokens == 100 and not request.tools, request
    [message] = request.messages
    assert message.role == "user" and message.content.text == "Test prompt for sampling", message
    # What the user was shown: the message and the scenario's form.
    [form] = client.forms
    assert form.message == "Please provide your information", form
    schema = form.requested_schema
    assert set(schema["properties"]) == {"username", "email"} and set(schema["required"]) == {"username", "email"}, schema


async def test_a_plugins_max_tokens_are_capped_by_the_sampling_section(dsh_bin, dsh_env, dsh_dirs, tmp_path):
    # The conformance plugin asks for 100 tokens; `[sampling] max_tokens` caps it.
    client = Client()
    async with stdio_session(
        dsh_bin, dsh_env, dsh_dirs, tmp_path, client.callbacks(), "[sampling]\nmax_tokens = 40\n"
    ) as session:
        sampled = await session.call_tool(*SAMPLING)
        assert not sampled.is_error, show(SAMPLING, sampled)
    [request] = client.samplings
    assert request.max_tokens == 40 and not request.tools, request


async def test_a_model_that_does_not_answer_in_sampling_timeout_ms_is_a_timeout(dsh_bin, dsh_env, dsh_dirs, tmp_path):
    # The client's model never answers: `[sampling] timeout_ms` ends the wait, the plugin
    # gets TIMEOUT (its tool says so), and the client is told to stop (a cancellation).
    asked = anyio.Event()

    async def silent(context: Any, params: types.CreateMessageRequestParams) -> Any:
        asked.set()
        await anyio.sleep(60)

    async with stdio_session(
        dsh_bin, dsh_env, dsh_dirs, tmp_path, {"sampling_callback": silent}, "[sampling]\ntimeout_ms = 300\n"
    ) as session:
        started = anyio.current_time()
        with anyio.fail_after(30):
            sampled = await session.call_tool(*SAMPLING)
        waited = anyio.current_time() - started
    assert asked.is_set()
    assert sampled.is_error, show(SAMPLING, sampled)
    assert "TIMEOUT" in text(sampled), show(SAMPLING, sampled)
    assert waited < 30, waited


async def test_a_decline_and_a_refused_sampling_reach_the_plugin(dsh_bin, dsh_env, dsh_dirs, tmp_path):
    client = Client(action="decline", refuse=True)
    async with stdio_session(dsh_bin, dsh_env, dsh_dirs, tmp_path, client.callbacks()) as session:
        declined = await session.call_tool(*ELICITATION)
        assert not declined.is_error, show(ELICITATION, declined)
        assert text(declined) == "User response: action: decline, content: {}", text(declined)
        refused = await session.call_tool(*SAMPLING)
        message = expect_error(SAMPLING, refused, "DENIED")
        assert "refused" in message, message
        # The session goes on.
        again = await session.call_tool(*ELICITATION)
        assert not again.is_error, show(ELICITATION, again)


async def test_a_client_that_declared_neither_gets_structured_unavailable_errors(dsh_bin, dsh_env, dsh_dirs, tmp_path):
    async with stdio_session(dsh_bin, dsh_env, dsh_dirs, tmp_path, {}) as session:
        listed = {tool.name for tool in (await session.list_tools()).tools}
        assert {"test_sampling", "test_elicitation"} <= listed, listed
        message = expect_error(SAMPLING, await session.call_tool(*SAMPLING), "SAMPLING_UNAVAILABLE")
        assert "did not declare sampling" in message, message
        message = expect_error(ELICITATION, await session.call_tool(*ELICITATION), "ELICITATION_UNAVAILABLE")
        assert "did not declare elicitation" in message, message


async def test_over_http_the_client_is_asked_on_the_call_s_stream(start_http_server, tmp_path):
    server = start_http_server(GRANTS, env={"DSH_PLUGINS": str(plugins_dir(tmp_path))})
    client = Client()
    async with create_mcp_http_client(headers=server.auth_headers) as http:
        async with streamable_http_client(server.url, http_client=http) as (read, write):
            async with ClientSession(read, write, read_timeout_seconds=REQUEST_TIMEOUT, **client.callbacks()) as session:
                with anyio.fail_after(REQUEST_TIMEOUT):
                    await session.initialize()
                    sampled = await session.call_tool(*SAMPLING)
                    elicited = await session.call_tool(*ELICITATION)
    assert text(sampled) == "LLM response: This is a test response from the client", show(SAMPLING, sampled)
    assert text(elicited).startswith("User response: action: accept, content: {"), show(ELICITATION, elicited)
    assert len(client.samplings) == 1 and len(client.forms) == 1


def plugin_listing(dsh_bin, dsh_env, dsh_dirs, tmp_path, config: str) -> str:
    done = subprocess.run(
        [dsh_bin, "--config", str(write_config(dsh_dirs, config)), "--plugins", str(plugins_dir(tmp_path)), "plugins"],
        env={"PATH": os.environ["PATH"], **dsh_env},
        cwd=dsh_dirs.work,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.stdout + done.stderr


def test_a_plugin_without_the_grants_is_refused_at_load_and_a_guard_or_a_filter_is_never_granted_them(
    dsh_bin, dsh_env, dsh_dirs, tmp_path
):
    granted = plugin_listing(dsh_bin, dsh_env, dsh_dirs, tmp_path, GRANTS)
    assert "test_sampling" in granted and "refused" not in granted.split("conformance", 1)[1].split("\n", 1)[0], granted
    only_sampling = plugin_listing(
        dsh_bin, dsh_env, dsh_dirs, tmp_path, '[plugins.conformance]\ninterfaces = ["sampling"]\n'
    )
    assert "dsh:plugin/elicitation" in only_sampling and "without a grant" in only_sampling, only_sampling
    assert "test_sampling" not in only_sampling, only_sampling
    guard = plugin_listing(
        dsh_bin,
        dsh_env,
        dsh_dirs,
        tmp_path,
        '[pipeline]\nguards = ["deny_destructive"]\n[plugins.deny_destructive]\ninterfaces = ["log", "sampling"]\n',
    )
    assert "only a tool plugin may ask the caller's client" in guard, guard
    result_filter = plugin_listing(
        dsh_bin,
        dsh_env,
        dsh_dirs,
        tmp_path,
        '[pipeline]\nfilters = ["redact_secrets"]\n[plugins.redact_secrets]\ninterfaces = ["log", "elicitation"]\n',
    )
    assert "only a tool plugin may ask the caller's client" in result_filter, result_filter
