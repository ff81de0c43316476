//! The `apply_patch` tool: a Codex-format patch parsed, every file it updates or deletes
//! read through the host first, every new content computed, and then one
//! `files.commit` with all the changes, so the patch applies whole or not at all. Later
//! operations on a file see what earlier ones made of it.

use std::collections::BTreeMap;

use dsh_plugin::tool_files::files::{Change, FileWrite};
use dsh_plugin::{error, text, CallContext, ErrorCode, ToolError, ToolResult};
use schemars::JsonSchema;
use serde::Deserialize;

use super::{invalid, utf8, Files, Settings};
use crate::patch::{self, apply::apply, Op};
use crate::{paths, redaction};

pub const DESCRIPTION: &str = "Apply a patch that adds, deletes, updates and renames files, all or nothing. The format:\n\
*** Begin Patch\n\
*** Add File: src/new.py\n\
+every line of the new file, each after a +\n\
*** Delete File: src/old.py\n\
*** Update File: src/app.py\n\
*** Move to: src/main.py\n\
@@ def handler():\n\
\x20    a context line, unchanged (a space first)\n\
-    a removed line\n\
+    an added line\n\
*** End Patch\n\
`*** Move to:` is optional (it renames the file). Each `@@` starts a hunk; text after `@@` is a line above the hunk \
(a def, class or fn line) that anchors it when the context alone is ambiguous. Give about 3 lines of context above \
and below each change, hunks in file order; `*** End of File` after a hunk's lines puts it at the end of the file. \
Lines are matched exactly, then ignoring trailing whitespace, then ignoring whitespace at both ends; line endings (CRLF) \
and a missing final newline are kept. Paths are relative to the workspace. Read the files you update, delete or \
replace first: a file that changed since you last read it, or that you never read, is refused (STALE_FILE: read it \
again). If a hunk does not match, nothing is changed and the error names the file and hunk and shows the lines it \
expected. Returns `A path`, `M path` and `D path` lines.";

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// The whole patch, from `*** Begin Patch` to `*** End Patch`.
    #[schemars(length(min = 1))]
    pub patch: String,
}

/// A file as the patch leaves it so far.
struct Working {
    /// The contents (`None`: deleted).
    contents: Option<String>,
    /// The file existed before the patch.
    existed: bool,
    /// A new file made by a move takes the moved file's permission bits.
    mode_from: Option<String>,
    /// The file as read before the patch, for the marker check.
    original: String,
}

