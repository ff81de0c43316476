"""Undo through MCP: what a call changes in the workspace is recorded under it, and its
owner (and only its owner) can list it and put it back.

With the official Python SDK as the client, over stdio and HTTP. Every call that changes
files ends its result with a line naming what it changed and the id to undo it with
(`[changed: …; undo with undo {call_id: "SESSION/call-N"}]`); what the workspace's
`.gitignore` ignores is named as not recorded and left alone. Each check compares the
whole workspace (every path's bytes, mode and symlink target, the ignored paths left
out) before and after.

Covers: two owners of one `dsh serve --http` (two 2025 sessions, and two named principals
under 2026-07-28): the other owner's call is not in `checkpoints`, not in resources/list,
and undoing it is the NOT_FOUND an id that never existed gets, changing nothing, while its
owner's undo puts the workspace back exactly; an undo after the `files` plugin (which
serves `checkpoints` and `undo`) was reloaded (a new build in the plugin directory, and a
`dsh.toml` change that links it again); an undo after `dsh upgrade` of a call made
before it; a call's record as the resource `checkpoint://SESSION_call-N/changes` (listed
for its owner, read as the JSON `checkpoints` gives); and a conflict: undoing a call whose
file a later call rewrote is UNDO_CONFLICT naming the file and the later call, changing
nothing, `and_later` undoes both, and undoing that undo redoes them.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import dsh_copy, surface_test_failures, write_config
from mcp import types
from mcp.client.client import Client
from mcp.shared.exceptions import MCPError
from test_principals import ALICE, BOB, PRINCIPALS, TOKENS, _modern
from test_reload import built_plugin, place, plugin_status, wait_until, with_custom_section
from test_resources import expect_not_found, listed, masked
from test_upgrade import server_pid, upgrade
from tool_results import call, expect_error, show, text

pytestmark = [
    pytest.mark.anyio,
    # dsh speaks the protocol versions of resources/subscribe (2026-07-28 replaced it).
    pytest.mark.filterwarnings("ignore:resources/(un)?subscribe is removed"),
]

# The line a result that changed files ends with.
CHANGED_RE = re.compile(
    r"\A\[changed: (?P<summary>\d+ paths? \([^)]*\))"
    r"(?:; not recorded: (?P<not_recorded>[^\]]*?))?"
    r'; undo with undo \{call_id: "(?P<id>[^"/\s]+/call-\d+)"\}\]\Z'
)

# What the workspace's .gitignore leaves out: never recorded, never put back, and left out
# of the workspace's comparisons.
GITIGNORE = "node_modules/\nscratch-*/\n"

# The grant of the `files` plugin (which serves checkpoints and undo), stated for a
# version loaded from a plugin directory (granted nothing unless dsh.toml says so).
GRANT_FILES = '[plugins.files]\ninterfaces = ["files", "undo"]\n'


# --------------------------------------------------------------------------- the workspace


def seed(work: Path) -> None:
    """A small workspace: text and binary files, an executable, a symlink, directories,
    and a .gitignore."""
    (work / ".gitignore").write_text(GITIGNORE)
    (work / "README.md").write_text("# demo\n")
    (work / "src").mkdir()
    (work / "src" / "app.py").write_text("print('v0')\n")
    (work / "src" / "util.py").write_text("X = 1\n")
    (work / "docs").mkdir()
    (work / "docs" / "notes.txt").write_text("notes\n")
    (work / "data.bin").write_bytes(bytes(range(256)) * 16)
    (work / "run.sh").write_text("#!/bin/sh\necho run\n")
    (work / "run.sh").chmod(0o755)
    (work / "f.txt").write_text("original\n")
    (work / "link").symlink_to("src/app.py")


def left_out(name: str) -> bool:
    """A top-level name .gitignore (or git) leaves out."""
    return name in ("node_modules", ".git") or name.startswith("scratch-")


def workspace(root: Path) -> dict[str, tuple[Any, ...]]:
    """Every path under the workspace but the ignored ones: a file's mode and the SHA-256
    of its bytes, a directory's mode, a symlink's target."""
    found: dict[str, tuple[Any, ...]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        if here == root:
            dirnames[:] = [d for d in dirnames if not left_out(d)]
            filenames = [f for f in filenames if not left_out(f)]
        for name in [*dirnames, *filenames]:
            path = here / name
            rel = path.relative_to(root).as_posix()
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                found[rel] = ("symlink", os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                found[rel] = ("dir", oct(stat.S_IMODE(st.st_mode)))
            elif stat.S_ISREG(st.st_mode):
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                found[rel] = ("file", oct(stat.S_IMODE(st.st_mode)), digest)
            else:
                found[rel] = ("other", stat.S_IFMT(st.st_mode))
    return found


def differences(expected: dict[str, tuple[Any, ...]], now: dict[str, tuple[Any, ...]]) -> str:
    """The paths where two workspace states differ, for assertion messages."""
    lines = []
    for path in sorted(set(expected) | set(now)):
        if expected.get(path) != now.get(path):
            lines.append(f"  {path}: expected {expected.get(path)}, found {now.get(path)}")
    return "workspace differs:\n" + "\n".join(lines)


def assert_workspace(root: Path, expected: dict[str, tuple[Any, ...]], what: str) -> None:
    now = workspace(root)
    assert now == expected, f"{what}\n{differences(expected, now)}"


# --------------------------------------------------------------------------- calls


async def succeeded(session: Any, tool: str, args: dict[str, Any]) -> Any:
    """A call's result, which must not be an error."""
    result = await call(session, tool, args)
    assert result.is_error is False, show((tool, args), result)
    return result


