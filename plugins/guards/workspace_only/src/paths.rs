//! The rules of `workspace_only`: which arguments name a place, how a path resolves
//! against the workspace, and when it is outside.

use serde_json::Value;

/// Top-level arguments that name the directory or file a call works in.
const PATH_ARGUMENTS: &[&str] = &["workdir", "cwd", "dir", "directory", "path"];

/// Why a call to `tool` with `args` leaves `workspace`, or `None` when it stays inside.
pub fn leaves_workspace(tool: &str, args: &Value, workspace: &str) -> Option<String> {
    let workspace = resolve("/", workspace);
    for key in PATH_ARGUMENTS {
        let Some(path) = args.get(key).and_then(Value::as_str) else {
            continue;
        };
        let resolved = resolve(&workspace, path);
        if !inside(&workspace, &resolved) {
            return Some(outside(
                &format!("`{key}` {path}"),
                path,
                &resolved,
                &workspace,
            ));
        }
    }
    if tool == "bash" {
        let command = args.get("command").and_then(Value::as_str)?;
        let target = leading_cd(command)?;
        // The command runs in its `workdir` argument (checked above) or the workspace.
        let base = args
            .get("workdir")
            .and_then(Value::as_str)
            .map_or_else(|| workspace.clone(), |w| resolve(&workspace, w));
        let resolved = resolve(&base, &target);
        if !inside(&workspace, &resolved) {
            return Some(outside(
                &format!("`cd {target}`"),
                &target,
                &resolved,
                &workspace,
            ));
        }
    }
    None
}

/// The reason for a path that leaves the workspace.
fn outside(what: &str, path: &str, resolved: &str, workspace: &str) -> String {
    if path == resolved {
        format!("{what} is outside the workspace {workspace}")
    } else {
        format!("{what} resolves to {resolved}, outside the workspace {workspace}")
    }
}

/// The directory of a `cd` that opens `command`, when it is a literal path: `cd -`, a
/// bare `cd`, and targets starting with `~` or `$` are not judged.
fn leading_cd(command: &str) -> Option<String> {
    let first = guard_shell::commands(command).into_iter().next()?;
    if first.program() != Some("cd") {
        return None;
    }
    let target = first
        .args()
        .iter()
        .find(|arg| !(arg.len() > 1 && arg.starts_with('-')))?;
    let unknown = target == "-" || target.starts_with('~') || target.starts_with('$');
    (!unknown).then(|| target.clone())
}

/// `path` resolved against the absolute directory `base`: `.`, `..` and repeated `/`
/// resolved lexically, `..` stopping at `/`.
pub fn resolve(base: &str, path: &str) -> String {
    let joined = if path.starts_with('/') {
        path.to_owned()
    } else {
        format!("{base}/{path}")
    };
    let mut parts = Vec::new();
    for part in joined.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            _ => parts.push(part),
        }
    }
    format!("/{}", parts.join("/"))
}

/// True when the resolved `path` is the resolved `workspace` or below it.
pub fn inside(workspace: &str, path: &str) -> bool {
    workspace == "/"
        || path == workspace
        || path
            .strip_prefix(workspace)
            .is_some_and(|rest| rest.starts_with('/'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn resolve_is_lexical() {
        assert_eq!(resolve("/ws", "sub"), "/ws/sub");
        assert_eq!(resolve("/ws", "./sub/./x/"), "/ws/sub/x");
        assert_eq!(resolve("/ws", "sub/../.."), "/");
        assert_eq!(resolve("/ws", "../../../.."), "/");
        assert_eq!(resolve("/ws", "/ws/../etc"), "/etc");
        assert_eq!(resolve("/ws", "//ws//a"), "/ws/a");
        assert_eq!(resolve("/ws", ""), "/ws");
        assert_eq!(resolve("/", "/ws/"), "/ws");
    }

    #[test]
    fn inside_compares_whole_components() {
        assert!(inside("/ws", "/ws"));
        assert!(inside("/ws", "/ws/sub"));
        assert!(!inside("/ws", "/ws2"));
        assert!(!inside("/ws", "/w"));
        assert!(!inside("/ws", "/"));
        assert!(!inside("/ws", "/etc"));
        assert!(inside("/", "/anything"));
    }

    fn check(tool: &str, args: serde_json::Value) -> Option<String> {
        leaves_workspace(tool, &args, "/ws")
    }

    #[test]
    fn path_arguments_inside_are_allowed() {
        for key in PATH_ARGUMENTS {
            for path in [
                "/ws",
                "/ws/",
                "/ws/sub",
                ".",
                "sub/dir",
                "sub/../other",
                "a/./b",
            ] {
                assert_eq!(check("any", json!({ *key: path })), None, "{key}={path}");
            }
        }
        assert_eq!(leaves_workspace("any", &json!({"path": "x"}), "/ws/"), None);
    }

    #[test]
    fn path_arguments_outside_are_denied() {
        assert_eq!(
            check("read", json!({"path": "/etc/passwd"})).as_deref(),
            Some("`path` /etc/passwd is outside the workspace /ws")
        );
        assert_eq!(
            check("bash", json!({"command": "ls", "workdir": "../other"})).as_deref(),
            Some("`workdir` ../other resolves to /other, outside the workspace /ws")
        );
        assert!(check("x", json!({"path": "/ws/../etc"}))
            .unwrap()
            .contains("resolves to /etc"));
        assert!(check("x", json!({"cwd": "/ws2"})).is_some());
        assert!(check("x", json!({"dir": "/"})).is_some());
        assert!(check("x", json!({"directory": "sub/../../.."})).is_some());
        assert!(check("terminal_open", json!({"cwd": "/tmp"})).is_some());
    }

    #[test]
    fn other_and_nested_arguments_are_ignored() {
        assert_eq!(
            check(
                "x",
                json!({"file": "/etc/passwd", "paths": ["/etc"], "opts": {"path": "/etc"}})
            ),
            None
        );
        assert_eq!(check("x", json!({"path": 7})), None);
    }

    #[test]
    fn a_leading_cd_outside_is_denied() {
        assert_eq!(
            check("bash", json!({"command": "cd /etc && cat passwd"})).as_deref(),
            Some("`cd /etc` is outside the workspace /ws")
        );
        assert!(check("bash", json!({"command": "cd .. && ls"}))
            .unwrap()
            .contains("`cd ..` resolves to /, outside"));
        assert!(check("bash", json!({"command": "cd -P /ws2"})).is_some());
        assert!(check("bash", json!({"command": "sudo cd '/var/log'"})).is_some());
        assert!(check(
            "bash",
            json!({"command": "cd .. ", "workdir": "sub/deeper"})
        )
        .is_none());
        assert!(check("bash", json!({"command": "cd ../..", "workdir": "sub"})).is_some());
    }

    #[test]
    fn other_cds_are_allowed() {
        for command in [
            "cd /ws/sub && make",
            "cd sub",
            "cd",
            "cd -",
            "cd ~/x",
            "cd $HOME",
            "ls && cd /etc",
            "echo cd /etc",
        ] {
            assert_eq!(
                check("bash", json!({ "command": command })),
                None,
                "{command}"
            );
        }
        assert_eq!(
            check("terminal_send", json!({"id": "term-1", "input": "cd /etc"})),
            None
        );
    }
}
