//! `[subagent]` in `dsh.toml`: how long and how far a subagent may run, how much it may
//! ask of the client's model, and how much of its transcript is kept.

use serde::Deserialize;

/// Subagents (the `subagent` tool).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SubagentConfig {
    /// Model turns (sampling requests) a subagent may take when its call names none.
    pub max_turns: u32,
    /// How many subagents deep a call may be: 1 lets a model's call start one, and a
    /// subagent cannot start another.
    pub max_depth: u32,
    /// `maxTokens` of every sampling request.
    pub max_tokens: u32,
    /// Subagents one owner may have running at once (foreground and background); the
    /// next gets `LIMIT_EXCEEDED`. They are jobs too, within `[jobs]
    /// max_running_per_owner`.
    pub max_running_per_owner: usize,
    /// A subagent's wall time when its call names none (and the most it may name).
    pub timeout_ms: u64,
    /// How long one sampling request may wait for the client's answer.
    pub sampling_timeout_ms: u64,
    /// The most bytes of a subagent's transcript (its job output); past it, entries are
    /// dropped and the transcript says so once.
    pub max_transcript_bytes: u64,
    /// Lines of a tool result the transcript shows (the model gets the whole result).
    pub result_lines: usize,
}

impl Default for SubagentConfig {
    fn default() -> Self {
        SubagentConfig {
            max_turns: 20,
            max_depth: 1,
            max_tokens: 4096,
            max_running_per_owner: 4,
            timeout_ms: 600_000,
            sampling_timeout_ms: 300_000,
            max_transcript_bytes: 1 << 20,
            result_lines: 10,
        }
    }
}
