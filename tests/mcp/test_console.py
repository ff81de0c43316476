"""The operator console (`dsh serve --http` with `DSH_CONSOLE_TOKEN`, at `/console`), driven
in a real browser (Debian's Chromium through Playwright) while an agent (the MCP Python
SDK over HTTP) works on the same server.

Covers: logging in with the operator token and the refusals (no cookie, a wrong token,
an MCP token, a forged cookie, a request from another origin); an agent's terminal shown
live (a Python REPL's prompt and output); seven terminals at once (more than the browser's
six connections to the server: the page watches them all on one stream); a background
job's output streamed as it is printed; a guard's ask answered in the page (approve runs the call, deny denies it, the
agent's client never being asked), with the decisions in the call feed and the event
log; taking over a terminal (the operator types into the REPL, the agent's sends fail
with TERMINAL_HELD until the operator releases it).

`DSH_CONSOLE_SCREENSHOT=PATH` saves a 1280x800 screenshot of the page (a REPL, a job's
output, a pending approval and the call feed) to PATH: that is `docs/src/console.png`.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from conftest import HttpServer
from test_guards import PUSH
from test_jobs import start_job
from test_terminals import OPENED_RE, send, settle_shell
from tool_results import call, expect_error, show, text

pytestmark = pytest.mark.anyio

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT = {"width": 1280, "height": 800}
ASK_PUSH = '[pipeline]\nguards = ["ask_git_push"]\n'
CONSOLE_HEADERS = {"X-Dsh-Console": "1"}
# How long the page gets to show something the server has (it polls the state every second).
PAGE_TIMEOUT = 10.0


# --------------------------------------------------------------------------- helpers


def start_console(start_http_server, config: str | None = None) -> tuple[HttpServer, str]:
    """A `dsh serve --http` with the console on; returns it and the operator token."""
    token = secrets.token_hex(24)
    return start_http_server(config, env={"DSH_CONSOLE_TOKEN": token}), token


def base_url(server: HttpServer) -> str:
    return f"http://127.0.0.1:{server.port}"


async def owner_of_session(session: Any, event_log: Any) -> str:
    """The owner the server gave an MCP session: the `owner` of its first call."""
    marker = f"whoami-{secrets.token_hex(4)}"
    result = await call(session, "bash", {"command": f"echo {marker}", "description": "who am I"})
    assert not result.is_error, show(None, result)
    calls = event_log.calls_with_command_containing(marker)
    assert len(calls) == 1 and calls[0].get("owner"), event_log.dump()
    return calls[0]["owner"]


def describe(response: httpx2.Response) -> str:
    request = response.request
    return f"{request.method} {request.url} -> HTTP {response.status_code} {dict(response.headers)}\n{response.text[:1000]}"


def set_cookies(response: httpx2.Response) -> list[str]:
    return response.headers.get_list("set-cookie")


async def log_in_raw(http: httpx2.AsyncClient, server: HttpServer, token: str) -> httpx2.Response:
    return await http.post(
        f"{base_url(server)}/console/login",
        data={"token": token},
        headers={"Origin": base_url(server)},
    )


class Console:
    """The console open in a browser page."""

    def __init__(self, page: Any, server: HttpServer) -> None:
        self.page = page
        self.server = server
        self.errors: list[str] = []

    def terminal(self, owner: str, term: str) -> str:
        return f'.terminal[data-owner="{owner}"][data-id="{term}"]'

    def job(self, owner: str, job: str) -> str:
        return f'.job[data-owner="{owner}"][data-id="{job}"]'

    async def text_of(self, selector: str) -> str:
        """The visible text of the first match (non-breaking spaces as spaces), or '' if none."""
        found = self.page.locator(selector)
        if await found.count() == 0:
            return ""
        return (await found.first.inner_text()).replace("\u00a0", " ")

    async def wait_text(
        self, selector: str, ok: Callable[[str], bool], what: str, timeout: float = PAGE_TIMEOUT
    ) -> str:
        """Polls the text of `selector` until `ok(text)`; fails with what the page shows."""
        deadline = time.monotonic() + timeout
        while True:
            shown = await self.text_of(selector)
            if ok(shown):
                return shown
            if time.monotonic() >= deadline:
                await self.fail(f"timed out after {timeout}s waiting for {what} in {selector}; it shows:\n{shown!r}")
            await anyio.sleep(0.1)

    async def wait_for(self, selector: str, what: str, timeout: float = PAGE_TIMEOUT, state: str = "visible") -> Any:
        try:
            await self.page.wait_for_selector(selector, state=state, timeout=timeout * 1000)
        except Exception as e:  # Playwright's TimeoutError
            await self.fail(f"timed out after {timeout}s waiting for {what} ({selector}): {e}")
        return self.page.locator(selector).first

    async def fail(self, message: str) -> None:
        state = ""
        try:
            state = await self.page.evaluate(
                "fetch('/console/api/state', {headers: {'X-Dsh-Console': '1'}}).then(r => r.text())"
            )
        except Exception as e:
            state = f"(could not read the state: {e})"
        pytest.fail(
            f"{message}\npage errors: {self.errors}\n/console/api/state: {state[:3000]}\n{self.server.stderr()}",
            pytrace=False,
        )

    async def screen_lines(self, owner: str, term: str) -> list[str]:
        rows = await self.text_of(f"{self.terminal(owner, term)} .xterm-rows")
        return [line.rstrip() for line in rows.split("\n")]

    async def wait_screen(self, owner: str, term: str, ok: Callable[[list[str]], bool], what: str) -> list[str]:
        deadline = time.monotonic() + PAGE_TIMEOUT
        while True:
            lines = await self.screen_lines(owner, term)
            if ok(lines):
                return lines
            if time.monotonic() >= deadline:
                await self.fail(f"timed out waiting for {what} on {term}'s screen; it shows:\n" + "\n".join(lines))
            await anyio.sleep(0.1)

    async def screenshot(self) -> None:
        """Saves the page to $DSH_CONSOLE_SCREENSHOT, when it is set."""
        path = os.environ.get("DSH_CONSOLE_SCREENSHOT")
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            await self.page.screenshot(path=path)


@asynccontextmanager
async def open_console(server: HttpServer, token: str) -> AsyncIterator[Console]:
    """A browser logged in to the server's console (through its login form)."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"{CHROMIUM} is missing (Debian's chromium package)")
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = await browser.new_context(viewport=VIEWPORT)
            page = await context.new_page()
            console = Console(page, server)
            page.on("pageerror", lambda error: console.errors.append(str(error)))
            await page.goto(f"{base_url(server)}/console")
            assert page.url == f"{base_url(server)}/console/login", f"/console without a login went to {page.url}"
            await page.fill("input[name=token]", token)
            async with page.expect_navigation():
                await page.click("button[type=submit]")
            assert page.url == f"{base_url(server)}/console", f"the login went to {page.url}"
            yield console
            assert not console.errors, f"errors in the page: {console.errors}"
        finally:
            await browser.close()


