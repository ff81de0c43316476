//! The eight tools as the model sees them: each one's arguments (their schema derived
//! with schemars, doc comments as descriptions), its description, and the handler that
//! turns a call into the plain modules' work and the host's `files` calls (`checkpoints`
//! and `undo`, in [`undo`], the host's `undo` calls). Handlers take the host as a
//! [`Files`] (or an [`undo::Undo`]) so the native tests run them against an in-memory
//! workspace (or canned answers).

pub mod apply_patch;
pub mod edit;
pub mod glob;
pub mod grep;
pub mod read;
pub mod undo;
pub mod write;

use dsh_plugin::{error, CallContext, ErrorCode, ToolError};
use serde::Deserialize;

pub use crate::host::Files;

/// This plugin's settings (`[plugins.files.settings]` in `dsh.toml`).
#[derive(Deserialize, Default, Debug)]
#[serde(default)]
pub struct Settings {
    /// The largest file read, edit and apply_patch read (32 MiB).
    pub max_read_bytes: Option<u64>,
    /// The most paths glob lists (200).
    pub glob_limit: Option<usize>,
    /// grep's default `head_limit` (250).
    pub grep_head_limit: Option<usize>,
}

const DEFAULT_MAX_READ_BYTES: u64 = 32 << 20;
const DEFAULT_GLOB_LIMIT: usize = 200;
const DEFAULT_GREP_HEAD_LIMIT: usize = 250;

impl Settings {
    pub fn of(context: &CallContext) -> Settings {
        context.settings()
    }

    pub fn max_read_bytes(&self) -> u64 {
        self.max_read_bytes.unwrap_or(DEFAULT_MAX_READ_BYTES)
    }

    pub fn glob_limit(&self) -> usize {
        self.glob_limit.unwrap_or(DEFAULT_GLOB_LIMIT).max(1)
    }

    pub fn grep_head_limit(&self) -> usize {
        self.grep_head_limit
            .unwrap_or(DEFAULT_GREP_HEAD_LIMIT)
            .max(1)
    }
}

/// An `invalid-arguments` error.
pub fn invalid(message: impl Into<String>) -> ToolError {
    error(ErrorCode::InvalidArguments, message)
}

/// The `invalid-arguments` error of `tool` (glob or grep) searching `root` that came
/// upon `special`, a FIFO, a socket or a device it had to read (`root` itself, or an
/// ignore file of the walk): never opened, so never waited on.
pub fn special_refused(
    context: &CallContext,
    tool: &str,
    root: &str,
    special: &crate::fsys::Special,
) -> ToolError {
    let shown = crate::paths::display(&context.workdir, &special.path.to_string_lossy());
    match special.path.as_path() == std::path::Path::new(root) {
        true => invalid(format!(
            "{shown} is {}: {tool} reads only regular files and directories (a FIFO, a \
             socket or a device is never opened)",
            special.kind
        )),
        false => invalid(format!(
            "{shown} is {}, and {tool} reads it as an ignore file (.gitignore, .ignore and \
             .git/info/exclude say what a search leaves out): it is never opened, so nothing \
             was searched. Remove it or make it a regular file, or set include_ignored \
             (glob) to search without ignore files",
            special.kind
        )),
    }
}

/// Bytes of the output budget kept for a result's notes and footer.
pub const NOTE_ROOM: usize = 400;

/// The part of the call's output budget results may fill.
pub fn result_budget(context: &CallContext) -> usize {
    (context.output_budget as usize)
        .saturating_sub(NOTE_ROOM)
        .max(200)
}

/// `text` cut at a line boundary to at most `budget` bytes; true when it was cut.
pub fn fit_lines(text: &mut String, budget: usize) -> bool {
    if text.len() <= budget {
        return false;
    }
    let mut end = budget;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let end = text[..end].rfind('\n').map_or(0, |at| at + 1);
    text.truncate(end);
    true
}

/// `text` as UTF-8, or the refusal to rewrite a file that is not.
pub fn utf8<'a>(bytes: &'a [u8], path: &str, tool: &str) -> Result<&'a str, ToolError> {
    simdutf8::compat::from_utf8(bytes).map_err(|e| {
        invalid(format!(
            "{path} is not UTF-8 text (invalid byte at offset {}): {tool} refuses to rewrite it, since that would change bytes you never saw. Change it with bash instead",
            e.valid_up_to()
        ))
    })
}

#[cfg(test)]
pub mod testing {
    //! A call context for the handlers' tests: workdir `/ws`, a 30000-byte budget.

    use dsh_plugin::{CallContext, ContentItem, ErrorCode, ToolResult};

    pub fn context() -> CallContext {
        CallContext {
            owner: "owner".into(),
            session: "session".into(),
            call_id: "call-1".into(),
            workdir: "/ws".into(),
            scope: "default".into(),
            settings_json: "{}".into(),
            output_budget: 30_000,
        }
    }

    /// The one text item of a successful result.
    pub fn ok_text(result: ToolResult) -> String {
        assert!(result.error.is_none(), "failed: {:?}", result.error);
        match result.content.as_slice() {
            [ContentItem::Text(text)] => text.clone(),
            other => panic!("not one text item: {other:?}"),
        }
    }

    /// The code and message of a failed result.
    pub fn failed(result: ToolResult) -> (ErrorCode, String) {
        let error = result.error.expect("the call failed");
        (error.code, error.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_have_defaults_and_read_overrides() {
        let mut context = testing::context();
        let settings = Settings::of(&context);
        assert_eq!(settings.max_read_bytes(), 32 << 20);
        assert_eq!(
            (settings.glob_limit(), settings.grep_head_limit()),
            (200, 250)
        );
        context.settings_json = r#"{"max_read_bytes": 1024, "glob_limit": 5}"#.into();
        let settings = Settings::of(&context);
        assert_eq!(
            (settings.max_read_bytes(), settings.glob_limit()),
            (1024, 5)
        );
    }

    #[test]
    fn fit_lines_cuts_at_a_line_boundary() {
        let mut text = "aaa\nbbb\nccc\n".to_string();
        assert!(!fit_lines(&mut text, 100));
        assert!(fit_lines(&mut text, 9));
        assert_eq!(text, "aaa\nbbb\n");
    }
}