async def bash(session: Any, command: str) -> Any:
    return await succeeded(session, "bash", {"command": command, "description": "undo test"})


def changed(result: Any) -> re.Match[str]:
    """The `[changed: …]` line the result ends with (its own content item, the last)."""
    last = result.content[-1] if result.content else None
    line = getattr(last, "text", "")
    match = CHANGED_RE.match(line)
    assert match, f"the result does not end with a [changed: …] line\n{show(None, result)}\nlast item: {line!r}"
    return match


def never(call_id: str) -> str:
    """An id of the same shape that no call ever had."""
    return re.sub(r"call-\d+\Z", "call-987654", call_id)


def checkpoint_uri(call_id: str) -> str:
    return f"checkpoint://{call_id.replace('/', '_')}/changes"


async def checkpoints(session: Any) -> list[dict[str, Any]]:
    """The caller's records, from `checkpoints`' structured content; each id is in its text too."""
    result = await succeeded(session, "checkpoints", {})
    structured = result.structured_content
    assert isinstance(structured, dict) and isinstance(structured.get("checkpoints"), list), show(
        ("checkpoints", {}), result
    )
    for record in structured["checkpoints"]:
        assert record["call_id"] in text(result), show(("checkpoints", {}), result)
    return structured["checkpoints"]


def record_of(records: list[dict[str, Any]], call_id: str) -> dict[str, Any]:
    found = [r for r in records if r["call_id"] == call_id]
    assert len(found) == 1, (call_id, records)
    return found[0]


async def checkpoint_uris(session: Any) -> set[str]:
    """The `checkpoint://` resources the client lists (a 2026 `Client` asked past its cache)."""
    if isinstance(session, Client):
        result = await session.list_resources(cache_mode="bypass")
        uris = {str(r.uri) for r in result.resources}
    else:
        uris = set(await listed(session))
    return {uri for uri in uris if uri.startswith("checkpoint://")}


async def until_recording(session: Any) -> None:
    """Waits until undo records the workspace. dsh takes the workspace's baseline as it
    starts; a call made before is recorded as a change made outside dsh. A call that makes
    an ignored directory is told so once it records (`not recorded: scratch-N/ (ignored)`),
    and it changes nothing recorded."""
    for n in range(400):
        result = await bash(session, f"mkdir scratch-{n}")
        if f"not recorded: scratch-{n}/ (ignored)" in text(result):
            return
        await anyio.sleep(0.05)
    pytest.fail(f"no call was recorded within 20 s; the last said: {text(result)!r}")


async def undone(session: Any, call_id: str, **more: Any) -> tuple[Any, str]:
    """Undoes `call_id`; the result and the id of the undo's own record."""
    args = {"call_id": call_id, **more}
    result = await succeeded(session, "undo", args)
    return result, changed(result)["id"]


# --------------------------------------------------------------------------- two owners


