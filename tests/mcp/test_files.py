"""The file tools (`read`, `write`, `edit`, `apply_patch`, `glob`, `grep`) over MCP, and
the attacks on their confinement.

Covers: paging a 100,000-line file (numbered lines, never cut by the output budget, the
way on), an image read as an image item, binary and directory and missing paths as
structured errors; `write` creating parents and refusing a blind overwrite; `edit` on a
CRLF file and on one without a final newline (both kept), permissions kept, a non-UTF-8
file refused and untouched, an ambiguous and a missing `old_string`; `apply_patch`
adding, updating, moving and deleting, and a patch whose second hunk fails leaving every
file untouched; a stale write after `bash` changed the file, and over HTTP another
owner's read not counting; `glob` newest first with `.gitignore` respected; `grep`'s
three modes.

Attacks, each with nothing outside the workspace read or written: `../../etc/passwd`,
`/etc/passwd`, a symlink `ws/link -> /etc` (and one to a directory outside for writes), a
directory swapped with a symlink to an outside directory while `write` and `edit` run a
thousand times, a NUL byte, a 4 KiB path, a FIFO (neither `read` nor `grep` hangs), a
full disk (a 1 MiB tmpfs as the workspace: the write fails with `IO_ERROR`, the file is
whole), the state directory inside the workspace (the file tools are refused, nothing of
it is read), and `dsh.toml` inside the workspace (never written).
"""

from __future__ import annotations

import base64
import os
import subprocess
import threading
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from tool_results import call, expect_error, show, text

pytestmark = pytest.mark.anyio

# The embedded `files` plugin's grant, stated (the configurations these tests write keep it).
GRANT = '[plugins.files]\ninterfaces = ["files", "undo"]\n'


# A 1x1 PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


async def ok(session: Any, tool: str, args: dict[str, Any]) -> str:
    result = await call(session, tool, args)
    assert result.is_error is False, show((tool, args), result)
    return text(result)


async def refused(session: Any, tool: str, args: dict[str, Any], code: str) -> str:
    return expect_error((tool, args), await call(session, tool, args), code)


# --------------------------------------------------------------------------- read


async def test_read_pages_a_long_file_with_numbered_lines(open_stdio_session, dsh_dirs):
    big = dsh_dirs.work / "big.txt"
    big.write_text("".join(f"line {n}\n" for n in range(1, 100_001)))
    async with open_stdio_session() as session:
        first = await ok(session, "read", {"path": "big.txt"})
        assert first.startswith("     1\tline 1\n"), first[:200]
        assert "bytes omitted" not in first, "a page was cut by the output budget"
        numbered = [line for line in first.splitlines() if "\t" in line]
        assert 100 <= len(numbered) <= 2000, len(numbered)
        last = int(numbered[-1].split("\t")[0])
        assert numbered[-1] == f"{last:>6}\tline {last}", numbered[-1]
        assert "100000" in first, "the total line count is not said"
        assert f"offset={last + 1}" in first.replace(" ", ""), first[-400:]

        tail = await ok(session, "read", {"path": str(big), "offset": 99_998, "limit": 10})
        assert " 99998\tline 99998\n" in tail and "100000\tline 100000" in tail, tail
        assert "line 99997" not in tail, tail


async def test_a_page_comes_with_what_the_host_counted_of_the_whole_file(open_stdio_session, dsh_dirs):
    """`read` is sent only its page (`files.read-lines`): the line count, the CRLF note, the
    missing final newline and a byte that is not UTF-8 past the page and the 8 KiB head are
    the host's counts of the whole file."""
    rows = b"".join(b"row %d\r\n" % n for n in range(1, 5001))
    (dsh_dirs.work / "crlf.txt").write_bytes(rows + b"tail")
    (dsh_dirs.work / "late.txt").write_bytes(b"a" * 10_000 + b"\n\xff\n")
    async with open_stdio_session() as session:
        page = await ok(session, "read", {"path": "crlf.txt", "offset": 4999, "limit": 5})
        assert page.startswith("  4999\trow 4999\n  5000\trow 5000\n  5001\ttail\n"), page
        assert "lines 4999-5001 of 5001; end of file" in page, page
        assert "CRLF" in page and "no newline at the end of the file" in page, page
        message = await refused(session, "read", {"path": "late.txt"}, "INVALID_ARGUMENTS")
        assert "not UTF-8" in message and "offset 10001" in message, message
        # The page read counts as the model's read of the whole file: an edit of it applies.
        edited = await ok(session, "edit", {"path": "crlf.txt", "old_string": "row 2\n", "new_string": "ROW 2\n"})
        assert "ROW 2" in edited, edited
        assert (dsh_dirs.work / "crlf.txt").read_bytes().startswith(b"row 1\r\nROW 2\r\nrow 3\r\n")


