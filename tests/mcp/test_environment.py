"""The environment a terminal's shell gets (`[process.env]` in dsh.toml), seen through
`dsh serve`: started with the HTTP bearer token and a cloud secret in its environment,
a terminal's `env` shows neither, but PATH, HOME and LANG; an `include`d secret-looking
variable is passed and `set` gives its value; `inherit = "none"` drops an ordinary
variable and keeps PATH. (The `bash` tool and background jobs: tests/e2e/environment.rs.)
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
from tool_results import call, show, text

pytestmark = pytest.mark.anyio

OPENED_RE = re.compile(r"\Aopened (?P<id>term-\d+) ")
SETTLED_RE = re.compile(r"\[settled: (?P<how>quiet|pattern|timeout|exited); cursor: \d+\]\Z")

HOST_VARIABLES = {
    "DSH_HTTP_TOKEN": "bearer-not-for-commands",
    "AWS_SECRET_ACCESS_KEY": "aws-not-for-commands",
    "HOME": "/home-of-the-environment-test",
    "LANG": "C.UTF-8",
    "ENV_TEST_ORDINARY": "ordinary-value",
    "ENV_TEST_SERVICE_TOKEN": "passed-on-purpose",
}


async def terminal_environment(session: Any, out: Path) -> dict[str, str]:
    """Opens a terminal, has its shell write `env -0` to `out`, and returns it as a dict."""
    result = await call(session, "terminal_open", {})
    assert result.is_error is False, show(("terminal_open", {}), result)
    opened = OPENED_RE.match(text(result))
    assert opened, show(("terminal_open", {}), result)
    args = {
        "id": opened["id"],
        "input": f"env -0 > {out}; echo env-$((40+2))-written",
        "wait": {"pattern": "env-42-written", "timeout_ms": 10000},
    }
    result = await call(session, "terminal_send", args)
    assert result.is_error is False, show(("terminal_send", args), result)
    settled = SETTLED_RE.search(text(result))
    assert settled and settled["how"] == "pattern", show(("terminal_send", args), result)
    entries = out.read_bytes().decode().split("\0")
    return dict(entry.split("=", 1) for entry in entries if entry)


def assert_no_secret_of_dsh(seen: dict[str, str]) -> None:
    for secret in ("DSH_HTTP_TOKEN", "AWS_SECRET_ACCESS_KEY", "DSH_STATE_DIR", "DSH_WORKDIR"):
        assert secret not in seen, f"{secret} reached the terminal: {sorted(seen)}"


async def test_a_terminal_gets_path_home_lang_and_no_secret_of_dsh(open_stdio_session, dsh_env, tmp_path):
    dsh_env.update(HOST_VARIABLES)
    config = '[process.env]\ninclude = ["ENV_TEST_SERVICE_TOKEN"]\n[process.env.set]\nENV_TEST_SET = "set-value"\n'
    async with open_stdio_session(config=config) as session:
        seen = await terminal_environment(session, tmp_path / "env.bin")
    assert_no_secret_of_dsh(seen)
    assert seen.get("PATH") == os.environ["PATH"], sorted(seen)
    assert seen.get("HOME") == HOST_VARIABLES["HOME"], sorted(seen)
    assert seen.get("LANG") == "C.UTF-8", sorted(seen)
    assert seen.get("ENV_TEST_ORDINARY") == "ordinary-value", sorted(seen)
    assert seen.get("ENV_TEST_SERVICE_TOKEN") == "passed-on-purpose", sorted(seen)
    assert seen.get("ENV_TEST_SET") == "set-value", sorted(seen)


async def test_a_terminal_under_inherit_none_keeps_path_and_drops_an_ordinary_variable(
    open_stdio_session, dsh_env, tmp_path
):
    dsh_env.update(HOST_VARIABLES)
    async with open_stdio_session(config='[process.env]\ninherit = "none"\n') as session:
        seen = await terminal_environment(session, tmp_path / "env.bin")
    assert_no_secret_of_dsh(seen)
    assert "ENV_TEST_ORDINARY" not in seen, sorted(seen)
    assert "ENV_TEST_SERVICE_TOKEN" not in seen, sorted(seen)
    assert seen.get("PATH") == os.environ["PATH"], sorted(seen)
    assert seen.get("LANG") == "C.UTF-8", sorted(seen)