@asynccontextmanager
async def two_owners(kind: str, start_http_server, open_http_session):
    """Two clients of one `dsh serve --http` that are different owners: two 2025 sessions
    (one token), or two named principals of one scope under 2026-07-28."""
    if kind == "sessions":
        server = start_http_server()
        async with open_http_session(server) as a, open_http_session(server) as b:
            yield a, b
    else:
        server = start_http_server(PRINCIPALS, env=TOKENS)
        with surface_test_failures():
            async with _modern(server, ALICE) as a, _modern(server, BOB) as b:
                yield a, b


A_CHANGES = (
    "printf \"print('v1')\\n\" > src/app.py"
    " && rm src/util.py"
    " && mkdir -p new/dir && printf 'made by A\\n' > new/dir/created.txt"
    " && chmod 644 run.sh"
    " && ln -sfn README.md link"
    " && printf 'XY' | dd of=data.bin bs=1 seek=10 conv=notrunc 2>/dev/null"
    " && mkdir -p node_modules/pkg && printf 'ignored\\n' > node_modules/pkg/index.js"
)


@pytest.mark.parametrize("kind", ["sessions", "principals"])
async def test_an_owner_neither_sees_nor_undoes_anothers_call_and_its_owner_undoes_it_exactly(
    kind, start_http_server, open_http_session, dsh_dirs
):
    """Another owner's call is not in my `checkpoints` or my resources; undoing it (with
    `and_later` too) is the NOT_FOUND of an id that never existed and changes nothing; its
    owner's undo puts every path back (contents, modes, a symlink, a deleted file, made
    directories), leaves what .gitignore ignores alone, and is itself recorded."""
    work = dsh_dirs.work
    seed(work)
    async with two_owners(kind, start_http_server, open_http_session) as (a, b):
        await until_recording(a)
        b_id = changed(await bash(b, "printf 'made by B\\n' > b.txt"))["id"]
        before = workspace(work)

        ran = await bash(a, A_CHANGES)
        line = changed(ran)
        a_id = line["id"]
        assert a_id != b_id, (a_id, b_id)
        assert "node_modules/ (ignored)" in (line["not_recorded"] or ""), show(None, ran)
        after_a = workspace(work)
        assert after_a != before

        # A's record: every path it changed, nothing ignored.
        mine = record_of(await checkpoints(a), a_id)
        kinds = {c["path"]: c["change"] for c in mine["changes"]}
        assert {
            "src/app.py": "modified",
            "src/util.py": "deleted",
            "new/dir/created.txt": "created",
            "run.sh": "mode",
            "link": "symlink",
            "data.bin": "modified",
        }.items() <= kinds.items(), mine
        assert not any(path.startswith("node_modules") for path in kinds), mine
        assert b_id not in {r["call_id"] for r in await checkpoints(a)}

        # B sees its own call only.
        theirs = await checkpoints(b)
        assert [r["call_id"] for r in theirs] == [b_id], theirs
        assert await checkpoint_uris(b) == {checkpoint_uri(b_id)}
        # B's undo of A's call is what an id that never existed gets, and changes nothing.
        for more in ({}, {"and_later": True}):
            request = ("undo", {"call_id": a_id, **more})
            foreign = expect_error(request, await call(b, *request), "NOT_FOUND")
            nothing_request = ("undo", {"call_id": never(a_id), **more})
            nothing = expect_error(nothing_request, await call(b, *nothing_request), "NOT_FOUND")
            assert foreign.replace(a_id, "ID") == nothing.replace(never(a_id), "ID"), (foreign, nothing)
            assert_workspace(work, after_a, f"B's undo of A's call {more} changed the workspace")
        # B cannot read A's record as a resource either: the error of one that never existed.
        errors = []
        for uri in (checkpoint_uri(a_id), checkpoint_uri(never(a_id))):
            with pytest.raises(MCPError) as raised:
                await b.read_resource(uri)
            errors.append(masked(raised.value, uri))
        assert errors[0] == errors[1], errors
        assert "made by A" not in str(errors[0]), errors

        # A lists its record as a resource, not B's, and undoes its call exactly.
        uris = await checkpoint_uris(a)
        assert checkpoint_uri(a_id) in uris and checkpoint_uri(b_id) not in uris, uris
        result, undo_id = await undone(a, a_id)
        assert text(result).startswith(f"Undid {a_id}: restored "), show(None, result)
        assert undo_id not in (a_id, b_id), undo_id
        assert_workspace(work, before, f"A's undo of {a_id} did not put the workspace back")
        assert (work / "node_modules" / "pkg" / "index.js").read_text() == "ignored\n", "undo touched an ignored path"
        assert record_of(await checkpoints(a), a_id)["undone_by"] == undo_id
        # And B's own call is still B's alone.
        request = ("undo", {"call_id": b_id})
        expect_error(request, await call(a, *request), "NOT_FOUND")
        assert (work / "b.txt").read_text() == "made by B\n"


