//! The `edit` tool: one exact text replacement (or every occurrence) in a file read
//! through the host, written back with one `files.commit`, and the changed region shown
//! with line numbers. Line endings and the final newline are kept (see `replace`).

use dsh_plugin::tool_files::files::{Change, FileWrite};
use dsh_plugin::{text, CallContext, ToolError, ToolResult};
use schemars::JsonSchema;
use serde::Deserialize;

use super::{fit_lines, invalid, result_budget, utf8, Files, Settings};
use crate::replace::{changed_region, not_found_hint, replace, Refusal};
use crate::{paths, redaction};

pub const DESCRIPTION: &str = "Replace exact text in a file. `old_string` must occur in the file exactly once (or set \
`replace_all` to replace every occurrence); it is replaced by `new_string`. Copy `old_string` from read's output \
without the line-number prefix, with its exact indentation and whitespace, and include enough surrounding lines to make \
it unique. Line endings are kept (in a CRLF file give text with plain line breaks), and so is whether the file ends \
with a newline. Read the file first: edit refuses a file that changed since you last read it, or that you never \
read (STALE_FILE: read it again, then retry). Returns the changed region with line numbers. If `old_string` is not found, or found more than once, nothing is \
changed and the error says why (and on which lines it occurs).";

/// Lines of context shown around a change.
const CONTEXT_LINES: usize = 3;
/// The most lines of changed region shown.
const MAX_REGION_LINES: usize = 80;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// The file: relative to the workspace or absolute inside it.
    #[schemars(length(min = 1), extend("format" = "path"))]
    pub path: String,
    /// The exact text to replace, as the file has it (without read's line-number prefixes).
    pub old_string: String,
    /// The text to put in its place (different from `old_string`; may be empty to delete).
    pub new_string: String,
    /// Replace every occurrence of `old_string` instead of requiring exactly one (default false).
    #[serde(default)]
    pub replace_all: bool,
}

