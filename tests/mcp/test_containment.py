"""Containment when an owner goes away: an HTTP session that started a background job and
a terminal, each with escapees (`setsid cmd &`, `setsid -f`, a double-forking daemon,
`nohup ... & disown`, `( cmd & )`), is closed (DELETE); once its `[serve]
owner_grace_ms` has passed, nothing it started is alive, in `cgroup` and in `subreaper`
mode. The other containment attacks are Rust end-to-end tests
(tests/e2e/containment.rs).
"""

from __future__ import annotations

import re
import time

import anyio
import pytest
from tool_results import call, show, text

pytestmark = pytest.mark.anyio

STARTED_RE = re.compile(r"\Astarted background job (bash-\d+)\b")
OPENED_RE = re.compile(r"\Aopened (?P<id>term-\d+) ")
GRACE_MS = 300
# "Nothing left one second later", with room for a kill to show in /proc.
GONE_WITHIN = 1.5


def escapes(sleeps: list[str]) -> str:
    """One line of shell starting five escapees, one `sleep` each."""
    a, b, c, d, e = sleeps
    daemon = (
        "import os; os.fork()==0 and (os.setsid(), os.fork()==0 and "
        f'os.execvp("sleep", ["sleep", "{c}"]))'
    )
    return (
        f"setsid sleep {a} >/dev/null 2>&1 & "
        f"setsid -f sleep {b} >/dev/null 2>&1; "
        f"python3 -c '{daemon}' >/dev/null 2>&1; "
        f"nohup sleep {d} >/dev/null 2>&1 & disown; "
        f"( sleep {e} >/dev/null 2>&1 & )"
    )


async def wait_until_running(procs, marker: str, sleeps: list[str], timeout: float = 20) -> None:
    """Waits until a live `sleep ARG` runs for every ARG in `sleeps`."""
    deadline = time.monotonic() + timeout
    while True:
        alive = [cmdline for _, cmdline in procs.matching(marker)]
        missing = [s for s in sleeps if f"sleep {s}" not in alive]
        if not missing:
            return
        if time.monotonic() >= deadline:
            pytest.fail(f"sleep {missing} never started within {timeout}s; alive: {alive}")
        await anyio.sleep(0.02)


@pytest.mark.parametrize("mode", ["cgroup", "subreaper"])
async def test_escapees_of_a_gone_owner_die_after_its_grace_period(
    mode, start_http_server, open_http_session, markers, procs, text_of
):
    server = start_http_server(config=f'[serve]\nowner_grace_ms = {GRACE_MS}\n\n[process]\ncontainment = "{mode}"\n')
    marker = markers("3")
    sleeps = [f"{marker}{k}" for k in range(7)]

    async with open_http_session(server) as leaving:
        args = {
            "command": f"{escapes(sleeps[1:6])}; sleep {sleeps[0]}",
            "description": "escapes from a job",
            "run_in_background": True,
        }
        result = await call(leaving, "bash", args)
        assert result.is_error is False and STARTED_RE.match(text(result)), show(("bash", args), result)

        result = await call(leaving, "terminal_open", {})
        opened = OPENED_RE.match(text(result))
        assert result.is_error is False and opened, show(("terminal_open", {}), result)
        send = {
            "id": opened["id"],
            "input": f'setsid -f sleep {sleeps[6]} >/dev/null 2>&1; echo laun""ched',
            "wait": {"pattern": "launched", "timeout_ms": 20000},
        }
        result = await call(leaving, "terminal_send", send)
        assert result.is_error is False, show(("terminal_send", send), result)

        await wait_until_running(procs, marker, sleeps)
        closed_at = time.monotonic()  # leaving the block sends DELETE: the owner is gone

    took = await procs.wait_until_gone(marker, timeout=GRACE_MS / 1000 + GONE_WITHIN)
    assert server.proc.poll() is None, f"the server exited\n{server.stderr()}"
    since_close = time.monotonic() - closed_at
    assert since_close >= GRACE_MS / 1000 * 0.8, (
        f"the owner's processes were gone {since_close:.2f}s after it left ({took:.2f}s of polling): "
        f"no {GRACE_MS} ms grace"
    )

    async with open_http_session(server) as other:
        result = await other.call_tool("bash", {"command": "echo still-here", "description": "d"})
        assert text_of(result) == "still-here\n[exit code: 0]", result