async def test_read_gives_an_image_and_refuses_binary_directories_and_missing(open_stdio_session, dsh_dirs):
    (dsh_dirs.work / "dot.png").write_bytes(PNG)
    (dsh_dirs.work / "blob.bin").write_bytes(b"\x00\x01\x02ELF" * 100)
    (dsh_dirs.work / "sub").mkdir()
    async with open_stdio_session() as session:
        result = await call(session, "read", {"path": "dot.png"})
        assert result.is_error is False, show(("read", {}), result)
        images = [c for c in result.content if c.type == "image"]
        assert len(images) == 1 and images[0].mime_type == "image/png", result.content
        assert base64.b64decode(images[0].data) == PNG

        await refused(session, "read", {"path": "blob.bin"}, "INVALID_ARGUMENTS")
        message = await refused(session, "read", {"path": "sub"}, "INVALID_ARGUMENTS")
        assert "glob" in message, message
        await refused(session, "read", {"path": "nope.txt"}, "NOT_FOUND")


# --------------------------------------------------------------------------- write and edit


async def test_write_creates_parents_and_never_overwrites_blind(open_stdio_session, dsh_dirs):
    existing = dsh_dirs.work / "notes.md"
    existing.write_text("mine\n")
    async with open_stdio_session() as session:
        await ok(session, "write", {"path": "deep/er/new.txt", "content": "hello\n"})
        assert (dsh_dirs.work / "deep/er/new.txt").read_text() == "hello\n"

        await refused(session, "write", {"path": "notes.md", "content": "blind\n"}, "STALE_FILE")
        assert existing.read_text() == "mine\n"
        await ok(session, "read", {"path": "notes.md"})
        await ok(session, "write", {"path": "notes.md", "content": "seen\n"})
        assert existing.read_text() == "seen\n"
        # What it wrote counts as read.
        await ok(session, "write", {"path": "notes.md", "content": "again\n"})
        assert existing.read_text() == "again\n"


async def test_edit_keeps_line_endings_the_final_newline_and_permissions(open_stdio_session, dsh_dirs):
    crlf = dsh_dirs.work / "crlf.txt"
    crlf.write_bytes(b"alpha\r\nbeta\r\ngamma\r\n")
    bare = dsh_dirs.work / "bare.sh"
    bare.write_bytes(b"#!/bin/sh\necho one")
    bare.chmod(0o755)
    async with open_stdio_session() as session:
        await ok(session, "read", {"path": "crlf.txt"})
        shown = await ok(session, "edit", {"path": "crlf.txt", "old_string": "beta\ngamma", "new_string": "BETA\nGAMMA"})
        assert crlf.read_bytes() == b"alpha\r\nBETA\r\nGAMMA\r\n"
        assert "BETA" in shown and "\t" in shown, "the changed region with line numbers"

        await ok(session, "read", {"path": "bare.sh"})
        await ok(session, "edit", {"path": "bare.sh", "old_string": "echo one", "new_string": "echo two"})
        assert bare.read_bytes() == b"#!/bin/sh\necho two"
        assert bare.stat().st_mode & 0o777 == 0o755


async def test_edit_refuses_ambiguous_missing_and_non_utf8(open_stdio_session, dsh_dirs):
    twice = dsh_dirs.work / "twice.py"
    twice.write_text("x = 1\ny = 2\nx = 1\n")
    latin = dsh_dirs.work / "latin1.txt"
    latin.write_bytes("caf\xe9 au lait\n".encode("latin-1"))
    async with open_stdio_session() as session:
        await ok(session, "read", {"path": "twice.py"})
        message = await refused(
            session, "edit", {"path": "twice.py", "old_string": "x = 1", "new_string": "x = 3"}, "INVALID_ARGUMENTS"
        )
        assert "2 times" in message and "1" in message and "3" in message, message
        await refused(
            session, "edit", {"path": "twice.py", "old_string": "z = 9", "new_string": "z = 0"}, "INVALID_ARGUMENTS"
        )
        assert twice.read_text() == "x = 1\ny = 2\nx = 1\n"
        await ok(session, "edit", {"path": "twice.py", "old_string": "x = 1", "new_string": "x = 3", "replace_all": True})
        assert twice.read_text() == "x = 3\ny = 2\nx = 3\n"

        before = latin.read_bytes()
        result = await call(session, "edit", {"path": "latin1.txt", "old_string": "au", "new_string": "with"})
        assert result.is_error is True, show(("edit", {}), result)
        assert latin.read_bytes() == before, "a non-UTF-8 file was rewritten"


