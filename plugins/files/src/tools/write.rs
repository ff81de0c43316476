//! The `write` tool: a whole file created or replaced through one `files.commit`. The
//! host refuses to replace a file the caller has not read since it last changed
//! (`stale-file`, passed through). An existing CRLF file keeps CRLF when the model
//! writes plain `\n` text, and text holding a redaction marker the file does not hold
//! is refused.

use dsh_plugin::tool_files::files::{Change, FileWrite};
use dsh_plugin::{text, CallContext, ToolError, ToolResult};
use schemars::JsonSchema;
use serde::Deserialize;

use super::{invalid, Files, Settings};
use crate::pager::count_lines;
use crate::replace::{dominant_eol, to_crlf};
use crate::{paths, redaction};

pub const DESCRIPTION: &str = "Create a file, or replace a file's whole content, with `content` (missing parent \
directories are made). To replace an existing file, read it first: a file that changed since you last read it, or \
that you never read, is refused with STALE_FILE (read it, then write again). To change part of a file use edit or \
apply_patch instead. An existing file keeps its permission bits and its CRLF line endings; a new file gets mode 0644.";

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// The file: relative to the workspace (e.g. `src/new.rs`) or absolute inside it.
    #[schemars(length(min = 1), extend("format" = "path"))]
    pub path: String,
    /// The whole new content of the file, exactly as it should be (end it with a
    /// newline if the file should end with one).
    pub content: String,
}

pub fn run(files: &dyn Files, context: &CallContext, args: Args) -> Result<ToolResult, ToolError> {
    let path = paths::resolve(&context.workdir, &args.path, "path")?;
    let shown = paths::display(&context.workdir, &path);
    if files.is_dir(&path) {
        return Err(invalid(format!(
            "{shown} is a directory: write needs a file path"
        )));
    }
    let settings = Settings::of(context);
    // A look that is not a read: the host decides whether the write is stale.
    let existing = files
        .peek(&path, settings.max_read_bytes())
        .and_then(|bytes| String::from_utf8(bytes).ok());
    let mut contents = args.content;
    if let Some(marker) = redaction::new_marker(&contents, existing.as_deref().unwrap_or("")) {
        return Err(invalid(redaction::refuse_writing(marker)));
    }
    let mut note = "";
    if let Some(existing) = &existing {
        if dominant_eol(existing) == "\r\n" && contents.contains('\n') && !contents.contains("\r\n")
        {
            contents = to_crlf(&contents);
            note = " (kept its CRLF line endings)";
        }
    }
    let lines = count_lines(&contents);
    let change = Change::Write(FileWrite {
        path: path.clone(),
        contents: contents.into_bytes(),
        mode_from: None,
    });
    let changed = files.commit(&[change])?;
    let (shown, created, bytes) = match changed.first() {
        Some(c) => (c.path.clone(), c.created, c.bytes),
        None => (shown, false, 0),
    };
    let lines_text = format!("{lines} line{}", if lines == 1 { "" } else { "s" });
    Ok(text(if created {
        format!("created {shown} ({lines_text}, {bytes} bytes)")
    } else {
        format!("wrote {lines_text} ({bytes} bytes) to {shown}{note}")
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::memory::Memory;
    use crate::tools::testing::{context, failed, ok_text};
    use dsh_plugin::ErrorCode;

    fn write(files: &Memory, path: &str, content: &str) -> ToolResult {
        let args = Args {
            path: path.into(),
            content: content.into(),
        };
        run(files, &context(), args).into()
    }

    #[test]
    fn creates_then_replaces_after_a_read() {
        let files = Memory::new();
        assert_eq!(
            ok_text(write(&files, "src/new.rs", "a\nb\n")),
            "created src/new.rs (2 lines, 4 bytes)"
        );
        assert_eq!(files.get("src/new.rs").as_deref(), Some("a\nb\n"));
        // Written by this caller: it counts as read.
        assert_eq!(
            ok_text(write(&files, "/ws/src/new.rs", "c")),
            "wrote 1 line (1 bytes) to src/new.rs"
        );
    }

    #[test]
    fn a_stale_overwrite_is_refused_by_the_host() {
        let files = Memory::new();
        files.put("a.txt", "theirs\n");
        let (code, _) = failed(write(&files, "a.txt", "mine\n"));
        assert_eq!(code, ErrorCode::StaleFile);
        assert_eq!(files.get("a.txt").as_deref(), Some("theirs\n"));
        files.read("/ws/a.txt", 100, true).unwrap();
        ok_text(write(&files, "a.txt", "mine\n"));
        assert_eq!(files.get("a.txt").as_deref(), Some("mine\n"));
    }

    #[test]
    fn crlf_is_kept_and_markers_are_refused() {
        let files = Memory::new();
        files.put("w.bat", "echo 1\r\necho 2\r\n");
        files.read("/ws/w.bat", 100, true).unwrap();
        let out = ok_text(write(&files, "w.bat", "echo 3\necho 4\n"));
        assert!(out.ends_with("(kept its CRLF line endings)"), "{out}");
        assert_eq!(files.get("w.bat").as_deref(), Some("echo 3\r\necho 4\r\n"));

        files.put(".env", "KEY=AKIAABCDEFGHIJKLMNOP\n");
        files.read("/ws/.env", 100, true).unwrap();
        let (code, message) = failed(write(
            &files,
            ".env",
            "KEY=[REDACTED:aws-access-key-id]\nX=1\n",
        ));
        assert_eq!(code, ErrorCode::InvalidArguments);
        assert!(message.contains("redact_secrets"), "{message}");
        assert_eq!(
            files.get(".env").as_deref(),
            Some("KEY=AKIAABCDEFGHIJKLMNOP\n")
        );
    }
}