async def in_background(tg: Any, run: Callable[[], Awaitable[Any]], timeout: float = 30.0) -> dict[str, Any]:
    """Starts `run()` in the task group; its result lands in the returned dict's 'result'.
    It gets `timeout` seconds (so a failing test does not wait for a call stuck on an ask)."""
    box: dict[str, Any] = {}

    async def task() -> None:
        with anyio.fail_after(timeout):
            box["result"] = await run()

    tg.start_soon(task)
    return box


async def wait_done(box: dict[str, Any], what: str, timeout: float = 15.0) -> Any:
    with anyio.move_on_after(timeout):
        while "result" not in box:
            await anyio.sleep(0.05)
        return box["result"]
    pytest.fail(f"{what} did not return within {timeout}s")


# --------------------------------------------------------------------------- login and refusals


async def test_the_operator_logs_in_and_everyone_else_is_refused(start_http_server, open_http_session, event_log):
    server, token = start_console(start_http_server)
    base = base_url(server)
    async with httpx2.AsyncClient(timeout=10, trust_env=False) as http:
        # Nothing without a login: the page sends to the login form, the API answers 401.
        page = await http.get(f"{base}/console")
        assert page.status_code == 303 and page.headers.get("location") == "/console/login", describe(page)
        state = await http.get(f"{base}/console/api/state", headers=CONSOLE_HEADERS)
        assert state.status_code == 401, describe(state)
        form = await http.get(f"{base}/console/login")
        assert form.status_code == 200 and 'name="token"' in form.text, describe(form)

        # A wrong token, and the MCP clients' token, are refused: back to the form, no cookie.
        for refused in ("not-the-token", token[:-1], server.token):
            response = await log_in_raw(http, server, refused)
            assert response.status_code == 303, describe(response)
            assert response.headers.get("location") == "/console/login?failed=1", describe(response)
            assert not set_cookies(response), describe(response)

        # The operator token: a cookie the page's scripts cannot read, never sent cross-site.
        good = await log_in_raw(http, server, token)
        assert good.status_code == 303 and good.headers.get("location") == "/console", describe(good)
        (cookie,) = set_cookies(good)
        name, _, value = cookie.split(";")[0].partition("=")
        attributes = {a.strip().split("=")[0].lower(): a.strip() for a in cookie.split(";")[1:]}
        assert value and "httponly" in attributes, cookie
        assert attributes.get("samesite", "").lower() == "samesite=strict", cookie
        assert token not in cookie, f"the cookie carries the operator token itself: {cookie}"

        # Each request below says which cookie it sends: none from the client's jar.
        http.cookies.clear()
        logged_in = {"Cookie": f"{name}={value}"}
        state = await http.get(f"{base}/console/api/state", headers=CONSOLE_HEADERS | logged_in)
        assert state.status_code == 200 and "owners" in state.json(), describe(state)
        # A cookie of the same name with another value is nobody's.
        for forged in (secrets.token_hex(32), value[:-1] + ("0" if value[-1] != "0" else "1")):
            response = await http.get(
                f"{base}/console/api/state", headers=CONSOLE_HEADERS | {"Cookie": f"{name}={forged}"}
            )
            assert response.status_code == 401, describe(response)
        # A logged-in browser on another site's page cannot act (the Origin check)...
        take = f"{base}/console/api/terminal/take?owner=http-1&id=term-1"
        evil = await http.post(take, headers=CONSOLE_HEADERS | logged_in | {"Origin": "http://evil.example"})
        assert evil.status_code == 403, describe(evil)
        # ...nor send a form of its own there (a form cannot carry the API's header)...
        bare = await http.post(take, headers=logged_in | {"Origin": base})
        assert bare.status_code == 403, describe(bare)
        # ...while the console's own request gets to the terminals (none here).
        own = await http.post(take, headers=CONSOLE_HEADERS | logged_in | {"Origin": base})
        assert own.status_code == 404, describe(own)
        # The MCP token does not open the API either.
        bearer = await http.get(f"{base}/console/api/state", headers=CONSOLE_HEADERS | server.auth_headers)
        assert bearer.status_code == 401, describe(bearer)

    async with open_http_session(server) as session:
        owner = await owner_of_session(session, event_log)
        async with open_console(server, token) as console:
            await console.wait_for(f'[data-owner="{owner}"]', f"the agent's owner {owner}")
            # The feed shows the agent's calls as they are made.
            result = await call(session, "bash", {"command": "echo feed-check", "description": "for the feed"})
            assert not result.is_error, show(None, result)
            (made,) = event_log.calls_with_command_containing("feed-check")
            row = f'#feed tr[data-call-id="{made["call_id"]}"]'
            shown = await console.wait_text(row, lambda t: "feed-check" in t and "ok" in t, "the agent's call")
            assert owner in shown and "bash" in shown, shown

            # The figures count the calls (a sample a second).
            page = console.page
            await page.click("#tab-figures")
            await console.wait_text(
                '#figures-now [data-figure="calls_total"]',
                lambda t: t.isdigit() and int(t) >= 2,
                "the two calls counted in the figures",
            )
            assert await page.locator("#plot-calls").is_visible()
            await page.click("#tab-live")

            # Logging out ends the login: the API refuses the browser's cookie from then on.
            async with page.expect_navigation():
                await page.click("#logout")
            assert page.url == f"{base}/console/login", page.url
            status = await page.evaluate(
                "fetch('/console/api/state', {headers: {'X-Dsh-Console': '1'}}).then(r => r.status)"
            )
            assert status == 401, f"the API after logging out answered {status}"

            # A wrong token in the form: the form again, saying so.
            await page.fill("input[name=token]", "wrong")
            async with page.expect_navigation():
                await page.click("button[type=submit]")
            assert page.url == f"{base}/console/login?failed=1", page.url
            assert await page.is_visible("#login-failed"), "the login form does not say the token was refused"


