//! `[files]` in `dsh.toml`: how many reads the host remembers per owner, the largest
//! file one read returns, and the extra roots: directories besides the workspace the
//! file tools reach, each read-only unless it says `write = true`.

use std::path::{Component, Path, PathBuf};

use serde::Deserialize;

/// The file tools' bounds and reach.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct FilesConfig {
    /// Files whose read the host remembers per owner (what makes a later commit of them
    /// allowed); past this, the oldest read is forgotten, and that file must be read
    /// again before a commit may change it.
    pub max_tracked_files_per_owner: usize,
    /// The largest file one read returns, whatever `max-bytes` the plugin asks for;
    /// a larger one is `LIMIT_EXCEEDED` and nothing is read.
    pub max_read_bytes: u64,
    /// Directories besides the session workspace that a plugin granted `files` reaches:
    /// each is mapped into it read-only at its own path (like the workspace), and the
    /// host's reads and commits resolve a path in one beneath it, as they do in the
    /// workspace. A commit changes files in one only when it says `write = true`.
    pub extra_roots: Vec<ExtraRoot>,
}

impl Default for FilesConfig {
    fn default() -> Self {
        FilesConfig {
            max_tracked_files_per_owner: 10_000,
            max_read_bytes: 16 << 20,
            extra_roots: Vec::new(),
        }
    }
}

/// One of `[files] extra_roots`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExtraRoot {
    /// The directory: an absolute path without `..` (a symbolic link on the way is
    /// resolved when a plugin granted `files` loads).
    pub path: PathBuf,
    /// True: commits may change its files (they are still never blind, and dsh's own
    /// files in it are never changed). False (the default): read-only.
    #[serde(default)]
    pub write: bool,
}

/// Why `[files] extra_roots` cannot be used.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum RootsError {
    #[error(
        "files.extra_roots: {0:?} is not an absolute path (give the directory's full path, \
         e.g. \"/srv/docs\")"
    )]
    Relative(PathBuf),
    #[error("files.extra_roots: {0:?} has a `..` in it (give the directory's path without one)")]
    ParentDir(PathBuf),
    #[error("files.extra_roots: {0:?} is listed twice")]
    Twice(PathBuf),
}

impl FilesConfig {
    /// Checks what can be checked of the extra roots without the filesystem: each
    /// absolute, without `..`, and listed once. (Whether each is a directory, and clear
    /// of the state directory, is checked when a plugin granted `files` loads.)
    pub fn check(&self) -> Result<(), RootsError> {
        let mut seen: Vec<PathBuf> = Vec::new();
        for root in &self.extra_roots {
            if !root.path.is_absolute() {
                return Err(RootsError::Relative(root.path.clone()));
            }
            if root.path.components().any(|c| c == Component::ParentDir) {
                return Err(RootsError::ParentDir(root.path.clone()));
            }
            let tidy = tidy(&root.path);
            if seen.contains(&tidy) {
                return Err(RootsError::Twice(root.path.clone()));
            }
            seen.push(tidy);
        }
        Ok(())
    }
}

/// `path` by its components: `.` and doubled or trailing `/` dropped.
pub fn tidy(path: &Path) -> PathBuf {
    path.components().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roots(text: &str) -> Result<FilesConfig, String> {
        let config: FilesConfig = toml::from_str(text).map_err(|e| e.to_string())?;
        config.check().map_err(|e| e.to_string())?;
        Ok(config)
    }

    #[test]
    fn extra_roots_are_read_only_by_default_and_must_be_absolute_and_listed_once() {
        let config = roots(
            "extra_roots = [{ path = \"/srv/docs\" }, { path = \"/srv/scratch\", write = true }]",
        )
        .unwrap();
        assert_eq!(
            config.extra_roots,
            [
                ExtraRoot {
                    path: "/srv/docs".into(),
                    write: false
                },
                ExtraRoot {
                    path: "/srv/scratch".into(),
                    write: true
                }
            ]
        );
        assert!(FilesConfig::default().extra_roots.is_empty());
        let error = roots("extra_roots = [{ path = \"docs\" }]").unwrap_err();
        assert!(
            error.contains("\"docs\" is not an absolute path"),
            "{error}"
        );
        let error = roots("extra_roots = [{ path = \"/srv/a/../b\" }]").unwrap_err();
        assert!(error.contains("`..`"), "{error}");
        let error = roots("extra_roots = [{ path = \"/srv/docs\" }, { path = \"/srv/./docs/\" }]")
            .unwrap_err();
        assert!(error.contains("listed twice"), "{error}");
        let error = roots("extra_roots = [{ path = \"/srv\", writable = true }]").unwrap_err();
        assert!(error.contains("unknown field"), "{error}");
        // Nested roots are allowed: the deepest one holding a path decides.
        roots("extra_roots = [{ path = \"/srv\" }, { path = \"/srv/scratch\", write = true }]")
            .unwrap();
    }
}
