//! The `glob` tool: files by name pattern under a directory of the workspace, most
//! recently modified first, capped, walked through the read-only preopen.

use std::path::Path;

use dsh_plugin::{error, text, CallContext, ErrorCode, ToolError, ToolResult};
use schemars::JsonSchema;
use serde::Deserialize;

use super::{fit_lines, invalid, result_budget, Settings};
use crate::find::{find, Pattern};
use crate::paths;

pub const DESCRIPTION: &str = "Find files by name pattern, most recently modified first. `**/*.rs` matches at any \
depth, `src/*.{ts,tsx}` only directly in src; `*` and `?` never cross a `/`. The pattern is matched against paths \
relative to `path` (default: the workspace); results are paths relative to the workspace, ready for read. Files \
ignored by .gitignore (and .git/) are left out unless `include_ignored` is true. At most 200 paths are listed, then \
how many more matched. To search file contents use grep.";

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// The glob, e.g. `**/*.py`, `src/**/test_*.py`, `*.{json,yaml}`.
    #[schemars(length(min = 1))]
    pub pattern: String,
    /// The directory to search, relative to the workspace or absolute inside it
    /// (default: the workspace).
    #[schemars(length(min = 1), extend("format" = "path"))]
    pub path: Option<String>,
    /// Also list files ignored by .gitignore, .ignore and .git/info/exclude, such as
    /// build output and dependencies (default false).
    #[serde(default)]
    pub include_ignored: bool,
}