# --------------------------------------------------------------------------- terminals


async def repl(session: Any, **size: int) -> tuple[str, dict[str, str]]:
    """A terminal (of `size`: cols, rows) running `python3 -q`, which has printed 42;
    returns its id and size."""
    opened = await call(session, "terminal_open", size)
    match = OPENED_RE.match(text(opened))
    assert match, show(("terminal_open", size), opened)
    term = match["id"]
    await settle_shell(session, term)
    started = await send(session, term, "python3 -q", wait={"pattern": ">>> ", "timeout_ms": 10000})
    assert started.how == "pattern", str(started)
    answer = await send(session, term, "print(6*7)", wait={"pattern": r"42\n>>> ", "timeout_ms": 10000})
    assert answer.how == "pattern", str(answer)
    return term, {"cols": match["cols"], "rows": match["rows"]}


async def test_an_agent_s_terminal_is_shown_live(start_http_server, open_http_session, event_log):
    server, token = start_console(start_http_server)
    async with open_http_session(server) as session:
        owner = await owner_of_session(session, event_log)
        async with open_console(server, token) as console:
            term, size = await repl(session)
            lines = await console.wait_screen(
                owner,
                term,
                lambda ls: "42" in ls and any(l.startswith(">>> print(6*7)") for l in ls),
                "42 from print(6*7)",
            )
            assert lines.index("42") > [i for i, l in enumerate(lines) if l.startswith(">>> print(6*7)")][0], lines

            # Something typed by the agent afterwards shows up too (output after the first screen).
            await send(session, term, "print('abc' * 3)", wait={"pattern": r"abcabcabc\n>>> ", "timeout_ms": 10000})
            await console.wait_screen(owner, term, lambda ls: "abcabcabc" in ls, "the output of a later send")

            # The page's terminal has the session's size, whatever the page's width.
            sizes = await console.page.evaluate(
                "[...window.dshConsole.terminals.values()].map(v => [v.owner, v.id, v.term.cols, v.term.rows])"
            )
            assert sizes == [[owner, term, int(size["cols"]), int(size["rows"])]], sizes
            frames = await console.page.evaluate("window.dshConsole.frames")
            assert frames >= 2, f"window.dshConsole.frames is {frames}"
            bar = await console.text_of(console.terminal(owner, term))
            assert "live" in bar and f"{size['cols']}x{size['rows']}" in bar, bar

            # The shell exits: the page says so.
            await send(session, term, "exit()", wait={"pattern": r"\$ ", "timeout_ms": 10000})
            await send(session, term, "exit 3", wait={"timeout_ms": 3000})
            await console.wait_text(
                f"{console.terminal(owner, term)} .tstate", lambda t: "exited (code 3)" in t, "the shell's exit"
            )


