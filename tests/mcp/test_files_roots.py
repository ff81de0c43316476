"""The file tools' extra roots (`[files] extra_roots`) over MCP, and the attacks on them.

Covers: a read-only root (`/…/srv/docs`) that `read`, `glob` and `grep` reach by absolute
path (results named absolutely, the workspace's relatively, the root's own `.gitignore`
applying above a subdirectory searched, `../srv/docs` reaching it from the workspace)
while `write`, `edit` and `apply_patch` get
`DENIED` saying how to make it writable; a writable root (`/…/srv/scratch`) that every
tool reaches, never blind; a root named through a symbolic link, reached by both names;
a patch touching the workspace, the writable root and the read-only one changing nothing
anywhere.

Attacks, each with nothing outside the roots read or written: `..` out of a root, a
sibling whose name starts the same (`docs2` beside `docs`), symbolic links in a root
leading out (absolute and relative, for reads, writes and `grep`), `dsh.toml` and the
plugin directory inside a writable root (read, never written), and a root that holds the
state directory or lies in it (the file tools are refused at start, `dsh plugins` says
why naming the root, and nothing of the state directory is read), as is a root that is
missing, a file, or a relative path.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from tool_results import call, expect_error, show, text

pytestmark = pytest.mark.anyio

# The `files` plugin is served from a plugin directory, granted `files` (it is not
# embedded yet: see the README's "The file tools").
GRANT = '[plugins.files]\ninterfaces = ["files", "undo"]\n'


@pytest.fixture(autouse=True)
def files_plugin(dsh_env: dict[str, str], tmp_path: Path) -> Path:
    """Every dsh these tests start serves the built `files` plugin, granted `files`."""
    wasm_dir = os.environ.get("DSH_PLUGIN_WASM_DIR")
    if not wasm_dir:
        pytest.fail("DSH_PLUGIN_WASM_DIR is not set: run through `cargo test` (tests/e2e/mcp_clients.rs)")
    plugins = tmp_path / "files-plugins"
    plugins.mkdir()
    (plugins / "files.wasm").write_bytes((Path(wasm_dir) / "files.wasm").read_bytes())
    config = tmp_path / "files-dsh.toml"
    config.write_text(GRANT)
    dsh_env["DSH_PLUGINS"] = str(plugins)
    dsh_env["DSH_CONFIG"] = str(config)
    return plugins


def roots_config(*roots: tuple[Path, bool]) -> str:
    """The grant and `[files] extra_roots` naming `roots` ((path, writable) each)."""
    entries = ", ".join(
        "{ path = %s%s }" % (json.dumps(str(path)), ", write = true" if write else "") for path, write in roots
    )
    return GRANT + f"[files]\nextra_roots = [{entries}]\n"


@pytest.fixture
def srv(tmp_path: Path) -> Path:
    """`srv/docs` (to be read-only), `srv/scratch` (writable), and beside them
    `srv/docs2` and `outside`, each holding a `secret`."""
    srv = tmp_path / "srv"
    for sub in ("docs", "scratch", "docs2"):
        (srv / sub).mkdir(parents=True)
    (srv / "docs2" / "secret").write_text("docs2 secret\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret").write_text("outside secret\n")
    return srv


async def ok(session: Any, tool: str, args: dict[str, Any]) -> str:
    result = await call(session, tool, args)
    assert result.is_error is False, show((tool, args), result)
    return text(result)


async def refused(session: Any, tool: str, args: dict[str, Any], code: str) -> str:
    return expect_error((tool, args), await call(session, tool, args), code)


# --------------------------------------------------------------------------- a read-only root


async def test_a_read_only_root_is_read_globbed_and_grepped_but_never_changed(open_stdio_session, dsh_dirs, srv):
    docs = srv / "docs"
    (docs / "guide").mkdir()
    guide = docs / "guide" / "intro.md"
    guide.write_text("# Intro\nneedle in the docs\n")
    (docs / "guide" / "draft.gen").write_text("needle generated\n")
    (docs / ".gitignore").write_text("*.gen\n")
    (dsh_dirs.work / "mine.txt").write_text("needle in the workspace\n")
    async with open_stdio_session(config=roots_config((docs, False), (srv / "scratch", True))) as session:
        page = await ok(session, "read", {"path": str(guide)})
        assert page.startswith("     1\t# Intro\n     2\tneedle in the docs\n"), page
        # glob and grep name what is in a root by its absolute path; the root's
        # .gitignore applies even to a search of a directory below it.
        found = await ok(session, "glob", {"pattern": "**/*", "path": str(docs / "guide")})
        assert found.splitlines() == [str(guide)], found
        found = await ok(session, "grep", {"pattern": "needle", "path": str(docs), "output_mode": "content"})
        assert found.splitlines() == [f"{guide}:2:needle in the docs"], found
        found = await ok(session, "grep", {"pattern": "needle"})
        assert found.splitlines() == ["mine.txt"], found
        # A root beside the workspace, by a relative path out of it.
        found = await ok(session, "glob", {"pattern": "**/*.md", "path": "../srv/docs"})
        assert found.splitlines() == [str(guide)], found
        assert "needle in the docs" in await ok(session, "read", {"path": "../srv/docs/guide/intro.md"})

        for tool, args in (
            ("write", {"path": str(guide), "content": "mine now\n"}),
            ("write", {"path": str(docs / "new" / "deep.md"), "content": "x\n"}),
            ("edit", {"path": str(guide), "old_string": "Intro", "new_string": "Mine"}),
            ("apply_patch", {"patch": f"*** Begin Patch\n*** Delete File: {guide}\n*** End Patch\n"}),
        ):
            message = await refused(session, tool, args, "DENIED")
            assert f"the extra root {docs}, which is read-only" in message, message
            assert "write = true" in message and "[files] extra_roots" in message, message
    assert guide.read_text() == "# Intro\nneedle in the docs\n"
    assert not (docs / "new").exists()


async def test_a_writable_root_takes_every_tool_and_is_never_written_blind(open_stdio_session, srv):
    scratch = srv / "scratch"
    notes = scratch / "notes.md"
    notes.write_text("one\n")
    config = roots_config((srv / "docs", False), (scratch, True))
    async with open_stdio_session(config=config) as session:
        await refused(session, "write", {"path": str(notes), "content": "blind\n"}, "STALE_FILE")
        await ok(session, "read", {"path": str(notes)})
        shown = await ok(session, "edit", {"path": str(notes), "old_string": "one", "new_string": "two"})
        assert f"The file {notes} was edited" in shown, shown
        created = await ok(session, "write", {"path": str(scratch / "sub" / "new.txt"), "content": "new\n"})
        assert created.startswith(f"created {scratch / 'sub' / 'new.txt'}"), created
        # Relative to the workspace, by its words.
        await ok(session, "read", {"path": "../srv/scratch/notes.md"})
        patch = (
            "*** Begin Patch\n"
            f"*** Update File: {notes}\n@@\n-two\n+three\n"
            "*** Add File: here.txt\n+in the workspace\n"
            "*** End Patch\n"
        )
        applied = await ok(session, "apply_patch", {"patch": patch})
        assert f"M {notes}" in applied and "A here.txt" in applied, applied
    assert notes.read_text() == "three\n"
    assert (scratch / "sub" / "new.txt").read_text() == "new\n"


async def test_a_patch_touching_a_read_only_root_changes_nothing_anywhere(open_stdio_session, dsh_dirs, srv):
    docs, scratch = srv / "docs", srv / "scratch"
    files = {dsh_dirs.work / "a.txt": "a\n", scratch / "b.txt": "b\n", docs / "c.txt": "c\n"}
    for path, contents in files.items():
        path.write_text(contents)
    patch = "*** Begin Patch\n"
    for path, contents in files.items():
        patch += f"*** Update File: {path}\n@@\n-{contents}+{contents.upper()}"
    patch += f"*** Add File: {scratch / 'made' / 'new.txt'}\n+new\n*** End Patch\n"
    async with open_stdio_session(config=roots_config((docs, False), (scratch, True))) as session:
        for path in files:
            await ok(session, "read", {"path": str(path)})
        message = await refused(session, "apply_patch", {"patch": patch}, "DENIED")
        assert "read-only" in message and "nothing was changed" in message, message
    for path, contents in files.items():
        assert path.read_text() == contents, path
    assert not (scratch / "made").exists()
    assert sorted(p.name for p in scratch.iterdir()) == ["b.txt"], "a temporary file was left"


async def test_a_root_named_through_a_link_is_reached_by_both_names(open_stdio_session, tmp_path, srv):
    (srv / "docs" / "real.md").write_text("real\n")
    link = tmp_path / "docs-link"
    link.symlink_to(srv / "docs")
    async with open_stdio_session(config=roots_config((link, False))) as session:
        for name in (link / "real.md", srv / "docs" / "real.md"):
            assert "real" in await ok(session, "read", {"path": str(name)})
        found = await ok(session, "glob", {"pattern": "*.md", "path": str(link)})
        assert found == str(link / "real.md"), found
        found = await ok(session, "glob", {"pattern": "*.md", "path": str(srv / "docs")})
        assert found == str(srv / "docs" / "real.md"), found
        await refused(session, "write", {"path": str(link / "real.md"), "content": "x\n"}, "DENIED")


# --------------------------------------------------------------------------- attacks


async def test_paths_leading_out_of_a_root_are_refused(open_stdio_session, tmp_path, srv):
    docs, scratch, outside = srv / "docs", srv / "scratch", tmp_path / "outside"
    (scratch / "abs").symlink_to(outside)
    (scratch / "rel").symlink_to("../../outside")
    (scratch / "file-link").symlink_to("../../outside/secret")
    async with open_stdio_session(config=roots_config((docs, False), (scratch, True))) as session:
        for path in (
            f"{docs}/../../outside/secret",
            f"{docs}/../docs2/secret",
            str(srv / "docs2" / "secret"),
            str(scratch / "abs" / "secret"),
            str(scratch / "rel" / "secret"),
            str(scratch / "file-link"),
        ):
            result = await call(session, "read", {"path": path})
            assert result.is_error is True, show(("read", {"path": path}), result)
            assert "secret\n" not in text(result), show(("read", {"path": path}), result)
            result = await call(session, "write", {"path": path, "content": "pwned\n"})
            assert result.is_error is True, show(("write", {"path": path}), result)
        message = await refused(session, "read", {"path": str(srv / "docs2" / "secret")}, "INVALID_ARGUMENTS")
        assert "outside the workspace" in message and f"{docs} (read-only)" in message, message
        for path in (str(scratch / "abs" / "new.txt"), str(scratch / "rel" / "new" / "deep.txt")):
            result = await call(session, "write", {"path": path, "content": "pwned\n"})
            assert result.is_error is True, show(("write", {"path": path}), result)
        for path in (str(srv / "docs2"), f"{docs}/../docs2", str(scratch / "abs")):
            result = await call(session, "grep", {"pattern": "secret", "path": path, "output_mode": "content"})
            assert "secret\n" not in text(result) and ":1:" not in text(result), show(("grep", {"path": path}), result)
        found = await ok(session, "grep", {"pattern": "secret", "path": str(scratch), "output_mode": "content"})
        assert "outside secret" not in found, "grep followed a link out of a root"
    assert [p.name for p in outside.iterdir()] == ["secret"]
    assert (outside / "secret").read_text() == "outside secret\n"
    assert (srv / "docs2" / "secret").read_text() == "docs2 secret\n"


async def test_dsh_toml_and_the_plugins_in_a_writable_root_are_never_written(dsh_bin, dsh_env, tmp_path, srv):
    from test_files import _serve  # the stdio session with explicit arguments

    scratch = srv / "scratch"
    plugins = scratch / "plugins"
    plugins.mkdir()
    wasm = (Path(os.environ["DSH_PLUGIN_WASM_DIR"]) / "files.wasm").read_bytes()
    (plugins / "files.wasm").write_bytes(wasm)
    config = scratch / "dsh.toml"
    config.write_text(roots_config((scratch, True)))
    before = config.read_bytes()
    env = dsh_env | {"DSH_PLUGINS": str(plugins)}
    async with _serve(dsh_bin, env, tmp_path / "work", ["--config", str(config)]) as session:
        assert "extra_roots" in await ok(session, "read", {"path": str(config)})
        for tool, args in (
            ("write", {"path": str(config), "content": GRANT}),
            ("edit", {"path": str(config), "old_string": "write = true", "new_string": "write = false"}),
            ("apply_patch", {"patch": f"*** Begin Patch\n*** Delete File: {config}\n*** End Patch\n"}),
            ("write", {"path": str(plugins / "files.wasm"), "content": "evil"}),
            ("write", {"path": str(plugins / "new.wasm"), "content": "evil"}),
        ):
            message = await refused(session, tool, args, "INVALID_ARGUMENTS")
            assert "one of dsh's own files" in message, message
        await ok(session, "write", {"path": str(scratch / "fine.txt"), "content": "fine\n"})
    assert config.read_bytes() == before
    assert (plugins / "files.wasm").read_bytes() == wasm
    assert sorted(p.name for p in plugins.iterdir()) == ["files.wasm"]


def _plugins_listing(
    dsh_bin: str, env: dict[str, str], cwd: Path, config: str, tmp_path: Path
) -> subprocess.CompletedProcess[str]:
    path = tmp_path / f"roots-{len(list(tmp_path.glob('roots-*.toml')))}.toml"
    path.write_text(config)
    return subprocess.run(
        [dsh_bin, "plugins", "--json", "--config", str(path)], env=env, cwd=cwd, capture_output=True, text=True
    )


async def test_a_root_holding_or_inside_the_state_directory_refuses_the_file_tools(
    dsh_bin, dsh_env, dsh_dirs, tmp_path, open_stdio_session
):
    inside = dsh_dirs.state / "sessions"
    inside.mkdir(exist_ok=True)
    for root, overlap in ((tmp_path, "contains"), (inside, "is inside")):
        listed = _plugins_listing(dsh_bin, dsh_env, dsh_dirs.work, roots_config((root, False)), tmp_path)
        out = listed.stdout + listed.stderr
        assert '"refused"' in listed.stdout, out
        assert f"the extra root {root}" in out and f"that root {overlap} dsh's state directory" in out, out
    async with open_stdio_session(config=roots_config((tmp_path, False))) as session:
        await ok(session, "bash", {"command": "true", "description": "make a session log"})
        logs = list(dsh_dirs.state.glob("sessions/*/events.jsonl"))
        assert logs, "no event log was written"
        for tool, args in (
            ("read", {"path": str(logs[0])}),
            ("grep", {"pattern": "session", "path": str(dsh_dirs.state), "output_mode": "content"}),
            ("glob", {"pattern": "**/*", "path": str(tmp_path)}),
        ):
            # The file tools' plugin is refused (its preopen of the root would hold the
            # state directory): each call says why, naming the root.
            body = expect_error((tool, args), await call(session, tool, args), "DENIED")
            assert f"the extra root {tmp_path}" in body and "that root contains" in body, body
            assert "tool/call" not in body and "events.jsonl" not in body, body


async def test_a_missing_a_file_or_a_relative_root_is_refused_naming_it(dsh_bin, dsh_env, dsh_dirs, tmp_path):
    (tmp_path / "a-file").write_text("x\n")
    for root, says in ((tmp_path / "missing", "No such file"), (tmp_path / "a-file", "not a directory")):
        listed = _plugins_listing(dsh_bin, dsh_env, dsh_dirs.work, roots_config((root, False)), tmp_path)
        out = listed.stdout + listed.stderr
        assert '"refused"' in listed.stdout, out
        assert f"the extra root {root}" in out and says in out, out
    listed = _plugins_listing(dsh_bin, dsh_env, dsh_dirs.work, roots_config((Path("docs"), False)), tmp_path)
    assert listed.returncode != 0, listed.stdout
    assert '"docs" is not an absolute path' in listed.stderr, listed.stderr