# --------------------------------------------------------------------------- reload


async def reload_by_plugin_file(session, dsh_bin, dsh_env, dsh_dirs, plugins: Path, heard: list[Any]) -> None:
    """A new build of `files` (another digest) replaces the embedded one."""
    already = len(heard)
    place(plugins, "files.wasm", with_custom_section(built_plugin("files").read_bytes(), b"undo-v2"))
    # A new digest is compiled before it serves: about 10 s under a debug build of dsh.
    await wait_until(lambda: len(heard) > already, "tools/list_changed after the files plugin was replaced", timeout=120)
    status = await anyio.to_thread.run_sync(plugin_status, dsh_bin, dsh_env, "files")
    assert status["status"] == "serving" and status["source"] == str(plugins / "files.wasm"), status


async def reload_by_config(session, dsh_bin, dsh_env, dsh_dirs, config: Path, heard: list[Any]) -> None:
    """`dsh.toml` changes the files plugin's bounds: it is linked again under them."""
    log = dsh_dirs.logs / "stdio-stderr.log"
    config.write_text(GRANT_FILES + "memory_mb = 96\n")
    await wait_until(lambda: "plugins.files (relinked)" in log.read_text(errors="replace"), "the files plugin relinked")


@pytest.mark.parametrize("how", ["plugin_file", "config"])
async def test_an_undo_works_after_the_files_plugin_is_reloaded(how, open_stdio_session, dsh_bin, dsh_env, dsh_dirs, tmp_path):
    """The records live in the host, not in the plugin that serves `checkpoints` and
    `undo`: calls made before the `files` plugin was replaced (or relinked by a dsh.toml
    change) are listed and undone after it, the workspace put back exactly."""
    work = dsh_dirs.work
    seed(work)
    heard: list[Any] = []

    async def on_message(message: Any) -> None:
        message = getattr(message, "root", message)
        if isinstance(message, types.ToolListChangedNotification):
            heard.append(message)

    config = write_config(dsh_dirs, GRANT_FILES)
    dsh_env["DSH_CONFIG"] = str(config)
    dsh_env["RUST_LOG"] = "dsh=info"
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    dsh_env["DSH_PLUGINS"] = str(plugins)
    async with open_stdio_session(message_handler=on_message) as session:
        await until_recording(session)
        before = workspace(work)
        wrote = await succeeded(session, "write", {"path": "docs/written.md", "content": "# written\n"})
        write_id = changed(wrote)["id"]
        bash_id = changed(await bash(session, "printf \"print('v2')\\n\" > src/app.py && chmod 700 run.sh"))["id"]
        after = workspace(work)
        assert after != before

        if how == "plugin_file":
            await reload_by_plugin_file(session, dsh_bin, dsh_env, dsh_dirs, plugins, heard)
        else:
            await reload_by_config(session, dsh_bin, dsh_env, dsh_dirs, config, heard)

        listed_ids = {r["call_id"] for r in await checkpoints(session)}
        assert {write_id, bash_id} <= listed_ids, listed_ids
        assert_workspace(work, after, "the reload changed the workspace")
        await undone(session, bash_id)
        await undone(session, write_id)
        assert_workspace(work, before, "the undo after the reload did not put the workspace back")


# --------------------------------------------------------------------------- upgrade


