//! `todos`: counts the TODO and FIXME lines under a path (a file or a directory read
//! through a granted directory), per file, and logs what it scanned. The same tool as
//! `examples/plugins/python/todos` and `examples/plugins/js/todos`, answer for answer.

use std::path::{Path, PathBuf};

use dsh_plugin::tool::log::{self, Level};
use dsh_plugin::{failure, text, CallContext, ErrorCode, Tool, ToolResult, Tools};
use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    /// A file or directory, absolute or relative to the workspace
    path: String,
}

fn count_lines(bytes: &[u8]) -> usize {
    String::from_utf8_lossy(bytes)
        .split('\n')
        .filter(|line| line.contains("TODO") || line.contains("FIXME"))
        .count()
}

/// (relative path, count) of every file under `root` with a match, sorted by path, and
/// how many files were read.
fn scan(root: &Path) -> std::io::Result<(Vec<(String, usize)>, usize)> {
    if !std::fs::metadata(root)?.is_dir() {
        let n = count_lines(&std::fs::read(root)?);
        let name = root.file_name().map(|n| n.to_string_lossy().into_owned());
        return Ok((
            name.filter(|_| n > 0)
                .map(|name| (name, n))
                .into_iter()
                .collect(),
            1,
        ));
    }
    let (mut found, mut scanned) = (Vec::new(), 0);
    let mut stack = vec![String::new()];
    while let Some(rel) = stack.pop() {
        let mut names: Vec<String> = std::fs::read_dir(root.join(&rel))?
            .filter_map(|entry| entry.ok())
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        for name in names.into_iter().rev() {
            let child = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            let full = root.join(&child);
            if full.is_dir() {
                stack.push(child);
                continue;
            }
            match std::fs::read(&full) {
                Ok(bytes) => {
                    scanned += 1;
                    let n = count_lines(&bytes);
                    if n > 0 {
                        found.push((child, n));
                    }
                }
                Err(_) => log::write(Level::Warn, &format!("cannot read {child}")),
            }
        }
    }
    found.sort();
    Ok((found, scanned))
}

struct Todos;

impl Tools for Todos {
    fn tools() -> Vec<Tool> {
        vec![Tool::new(
            "todos",
            "Count the TODO and FIXME lines under a path (a file or a directory), per file.",
            todos,
        )
        .idempotent()]
    }
}

fn todos(context: &CallContext, Args { path }: Args) -> ToolResult {
    let root = match path.starts_with('/') {
        true => PathBuf::from(&path),
        false => Path::new(&context.workdir).join(&path),
    };
    let Ok((found, scanned)) = scan(&root) else {
        return failure(
            ErrorCode::InvalidArguments,
            format!("cannot read {path}: no such file or directory in the granted directories"),
        );
    };
    let total: usize = found.iter().map(|(_, n)| n).sum();
    log::write(
        Level::Info,
        &format!("todos: {scanned} files scanned, {total} lines found"),
    );
    let mut lines: Vec<String> = found.iter().map(|(rel, n)| format!("{rel}: {n}")).collect();
    lines.push(format!("total: {total} in {} files", found.len()));
    let files: serde_json::Map<String, serde_json::Value> =
        found.into_iter().map(|(rel, n)| (rel, n.into())).collect();
    text(lines.join("\n"))
        .with_structured_json(serde_json::json!({"files": files, "total": total}).to_string())
}

dsh_plugin::export!(tool: Todos);
