//! `[process]` in `dsh.toml`: how the process capability runs and contains commands.
//!
//! `[process.executor]` picks what runs a command (foreground bash, background jobs,
//! terminal sessions alike): `local` (as the host's user, unconfined) or `sandbox`
//! (Landlock and seccomp, see [`super::executor`]); `[process.sandbox]` says what a
//! sandboxed run may do:
//!
//! ```toml
//! [process.executor]
//! default = "local"                  # "local" | "sandbox"
//! scopes = { untrusted = "sandbox" } # per scope (`dsh serve --scope`, `dsh call --scope`)
//! tools = { bash = "sandbox" }       # per tool (the tool whose call starts the run)
//!
//! [process.sandbox]
//! write = ["/var/cache/ccache"]      # writable besides the workspace and the run's TMPDIR
//! tcp_ports = [443]                  # TCP ports it may connect to (any host); none by default
//! require = ["fs", "net", "signals"] # features whose absence refuses sandboxed calls
//! unix_sockets = false               # true: may connect to named Unix sockets
//! # assume_abi = 3                   # test only: act as if the kernel's Landlock ABI were this
//! ```
//!
//! A run's executor: if the call's tool or scope has an entry and any of them says
//! `sandbox`, the sandbox; else if one says `local`, local; else `default`. So a
//! `local` entry never lifts a `sandbox` one.

use std::collections::BTreeMap;
use std::path::PathBuf;

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
    /// Which executor runs a call's commands.
    pub executor: ExecutorConfig,
    /// What a sandboxed run may do.
    pub sandbox: SandboxConfig,
}

impl ProcessConfig {
    /// The executor for a run started by `tool` in `scope` (see the module doc).
    pub fn executor_for(&self, scope: &str, tool: &str) -> Executor {
        let entries = [
            self.executor.tools.get(tool),
            self.executor.scopes.get(scope),
        ];
        let matched: Vec<Executor> = entries.into_iter().flatten().copied().collect();
        if matched.contains(&Executor::Sandbox) {
            Executor::Sandbox
        } else if matched.is_empty() {
            self.executor.default
        } else {
            Executor::Local
        }
    }

    /// Whether any run can be sandboxed under this configuration.
    pub fn uses_sandbox(&self) -> bool {
        self.executor.default == Executor::Sandbox
            || self
                .executor
                .scopes
                .values()
                .chain(self.executor.tools.values())
                .any(|e| *e == Executor::Sandbox)
    }
}

/// What runs a command.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Executor {
    /// As the host's user, with its rights (contained and killed whole, not confined).
    #[default]
    Local,
    /// Confined by Landlock and seccomp before exec.
    Sandbox,
}

/// `[process.executor]`: the default executor and overrides per scope and per tool.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExecutorConfig {
    pub default: Executor,
    pub scopes: BTreeMap<String, Executor>,
    pub tools: BTreeMap<String, Executor>,
}

/// `[process.sandbox]`: what a sandboxed run may do besides reading (everything but
/// the state directory) and writing its workspace and private temporary directory.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SandboxConfig {
    /// Further writable paths (directories: everything beneath them).
    pub write: Vec<PathBuf>,
    /// TCP ports runs may connect to, on any host (Landlock rules name ports, not hosts).
    pub tcp_ports: Vec<u16>,
    /// The features a sandboxed run must have; a kernel without one refuses the call.
    /// A feature left out is used where the kernel has it, skipped where it does not.
    pub require: Vec<SandboxFeature>,
    /// Whether runs may make Unix sockets (`socket(AF_UNIX)`: connecting to named
    /// sockets such as a Docker or D-Bus socket, which Landlock before ABI 9 cannot
    /// confine). Off by default; `socketpair` works either way.
    pub unix_sockets: bool,
    /// Test only: act as if the kernel's Landlock ABI were at most this.
    pub assume_abi: Option<i32>,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            write: Vec::new(),
            tcp_ports: Vec::new(),
            require: vec![
                SandboxFeature::Fs,
                SandboxFeature::Net,
                SandboxFeature::Signals,
            ],
            unix_sockets: false,
            assume_abi: None,
        }
    }
}

/// A confinement the sandbox applies, with the Landlock ABI it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxFeature {
    /// Files: Landlock filesystem rules (ABI 1; truncation from 3, device ioctls from 5).
    Fs,
    /// TCP bind and connect by port (ABI 4).
    Net,
    /// Signal and abstract Unix socket scoping (ABI 6).
    Signals,
}

impl SandboxFeature {
    /// The Landlock ABI version that brings it.
    pub fn abi(self) -> i32 {
        match self {
            SandboxFeature::Fs => 1,
            SandboxFeature::Net => 4,
            SandboxFeature::Signals => 6,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            SandboxFeature::Fs => "fs",
            SandboxFeature::Net => "net",
            SandboxFeature::Signals => "signals",
        }
    }
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
            executor: Default::default(),
            sandbox: Default::default(),
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