async def test_a_stale_edit_after_bash_changed_the_file(open_stdio_session, dsh_dirs):
    target = dsh_dirs.work / "app.py"
    target.write_text("print('a')\n")
    async with open_stdio_session() as session:
        await ok(session, "read", {"path": "app.py"})
        await ok(session, "bash", {"command": "echo \"print('b')\" >> app.py", "description": "change it behind read"})
        message = await refused(
            session, "edit", {"path": "app.py", "old_string": "print('a')", "new_string": "print('c')"}, "STALE_FILE"
        )
        assert "read" in message.lower(), message
        assert target.read_text() == "print('a')\nprint('b')\n"
        await ok(session, "read", {"path": "app.py"})
        await ok(session, "edit", {"path": "app.py", "old_string": "print('a')", "new_string": "print('c')"})
        assert target.read_text() == "print('c')\nprint('b')\n"


async def test_another_owners_read_does_not_count(http_server, open_http_session, dsh_dirs):
    target = dsh_dirs.work / "shared.txt"
    target.write_text("one\n")
    async with open_http_session(http_server) as a, open_http_session(http_server) as b:
        await ok(a, "read", {"path": "shared.txt"})
        await refused(b, "edit", {"path": "shared.txt", "old_string": "one", "new_string": "two"}, "STALE_FILE")
        assert target.read_text() == "one\n"
        await ok(a, "edit", {"path": "shared.txt", "old_string": "one", "new_string": "two"})
        assert target.read_text() == "two\n"


# --------------------------------------------------------------------------- apply_patch


async def test_apply_patch_adds_updates_moves_and_deletes(open_stdio_session, dsh_dirs):
    work = dsh_dirs.work
    (work / "src").mkdir()
    (work / "src/lib.rs").write_text("fn a() {}\n\nfn b() {\n    1\n}\n")
    (work / "old.txt").write_text("keep\nme\n")
    (work / "gone.txt").write_text("bye\n")
    patch = """*** Begin Patch
*** Add File: src/new.rs
+pub fn new() {}
*** Update File: src/lib.rs
@@ fn b() {
-    1
+    2
 }
*** Update File: old.txt
*** Move to: moved/new.txt
@@
 keep
-me
+you
*** Delete File: gone.txt
*** End Patch
"""
    async with open_stdio_session() as session:
        for name in ("src/lib.rs", "old.txt", "gone.txt"):
            await ok(session, "read", {"path": name})
        await ok(session, "apply_patch", {"patch": patch})
    assert (work / "src/new.rs").read_text() == "pub fn new() {}\n"
    assert (work / "src/lib.rs").read_text() == "fn a() {}\n\nfn b() {\n    2\n}\n"
    assert (work / "moved/new.txt").read_text() == "keep\nyou\n"
    assert not (work / "old.txt").exists() and not (work / "gone.txt").exists()


async def test_a_patch_whose_second_hunk_fails_changes_nothing(open_stdio_session, dsh_dirs):
    work = dsh_dirs.work
    (work / "one.txt").write_text("a\nb\nc\n")
    (work / "two.txt").write_text("x\ny\nz\n")
    patch = """*** Begin Patch
*** Update File: one.txt
@@
 a
-b
+B
*** Update File: two.txt
@@
 x
-not there
+w
*** End Patch
"""
    async with open_stdio_session() as session:
        await ok(session, "read", {"path": "one.txt"})
        await ok(session, "read", {"path": "two.txt"})
        message = await refused(session, "apply_patch", {"patch": patch}, "INVALID_ARGUMENTS")
        assert "two.txt" in message, message
    assert (work / "one.txt").read_text() == "a\nb\nc\n"
    assert (work / "two.txt").read_text() == "x\ny\nz\n"


# --------------------------------------------------------------------------- glob and grep