async def test_a_call_made_before_dsh_upgrade_is_undone_after_it(open_stdio_session, dsh_bin, dsh_env, dsh_dirs, tmp_path):
    """The records outlive `dsh upgrade`: a call made before the server executes another
    binary is listed and undone after it, the workspace put back exactly."""
    work = dsh_dirs.work
    seed(work)
    next_binary = dsh_copy(dsh_bin, tmp_path / "next" / "dsh-next")
    async with open_stdio_session() as session:
        await until_recording(session)
        before = workspace(work)
        call_id = changed(await bash(session, A_CHANGES))["id"]
        after = workspace(work)
        assert after != before
        pid = server_pid(dsh_dirs.state)

        done = await anyio.to_thread.run_sync(lambda: upgrade(dsh_bin, dsh_env, "--binary", str(next_binary)))
        assert done.returncode == 0, f"dsh upgrade failed: {done.stdout}{done.stderr}"
        assert server_pid(dsh_dirs.state) == pid and os.readlink(f"/proc/{pid}/exe") == str(next_binary)

        assert call_id in {r["call_id"] for r in await checkpoints(session)}
        assert_workspace(work, after, "the upgrade changed the workspace")
        result = await succeeded(session, "undo", {"call_id": call_id})
        assert text(result).startswith(f"Undid {call_id}: restored "), show(None, result)
        assert_workspace(work, before, f"the undo of {call_id} after the upgrade did not put the workspace back")


# --------------------------------------------------------------------------- resources


async def test_a_calls_record_is_a_resource_listed_and_read_as_json(open_stdio_session, dsh_dirs):
    """After a call changes files, resources/list shows `checkpoint://SESSION_call-N/changes`
    for it, and resources/read returns its record as JSON naming each changed path (the
    record `checkpoints` gives); an id that never existed is not found."""
    work = dsh_dirs.work
    seed(work)
    async with open_stdio_session() as session:
        await until_recording(session)
        uris_before = await checkpoint_uris(session)
        ran = await bash(session, "printf 'hello\\n' > docs/new.txt && printf 'more\\n' >> README.md")
        call_id = changed(ran)["id"]
        uri = checkpoint_uri(call_id)

        resources = await listed(session)
        assert {u for u in resources if u.startswith("checkpoint://")} - uris_before == {uri}, resources
        assert call_id in (resources[uri].description or ""), resources[uri]

        read = await session.read_resource(uri)
        assert len(read.contents) == 1 and str(read.contents[0].uri) == uri, read
        record = json.loads(read.contents[0].text)
        assert record["call_id"] == call_id and record["tool"] == "bash", record
        assert {c["path"]: c["change"] for c in record["changes"]} == {
            "docs/new.txt": "created",
            "README.md": "modified",
        }, record
        sizes = {c["path"]: c["size"] for c in record["changes"]}
        assert sizes["README.md"] == (work / "README.md").stat().st_size, record
        assert record == record_of(await checkpoints(session), call_id)

        await expect_not_found(session, checkpoint_uri(never(call_id)))


# --------------------------------------------------------------------------- conflicts


async def test_an_undo_that_would_overwrite_a_later_change_is_refused_and_and_later_undoes_both(
    open_stdio_session, dsh_dirs
):
    """Call 1 writes f.txt, call 2 (the `edit` tool) rewrites it: undoing call 1 is
    UNDO_CONFLICT naming f.txt and call 2, and changes nothing; with `and_later` both are
    undone (the workspace as before call 1); undoing that undo redoes them."""
    work = dsh_dirs.work
    seed(work)
    async with open_stdio_session() as session:
        await until_recording(session)
        before = workspace(work)
        first = changed(await bash(session, "printf 'one\\n' > f.txt"))["id"]
        read = await succeeded(session, "read", {"path": "f.txt"})
        assert "[changed:" not in text(read), show(None, read)
        edit = {"path": "f.txt", "old_string": "one", "new_string": "two"}
        second = changed(await succeeded(session, "edit", edit))["id"]
        assert (work / "f.txt").read_text() == "two\n"
        after = workspace(work)

        request = ("undo", {"call_id": first})
        message = expect_error(request, await call(session, *request), "UNDO_CONFLICT")
        assert "f.txt" in message and second in message, message
        assert_workspace(work, after, "a refused undo changed the workspace")
        assert record_of(await checkpoints(session), first)["undone_by"] is None

        result, undo_id = await undone(session, first, and_later=True)
        assert text(result).startswith(f"Undid {first}, {second}: restored 1 path:"), show(None, result)
        assert_workspace(work, before, "undo with and_later did not put the workspace as before call 1")
        assert (work / "f.txt").read_text() == "original\n"
        records = await checkpoints(session)
        assert record_of(records, first)["undone_by"] == undo_id, records
        assert record_of(records, second)["undone_by"] == undo_id, records

        # The undo is recorded: undoing it redoes both calls.
        await undone(session, undo_id)
        assert_workspace(work, after, f"undoing the undo {undo_id} did not redo the calls")
