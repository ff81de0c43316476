//! The `grep` tool: ripgrep-style content search under a directory (or in one file) of
//! the workspace, walked and read through the read-only preopen.

use std::path::Path;

use dsh_plugin::{text, CallContext, ToolError, ToolResult};
use schemars::JsonSchema;
use serde::Deserialize;

use super::glob::search_root;
use super::{invalid, result_budget, Settings};
use crate::paths;
use crate::search::{self, Mode, Options};

pub const DESCRIPTION: &str = "Search file contents with a regular expression (Rust regex syntax, as ripgrep: \
`fn\\s+\\w+`, `log.*Error`, `^import`; escape `( ) [ ] { } . * + ? ^ $ | \\` with a backslash to match them literally). \
output_mode `files_with_matches` (the default) lists the files that match, most recently modified first; `content` \
shows matching lines as `path:line:text`, with `context` lines around them as `path-line-text` and `--` between \
groups; `count` gives `path:N` per file. Narrow the search with `path` (a directory or one file), `glob` (`*.rs`, \
`!*_test.go`, `src/**/*.{ts,tsx}`; a glob without `/` matches file names at any depth) or `type` (ripgrep's file \
types: rust, py, js, ts, go, c, cpp, java, md, json, toml, yaml, ...). Files ignored by .gitignore, .git/ and binary \
files are skipped. A match stays within one line unless `multiline` is true. Results stop at `head_limit` (default \
250 lines or files), with a note when there are more. Paths are relative to the workspace.";

/// What grep reports.
#[derive(Deserialize, JsonSchema, Clone, Copy, Default)]
#[serde(rename_all = "snake_case")]
pub enum OutputMode {
    Content,
    #[default]
    FilesWithMatches,
    Count,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// The regular expression (Rust regex syntax).
    #[schemars(length(min = 1))]
    pub pattern: String,
    /// The directory or file to search, relative to the workspace or absolute inside it
    /// (default: the workspace).
    #[schemars(length(min = 1), extend("format" = "path"))]
    pub path: Option<String>,
    /// Only files matching this glob, e.g. `*.py`, `*.{ts,tsx}`, `src/**`; `!` in
    /// front excludes instead.
    #[schemars(length(min = 1))]
    pub glob: Option<String>,
    /// Only files of this type (ripgrep's names: rust, py, js, ts, go, c, cpp, java,
    /// md, json, toml, yaml, sh, html, css, ...).
    #[serde(rename = "type")]
    #[schemars(length(min = 1))]
    pub file_type: Option<String>,
    /// `files_with_matches` (default): the paths of matching files, newest first;
    /// `content`: matching lines as `path:line:text`; `count`: `path:N` per file.
    pub output_mode: Option<OutputMode>,
    /// Match letters in either case (default false).
    #[serde(default)]
    pub case_insensitive: bool,
    /// Lines to show before and after each match (content mode only; default 0).
    #[schemars(range(max = 50))]
    pub context: Option<u32>,
    /// Let matches span lines: `.` also matches a newline, and `\n` can be matched
    /// (default false).
    #[serde(default)]
    pub multiline: bool,
    /// The most lines (content) or files (files_with_matches, count) to return
    /// (default 250).
    #[schemars(range(min = 1))]
    pub head_limit: Option<u32>,
}

