"""MCP 2026-07-28 (the stateless revision) over stdio, beside the 2025 handshake.

Round trips: a guard's ask, and a plugin's sampling and elicitation (the conformance
plugin, as `test_client_asks.py` drives it over the handshake), each an `input_required`
answered by the SDK's callbacks on the retry.

The official Python SDK's `Client` pinned to 2026-07-28 and in its default mode (which
probes `server/discover` first): tools listed with cache hints, bash, a REPL opened in one
request and read in a later one (over stdio the connection is the owner whatever the
revision), and requests the revision refuses (no `_meta`, an unsupported version) answered
with its errors and nothing run.
"""

from __future__ import annotations

import json
import time
import warnings

import pytest
from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters

from conftest import REQUEST_TIMEOUT, _config_args, dsh_copy

pytestmark = pytest.mark.anyio

MODERN = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
}


def _params(dsh_bin, dsh_env, dsh_dirs) -> StdioServerParameters:
    return StdioServerParameters(
        command=dsh_bin, args=["serve", *_config_args(dsh_dirs, None)], env=dsh_env, cwd=str(dsh_dirs.work)
    )


def _text(result) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


async def test_a_client_pinned_to_2026_07_28_is_served_and_keeps_a_repl_across_requests(dsh_bin, dsh_env, dsh_dirs):
    warnings.filterwarnings("ignore")
    async with Client(_params(dsh_bin, dsh_env, dsh_dirs), mode=MODERN, read_timeout_seconds=REQUEST_TIMEOUT) as client:
        assert client.protocol_version == MODERN
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert {"bash", "terminal_open", "terminal_send", "job_output"} <= names, sorted(names)
        result = await client.call_tool("bash", {"command": "echo modern-$((6*7))", "description": "x"})
        assert "modern-42" in _text(result), _text(result)
        opened = _text(await client.call_tool("terminal_open", {}))
        session = next(word.strip(".,:;`'\"()") for word in opened.split() if word.strip(".,:;`'\"()").startswith("term-"))
        await client.call_tool(
            "terminal_send", {"id": session, "input": "python3 -q", "wait": {"pattern": ">>> ", "timeout_ms": 10000}}
        )
        await client.call_tool("terminal_send", {"id": session, "input": "x = 41", "wait": {"quiet_ms": 300}})
        answer = await client.call_tool(
            "terminal_send", {"id": session, "input": "print(x + 1)", "wait": {"pattern": "42", "timeout_ms": 10000}}
        )
        assert "42" in _text(answer), _text(answer)


async def test_the_sdks_default_mode_lands_on_2026_07_28_without_the_handshake(dsh_bin, dsh_env, dsh_dirs):
    warnings.filterwarnings("ignore")
    async with Client(_params(dsh_bin, dsh_env, dsh_dirs), read_timeout_seconds=REQUEST_TIMEOUT) as client:
        assert client.protocol_version == MODERN