pub fn run(files: &dyn Files, context: &CallContext, args: Args) -> Result<ToolResult, ToolError> {
    let ops = patch::parse(&args.patch).map_err(|e| {
        invalid(format!(
            "the patch does not parse (patch line {}): {}. Nothing was changed",
            e.line, e.message
        ))
    })?;
    if ops.is_empty() {
        return Err(invalid("the patch holds no file operations: nothing to do"));
    }
    let workdir = &context.workdir;
    let max_bytes = Settings::of(context).max_read_bytes();
    let mut working: BTreeMap<String, Working> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    let mut summary: Vec<String> = Vec::new();

    // The file at `path` as the patch has left it so far, read through the host the
    // first time.
    let current = |working: &mut BTreeMap<String, Working>,
                   order: &mut Vec<String>,
                   path: &str,
                   what: &str|
     -> Result<Option<String>, ToolError> {
        if let Some(file) = working.get(path) {
            return Ok(file.contents.clone());
        }
        // Not remembered: the commit is refused (stale-file) for a file that changed
        // since the model last read it.
        let file = files.read(path, max_bytes, false).map_err(|mut e| {
            e.message = format!(
                "{what} {}: {}. Nothing was changed",
                paths::display(workdir, path),
                e.message
            );
            e
        })?;
        let contents = utf8(&file.contents, &file.path, "apply_patch")?.to_string();
        order.push(path.to_string());
        working.insert(
            path.to_string(),
            Working {
                contents: Some(contents.clone()),
                existed: true,
                mode_from: None,
                original: contents.clone(),
            },
        );
        Ok(Some(contents))
    };

    for op in &ops {
        let path = paths::resolve(workdir, op.path(), "path")?;
        let shown = paths::display(workdir, &path);
        match op {
            Op::Add { contents, .. } => {
                let existed = match working.get(&path) {
                    Some(file) => file.contents.is_some(),
                    None => files.exists(&path),
                };
                let original = files
                    .peek(&path, max_bytes)
                    .and_then(|b| String::from_utf8(b).ok())
                    .unwrap_or_default();
                if let Some(marker) = redaction::new_marker(contents, &original) {
                    return Err(invalid(redaction::refuse_writing(marker)));
                }
                set(
                    &mut working,
                    &mut order,
                    &path,
                    Some(contents.clone()),
                    None,
                );
                summary.push(if existed {
                    format!("M {shown} (replaced by Add File)")
                } else {
                    format!("A {shown}")
                });
            }
            Op::Delete { .. } => {
                // Not read (a file of any size can go); the commit checks freshness.
                let exists = match working.get(&path) {
                    Some(file) => file.contents.is_some(),
                    None => files.exists(&path),
                };
                if !exists {
                    let why = if working.contains_key(&path) {
                        "an earlier operation of this patch already deleted it"
                    } else {
                        "there is no such file"
                    };
                    return Err(error(
                        ErrorCode::NotFound,
                        format!("Delete File {shown}: {why}. Nothing was changed"),
                    ));
                }
                if !working.contains_key(&path) {
                    order.push(path.clone());
                    working.insert(
                        path.clone(),
                        Working {
                            contents: Some(String::new()),
                            existed: true,
                            mode_from: None,
                            original: String::new(),
                        },
                    );
                }
                set(&mut working, &mut order, &path, None, None);
                summary.push(format!("D {shown}"));
            }
            Op::Update { move_to, hunks, .. } => {
                let Some(before) = current(&mut working, &mut order, &path, "Update File")? else {
                    return Err(invalid(format!(
                        "Update File {shown}: an earlier operation of this patch deleted it. Nothing was changed"
                    )));
                };
                let after = apply(&before, hunks).map_err(|e| {
                    let line = hunks.get(e.hunk - 1).map_or(0, |h| h.line);
                    invalid(format!(
                        "Update File {shown}, hunk {} (patch line {line}): {}\nNothing was changed. Read the file again and make the hunk's context and `-` lines match it exactly.",
                        e.hunk, e.message
                    ))
                })?;
                let original = working
                    .get(&path)
                    .map(|w| w.original.clone())
                    .unwrap_or_default();
                if let Some(marker) = redaction::new_marker(&after, &original) {
                    return Err(invalid(redaction::refuse_writing(marker)));
                }
                match move_to {
                    Some(to) => {
                        let to = paths::resolve(workdir, to, "Move to")?;
                        if to == path {
                            set(&mut working, &mut order, &path, Some(after), None);
                            summary.push(format!("M {shown}"));
                            continue;
                        }
                        let to_shown = paths::display(workdir, &to);
                        if !working.contains_key(&to) && files.exists(&to) {
                            return Err(invalid(format!(
                                "Move to {to_shown}: it already exists; delete it in the patch first (`*** Delete File: {to_shown}`) if it should be replaced. Nothing was changed"
                            )));
                        }
                        set(
                            &mut working,
                            &mut order,
                            &to,
                            Some(after),
                            Some(path.clone()),
                        );
                        set(&mut working, &mut order, &path, None, None);
                        summary.push(format!("M {to_shown} (moved from {shown})"));
                    }
                    None => {
                        set(&mut working, &mut order, &path, Some(after), None);
                        summary.push(format!("M {shown}"));
                    }
                }
            }
        }
    }

    // Writes first, then removes: a move's new file takes the old one's mode while it
    // is still there.
    let mut changes = Vec::new();
    for path in &order {
        let file = &working[path];
        if let Some(contents) = &file.contents {
            changes.push(Change::Write(FileWrite {
                path: path.clone(),
                contents: contents.clone().into_bytes(),
                mode_from: file.mode_from.clone(),
            }));
        }
    }
    for path in &order {
        let file = &working[path];
        if file.contents.is_none() && file.existed {
            changes.push(Change::Remove(path.clone()));
        }
    }
    if !changes.is_empty() {
        files.commit(&changes).map_err(|mut e| {
            e.message.push_str(". Nothing was changed");
            e
        })?;
    }
    Ok(text(format!("Applied the patch:\n{}", summary.join("\n"))))
}