async def test_seven_terminals_are_all_shown_live(start_http_server, open_http_session, event_log):
    """More terminals than a browser has connections to the server (6 over HTTP/1.1): the
    page watches them all on one stream, reopened when the set changes (a job printing
    meanwhile resumes where it was: no line lost or repeated) and only then."""
    server, token = start_console(start_http_server)
    async with open_http_session(server) as session:
        owner = await owner_of_session(session, event_log)
        async with open_console(server, token) as console:
            job_lines = [f"job-line-{i}" for i in range(1, 17)]
            job = await start_job(session, "for i in $(seq 1 16); do echo job-line-$i; sleep 0.5; done", "16 lines")
            pre = f"{console.job(owner, job)} pre"
            await console.wait_text(pre, lambda t: "job-line-1" in t, "the job's first line", timeout=5)

            terms = []
            for n in range(1, 8):
                opened = await call(session, "terminal_open", {})
                match = OPENED_RE.match(text(opened))
                assert match, show(("terminal_open", {}), opened)
                term = match["id"]
                await settle_shell(session, term)
                sent = await send(session, term, f"echo term-{n}-ready", wait={"pattern": rf"term-{n}-ready\n\$ "})
                assert sent.how == "pattern", str(sent)
                terms.append(term)
                if n == 1:
                    # The watch now naming term-1 was opened while the job still printed.
                    await console.wait_screen(owner, term, lambda ls: "term-1-ready" in ls, "term-1-ready")
                    shown = await console.text_of(pre)
                    assert "job-line-16" not in shown, f"the job ended before a second watch:\n{shown}"
            for n, term in enumerate(terms, 1):
                # xterm.js draws only a terminal in view: scroll to each in turn.
                await console.page.locator(console.terminal(owner, term)).scroll_into_view_if_needed()
                # The echo's output line, not only the command line typed.
                await console.wait_screen(owner, term, lambda ls, n=n: f"term-{n}-ready" in ls, f"term-{n}-ready")

            await console.wait_text(
                f"{console.job(owner, job)} .jstate", lambda t: t and "running" not in t, "the job's end"
            )
            whole = await console.text_of(pre)
            assert whole.split() == job_lines, f"the job's output across the page's watches:\n{whole}"
            # One watch names all seven (and the job, if it ended on that watch: an ended
            # target's stream ends on its own, dropping it is no reason to reconnect).
            watching = set(await console.page.evaluate("window.dshConsole.watching"))
            named = {f"term={owner}/{t}" for t in terms}
            assert named <= watching <= named | {f"job={owner}/{job}"}, watching
            assert await console.page.evaluate("window.dshConsole.streams") == 1
            # Nothing changes: the watch stays (the page polls the state every second).
            watches = await console.page.evaluate("window.dshConsole.watches")
            await anyio.sleep(2.5)
            again = await console.page.evaluate("window.dshConsole.watches")
            assert again == watches, f"the page opened {again - watches} watches while nothing changed"
            # Still live: a later send to the first terminal shows up.
            await send(session, terms[0], "echo term-1-again", wait={"pattern": r"term-1-again\n\$ "})
            await console.page.locator(console.terminal(owner, terms[0])).scroll_into_view_if_needed()
            await console.wait_screen(owner, terms[0], lambda ls: "term-1-again" in ls, "term-1-again")


