//! The six tools on paths outside the workspace, in the operator's extra roots: against
//! the in-memory host (`/srv/docs` read-only, `/srv/scratch` writable) for `read`,
//! `write`, `edit` and `apply_patch`, and against real directories for `glob` and
//! `grep`. A path in a root goes to the host as it is and comes back absolute; a change
//! in a read-only root is the host's `DENIED`, and with it nothing changes.

use dsh_plugin::{CallContext, ErrorCode, ToolResult};

use crate::host::memory::{Memory, DOCS, SCRATCH};
use crate::tools::testing::{context, failed, ok_text};
use crate::tools::{apply_patch, edit, glob, grep, read, write};
use crate::walk::testdir::TestDir;

fn args<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> T {
    serde_json::from_value(value).unwrap()
}

#[test]
fn read_write_edit_and_apply_patch_take_a_root_path_and_show_it_absolute() {
    let files = Memory::new();
    let doc = format!("{DOCS}/guide.md");
    let note = format!("{SCRATCH}/note.txt");
    files.put(&doc, "# Guide\nstep one\n");
    let out = ok_text(read::run(&files, &context(), args(serde_json::json!({"path": doc}))).into());
    assert_eq!(
        out,
        "     1\t# Guide\n     2\tstep one\n[end of file: 2 lines]"
    );
    files.put(&format!("{DOCS}/empty.md"), "");
    let out = ok_text(
        read::run(
            &files,
            &context(),
            args(serde_json::json!({"path": format!("{DOCS}/empty.md")})),
        )
        .into(),
    );
    assert_eq!(out, format!("{DOCS}/empty.md is empty (0 bytes)."));

    // A relative path with `..` reaches a root by its words, as the host takes it.
    let out = ok_text(
        write::run(
            &files,
            &context(),
            args(serde_json::json!({"path": "../srv/scratch/note.txt", "content": "v1\n"})),
        )
        .into(),
    );
    assert_eq!(out, format!("created {note} (1 line, 3 bytes)"));
    let out = ok_text(
        edit::run(
            &files,
            &context(),
            args(serde_json::json!({"path": note, "old_string": "v1", "new_string": "v2"})),
        )
        .into(),
    );
    assert!(
        out.starts_with(&format!("The file {note} was edited")),
        "{out}"
    );
    let patch = format!(
        "*** Begin Patch\n*** Update File: {note}\n@@\n-v2\n+v3\n*** Add File: {SCRATCH}/new.txt\n+new\n*** End Patch\n"
    );
    let out = ok_text(
        apply_patch::run(
            &files,
            &context(),
            args(serde_json::json!({"patch": patch})),
        )
        .into(),
    );
    assert_eq!(
        out,
        format!("Applied the patch:\nM {note}\nA {SCRATCH}/new.txt")
    );
    assert_eq!(files.get(&note).unwrap(), "v3\n");
}

#[test]
fn a_change_in_a_read_only_root_is_denied_and_changes_nothing() {
    let files = Memory::new();
    let doc = format!("{DOCS}/guide.md");
    files.seen(&doc, "# Guide\n");
    files.seen("src/a.rs", "a\n");
    let context = context();
    for result in [
        write::run(
            &files,
            &context,
            args(serde_json::json!({"path": doc, "content": "x\n"})),
        )
        .into(),
        edit::run(
            &files,
            &context,
            args(serde_json::json!({"path": doc, "old_string": "Guide", "new_string": "Mine"})),
        )
        .into(),
    ] {
        let (code, message): (ErrorCode, String) = failed(result);
        assert_eq!(code, ErrorCode::Denied, "{message}");
        assert!(message.contains("read-only"), "{message}");
    }
    // A patch touching the workspace and the read-only root applies neither.
    let patch = format!(
        "*** Begin Patch\n*** Update File: src/a.rs\n@@\n-a\n+b\n*** Update File: {doc}\n@@\n-# Guide\n+# Mine\n*** End Patch\n"
    );
    let result: ToolResult =
        apply_patch::run(&files, &context, args(serde_json::json!({"patch": patch}))).into();
    assert_eq!(failed(result).0, ErrorCode::Denied);
    assert_eq!(files.get("src/a.rs").unwrap(), "a\n");
    assert_eq!(files.get(&doc).unwrap(), "# Guide\n");
    // Outside every root: the host's refusal.
    let result: ToolResult = read::run(
        &files,
        &context,
        args(serde_json::json!({"path": "/srv/docs2/x"})),
    )
    .into();
    assert_eq!(failed(result).0, ErrorCode::InvalidArguments);
}

/// A call context whose workspace is `ws`.
fn in_workspace(ws: &TestDir) -> CallContext {
    let mut context = context();
    context.workdir = ws.path().to_string_lossy().into_owned();
    context
}

#[test]
fn glob_and_grep_walk_a_root_outside_the_workspace_and_show_absolute_paths() {
    let (ws, root) = (TestDir::new("roots-ws"), TestDir::new("roots-root"));
    ws.write("src/a.rs", "needle in the workspace\n");
    root.write("guide/b.md", "needle in a root\n");
    root.write(".gitignore", "build/\n");
    root.write("build/gen.md", "needle ignored\n");
    let context = in_workspace(&ws);
    let root_path = root.path().display().to_string();
    let b = root.path().join("guide/b.md").display().to_string();

    let found = ok_text(
        glob::run(
            &context,
            args(serde_json::json!({"pattern": "**/*.md", "path": root_path})),
        )
        .into(),
    );
    assert_eq!(found, b);
    let found = ok_text(
        grep::run(
            &context,
            args(serde_json::json!({"pattern": "needle", "path": root_path, "output_mode": "content"})),
        )
        .into(),
    );
    assert_eq!(found, format!("{b}:1:needle in a root"));
    // The workspace's own paths stay relative.
    let found = ok_text(grep::run(&context, args(serde_json::json!({"pattern": "needle"}))).into());
    assert_eq!(found, "src/a.rs");
    // Natively there are no preopens: a missing path outside the workspace is refused
    // as outside it (in the component, a path in an extra root is `NOT_FOUND`).
    let missing = root.path().join("nope").display().to_string();
    let (code, message) = failed(
        glob::run(
            &context,
            args(serde_json::json!({"pattern": "*", "path": missing})),
        )
        .into(),
    );
    assert_eq!(code, ErrorCode::InvalidArguments);
    assert!(message.contains("extra_roots"), "{message}");
}