/// Records `path` as the patch leaves it.
fn set(
    working: &mut BTreeMap<String, Working>,
    order: &mut Vec<String>,
    path: &str,
    contents: Option<String>,
    mode_from: Option<String>,
) {
    match working.get_mut(path) {
        Some(file) => {
            file.contents = contents;
            if mode_from.is_some() {
                file.mode_from = mode_from;
            }
        }
        None => {
            order.push(path.to_string());
            working.insert(
                path.to_string(),
                Working {
                    contents,
                    existed: false,
                    mode_from,
                    original: String::new(),
                },
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::memory::Memory;
    use crate::tools::testing::{context, failed, ok_text};
    use dsh_plugin::ErrorCode;

    fn patch(files: &Memory, body: &str) -> ToolResult {
        let args = Args {
            patch: format!("*** Begin Patch\n{body}\n*** End Patch\n"),
        };
        run(files, &context(), args).into()
    }

    #[test]
    fn add_update_move_and_delete_in_one_commit() {
        let files = Memory::new();
        files.seen(
            "src/app.py",
            "def handler():\n    return 1\n\n\ndef other():\n    pass\n",
        );
        files.set_mode("src/app.py", 0o755);
        files.seen("old.txt", "bye\n");
        files.seen("keep.txt", "a\nb\nc\n");
        let out = ok_text(patch(
            &files,
            "*** Add File: docs/new.md\n+# New\n+\n+text\n\
             *** Update File: src/app.py\n*** Move to: src/main.py\n@@ def handler():\n-    return 1\n+    return 2\n\
             *** Delete File: old.txt\n\
             *** Update File: keep.txt\n@@\n a\n-b\n+B\n c",
        ));
        assert_eq!(
            out,
            "Applied the patch:\nA docs/new.md\nM src/main.py (moved from src/app.py)\nD old.txt\nM keep.txt"
        );
        assert_eq!(*files.commits.borrow(), 1);
        assert_eq!(files.get("docs/new.md").as_deref(), Some("# New\n\ntext\n"));
        assert_eq!(
            files.get("src/main.py").as_deref(),
            Some("def handler():\n    return 2\n\n\ndef other():\n    pass\n")
        );
        assert_eq!(files.mode("src/main.py"), Some(0o755));
        assert_eq!(files.get("src/app.py"), None);
        assert_eq!(files.get("old.txt"), None);
        assert_eq!(files.get("keep.txt").as_deref(), Some("a\nB\nc\n"));
    }

    #[test]
    fn a_failing_second_hunk_changes_nothing_and_names_file_and_hunk() {
        let files = Memory::new();
        files.seen("a.rs", "fn a() {\n    1\n}\nfn b() {\n    2\n}\n");
        files.seen("z.txt", "z\n");
        let (code, message) = failed(patch(
            &files,
            "*** Update File: z.txt\n@@\n-z\n+Z\n\
             *** Update File: a.rs\n@@ fn a() {\n-    1\n+    10\n@@ fn b() {\n-    3\n+    30",
        ));
        assert_eq!(code, ErrorCode::InvalidArguments);
        assert!(
            message.starts_with("Update File a.rs, hunk 2 (patch line 10):"),
            "{message}"
        );
        assert!(message.contains("|    3\n"), "{message}");
        assert!(message.contains("Nothing was changed"));
        assert_eq!(*files.commits.borrow(), 0);
        assert_eq!(files.get("z.txt").as_deref(), Some("z\n"));
        assert_eq!(
            files.get("a.rs").as_deref(),
            Some("fn a() {\n    1\n}\nfn b() {\n    2\n}\n")
        );
    }

    #[test]
    fn lenient_whitespace_matching_and_crlf_are_kept() {
        let files = Memory::new();
        files.seen("w.cs", "class A {\r\n    int x = 1;   \r\n}\r\n");
        ok_text(patch(
            &files,
            "*** Update File: w.cs\n@@ class A {\n-int x = 1;\n+    int x = 2;\n }",
        ));
        assert_eq!(
            files.get("w.cs").as_deref(),
            Some("class A {\r\n    int x = 2;\r\n}\r\n")
        );
    }

    #[test]
    fn later_operations_see_earlier_ones() {
        let files = Memory::new();
        files.seen("a.txt", "1\n2\n");
        ok_text(patch(
            &files,
            "*** Update File: a.txt\n@@\n-1\n+one\n*** Update File: a.txt\n@@\n one\n-2\n+two",
        ));
        assert_eq!(files.get("a.txt").as_deref(), Some("one\ntwo\n"));
        // Added then deleted: nothing to commit for it.
        ok_text(patch(
            &files,
            "*** Add File: tmp.txt\n+x\n*** Delete File: tmp.txt",
        ));
        assert_eq!(files.get("tmp.txt"), None);
    }

    #[test]
    fn parse_errors_missing_files_and_stale_commits_change_nothing() {
        let files = Memory::new();
        let args = Args {
            patch: "*** Update File: a\n".into(),
        };
        let (code, message) = failed(run(&files, &context(), args).into());
        assert_eq!(code, ErrorCode::InvalidArguments);
        assert!(
            message.contains("does not parse (patch line 1)"),
            "{message}"
        );

        let (code, message) = failed(patch(&files, "*** Delete File: gone.txt"));
        assert_eq!(code, ErrorCode::NotFound);
        assert!(
            message.starts_with("Delete File gone.txt: there is no such file"),
            "{message}"
        );

        // Updating or deleting a file the model never read (or that changed since).
        files.put("unread.txt", "x\n");
        let (code, _) = failed(patch(&files, "*** Update File: unread.txt\n@@\n-x\n+y"));
        assert_eq!(code, ErrorCode::StaleFile);
        let (code, _) = failed(patch(&files, "*** Delete File: unread.txt"));
        assert_eq!(code, ErrorCode::StaleFile);
        assert_eq!(files.get("unread.txt").as_deref(), Some("x\n"));

        // Adding over a file never read: the host says it is stale.
        files.put("exists.txt", "theirs\n");
        let (code, message) = failed(patch(&files, "*** Add File: exists.txt\n+mine"));
        assert_eq!(code, ErrorCode::StaleFile);
        assert!(message.ends_with("Nothing was changed"));
        assert_eq!(files.get("exists.txt").as_deref(), Some("theirs\n"));

        // A move onto an existing file.
        files.read("/ws/exists.txt", 100, true).unwrap();
        files.put("b.txt", "b\n");
        let (code, message) = failed(patch(
            &files,
            "*** Update File: exists.txt\n*** Move to: b.txt",
        ));
        assert_eq!(code, ErrorCode::InvalidArguments);
        assert!(message.contains("already exists"));
    }

    #[test]
    fn markers_added_by_a_patch_are_refused() {
        let files = Memory::new();
        files.seen("conf.py", "KEY = 'AKIAABCDEFGHIJKLMNOP'\n");
        let (code, message) = failed(patch(
            &files,
            "*** Update File: conf.py\n@@\n-KEY = '[REDACTED:aws-access-key-id]'\n+KEY = '[REDACTED:aws-access-key-id]'\n+X = 1",
        ));
        assert_eq!(code, ErrorCode::InvalidArguments);
        // The marker is not in the file, so the hunk does not even match.
        assert!(message.contains("hunk 1"), "{message}");
        let (code, message) = failed(patch(
            &files,
            "*** Update File: conf.py\n@@\n KEY = 'AKIAABCDEFGHIJKLMNOP'\n+OTHER = '[REDACTED:github-token]'",
        ));
        assert_eq!(code, ErrorCode::InvalidArguments);
        assert!(message.contains("redact_secrets"), "{message}");
        assert_eq!(*files.commits.borrow(), 0);
    }
}
