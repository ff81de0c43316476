//! Where a path a file tool names lands in the workspace, by its words alone: relative
//! paths are joined to the workspace, `.` and repeated `/` are dropped, and `..` steps
//! back. A `..` that steps out of the workspace places the path outside even when the
//! path comes back in (`../ws/src/x`, `/ws/../ws/src/x`): the guard asks rather than
//! judge a path by where a climb out of the workspace lands (the files service refuses
//! a relative path whose `..` steps past the workspace). Symbolic links are not
//! followed (the guard has no filesystem).

/// The workspace `workdir` as its components (`/ws/a` is `["ws", "a"]`), or `None` when
/// it is not an absolute path, and nothing can be placed in it.
pub fn workspace(workdir: &str) -> Option<Vec<&str>> {
    if !workdir.starts_with('/') {
        return None;
    }
    let mut parts = Vec::new();
    for part in workdir.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            name => parts.push(name),
        }
    }
    Some(parts)
}

/// `path`'s workspace-relative form (`src/main.rs`; `""` for the workspace itself), or
/// `None` when it lies outside the workspace `workspace` (from [`workspace`]) or a `..`
/// in it steps out of the workspace.
pub fn relative(workspace: &[&str], path: &str) -> Option<String> {
    let mut at: Vec<&str> = if path.starts_with('/') {
        Vec::new()
    } else {
        workspace.to_vec()
    };
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                // Only a step that stays inside the workspace is taken.
                if at.len() <= workspace.len() || !at.starts_with(workspace) {
                    return None;
                }
                at.pop();
            }
            name => at.push(name),
        }
    }
    at.starts_with(workspace)
        .then(|| at[workspace.len()..].join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rel(path: &str) -> Option<String> {
        relative(&workspace("/ws").unwrap(), path)
    }

    #[test]
    fn the_workspace_is_an_absolute_path() {
        assert_eq!(workspace("/ws"), Some(vec!["ws"]));
        assert_eq!(workspace("/ws/"), Some(vec!["ws"]));
        assert_eq!(
            workspace("//home//me/./proj"),
            Some(vec!["home", "me", "proj"])
        );
        assert_eq!(workspace("/"), Some(vec![]));
        assert_eq!(workspace(""), None);
        assert_eq!(workspace("ws"), None);
    }

    #[test]
    fn paths_inside_are_placed_lexically() {
        for (path, placed) in [
            ("src/a.rs", "src/a.rs"),
            ("src/./a", "src/a"),
            ("./src/a", "src/a"),
            ("src//a/", "src/a"),
            ("src/../x", "x"),
            ("src/a/../../docs/x.md", "docs/x.md"),
            ("src/a/..", "src"),
            ("/ws/src/a", "src/a"),
            ("//ws//src/./a", "src/a"),
            ("/ws/src/../x", "x"),
            ("/ws", ""),
            (".", ""),
            ("", ""),
            ("src/...", "src/..."),
            ("src\\..\\x", "src\\..\\x"),
            (" src/a", " src/a"),
        ] {
            assert_eq!(rel(path).as_deref(), Some(placed), "{path:?}");
        }
    }

    #[test]
    fn paths_outside_or_stepping_out_are_not_placed() {
        for path in [
            "../src/x",
            "..",
            "../ws/src/x",
            "src/../../ws/src/x",
            "/etc/passwd",
            "/",
            "/ws2/src/a",
            "/w",
            "/ws/../ws/src/a",
            "/etc/../ws/src/a",
            "/../ws/src/a",
        ] {
            assert_eq!(rel(path), None, "{path:?}");
        }
    }

    #[test]
    fn a_root_workspace_holds_every_absolute_path() {
        let root = workspace("/").unwrap();
        assert_eq!(relative(&root, "/etc/x").as_deref(), Some("etc/x"));
        assert_eq!(relative(&root, "etc/x").as_deref(), Some("etc/x"));
        assert_eq!(relative(&root, "../etc/x"), None);
        assert_eq!(relative(&root, "/.."), None);
    }

    #[test]
    fn a_deeper_workspace_compares_whole_components() {
        let ws = workspace("/home/me/proj").unwrap();
        assert_eq!(
            relative(&ws, "/home/me/proj/src/a").as_deref(),
            Some("src/a")
        );
        assert_eq!(relative(&ws, "/home/me/project/src/a"), None);
        assert_eq!(relative(&ws, "/home/me"), None);
        assert_eq!(relative(&ws, "../proj/src/a"), None);
    }
}