async def test_glob_is_newest_first_and_respects_gitignore(open_stdio_session, dsh_dirs):
    work = dsh_dirs.work
    (work / "pkg").mkdir()
    (work / "build").mkdir()
    for n, name in enumerate(["pkg/old.py", "pkg/mid.py", "top.py", "build/gen.py"]):
        path = work / name
        path.write_text("pass\n")
        os.utime(path, (1_700_000_000 + n * 100, 1_700_000_000 + n * 100))
    (work / ".gitignore").write_text("build/\n")
    async with open_stdio_session() as session:
        found = await ok(session, "glob", {"pattern": "**/*.py"})
        lines = [line for line in found.splitlines() if line.endswith(".py")]
        assert [Path(line).name for line in lines] == ["top.py", "mid.py", "old.py"], found


async def test_grep_modes(open_stdio_session, dsh_dirs):
    work = dsh_dirs.work
    (work / "a.txt").write_text("alpha\nneedle one\ngamma\n")
    (work / "b.txt").write_text("NEEDLE two\n")
    (work / "c.bin").write_bytes(b"needle\x00binary")
    (work / "ignored").mkdir()
    (work / "ignored/d.txt").write_text("needle hidden\n")
    (work / ".gitignore").write_text("ignored/\n")
    async with open_stdio_session() as session:
        files = await ok(session, "grep", {"pattern": "needle"})
        assert "a.txt" in files and "b.txt" not in files and "c.bin" not in files, files
        assert "d.txt" not in files, files
        files = await ok(session, "grep", {"pattern": "needle", "case_insensitive": True})
        assert "a.txt" in files and "b.txt" in files, files
        content = await ok(session, "grep", {"pattern": "needle \\w+", "output_mode": "content", "context": 1})
        assert "a.txt:2:needle one" in content.replace("-", ":"), content
        assert "alpha" in content and "gamma" in content, "context lines"
        counted = await ok(session, "grep", {"pattern": "[ae]", "output_mode": "count", "glob": "*.txt"})
        assert "a.txt:3" in counted, counted


# --------------------------------------------------------------------------- attacks


async def test_paths_leading_out_are_refused(open_stdio_session, dsh_dirs, tmp_path):
    work = dsh_dirs.work
    outside = tmp_path / "outside"
    outside.mkdir()
    (work / "etc").symlink_to("/etc")
    (work / "out").symlink_to(outside)
    passwd = Path("/etc/passwd").read_text()
    async with open_stdio_session() as session:
        for path in ("../../etc/passwd", "/etc/passwd", "etc/passwd", "out/../../outside/x", "\x00x", "a/" * 2048):
            result = await call(session, "read", {"path": path})
            assert result.is_error is True, show(("read", {"path": path[:60]}), result)
            assert passwd[:64] not in text(result)
        for path in ("out/planted.txt", str(outside / "planted.txt"), "../outside/planted.txt"):
            result = await call(session, "write", {"path": path, "content": "pwned\n"})
            assert result.is_error is True, show(("write", {"path": path}), result)
        result = await call(session, "grep", {"pattern": "root", "path": "etc"})
        assert "root:x:0" not in text(result), show(("grep", {}), result)
        result = await call(session, "grep", {"pattern": "root", "output_mode": "content"})
        assert "root:x:0" not in text(result), "grep followed a symlink out"
    assert list(outside.iterdir()) == []


async def test_a_fifo_never_hangs_a_call(open_stdio_session, dsh_dirs):
    fifo = dsh_dirs.work / "pipe"
    os.mkfifo(fifo)
    (dsh_dirs.work / "real.txt").write_text("findme\n")
    async with open_stdio_session() as session:
        with anyio.fail_after(20):
            await refused(session, "read", {"path": "pipe"}, "INVALID_ARGUMENTS")
            found = await ok(session, "grep", {"pattern": "findme"})
            assert "real.txt" in found, found
            said = await refused(session, "grep", {"pattern": "x", "path": "pipe"}, "INVALID_ARGUMENTS")
            assert "pipe is a FIFO" in said, said
            said = await refused(session, "write", {"path": "pipe", "content": "x"}, "INVALID_ARGUMENTS")
            assert "pipe is a FIFO" in said, said


async def test_a_directory_swapped_for_a_symlink_never_lets_a_byte_out(open_stdio_session, dsh_dirs, tmp_path):
    work = dsh_dirs.work
    outside = tmp_path / "swap-outside"
    outside.mkdir()
    inside = work / "d"
    inside.mkdir()
    (inside / "f.txt").write_text("v0\n")
    stop = threading.Event()

    def swap() -> None:
        # d: a real directory, then a symlink to the outside one, then a directory again.
        parked = work / "d.parked"
        while not stop.is_set():
            try:
                os.rename(inside, parked)
                os.symlink(outside, inside)
                os.unlink(inside)
                os.rename(parked, inside)
            except OSError:
                pass

    async with open_stdio_session() as session:
        swapper = threading.Thread(target=swap, daemon=True)
        swapper.start()
        try:
            for n in range(1000):
                await call(session, "read", {"path": "d/f.txt"})
                await call(session, "write", {"path": "d/f.txt", "content": f"v{n}\n"})
                await call(session, "edit", {"path": "d/f.txt", "old_string": f"v{n}", "new_string": f"w{n}"})
        finally:
            stop.set()
            swapper.join()
    assert list(outside.iterdir()) == [], f"bytes landed outside: {list(outside.iterdir())}"