# --------------------------------------------------------------------------- jobs


async def test_a_job_s_output_streams_into_the_page(start_http_server, open_http_session, event_log):
    server, token = start_console(start_http_server)
    async with open_http_session(server) as session:
        owner = await owner_of_session(session, event_log)
        async with open_console(server, token) as console:
            lines = [f"job-line-{i}" for i in range(1, 9)]
            job = await start_job(
                session, "for i in 1 2 3 4 5 6 7 8; do echo job-line-$i; sleep 0.4; done", "eight lines over 3 s"
            )
            pre = f"{console.job(owner, job)} pre"
            first = await console.wait_text(pre, lambda t: "job-line-1" in t, "the job's first line", timeout=5)
            # Seen while the job still prints: the page streams, it does not wait for the end.
            assert "job-line-8" not in first, f"the first output the page showed was already complete:\n{first}"
            whole = await console.wait_text(pre, lambda t: "job-line-8" in t, "the job's last line")
            assert whole.split() == lines, f"the job's output in the page is not its eight lines in order:\n{whole}"
            await console.wait_text(
                f"{console.job(owner, job)} .jstate", lambda t: t and "running" not in t, "the job's end"
            )


# --------------------------------------------------------------------------- approvals


async def test_the_operator_approves_and_denies_a_guard_s_asks(start_http_server, open_http_session, event_log):
    server, token = start_console(start_http_server, ASK_PUSH)
    # The agent's client has no elicitation: only the console can answer.
    async with open_http_session(server) as session, anyio.create_task_group() as tg:
        owner = await owner_of_session(session, event_log)
        async with open_console(server, token) as console:
            # Something in each panel, for the screenshot: a REPL, a job's output, the feed.
            term, _ = await repl(session, cols=96, rows=14)
            job = await start_job(session, "for i in 1 2 3; do echo building step $i; sleep 0.2; done", "build")
            await console.wait_screen(owner, term, lambda ls: "42" in ls, "the REPL")
            await console.wait_text(f"{console.job(owner, job)} pre", lambda t: "step 3" in t, "the job's output")

            first_args = PUSH | {"command": PUSH["command"].replace("push-ran", "push-ran-1")}
            first = await in_background(tg, lambda: call(session, "bash", first_args))
            card = await console.wait_for(".approval[data-id]", "the first approval")
            shown = await card.inner_text()
            assert "bash" in shown and "ask_git_push" in shown and "git push" in shown, shown
            assert "result" not in first, "the call ran before anyone approved it"
            await card.locator("input.note").fill("dry run, fine")
            await console.screenshot()
            await card.locator(".approve").click()
            approved = await wait_done(first, "the approved call")
            assert not approved.is_error and "push-ran-1" in text(approved), show(("bash", first_args), approved)
            await console.wait_for(".approval[data-id]", "the approval to leave the page", state="detached")

            second_args = PUSH | {"command": PUSH["command"].replace("push-ran", "push-ran-2")}
            second = await in_background(tg, lambda: call(session, "bash", second_args))
            card = await console.wait_for(".approval[data-id]", "the second approval")
            await card.locator(".deny").click()
            denied = await wait_done(second, "the denied call")
            expect_error(("bash", second_args), denied, "DENIED")
            assert "push-ran-2" not in text(denied), show(("bash", second_args), denied)

            # The feed shows each call with its decision and result.
            (call_1,) = event_log.calls_with_command_containing("push-ran-1")
            (call_2,) = event_log.calls_with_command_containing("push-ran-2")
            row_1 = f'#feed tr[data-call-id="{call_1["call_id"]}"]'
            row_2 = f'#feed tr[data-call-id="{call_2["call_id"]}"]'
            await console.wait_text(row_1, lambda t: "approved" in t and "ok" in t, "the approved call in the feed")
            await console.wait_text(row_2, lambda t: "denied" in t and "DENIED" in t, "the denied call in the feed")

    approvals = [e for e in event_log.events() if e["event"] == "approval"]
    assert [(e["decision"], e["channel"]) for e in approvals] == [
        ("approved", "console"),
        ("denied", "console"),
    ], approvals
    assert approvals[0].get("note") == "dry run, fine", approvals


