//! `[jobs]` in `dsh.toml`: how many background jobs run and are kept, and how much of
//! their output.

use serde::Deserialize;

/// Background jobs.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct JobsConfig {
    /// Running jobs one owner may have; the next start gets `LIMIT_EXCEEDED`.
    pub max_running_per_owner: usize,
    /// A job whose output passes this many bytes is killed (its spill file's size cap).
    pub max_output_bytes: u64,
    /// The newest bytes of each job's output kept in memory.
    pub tail_bytes: usize,
    /// The longest `job_output` may wait for news.
    pub max_wait_ms: u64,
    /// Finished jobs kept per owner (their state and their spill file); past this, the
    /// oldest finished are retired: forgotten, their spill file deleted.
    pub max_finished_per_owner: usize,
    /// A job that finished this long ago is retired.
    pub finished_retention_ms: u64,
}

impl Default for JobsConfig {
    fn default() -> Self {
        JobsConfig {
            max_running_per_owner: 64,
            max_output_bytes: 1 << 30,
            tail_bytes: 1 << 20,
            max_wait_ms: 60_000,
            max_finished_per_owner: 256,
            finished_retention_ms: 3_600_000,
        }
    }
}