def _is_root() -> bool:
    return os.geteuid() == 0


@asynccontextmanager
async def _serve(dsh_bin: str, env: dict[str, str], cwd: Path, args: list[str] | None = None) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(command=dsh_bin, args=[*(args or []), "serve"], env=env, cwd=str(cwd))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            yield session


@pytest.mark.skipif(not _is_root(), reason="mounts a tmpfs: needs root")
async def test_a_full_disk_fails_the_write_clearly_and_keeps_the_file(dsh_bin, dsh_env, tmp_path):
    disk = tmp_path / "small"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], check=True)
    try:
        target = disk / "keep.txt"
        target.write_text("precious\n" * 10)
        async with _serve(dsh_bin, dsh_env | {"DSH_WORKDIR": str(disk)}, disk) as session:
            await ok(session, "read", {"path": "keep.txt"})
            # Fill the disk to the last block.
            subprocess.run(["dd", "if=/dev/zero", f"of={disk / 'filler'}", "bs=4k"], capture_output=True)
            big = "x" * 600_000
            message = await refused(session, "write", {"path": "keep.txt", "content": big}, "IO_ERROR")
            assert "full" in message.lower() or "space" in message.lower(), message
            assert target.read_text() == "precious\n" * 10
            leftovers = [p.name for p in disk.iterdir() if p.name not in ("keep.txt", "filler")]
            assert leftovers == [], f"temporary files left: {leftovers}"
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


async def test_the_state_directory_inside_the_workspace_is_out_of_reach(dsh_bin, dsh_env, dsh_dirs):
    state = dsh_dirs.work / ".dsh-state"
    env = dsh_env | {"DSH_STATE_DIR": str(state)}
    listed = subprocess.run([dsh_bin, "plugins", "--json"], env=env, cwd=dsh_dirs.work, capture_output=True, text=True)
    assert '"refused"' in listed.stdout and "state directory" in listed.stdout, listed.stdout + listed.stderr
    async with _serve(dsh_bin, env, dsh_dirs.work) as session:
        await ok(session, "bash", {"command": "true", "description": "make a session log"})
        logs = list(state.glob("sessions/*/events.jsonl"))
        assert logs, "no event log was written"
        relative = str(logs[0].relative_to(dsh_dirs.work))
        for tool, args in (
            ("read", {"path": relative}),
            ("grep", {"pattern": "session", "output_mode": "content"}),
            ("glob", {"pattern": "**/*"}),
            ("write", {"path": ".dsh-state/planted", "content": "x"}),
        ):
            # The file tools' plugin is refused (its workspace preopen would hold the state
            # directory, as `dsh plugins` said): its tools stay listed, and each call says
            # why and how to move the state directory.
            body = expect_error((tool, args), await call(session, tool, args), "DENIED")
            assert "the workspace contains dsh's state directory" in body, body
            assert "--state-dir" in body, body
            assert "tool/call" not in body and "events.jsonl" not in body, body
    assert not (state / "planted").exists()


async def test_dsh_toml_inside_the_workspace_is_never_written(dsh_bin, dsh_env, dsh_dirs):
    config = dsh_dirs.work / "dsh.toml"
    config.write_text(GRANT + "[serve]\nprogress_interval_ms = 250\n")
    before = config.read_bytes()
    async with _serve(dsh_bin, dsh_env, dsh_dirs.work, ["--config", str(config)]) as session:
        await ok(session, "read", {"path": "dsh.toml"})
        for tool, args in (
            ("write", {"path": "dsh.toml", "content": "[serve]\n"}),
            ("edit", {"path": "dsh.toml", "old_string": "250", "new_string": "1"}),
            ("apply_patch", {"patch": "*** Begin Patch\n*** Delete File: dsh.toml\n*** End Patch\n"}),
        ):
            result = await call(session, tool, args)
            assert result.is_error is True, show((tool, args), result)
    assert config.read_bytes() == before