# --------------------------------------------------------------------------- taking over


async def test_the_operator_takes_over_a_terminal_and_gives_it_back(start_http_server, open_http_session, event_log):
    server, token = start_console(start_http_server)
    async with open_http_session(server) as session:
        owner = await owner_of_session(session, event_log)
        async with open_console(server, token) as console:
            term, _ = await repl(session)
            box = console.terminal(owner, term)
            await console.wait_screen(owner, term, lambda ls: "42" in ls, "the REPL")

            await console.page.click(f"{box} .take")
            await console.wait_for(f'{box}[data-held-by="console"]', "the terminal held by the console")
            assert "held by console" in await console.text_of(f"{box} .held")

            # The agent cannot type meanwhile.
            attempt = {"id": term, "input": "print('agent')"}
            refused = await call(session, "terminal_send", attempt)
            expect_error(("terminal_send", attempt), refused, "TERMINAL_HELD")

            # The operator types into the REPL.
            await console.page.click(f"{box} .xterm-screen")
            await console.page.keyboard.type("print(1+1)")
            await console.page.keyboard.press("Enter")
            lines = await console.wait_screen(owner, term, lambda ls: ">>> print(1+1)" in ls and "2" in ls, "2")
            assert lines.index("2") == lines.index(">>> print(1+1)") + 1, lines
            assert not any("agent" in line for line in lines), f"the agent's refused input reached the REPL:\n{lines}"

            await console.page.click(f"{box} .release")
            await console.wait_for(f'{box}[data-held-by=""]', "the terminal released")

            # Typing in the page does nothing now, and the agent has the terminal again.
            await console.page.click(f"{box} .xterm-screen")
            await console.page.keyboard.type("print('ignored')")
            back = await send(session, term, "print(3*3)", wait={"pattern": r"9\n>>> ", "timeout_ms": 10000})
            assert back.how == "pattern", str(back)
            assert "ignored" not in back.raw, str(back)
            await console.wait_screen(owner, term, lambda ls: "9" in ls, "the agent's print(3*3)")
