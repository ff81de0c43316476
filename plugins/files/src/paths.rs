//! Paths in arguments: refused when the host could not even be asked about them (empty,
//! a NUL byte), joined with the call's workdir when relative, tidied lexically (`.` and
//! doubled `/` dropped), and shown to the model relative to the workspace when inside
//! it, else absolute (a file in an extra root). Whether a path is inside the workspace or
//! an extra root is never decided here: the host's `files` interface and the read-only
//! preopens resolve and confine it, and their errors are the answer.

use std::path::{Component, Path, PathBuf};

use dsh_plugin::{error, ErrorCode, ToolError};

/// `path` (an argument named `what`) as an absolute path: joined with `workdir` when
/// relative. Empty and NUL-holding paths are `invalid-arguments`.
pub fn resolve(workdir: &str, path: &str, what: &str) -> Result<String, ToolError> {
    if path.trim().is_empty() {
        return Err(error(
            ErrorCode::InvalidArguments,
            format!("`{what}` is empty: give a path relative to the workspace (e.g. src/main.rs) or an absolute path inside it"),
        ));
    }
    if path.contains('\0') {
        return Err(error(
            ErrorCode::InvalidArguments,
            format!("`{what}` contains a NUL byte, which no file name can hold"),
        ));
    }
    Ok(join(workdir, path))
}

/// `path` joined with `workdir` (when relative) and tidied: `.` components and doubled
/// or trailing `/` dropped. `..` is kept for the host to resolve.
pub fn join(workdir: &str, path: &str) -> String {
    let joined = Path::new(workdir).join(path);
    let mut tidy = PathBuf::new();
    for component in joined.components() {
        match component {
            Component::CurDir => {}
            other => tidy.push(other.as_os_str()),
        }
    }
    tidy.to_string_lossy().into_owned()
}

/// The absolute `path` by its words: each `..` takes back the name before it (`/..` is
/// `/`), as the host's `files` interface takes an absolute path.
pub fn normalize(path: &str) -> String {
    let mut tidy = PathBuf::new();
    for component in Path::new(path).components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                tidy.pop();
            }
            other => tidy.push(other.as_os_str()),
        }
    }
    tidy.to_string_lossy().into_owned()
}

/// The directory `glob` or `grep` walks for the joined `path`: as it is when the
/// preopens resolve it, else by its words when that resolves (a `..` out of the
/// workspace into an extra root: `../docs` beside it), else as it is (for the error).
pub fn to_walk(path: String) -> String {
    if std::fs::symlink_metadata(&path).is_ok() || !path.split('/').any(|c| c == "..") {
        return path;
    }
    let tidy = normalize(&path);
    match std::fs::symlink_metadata(&tidy) {
        Ok(_) => tidy,
        Err(_) => path,
    }
}

/// `path` as the model should see it: relative to the workspace `workdir` when inside
/// it (`.` for the workspace itself), else as it is.
pub fn display(workdir: &str, path: &str) -> String {
    match Path::new(path).strip_prefix(workdir) {
        Ok(rest) if rest.as_os_str().is_empty() => ".".into(),
        Ok(rest) => rest.to_string_lossy().into_owned(),
        Err(_) => path.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_join_the_workdir_and_absolute_ones_stay() {
        assert_eq!(join("/ws", "src/main.rs"), "/ws/src/main.rs");
        assert_eq!(join("/ws/", "./src//main.rs"), "/ws/src/main.rs");
        assert_eq!(join("/ws", "/ws/a/./b/"), "/ws/a/b");
        assert_eq!(join("/ws", "/etc/passwd"), "/etc/passwd");
        // `..` is the host's to resolve (and refuse past the workspace).
        assert_eq!(join("/ws", "../x"), "/ws/../x");
        assert_eq!(join("/ws", "."), "/ws");
        // Taken by its words, as the host takes an absolute path.
        assert_eq!(normalize("/ws/../srv/docs/a.md"), "/srv/docs/a.md");
        assert_eq!(normalize("/srv/docs/../docs2/./x"), "/srv/docs2/x");
        assert_eq!(normalize("/ws/../../../.."), "/");
    }

    #[test]
    fn empty_and_nul_paths_are_invalid_arguments() {
        for bad in ["", "  ", "a\0b"] {
            let error = resolve("/ws", bad, "path").unwrap_err();
            assert_eq!(error.code, ErrorCode::InvalidArguments, "{bad:?}");
        }
        assert!(resolve("/ws", "", "path")
            .unwrap_err()
            .message
            .contains("`path` is empty"));
    }

    #[test]
    fn display_is_relative_to_the_workspace() {
        assert_eq!(display("/ws", "/ws/src/a.rs"), "src/a.rs");
        assert_eq!(display("/ws/", "/ws/src/a.rs"), "src/a.rs");
        assert_eq!(display("/ws", "/ws"), ".");
        assert_eq!(display("/ws", "/wsx/a"), "/wsx/a");
        assert_eq!(display("/ws", "/other/a"), "/other/a");
        // A file in an extra root is shown by its absolute path.
        assert_eq!(display("/ws", "/srv/docs/guide.md"), "/srv/docs/guide.md");
        assert_eq!(display("/srv/ws", "/srv/ws2/a"), "/srv/ws2/a");
    }
}
