//! `[terminal]` in `dsh.toml`: how many terminal sessions, how much scrollback, which
//! shell.

use serde::Deserialize;

/// Terminal sessions.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct TerminalConfig {
    /// Open sessions one owner may have.
    pub max_sessions_per_owner: usize,
    /// Open sessions in all.
    pub max_sessions: usize,
    /// Bytes of output kept per session (the scrollback).
    pub scrollback_bytes: usize,
    /// Lines the `plain` view returns at most.
    pub scrollback_lines: usize,
    /// The shell a session runs when none is asked for (bash starts as
    /// `bash --noprofile --norc -i` with the prompt `$ `).
    pub shell: String,
}

impl Default for TerminalConfig {
    fn default() -> Self {
        TerminalConfig {
            max_sessions_per_owner: 16,
            max_sessions: 64,
            scrollback_bytes: 4 << 20,
            scrollback_lines: 10_000,
            shell: "bash".into(),
        }
    }
}
