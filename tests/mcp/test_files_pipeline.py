"""The file tools pass dsh's pipeline like any tool, over MCP.

Covers: a `[gate]` rule by tool and argument that denies writes under `secrets/`, reached
also through `src/../secrets/x` (path arguments are normalized before the gate, so the
rule judges what the tool would touch); the shipped `ask_writes_outside` guard asking
before `write`, `edit` and `apply_patch` write outside `src/` (an MCP client without
elicitation gets "approval required" and nothing is written), also through
`src/../docs/x` and a patch's `*** Move to:`; the `redact_secrets` filter masking a
secret `read` returns, and an `edit` whose `old_string` holds the marker refused (the
model never saw that text) with the file untouched; the event log's `tool/call` and
`tool/result` of a `read`, and `dsh stats` counting the file tools' calls and errors; a
scope that does not list the file tools cannot call them.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
from tool_results import call, expect_error, show, text

pytestmark = pytest.mark.anyio

AWS_KEY = "AKIAIOSFODNN7EXAMPLE"


async def ok(session: Any, tool: str, args: dict[str, Any]) -> str:
    result = await call(session, tool, args)
    assert result.is_error is False, show((tool, args), result)
    return text(result)


async def refused(session: Any, tool: str, args: dict[str, Any], code: str) -> str:
    return expect_error((tool, args), await call(session, tool, args), code)


GATE = """
[[gate.rules]]
action = "deny"
tool = "*"
arg = "path"
pattern = '^secrets(/|$)'
reason = "nothing under secrets/ is touched by the file tools"
"""


async def test_a_gate_rule_sees_the_normalized_path(open_stdio_session, dsh_dirs):
    (dsh_dirs.work / "src").mkdir()
    (dsh_dirs.work / "secrets").mkdir()
    async with open_stdio_session(config=GATE) as session:
        for path in ("secrets/x.txt", "src/../secrets/x.txt", "./secrets//x.txt", "src/./../secrets/x.txt"):
            message = await refused(session, "write", {"path": path, "content": "leak\n"}, "DENIED")
            assert "nothing under secrets/" in message, message
        await refused(session, "read", {"path": "src/../secrets"}, "DENIED")
        await ok(session, "write", {"path": "src/ok.txt", "content": "fine\n"})
    assert not (dsh_dirs.work / "secrets" / "x.txt").exists()
    assert (dsh_dirs.work / "src" / "ok.txt").read_text() == "fine\n"


GUARD = """
[pipeline]
guards = ["ask_writes_outside"]
[plugins.ask_writes_outside.settings]
allow = ["src/**"]
"""


async def test_the_example_guard_asks_before_writing_outside_src(open_stdio_session, dsh_dirs, event_log):
    work = dsh_dirs.work
    (work / "src").mkdir()
    (work / "src" / "lib.rs").write_text("fn a() {}\n")
    (work / "README.md").write_text("# readme\n")
    async with open_stdio_session(config=GUARD) as session:
        # Inside src/: no question.
        await ok(session, "write", {"path": "src/new.rs", "content": "fn b() {}\n"})
        await ok(session, "read", {"path": "src/lib.rs"})
        await ok(session, "edit", {"path": "src/lib.rs", "old_string": "fn a", "new_string": "fn c"})
        # Reads anywhere are not writes.
        await ok(session, "read", {"path": "README.md"})
        # Outside: the guard asks, and a client without elicitation has no one to answer.
        for tool, args in (
            ("write", {"path": "docs/x.md", "content": "x\n"}),
            ("write", {"path": "src/../docs/x.md", "content": "x\n"}),
            ("edit", {"path": "README.md", "old_string": "readme", "new_string": "changed"}),
            (
                "apply_patch",
                {"patch": "*** Begin Patch\n*** Add File: src/ok.rs\n+ok\n*** Add File: src/../out.txt\n+no\n*** End Patch\n"},
            ),
            (
                "apply_patch",
                {"patch": "*** Begin Patch\n*** Update File: src/new.rs\n*** Move to: moved.rs\n@@\n-fn b() {}\n+fn d() {}\n*** End Patch\n"},
            ),
        ):
            message = await refused(session, tool, args, "DENIED")
            assert message.startswith("approval required: guard ask_writes_outside"), message
    assert not (work / "docs").exists()
    assert not (work / "out.txt").exists() and not (work / "src" / "ok.rs").exists()
    assert not (work / "moved.rs").exists()
    assert (work / "README.md").read_text() == "# readme\n"
    assert (work / "src" / "lib.rs").read_text() == "fn c() {}\n"
    asked = [e for e in event_log.events() if e.get("event") == "approval"]
    assert len(asked) == 5, event_log.dump()


REDACT = """
[pipeline]
filters = ["redact_secrets"]
"""


async def test_a_secret_read_is_redacted_and_an_edit_of_the_marker_refused(open_stdio_session, dsh_dirs):
    target = dsh_dirs.work / "settings.env"
    original = f"REGION=eu\nAWS_ACCESS_KEY_ID={AWS_KEY}\n"
    target.write_text(original)
    async with open_stdio_session(config=REDACT) as session:
        shown = await ok(session, "read", {"path": "settings.env"})
        assert AWS_KEY not in shown, shown
        marker = next(word for word in shown.split("=") if word.startswith("[REDACTED:"))
        marker = marker.split("]")[0] + "]"
        message = await refused(
            session, "edit", {"path": "settings.env", "old_string": f"AWS_ACCESS_KEY_ID={marker}", "new_string": "AWS_ACCESS_KEY_ID=x"},
            "INVALID_ARGUMENTS",
        )
        assert "REDACTED" in message, message
        # An edit that does not touch the hidden text goes ahead, and keeps the secret.
        await ok(session, "edit", {"path": "settings.env", "old_string": "REGION=eu", "new_string": "REGION=us"})
        found = await ok(session, "grep", {"pattern": "AKIA", "output_mode": "content"})
        assert AWS_KEY not in found, found
    assert target.read_text() == original.replace("REGION=eu", "REGION=us")


async def test_file_calls_are_logged_and_counted(open_stdio_session, dsh_bin, dsh_env, dsh_dirs, event_log):
    (dsh_dirs.work / "a.txt").write_text("alpha\n")
    async with open_stdio_session() as session:
        await ok(session, "read", {"path": "a.txt"})
        await ok(session, "read", {"path": "./a.txt"})
        await refused(session, "read", {"path": "missing.txt"}, "NOT_FOUND")
        await ok(session, "grep", {"pattern": "alpha"})
    reads = event_log.calls(lambda e: e.get("tool") == "read")
    assert [e["args"]["path"] for e in reads] == ["a.txt", "./a.txt", "missing.txt"], event_log.dump()
    results = [event_log.result_for(e) for e in reads]
    assert all(results), event_log.dump()
    done = subprocess.run(
        [dsh_bin, "stats", "--json"], env=dsh_env, cwd=dsh_dirs.work, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    tools = json.loads(done.stdout)["tools"]
    assert tools["read"]["calls"] == 3, tools
    assert tools["read"]["errors"] == {"NOT_FOUND": 1}, tools
    assert tools["grep"]["calls"] == 1, tools


SCOPES = """
[scopes]
shell = ["bash"]
"""


def test_a_scope_without_the_file_tools_cannot_call_them(dsh_bin, dsh_env, dsh_dirs, tmp_path):
    (dsh_dirs.work / "a.txt").write_text("alpha\n")
    config = tmp_path / "scopes.toml"
    config.write_text(SCOPES)

    def dsh(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [dsh_bin, "--config", str(config), *args], env=dsh_env, cwd=dsh_dirs.work,
            capture_output=True, text=True, timeout=120,
        )

    listed = {tool["name"] for tool in json.loads(dsh("tools", "--json").stdout)}
    assert {"read", "write", "edit", "apply_patch", "glob", "grep"} <= listed, listed
    listed = {tool["name"] for tool in json.loads(dsh("tools", "--json", "--scope", "shell").stdout)}
    assert listed == {"bash"}, listed
    done = dsh("call", "--scope", "shell", "read", json.dumps({"path": "a.txt"}))
    assert done.returncode == 1 and "alpha" not in done.stdout, (done.stdout, done.stderr)
    assert done.stdout.startswith("UNKNOWN_TOOL"), done.stdout