/// The directory `path` names, or why it is not one.
pub fn search_root(
    context: &CallContext,
    path: Option<&str>,
    tool: &str,
) -> Result<String, ToolError> {
    let root = match path {
        Some(path) => paths::to_walk(paths::resolve(&context.workdir, path, "path")?),
        None => paths::join(&context.workdir, "."),
    };
    match std::fs::metadata(&root) {
        Ok(_) => Ok(root),
        // Only for the message: the preopens are what confine the walk.
        Err(_)
            if !Path::new(&root).starts_with(&context.workdir)
                && crate::fsys::top_of(Path::new(&root)).is_none() =>
        {
            Err(invalid(format!(
                "{root} is outside the workspace {} (and every extra root dsh.toml's [files] extra_roots names): {tool} searches only those (give a path inside one, or one relative to the workspace)",
                context.workdir
            )))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(error(
            ErrorCode::NotFound,
            format!(
                "no such file or directory: {}",
                paths::display(&context.workdir, &root)
            ),
        )),
        Err(e) => Err(invalid(format!(
            "cannot read {}: {e} ({tool} sees only the workspace {} and the extra roots)",
            paths::display(&context.workdir, &root),
            context.workdir
        ))),
    }
}

pub fn run(context: &CallContext, args: Args) -> Result<ToolResult, ToolError> {
    let root = search_root(context, args.path.as_deref(), "glob")?;
    let root_shown = paths::display(&context.workdir, &root);
    if let Some(kind) = crate::fsys::special_at(Path::new(&root)) {
        return Err(invalid(format!(
            "{root_shown} is {kind}, not a directory: give glob a directory as `path` (a FIFO, a socket or a device is never opened)"
        )));
    }
    if !Path::new(&root).is_dir() {
        return Err(invalid(format!(
            "{root_shown} is a file, not a directory: give glob a directory as `path` (read the file with read)"
        )));
    }
    let pattern = Pattern::new(&args.pattern, Path::new(&root)).map_err(invalid)?;
    let limit = Settings::of(context).glob_limit();
    let found = find(
        Path::new(&root),
        Path::new(&context.workdir),
        &pattern,
        args.include_ignored,
        limit,
    )
    .map_err(|e| match crate::fsys::Special::of(&e) {
        Some(special) => super::special_refused(context, "glob", &root, special),
        None => invalid(format!("cannot list {root_shown}: {e}")),
    })?;
    Ok(text(render(context, &root, &root_shown, &args, &found)))
}

fn render(
    context: &CallContext,
    root: &str,
    root_shown: &str,
    args: &Args,
    found: &crate::find::Found,
) -> String {
    if found.total == 0 {
        let mut out = format!("no files match `{}` under {root_shown}", args.pattern);
        if !args.include_ignored {
            out.push_str(
                " (files ignored by .gitignore were left out: set include_ignored to list them)",
            );
        }
        if !args.pattern.contains('/') && !args.pattern.starts_with("**") {
            out.push_str(&format!(
                "; `{}` matches only directly in {root_shown}: use `**/{}` for every depth",
                args.pattern, args.pattern
            ));
        }
        return out;
    }
    let mut out = String::new();
    for relative in &found.paths {
        let full = Path::new(root).join(relative);
        out.push_str(&paths::display(&context.workdir, &full.to_string_lossy()));
        out.push('\n');
    }
    let mut shown = found.paths.len();
    if fit_lines(&mut out, result_budget(context)) {
        shown = out.lines().count();
    }
    if found.total > shown {
        out.push_str(&format!(
            "[{} more files match, not listed; narrow the pattern or path]\n",
            found.total - shown
        ));
    }
    if found.unreadable > 0 {
        out.push_str(&format!(
            "[{} entries could not be read]\n",
            found.unreadable
        ));
    }
    out.pop();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::testing::{context, failed, ok_text};
    use crate::walk::testdir::TestDir;

    fn glob(dir: &TestDir, args: serde_json::Value) -> ToolResult {
        let mut context = context();
        context.workdir = dir.path().to_string_lossy().into_owned();
        context.settings_json = r#"{"glob_limit": 2}"#.into();
        run(&context, serde_json::from_value(args).unwrap()).into()
    }

    #[test]
    fn lists_newest_first_capped_relative_to_the_workspace() {
        let dir = TestDir::new("glob-tool");
        for (i, name) in ["src/a.rs", "src/b.rs", "src/c/d.rs", "x.md"]
            .iter()
            .enumerate()
        {
            dir.write(name, "x");
            dir.touch(name, 10 + i as u64);
        }
        assert_eq!(
            ok_text(glob(&dir, serde_json::json!({"pattern": "**/*.rs"}))),
            "src/c/d.rs\nsrc/b.rs\n[1 more files match, not listed; narrow the pattern or path]"
        );
        assert_eq!(
            ok_text(glob(
                &dir,
                serde_json::json!({"pattern": "*.rs", "path": "src"})
            )),
            "src/b.rs\nsrc/a.rs"
        );
        let none = ok_text(glob(&dir, serde_json::json!({"pattern": "*.rs"})));
        assert!(none.starts_with("no files match `*.rs` under ."), "{none}");
        assert!(none.contains("use `**/*.rs`"));
    }

    #[test]
    fn a_missing_path_a_file_path_and_a_bad_pattern_fail_clearly() {
        let dir = TestDir::new("glob-errors");
        dir.write("f.txt", "x");
        let (code, _) = failed(glob(
            &dir,
            serde_json::json!({"pattern": "*", "path": "nope"}),
        ));
        assert_eq!(code, ErrorCode::NotFound);
        let (code, message) = failed(glob(
            &dir,
            serde_json::json!({"pattern": "*", "path": "f.txt"}),
        ));
        assert_eq!(code, ErrorCode::InvalidArguments);
        assert!(message.contains("is a file"));
        let (code, message) = failed(glob(&dir, serde_json::json!({"pattern": "[x"})));
        assert_eq!(code, ErrorCode::InvalidArguments);
        assert!(message.contains("not a valid glob"));
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_as_the_path_or_an_ignore_file_on_the_way_is_refused_naming_it() {
        let dir = TestDir::new("glob-fifo");
        dir.write("sub/a.rs", "x");
        crate::walk::tests::mkfifo(&dir, "p");
        let (code, message) = failed(glob(&dir, serde_json::json!({"pattern": "*", "path": "p"})));
        assert_eq!(code, dsh_plugin::ErrorCode::InvalidArguments);
        assert!(
            message.starts_with("p is a FIFO (named pipe), not a directory"),
            "{message}"
        );
        crate::walk::tests::mkfifo(&dir, ".git/info/exclude");
        let (code, message) = failed(glob(
            &dir,
            serde_json::json!({"pattern": "*", "path": "sub"}),
        ));
        assert_eq!(code, dsh_plugin::ErrorCode::InvalidArguments);
        assert!(
            message.starts_with(
                ".git/info/exclude is a FIFO (named pipe), and glob reads it as an ignore file"
            ),
            "{message}"
        );
        let listed = ok_text(glob(
            &dir,
            serde_json::json!({"pattern": "*", "path": "sub", "include_ignored": true}),
        ));
        assert_eq!(listed, "sub/a.rs");
    }
}