pub fn run(files: &dyn Files, context: &CallContext, args: Args) -> Result<ToolResult, ToolError> {
    let path = paths::resolve(&context.workdir, &args.path, "path")?;
    if args.old_string.is_empty() {
        return Err(invalid(
            "old_string is empty: to create a file use write; to insert text, put a neighbouring line in old_string and repeat it in new_string with the new text",
        ));
    }
    if args.old_string == args.new_string {
        return Err(invalid(
            "old_string and new_string are the same: the edit would change nothing",
        ));
    }
    // Not remembered: only what the model has read counts, so the commit is refused
    // (stale-file) when the file changed since the model last read it.
    let file = files.read(&path, Settings::of(context).max_read_bytes(), false)?;
    let shown = file.path.clone();
    let original = utf8(&file.contents, &shown, "edit")?;
    let replaced = replace(original, &args.old_string, &args.new_string, args.replace_all).map_err(|refusal| {
        match refusal {
            Refusal::NotFound => invalid(format!(
                "old_string was not found in {shown}: {}. Nothing was changed",
                not_found_hint(original, &args.old_string)
            )),
            Refusal::Ambiguous { count, lines } => {
                let lines: Vec<String> = lines.iter().map(usize::to_string).collect();
                let more = if count > lines.len() { ", ..." } else { "" };
                invalid(format!(
                    "old_string was found {count} times in {shown} (lines {}{more}): include more of the surrounding lines to make it unique, or set replace_all to replace every occurrence. Nothing was changed",
                    lines.join(", ")
                ))
            }
        }
    })?;
    if replaced.text == original {
        return Err(invalid(
            "the replacement leaves the file as it was: nothing to change",
        ));
    }
    if let Some(marker) = redaction::new_marker(&args.new_string, original) {
        return Err(invalid(redaction::refuse_writing(marker)));
    }
    let mut region = changed_region(
        &replaced.text,
        &replaced.spans,
        CONTEXT_LINES,
        MAX_REGION_LINES,
    );
    let change = Change::Write(FileWrite {
        path,
        contents: replaced.text.into_bytes(),
        mode_from: None,
    });
    files.commit(&[change])?;
    let what = if replaced.count == 1 {
        String::new()
    } else {
        format!(" ({} replacements)", replaced.count)
    };
    let mut out = format!("The file {shown} was edited{what}; here is the changed region:\n");
    if fit_lines(
        &mut region,
        result_budget(context).saturating_sub(out.len()),
    ) {
        region.push_str("[... the rest of the region does not fit the output budget; read the file to see it]\n");
    }
    out.push_str(&region);
    Ok(text(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::memory::Memory;
    use crate::tools::testing::{context, failed, ok_text};
    use dsh_plugin::ErrorCode;

    fn edit(files: &Memory, path: &str, old: &str, new: &str, all: bool) -> ToolResult {
        let args = Args {
            path: path.into(),
            old_string: old.into(),
            new_string: new.into(),
            replace_all: all,
        };
        run(files, &context(), args).into()
    }

    /// A file as the model has read it.
    fn with_file(path: &str, contents: &[u8]) -> Memory {
        let files = Memory::new();
        files.seen(path, contents);
        files
    }

    #[test]
    fn an_edit_replaces_and_shows_the_region() {
        let files = with_file(
            "src/a.py",
            b"def f():\n    return 1\n\n\ndef g():\n    pass\n",
        );
        let out = ok_text(edit(
            &files,
            "src/a.py",
            "    return 1",
            "    return 2",
            false,
        ));
        assert_eq!(
            out,
            "The file src/a.py was edited; here is the changed region:\n     1\tdef f():\n     2\t    return 2\n     3\t\n     4\t\n     5\tdef g():\n"
        );
        assert_eq!(
            files.get("src/a.py").as_deref(),
            Some("def f():\n    return 2\n\n\ndef g():\n    pass\n")
        );
    }

    #[test]
    fn a_crlf_file_without_a_final_newline_stays_so() {
        let files = with_file("w.txt", b"one\r\ntwo\r\nthree");
        ok_text(edit(&files, "w.txt", "two\nthree", "2\n3\n", false));
        assert_eq!(files.get("w.txt").as_deref(), Some("one\r\n2\r\n3"));
    }

    #[test]
    fn missing_ambiguous_and_identical_texts_change_nothing() {
        let files = with_file("a.txt", b"x = 1\ny = 2\nx = 1\n");
        let (code, message) = failed(edit(&files, "a.txt", "x = 1", "x = 3", false));
        assert_eq!(code, ErrorCode::InvalidArguments);
        assert!(
            message.contains("found 2 times in a.txt (lines 1, 3)"),
            "{message}"
        );

        let (code, message) = failed(edit(&files, "a.txt", "  y = 2", "y = 3", false));
        assert_eq!(code, ErrorCode::InvalidArguments);
        assert!(
            message.contains("not found in a.txt") && message.contains("line"),
            "{message}"
        );

        let (code, _) = failed(edit(&files, "a.txt", "same", "same", false));
        assert_eq!(code, ErrorCode::InvalidArguments);
        let (code, _) = failed(edit(&files, "a.txt", "", "x", false));
        assert_eq!(code, ErrorCode::InvalidArguments);
        assert_eq!(*files.commits.borrow(), 0);

        let out = ok_text(edit(&files, "a.txt", "x = 1", "x = 3", true));
        assert!(out.contains("(2 replacements)"));
        assert_eq!(files.get("a.txt").as_deref(), Some("x = 3\ny = 2\nx = 3\n"));
    }

    #[test]
    fn non_utf8_files_and_redaction_markers_are_refused() {
        let files = with_file("l1.txt", b"caf\xe9 = 1\n");
        let (code, message) = failed(edit(&files, "l1.txt", "= 1", "= 2", false));
        assert_eq!(code, ErrorCode::InvalidArguments);
        assert!(message.contains("not UTF-8"), "{message}");

        let files = with_file("conf.py", b"KEY = \"AKIAABCDEFGHIJKLMNOP\"\nDEBUG = True\n");
        let (code, message) = failed(edit(
            &files,
            "conf.py",
            "KEY = \"[REDACTED:aws-access-key-id]\"\nDEBUG = True",
            "KEY = \"[REDACTED:aws-access-key-id]\"\nDEBUG = False",
            false,
        ));
        assert_eq!(code, ErrorCode::InvalidArguments);
        assert!(message.contains("never saw"), "{message}");
        let (code, _) = failed(edit(
            &files,
            "conf.py",
            "DEBUG = True",
            "TOKEN = \"[REDACTED:github-token]\"",
            false,
        ));
        assert_eq!(code, ErrorCode::InvalidArguments);
        assert_eq!(*files.commits.borrow(), 0);
    }

    #[test]
    fn the_hosts_errors_are_the_answer() {
        let files = Memory::new();
        let (code, _) = failed(edit(&files, "nope.txt", "a", "b", false));
        assert_eq!(code, ErrorCode::NotFound);
        let files = with_file("a.txt", b"a\n");
        *files.fail_commit.borrow_mut() = Some(dsh_plugin::error(ErrorCode::IoError, "disk full"));
        let (code, message) = failed(edit(&files, "a.txt", "a", "b", false));
        assert_eq!((code, message.as_str()), (ErrorCode::IoError, "disk full"));
        assert_eq!(files.get("a.txt").as_deref(), Some("a\n"));
    }

    #[test]
    fn a_file_never_read_or_changed_since_is_stale() {
        let files = Memory::new();
        files.put("a.txt", "one\n");
        let (code, _) = failed(edit(&files, "a.txt", "one", "two", false));
        assert_eq!(code, ErrorCode::StaleFile);
        files.read("/ws/a.txt", 100, true).unwrap();
        ok_text(edit(&files, "a.txt", "one", "two", false));
        // Its own edit counts as read: a second edit goes through.
        ok_text(edit(&files, "a.txt", "two", "three", false));
        // Changed by someone else since: stale again.
        files.put("a.txt", "three\nmore\n");
        let (code, _) = failed(edit(&files, "a.txt", "three", "four", false));
        assert_eq!(code, ErrorCode::StaleFile);
        assert_eq!(files.get("a.txt").as_deref(), Some("three\nmore\n"));
    }

    #[test]
    fn permissions_are_the_hosts_to_keep() {
        let files = with_file("run.sh", b"echo a\n");
        files.set_mode("run.sh", 0o755);
        ok_text(edit(&files, "run.sh", "echo a", "echo b", false));
        assert_eq!(files.mode("run.sh"), Some(0o755));
    }
}