def test_discover_lists_both_eras_and_lists_carry_cache_hints(raw_stdio_server):
    server = raw_stdio_server()
    server.send({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": META}})
    discovered = server.receive_response(1)["result"]
    assert discovered["supportedVersions"][0] == MODERN, discovered
    assert "2025-11-25" in discovered["supportedVersions"], discovered
    assert discovered["resultType"] == "complete", discovered
    server.send({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": META}})
    listed = server.receive_response(2)["result"]
    assert listed["resultType"] == "complete" and listed["cacheScope"] == "private", {
        k: v for k, v in listed.items() if k != "tools"
    }
    assert "ttlMs" in listed, listed.keys()


def test_a_2026_request_missing_its_meta_or_naming_an_unknown_version_runs_nothing(raw_stdio_server, markers, procs):
    server = raw_stdio_server()
    server.send({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": META}})
    server.receive_response(1)
    marker = markers()
    call = {"name": "bash", "arguments": {"command": f"sleep {marker}", "description": "x"}}
    server.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call})
    missing = server.receive_response(2)
    assert missing["error"]["code"] == -32602 and "_meta" in missing["error"]["message"], missing
    unknown = dict(META, **{"io.modelcontextprotocol/protocolVersion": "2099-01-01"})
    server.send({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": dict(call, _meta=unknown)})
    refused = server.receive_response(3)
    assert refused["error"]["code"] == -32022, refused
    assert MODERN in refused["error"]["data"]["supported"], refused
    assert procs.matching(marker) == [], "a refused request started its command"


# --------------------------------------------------------------------------- round trips

ASKING = '[pipeline]\nguards = ["ask_git_push"]\n'
PUSH = {"command": "echo would-push; git push origin main 2>/dev/null; true", "description": "push"}


def _asking_params(dsh_bin, dsh_env, dsh_dirs, config: str = ASKING) -> StdioServerParameters:
    return StdioServerParameters(
        command=dsh_bin, args=["serve", *_config_args(dsh_dirs, config)], env=dsh_env, cwd=str(dsh_dirs.work)
    )


async def test_a_guards_ask_is_a_round_trip_and_the_answer_decides(dsh_bin, dsh_env, dsh_dirs):
    from mcp import types

    warnings.filterwarnings("ignore")
    asked: list[str] = []
    answers = ["decline", "accept"]

    async def answer(context, params):
        asked.append(getattr(params, "message", ""))
        return types.ElicitResult(action=answers.pop(0), content={})

    async with Client(
        _asking_params(dsh_bin, dsh_env, dsh_dirs),
        mode=MODERN,
        elicitation_callback=answer,
        read_timeout_seconds=REQUEST_TIMEOUT,
    ) as client:
        declined = await client.call_tool("bash", PUSH)
        assert declined.is_error and "DENIED" in _text(declined), _text(declined)
        assert "would-push" not in _text(declined), _text(declined)
        accepted = await client.call_tool("bash", PUSH)
        assert not accepted.is_error and "would-push" in _text(accepted), _text(accepted)
    assert len(asked) == 2 and all("git push" in a and "ask_git_push" in a for a in asked), asked


async def test_a_client_without_elicitation_is_denied_without_a_round_trip(dsh_bin, dsh_env, dsh_dirs):
    warnings.filterwarnings("ignore")
    async with Client(
        _asking_params(dsh_bin, dsh_env, dsh_dirs), mode=MODERN, read_timeout_seconds=REQUEST_TIMEOUT
    ) as client:
        result = await client.call_tool("bash", PUSH)
    assert result.is_error and "approval required" in _text(result), _text(result)
    assert "would-push" not in _text(result), _text(result)


def _ask(server, request_id: int, marker: str, extra: dict | None = None) -> dict:
    meta = dict(META)
    meta["io.modelcontextprotocol/clientCapabilities"] = {"elicitation": {"form": {}}}
    params = {
        "_meta": meta,
        "name": "bash",
        "arguments": {"command": f"echo ran-{marker}; git push origin main 2>/dev/null; true", "description": "x"},
    }
    params.update(extra or {})
    server.send({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params})
    return server.receive_response(request_id)


def test_a_forged_replayed_or_foreign_request_state_runs_nothing(raw_stdio_server, markers):
    server = raw_stdio_server(ASKING)
    marker = markers()
    first = _ask(server, 1, marker)["result"]
    assert first["resultType"] == "input_required", first
    state = first["requestState"]
    question = first["inputRequests"]["input"]
    assert question["method"] == "elicitation/create" and "git push" in question["params"]["message"], question
    accept = {"input": {"action": "accept", "content": {}}}
    # Forged (its MAC altered), and another call's (other arguments): refused, nothing run.
    forged = state[:-4] + ("0000" if not state.endswith("0000") else "1111")
    refused = _ask(server, 2, marker, {"requestState": forged, "inputResponses": accept})
    assert refused["error"]["code"] == -32602 and "requestState" in refused["error"]["message"], refused
    other = _ask(server, 3, marker + "0", {"requestState": state, "inputResponses": accept})
    assert other["error"]["code"] == -32602, other
    # The real retry runs the call once; a replay of it is refused.
    done = _ask(server, 4, marker, {"requestState": state, "inputResponses": accept})["result"]
    assert done["resultType"] == "complete" and f"ran-{marker}" in done["content"][0]["text"], done
    replayed = _ask(server, 5, marker, {"requestState": state, "inputResponses": accept})
    assert replayed["error"]["code"] == -32602 and "used already" in replayed["error"]["message"], replayed


def test_a_call_nobody_retries_is_denied_after_the_wait_and_its_state_refused(raw_stdio_server, markers, event_log):
    server = raw_stdio_server(ASKING + "[serve]\napproval_timeout_ms = 1500\n")
    marker = markers()
    first = _ask(server, 1, marker)["result"]
    state = first["requestState"]
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        results = [e for e in event_log.events() if e.get("event") == "tool/result"]
        if results:
            break
        time.sleep(0.2)
    assert results and results[-1]["code"] == "DENIED", event_log.dump()
    late = _ask(server, 2, marker, {"requestState": state, "inputResponses": {"input": {"action": "accept"}}})
    assert late["error"]["code"] == -32602 and "ran out" in late["error"]["message"], late
    assert [e["code"] for e in event_log.events() if e.get("event") == "tool/result"] == ["DENIED"], event_log.dump()


async def test_a_plugin_asks_the_model_and_the_user_by_round_trips(dsh_bin, dsh_env, dsh_dirs, tmp_path):
    from test_client_asks import ELICITATION, GRANTS, SAMPLING, Client as Scripted, plugins_dir

    warnings.filterwarnings("ignore")
    scripted = Scripted()
    params = StdioServerParameters(
        command=dsh_bin,
        args=["--plugins", str(plugins_dir(tmp_path)), "serve", *_config_args(dsh_dirs, GRANTS)],
        env=dsh_env,
        cwd=str(dsh_dirs.work),
    )
    async with Client(params, mode=MODERN, read_timeout_seconds=REQUEST_TIMEOUT, **scripted.callbacks()) as client:
        sampled = await client.call_tool(*SAMPLING)
        assert not sampled.is_error, _text(sampled)
        assert _text(sampled) == "LLM response: This is a test response from the client", _text(sampled)
        elicited = await client.call_tool(*ELICITATION)
        assert not elicited.is_error, _text(elicited)
        said = _text(elicited)
        assert said.startswith("User response: action: accept, content: "), said
        assert json.loads(said.split("content: ", 1)[1]) == {"username": "testuser", "email": "test@example.com"}
    [request] = scripted.samplings
    assert request.max_tokens == 100 and not request.tools, request
    [form] = scripted.forms
    assert form.message == "Please provide your information", form


async def test_a_2026_client_that_declared_neither_gets_the_unavailable_errors(dsh_bin, dsh_env, dsh_dirs, tmp_path):
    from test_client_asks import ELICITATION, GRANTS, SAMPLING, plugins_dir

    warnings.filterwarnings("ignore")
    params = StdioServerParameters(
        command=dsh_bin,
        args=["--plugins", str(plugins_dir(tmp_path)), "serve", *_config_args(dsh_dirs, GRANTS)],
        env=dsh_env,
        cwd=str(dsh_dirs.work),
    )
    async with Client(params, mode=MODERN, read_timeout_seconds=REQUEST_TIMEOUT) as client:
        sampled = await client.call_tool(*SAMPLING)
        assert sampled.is_error and "SAMPLING_UNAVAILABLE" in _text(sampled), _text(sampled)
        elicited = await client.call_tool(*ELICITATION)
        assert elicited.is_error and "ELICITATION_UNAVAILABLE" in _text(elicited), _text(elicited)


def _listing_model(dsh_dirs):
    """A scripted model that has the subagent run `ls` in a workspace holding one file,
    then answers with what it saw; and the client options that lend it to dsh."""
    from test_subagent import LS, SAMPLING_WITH_TOOLS, Model, answer, use

    warnings.filterwarnings("ignore")
    (dsh_dirs.work / "marker-file.txt").write_text("x\n")
    model = Model(use("bash", LS), lambda p: answer("the workspace holds " + model.tool_results(1)[0].strip()))
    options = {"read_timeout_seconds": 30, "sampling_callback": model, "sampling_capabilities": SAMPLING_WITH_TOOLS}
    return model, options


async def test_a_foreground_subagent_asks_the_clients_model_by_round_trips(dsh_bin, dsh_env, dsh_dirs):
    model, options = _listing_model(dsh_dirs)
    async with Client(_params(dsh_bin, dsh_env, dsh_dirs), mode=MODERN, **options) as client:
        result = await client.call_tool("subagent", {"prompt": "What files are in the workspace?"})
    words = _text(result)
    assert not result.is_error, words
    assert words.startswith("the workspace holds marker-file.txt"), words
    assert "answered in 2 turns" in words, words
    offered = {tool.name for tool in model.requests[0].tools or []}
    assert "bash" in offered and "subagent" not in offered, offered


def test_a_call_waiting_at_a_guards_question_survives_an_upgrade(
    raw_stdio_server, markers, event_log, dsh_bin, dsh_env, dsh_dirs, tmp_path
):
    """`dsh upgrade` hands a call parked at a guard's question to the next binary (its
    state is sealed under the key in the state directory, which both read): the retry runs
    it there with its answer, once; a declined one runs nothing. An upgrade refused (a
    binary that exits) takes the calls back: their retries run them in the old binary. The
    drain does not wait for retries that cannot come while it runs (`upgrade_drain_ms` is
    longer than the test's patience for the upgrade)."""
    import stat

    from test_upgrade import server_pid, upgrade

    server = raw_stdio_server(ASKING + "[serve]\nupgrade_drain_ms = 120000\n")
    accept = {"input": {"action": "accept", "content": {}}}
    decline = {"input": {"action": "decline"}}
    parked = {}
    for name in ("refused", "accepted", "declined"):
        marker = markers()
        first = _ask(server, len(parked) + 1, marker)["result"]
        assert first["resultType"] == "input_required", first
        parked[name] = (marker, first["requestState"])
    pid = server_pid(dsh_dirs.state)
    exits = tmp_path / "exits"
    exits.write_text("#!/bin/sh\necho 'no such luck' >&2\nexit 3\n")
    exits.chmod(exits.stat().st_mode | stat.S_IXUSR)
    refused = upgrade(dsh_bin, dsh_env, "--binary", str(exits), timeout=30)
    assert refused.returncode != 0 and "no such luck" in refused.stderr, refused.stderr
    marker, state = parked["refused"]
    done = _ask(server, 10, marker, {"requestState": state, "inputResponses": accept})["result"]
    assert done["resultType"] == "complete" and f"ran-{marker}" in done["content"][0]["text"], done

    copy = dsh_copy(dsh_bin, tmp_path / "dsh-next")
    upgraded = upgrade(dsh_bin, dsh_env, "--binary", str(copy), timeout=30)
    assert upgraded.returncode == 0, upgraded.stderr
    marker, state = parked["accepted"]
    done = _ask(server, 11, marker, {"requestState": state, "inputResponses": accept})["result"]
    assert done["resultType"] == "complete" and f"ran-{marker}" in done["content"][0]["text"], done
    replayed = _ask(server, 12, marker, {"requestState": state, "inputResponses": accept})
    assert replayed["error"]["code"] == -32602 and "used already" in replayed["error"]["message"], replayed
    marker, state = parked["declined"]
    denied = _ask(server, 13, marker, {"requestState": state, "inputResponses": decline})["result"]
    assert "DENIED" in json.dumps(denied) and f"ran-{marker}" not in json.dumps(denied), denied
    assert server_pid(dsh_dirs.state) == pid
    key = dsh_dirs.state / "round-trips.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and key.stat().st_size == 32
    codes = [e.get("code") for e in event_log.events() if e.get("event") == "tool/result"]
    # Each parked call ended once in the binary that handed it on (the refused upgrade's
    # take-back ends none), then ran once on its retry: two ran, one denied.
    assert codes.count("DENIED") >= 1 and len([c for c in codes if c in (None, "OK")]) == 2, event_log.dump()


async def test_a_background_subagent_asks_the_clients_model_through_job_output_round_trips(dsh_bin, dsh_env, dsh_dirs):
    """A background subagent asks the model only while its owner waits on it: under
    2026-07-28 the `job_output {wait_ms}` request lends its round trips, so each question
    comes back as that request's `input_required` and the SDK's retry carries the answer."""
    import re

    model, options = _listing_model(dsh_dirs)
    async with Client(_params(dsh_bin, dsh_env, dsh_dirs), mode=MODERN, **options) as client:
        started = _text(await client.call_tool("subagent", {"prompt": "What files?", "run_in_background": True}))
        job = re.search(r"\bsubagent-\d+\b", started).group(0)
        assert not model.requests, "nobody waits on it yet: the model is not asked"
        transcript, since = "", 0
        for _ in range(20):
            read = _text(await client.call_tool("job_output", {"id": job, "since": since, "wait_ms": 5000}))
            status = re.search(r"\[(subagent-\d+): ([^;\]]*); next cursor: (\d+)\]\s*\Z", read)
            assert status, read
            transcript += read[: status.start()]
            since = int(status.group(3))
            if status.group(2).startswith("exited"):
                break
    assert status.group(2) == "exited with code 0", read
    assert "[turn 2] answer: the workspace holds marker-file.txt" in transcript, transcript
    assert len(model.requests) == 2, model.requests


def test_a_call_waiting_in_a_plugins_sampling_is_drained_at_an_upgrade_and_its_state_refused(
    raw_stdio_server, event_log, dsh_bin, dsh_env, tmp_path
):
    """A call parked in a plugin's sampling has run part way and cannot be run again: the
    upgrade's drain waits for it (`upgrade_drain_ms`), cancels it, and its state is refused
    by the next binary."""
    from test_client_asks import GRANTS, SAMPLING, plugins_dir
    from test_upgrade import upgrade

    dsh_env["DSH_PLUGINS"] = str(plugins_dir(tmp_path))
    server = raw_stdio_server(GRANTS + "[serve]\nupgrade_drain_ms = 300\n")
    meta = dict(META)
    meta["io.modelcontextprotocol/clientCapabilities"] = {"sampling": {}}
    name, arguments = SAMPLING
    params = {"_meta": meta, "name": name, "arguments": arguments}
    server.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
    first = server.receive_response(1)["result"]
    assert first["resultType"] == "input_required", first
    assert first["inputRequests"]["input"]["method"] == "sampling/createMessage", first
    copy = dsh_copy(dsh_bin, tmp_path / "dsh-next")
    upgraded = upgrade(dsh_bin, dsh_env, "--binary", str(copy), timeout=30)
    assert upgraded.returncode == 0, upgraded.stderr
    answer = {"role": "assistant", "content": {"type": "text", "text": "late"}, "model": "m", "stopReason": "endTurn"}
    retry = dict(params, requestState=first["requestState"], inputResponses={"input": answer})
    server.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": retry})
    refused = server.receive_response(2)
    assert refused["error"]["code"] == -32602 and "requestState" in refused["error"]["message"], refused
    codes = [e.get("code") for e in event_log.events() if e.get("event") == "tool/result"]
    assert codes == ["CANCELLED"], event_log.dump()