pub fn run(context: &CallContext, args: Args) -> Result<ToolResult, ToolError> {
    let root = search_root(context, args.path.as_deref(), "grep")?;
    let root_path = Path::new(&root);
    let root_shown = paths::display(&context.workdir, &root);
    let matcher = search::matcher(&args.pattern, args.case_insensitive, args.multiline).map_err(|e| {
        invalid(format!(
            "`{}` is not a valid regular expression: {e}\nTo match text literally, escape regex metacharacters with a backslash (`\\(`, `\\.`, `\\[`, `\\{{`)",
            args.pattern
        ))
    })?;
    // A glob applies relative to the directory searched.
    let glob_root = if root_path.is_dir() {
        root_path
    } else {
        root_path.parent().unwrap_or(root_path)
    };
    let glob = match &args.glob {
        Some(glob) => Some(search::glob_filter(glob_root, glob).map_err(invalid)?),
        None => None,
    };
    let types = match &args.file_type {
        Some(name) => Some(search::types(name).map_err(invalid)?),
        None => None,
    };
    let mode = match args.output_mode.unwrap_or_default() {
        OutputMode::Content => Mode::Content,
        OutputMode::FilesWithMatches => Mode::Files,
        OutputMode::Count => Mode::Count,
    };
    let head_limit = args
        .head_limit
        .map_or_else(|| Settings::of(context).grep_head_limit(), |l| l as usize);
    let options = Options {
        mode,
        context: args.context.unwrap_or(0) as usize,
        multiline: args.multiline,
        head_limit,
        budget: result_budget(context),
    };
    let outcome = search::search(
        root_path,
        Path::new(&context.workdir),
        &matcher,
        glob,
        types,
        &options,
    );

    if let Some(special) = &outcome.refused {
        return Err(super::special_refused(context, "grep", &root, special));
    }
    if outcome.shown == 0 && outcome.more.is_none() {
        let mut out = format!("no matches for `{}` in {root_shown}", args.pattern);
        let mut notes = vec![format!(
            "{} file{} searched",
            outcome.searched,
            if outcome.searched == 1 { "" } else { "s" }
        )];
        if outcome.binary > 0 {
            notes.push(format!("{} binary skipped", outcome.binary));
        }
        notes.push("files ignored by .gitignore not searched".into());
        if outcome.unreadable > 0 {
            notes.push(format!("{} unreadable", outcome.unreadable));
        }
        out.push_str(&format!(" ({})", notes.join("; ")));
        return Ok(text(out));
    }
    let mut out = outcome.text;
    let what = match mode {
        Mode::Content => "lines",
        Mode::Files | Mode::Count => "files",
    };
    match outcome.more {
        Some(Some(n)) => out.push_str(&format!(
            "[{n} more {what} match, not listed; narrow with path, glob or type, or raise head_limit]\n"
        )),
        Some(None) if outcome.budget_hit => out.push_str(&format!(
            "[stopped at the output budget after {} {what}; there are more: narrow with path, glob or type{}]\n",
            outcome.shown,
            if mode == Mode::Content { ", or use output_mode files_with_matches or count" } else { "" }
        )),
        Some(None) => out.push_str(&format!(
            "[stopped at head_limit={head_limit} {what}; there are more: narrow with path, glob or type, or raise head_limit]\n"
        )),
        None => {}
    }
    if outcome.unreadable > 0 {
        out.push_str(&format!(
            "[{} files or directories could not be read]\n",
            outcome.unreadable
        ));
    }
    out.pop();
    Ok(text(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::testing::{context, failed, ok_text};
    use crate::walk::testdir::TestDir;
    use dsh_plugin::ErrorCode;

    fn grep(dir: &TestDir, args: serde_json::Value) -> ToolResult {
        let mut context = context();
        context.workdir = dir.path().to_string_lossy().into_owned();
        run(&context, serde_json::from_value(args).unwrap()).into()
    }

    fn tree() -> TestDir {
        let dir = TestDir::new("grep-tool");
        dir.write("src/main.rs", "fn main() {\n    run();\n}\n");
        dir.write("src/run.rs", "pub fn run() {}\n");
        dir.write("README.md", "Run it with cargo run.\n");
        dir.touch("src/main.rs", 20);
        dir.touch("src/run.rs", 30);
        dir.touch("README.md", 10);
        dir
    }

    #[test]
    fn the_modes_and_filters() {
        let dir = tree();
        assert_eq!(
            ok_text(grep(&dir, serde_json::json!({"pattern": "run"}))),
            "src/run.rs\nsrc/main.rs\nREADME.md"
        );
        assert_eq!(
            ok_text(grep(
                &dir,
                serde_json::json!({"pattern": "run", "type": "rust", "output_mode": "count"})
            )),
            "src/main.rs:1\nsrc/run.rs:1"
        );
        assert_eq!(
            ok_text(grep(
                &dir,
                serde_json::json!({"pattern": "^run", "case_insensitive": true, "output_mode": "content"})
            )),
            "README.md:1:Run it with cargo run."
        );
        assert_eq!(
            ok_text(grep(
                &dir,
                serde_json::json!({"pattern": "fn", "glob": "run.*", "path": "src", "output_mode": "content"})
            )),
            "src/run.rs:1:pub fn run() {}"
        );
        assert_eq!(
            ok_text(grep(&dir, serde_json::json!({"pattern": "run", "head_limit": 1}))),
            "src/run.rs\n[2 more files match, not listed; narrow with path, glob or type, or raise head_limit]"
        );
        let none = ok_text(grep(&dir, serde_json::json!({"pattern": "zebra"})));
        assert!(
            none.starts_with("no matches for `zebra` in . (3 files searched"),
            "{none}"
        );
    }

    #[test]
    fn bad_patterns_types_and_paths_fail_clearly() {
        let dir = tree();
        let (code, message) = failed(grep(&dir, serde_json::json!({"pattern": "run("})));
        assert_eq!(code, ErrorCode::InvalidArguments);
        assert!(message.contains("not a valid regular expression") && message.contains("escape"));
        let (code, _) = failed(grep(
            &dir,
            serde_json::json!({"pattern": "x", "type": "nosuch"}),
        ));
        assert_eq!(code, ErrorCode::InvalidArguments);
        let (code, _) = failed(grep(
            &dir,
            serde_json::json!({"pattern": "x", "path": "missing"}),
        ));
        assert_eq!(code, ErrorCode::NotFound);
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_as_the_path_or_an_ignore_file_is_refused_naming_it() {
        let dir = tree();
        crate::walk::tests::mkfifo(&dir, "p");
        let (code, message) = failed(grep(&dir, serde_json::json!({"pattern": "x", "path": "p"})));
        assert_eq!(code, ErrorCode::InvalidArguments);
        assert!(
            message.starts_with("p is a FIFO (named pipe): grep reads only regular files"),
            "{message}"
        );
        crate::walk::tests::mkfifo(&dir, "src/.gitignore");
        let (code, message) = failed(grep(&dir, serde_json::json!({"pattern": "run"})));
        assert_eq!(code, ErrorCode::InvalidArguments);
        assert!(
            message.starts_with(
                "src/.gitignore is a FIFO (named pipe), and grep reads it as an ignore file"
            ),
            "{message}"
        );
    }
}
