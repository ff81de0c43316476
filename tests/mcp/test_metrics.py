"""`/metrics` on the `dsh serve --http` listener: the host's Prometheus metrics, scraped
and parsed by the Prometheus project's own text-format parser
(`prometheus_client.parser`), moving as MCP calls are made; and their bearer token,
which opens `/metrics` and nothing else, while no MCP token opens `/metrics`.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp.shared.exceptions import MCPError
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.anyio

ACCEPT_MCP = {"Accept": "application/json, text/event-stream"}
PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}


def metrics_url(server: Any) -> str:
    return server.url.removesuffix("/mcp") + "/metrics"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def scrape(http: httpx2.AsyncClient, server: Any, token: str) -> dict[tuple[str, tuple], float]:
    """Every sample of `/metrics`, by name and labels, parsed as Prometheus parses it."""
    response = await http.get(metrics_url(server), headers=bearer(token))
    assert response.status_code == 200, (response.status_code, response.text, server.stderr())
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4"), response.headers
    samples: dict[tuple[str, tuple], float] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: dict[tuple[str, tuple], float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def test_metrics_count_calls_by_tool_and_code_and_read_live_state(
    start_http_server, open_http_session, text_of
):
    """Counters, histograms and gauges move as calls are made: `bash` calls that work
    (`code="ok"`, one spilling its long output), a `read` of a missing file
    (`code="NOT_FOUND"`), the stages and the admission wait of each call, and the owners,
    terminals, jobs and containment runs live at the scrape."""
    token = secrets.token_hex(32)
    server = start_http_server(env={"DSH_METRICS_TOKEN": token})
    async with httpx2.AsyncClient(timeout=30) as http:
        before = await scrape(http, server, token)
        assert value(before, "dsh_owners") == 0, before
        async with open_http_session(server) as session:
            ok = await session.call_tool("bash", {"command": "echo counted", "description": "a counted call"})
            assert ok.is_error is False and "counted" in text_of(ok), ok
            long = await session.call_tool(
                "bash", {"command": "head -c 300000 /dev/zero | tr '\\0' x", "description": "a long output"}
            )
            assert long.is_error is False and "bytes omitted" in text_of(long), long
            missing = await session.call_tool("read", {"path": "no-such-file.txt"})
            assert missing.is_error is True and text_of(missing).startswith("NOT_FOUND"), missing
            unknown = f"no_such_tool_{secrets.token_hex(4)}"
            with pytest.raises(MCPError, match="no tool named"):
                await session.call_tool(unknown, {})
            job = await session.call_tool(
                "bash", {"command": "sleep 60", "run_in_background": True, "description": "held"}
            )
            assert job.is_error is False, job
            opened = await session.call_tool("terminal_open", {})
            assert opened.is_error is False, opened
            during = await scrape(http, server, token)
            assert value(during, "dsh_owners") == 1, during
            assert value(during, "dsh_terminals") == 1, during
            assert value(during, "dsh_jobs_running") == 1, during
            # The job's and the terminal's runs (the terminal's shell is a run of its own).
            assert value(during, "dsh_containment_runs") >= 2, during
        after = await scrape(http, server, token)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("dsh_calls_total", tool="bash", code="ok") == 3, after
    assert moved("dsh_calls_total", tool="read", code="NOT_FOUND") == 1, after
    assert moved("dsh_calls_total", tool="terminal_open", code="ok") == 1, after
    # A name the client made up is no label: it counts in the one bucket of unknown tools.
    assert moved("dsh_calls_total", tool="(unknown)", code="UNKNOWN_TOOL") == 1, after
    assert not [key for key in after if ("tool", unknown) in key[1]], after
    assert moved("dsh_call_duration_seconds_count", tool="bash") == 3, after
    assert moved("dsh_call_duration_seconds_sum", tool="bash") > 0, after
    assert moved("dsh_call_duration_seconds_bucket", tool="bash", le="+Inf") == 3, after
    # The long output's full text went to a spill file.
    assert moved("dsh_spilled_bytes_total") >= 300_000, after
    for stage in ("gate", "guards", "execute", "filters", "finalize"):
        assert moved("dsh_stage_duration_seconds_count", stage=stage) == 5, (stage, after)
    # Every call is admitted before its tool is resolved: the unknown one too.
    assert moved("dsh_admission_wait_seconds_count") == 6, after
    assert value(after, "dsh_admission_queued_calls") == 0, after
    # Between calls a plugin's next instance is made ahead (the pool's spares).
    async with httpx2.AsyncClient(timeout=30) as http:
        with anyio.fail_after(10):
            while value(await scrape(http, server, token), "dsh_plugin_spare_instances") < 1:
                await anyio.sleep(0.05)
    # The session is closed; its connection goes when rmcp drops it.
    async with httpx2.AsyncClient(timeout=30) as http:
        with anyio.fail_after(10):
            while value(await scrape(http, server, token), "dsh_owners") != 0:
                await anyio.sleep(0.05)


async def test_metrics_open_only_to_their_own_token(start_http_server, open_http_session):
    """No token and every MCP token get 401 at `/metrics`; the metrics token gets the
    metrics and 401 at `/mcp`. Unset, the token is generated and printed on stderr."""
    server = start_http_server()
    printed = "".join(server.stderr_lines)
    found = re.search(r"^dsh: bearer token for /metrics \(\$DSH_METRICS_TOKEN unset\): ([0-9a-f]{64})$", printed, re.M)
    assert found, printed
    token = found.group(1)
    assert token != server.token
    async with httpx2.AsyncClient(timeout=30) as http:
        for headers in ({}, bearer(server.token), bearer(token + "0"), {"Authorization": f"Basic {token}"}):
            refused = await http.get(metrics_url(server), headers=headers)
            assert refused.status_code == 401, (headers, refused.status_code, refused.text)
            assert refused.headers.get("www-authenticate") == "Bearer", refused.headers
        assert (await http.get(metrics_url(server), headers=bearer(token))).status_code == 200
        assert (await http.post(metrics_url(server), headers=bearer(token))).status_code == 405
        on_mcp = await http.post(server.url, headers=bearer(token) | ACCEPT_MCP, json=PING)
        assert on_mcp.status_code == 401, (on_mcp.status_code, on_mcp.text)
    # The MCP token still opens MCP.
    async with open_http_session(server) as session:
        await session.send_ping()


async def test_metrics_count_limit_hits_reloads_and_refusals(start_http_server, open_http_session, tmp_path):
    """A plugin stopped by its CPU budget and one stopped by its memory cap count in
    `dsh_plugin_limit_hits_total{plugin,limit}`; a plugin file added while serving counts
    as a reload, a broken version of it as a refusal."""
    wasm_dir = os.environ.get("DSH_PLUGIN_WASM_DIR")
    if not wasm_dir:
        pytest.fail("DSH_PLUGIN_WASM_DIR is not set: run through `cargo test` (tests/e2e/mcp_clients.rs)")
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    shutil.copy(Path(wasm_dir) / "hostile.wasm", plugins / "hostile.wasm")
    token = secrets.token_hex(32)
    server = start_http_server(
        config="[plugins.hostile]\ncpu_ms = 100\nmemory_mb = 16\n",
        env={"DSH_METRICS_TOKEN": token, "DSH_PLUGINS": str(plugins)},
    )
    async with httpx2.AsyncClient(timeout=30) as http:
        async with open_http_session(server) as session:
            spun = await session.call_tool("spin", {})
            assert spun.is_error is True and "PLUGIN_CPU_LIMIT" in str(spun.content), spun
            grown = await session.call_tool("grow_memory", {})
            assert grown.is_error is True and "PLUGIN_OUT_OF_MEMORY" in str(grown.content), grown
        samples = await scrape(http, server, token)
        assert value(samples, "dsh_plugin_limit_hits_total", plugin="hostile", limit="cpu") == 1, samples
        assert value(samples, "dsh_plugin_limit_hits_total", plugin="hostile", limit="memory") == 1, samples
        assert value(samples, "dsh_calls_total", tool="spin", code="PLUGIN_CPU_LIMIT") == 1, samples
        assert value(samples, "dsh_plugin_reloads_total") == 0, samples

        async def counted(name: str, want: float) -> None:
            with anyio.fail_after(15):
                while value(await scrape(http, server, token), name) != want:
                    await anyio.sleep(0.05)

        echo = (Path(wasm_dir) / "echo.wasm").read_bytes()
        partial = plugins / "echo.wasm.partial"
        partial.write_bytes(echo)
        partial.rename(plugins / "echo.wasm")
        await counted("dsh_plugin_reloads_total", 1)
        (plugins / "echo.wasm").write_bytes(echo[: len(echo) // 2])
        await counted("dsh_plugin_refusals_total", 1)
        assert value(await scrape(http, server, token), "dsh_plugin_reloads_total") == 1


async def test_http_requests_are_counted_by_era(start_http_server, open_http_session):
    """`dsh_http_requests{era}`: a 2025 session's requests as `2025`, a client pinned to
    2026-07-28 as `2026-07-28`."""
    import warnings

    from mcp.client.client import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    token = secrets.token_hex(32)
    server = start_http_server(env={"DSH_METRICS_TOKEN": token})
    async with httpx2.AsyncClient(timeout=30) as http:
        before = await scrape(http, server, token)
        async with open_http_session(server) as session:
            await session.list_tools()
        legacy = await scrape(http, server, token)
        warnings.filterwarnings("ignore")
        async with create_mcp_http_client(headers=bearer(server.token)) as client_http:
            transport = streamable_http_client(server.url, http_client=client_http)
            async with Client(transport, mode="2026-07-28") as client:
                for _ in range(3):
                    await client.list_tools()
        modern = await scrape(http, server, token)
    assert value(before, "dsh_http_requests_total", era="2025") == 0, before
    assert value(legacy, "dsh_http_requests_total", era="2025") >= 3, legacy  # initialize, initialized, tools/list
    assert value(legacy, "dsh_http_requests_total", era="2026-07-28") == 0, legacy
    assert value(modern, "dsh_http_requests_total", era="2026-07-28") >= 3, modern
