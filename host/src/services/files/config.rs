//! `[files]` in `dsh.toml`: how many reads the host remembers per owner, and the largest
//! file one read returns.

use serde::Deserialize;

/// The file tools' bounds.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FilesConfig {
    /// Files whose read the host remembers per owner (what makes a later commit of them
    /// allowed); past this, the oldest read is forgotten, and that file must be read
    /// again before a commit may change it.
    pub max_tracked_files_per_owner: usize,
    /// The largest file one read returns, whatever `max-bytes` the plugin asks for;
    /// a larger one is `LIMIT_EXCEEDED` and nothing is read.
    pub max_read_bytes: u64,
}

impl Default for FilesConfig {
    fn default() -> Self {
        FilesConfig {
            max_tracked_files_per_owner: 10_000,
            max_read_bytes: 16 << 20,
        }
    }
}
