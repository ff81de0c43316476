//! `[process]` in `dsh.toml`: how the process capability runs and contains commands.

use serde::Deserialize;

/// How the process service treats process trees.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProcessConfig {
    /// Time between TERM and KILL when a process group is stopped.
    pub kill_grace_ms: u64,
    /// How long output is still read after the shell exits (a process that left the
    /// group may hold the pipe open; it is not waited for longer than this).
    pub drain_ms: u64,
    /// How runs are contained: `auto` (a cgroup per run where one can be created, else
    /// the subreaper fallback), `cgroup` (required: dsh refuses to start without it) or
    /// `subreaper` (the fallback, forced).
    pub containment: ContainmentMode,
    /// Most processes and threads one run may have (cgroup `pids.max`); 0 = no limit.
    pub pids_max: u64,
    /// Most memory one run may use, in MiB (cgroup `memory.max`); 0 = no limit.
    pub memory_max_mb: u64,
    /// The environment commands get (bash, background jobs, terminals).
    pub env: super::environment::EnvPolicy,
}

impl Default for ProcessConfig {
    fn default() -> Self {
        ProcessConfig {
            kill_grace_ms: 2_000,
            drain_ms: 200,
            containment: ContainmentMode::Auto,
            pids_max: 4096,
            memory_max_mb: 0,
            env: Default::default(),
        }
    }
}

/// How runs are contained (`[process] containment`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ContainmentMode {
    /// A cgroup per run where dsh can create one, else the subreaper fallback.
    #[default]
    Auto,
    /// A cgroup per run, or dsh does not start.
    Cgroup,
    /// The fallback: dsh is the subreaper of everything it starts and follows runs by a
    /// mark in their environment.
    Subreaper,
}
