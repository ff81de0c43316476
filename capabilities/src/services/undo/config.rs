//! `[undo]` in `dsh.toml`: whether dsh records what calls change in the workspace, what
//! it ignores, and the bounds of what it keeps.

use serde::Deserialize;

/// `[undo]` in `dsh.toml`.
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct UndoConfig {
    /// Record what every call changes in the workspace, so it can be undone.
    pub enabled: bool,
    /// The most bytes of new file contents one call's record keeps; past it, the
    /// call's further changes are listed as not recorded (the call still runs).
    pub max_call_bytes: u64,
    /// The most bytes of new file contents the records of one session keep.
    pub max_session_bytes: u64,
    /// A file larger than this is not kept: a change to it is listed as not recorded.
    pub max_file_bytes: u64,
    /// Records older than this many days are dropped when dsh starts (and the contents
    /// only they held with them).
    pub days_kept: u32,
    /// The most files (and directories) recorded in the workspace; a larger workspace
    /// is not recorded at all (dsh says why in its log and in `dsh checkpoints`).
    pub max_files: usize,
    /// The most bytes of file contents the baseline keeps (each recorded file is read
    /// once when dsh starts in a workspace); past it, the workspace is not recorded.
    pub max_baseline_bytes: u64,
    /// Follow the workspace's `.gitignore` files (and `.git/info/exclude`): what they
    /// ignore is not recorded. `.git/` itself never is.
    pub gitignore: bool,
    /// More paths not to record, in `.gitignore` syntax, relative to the workspace.
    pub ignore: Vec<String>,
}

impl Default for UndoConfig {
    fn default() -> Self {
        UndoConfig {
            enabled: true,
            max_call_bytes: 64 << 20,
            max_session_bytes: 1 << 30,
            max_file_bytes: 16 << 20,
            days_kept: 7,
            max_files: 200_000,
            max_baseline_bytes: 2 << 30,
            gitignore: true,
            ignore: Vec::new(),
        }
    }
}

impl UndoConfig {
    /// What `[undo]` refuses, said whole.
    pub fn check(&self) -> Result<(), String> {
        if self.enabled && self.max_files == 0 {
            return Err("undo.max_files must be at least 1 (or set undo.enabled = false)".into());
        }
        if self.days_kept == 0 {
            return Err("undo.days_kept must be at least 1".into());
        }
        let mut builder = ignore::gitignore::GitignoreBuilder::new("/");
        for pattern in &self.ignore {
            builder.add_line(None, pattern).map_err(|error| {
                format!("undo.ignore: {pattern:?} is not a .gitignore pattern: {error}")
            })?;
        }
        Ok(())
    }
}
