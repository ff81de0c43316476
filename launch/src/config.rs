//! The configuration the launch platform reads: how runs are contained
//! (`[process] containment`, `pids_max`, `memory_max_mb`), which executors it names
//! ([`ExecutorKind`], whose list is [`crate::executor`]'s), what a sandboxed or contained run may do (`[process.sandbox]`,
//! [`SandboxConfig`]) and who a container's root is (`[process.container]`,
//! [`ContainerConfig`]). The host parses `[process]` in `dsh.toml` (where its keys and
//! their meaning are documented) and hands the launch a [`LaunchConfig`].

use std::collections::BTreeSet;
use std::ffi::CString;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What a [`crate::Launch`] is made with.
#[derive(Debug, Clone, Default)]
pub struct LaunchConfig {
    /// How runs are contained.
    pub containment: ContainmentMode,
    /// Most processes and threads one run may have (cgroup `pids.max`); 0 = no limit.
    pub pids_max: u64,
    /// Most memory one run may use, in MiB (cgroup `memory.max`); 0 = no limit.
    pub memory_max_mb: u64,
    /// What a sandboxed (or contained) run may do.
    pub sandbox: SandboxConfig,
    /// The executors the configuration names (each prepared, and what it lacks logged,
    /// at start).
    pub named: BTreeSet<ExecutorKind>,
    /// The environment every command gets, as (name, `NAME=value`), before what a run
    /// adds.
    pub environment: Vec<(Vec<u8>, CString)>,
}

impl From<&LaunchConfig> for LaunchConfig {
    fn from(config: &LaunchConfig) -> Self {
        config.clone()
    }
}

/// `[process.container]`: the host ids a container's uid 0 and gid 0 are (see
/// [`crate::executor::container`]), not 0: a container's root must not be the host's;
/// and the network it gets.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ContainerConfig {
    /// The host uid of a container's root (65534, `nobody`, by default; an unused high
    /// id keeps runs from sharing anything with the host's `nobody`).
    pub uid: u32,
    /// The host gid of a container's root group (65534 by default).
    pub gid: u32,
    /// What network a container has (`none` by default).
    pub network: ContainerNetwork,
}

/// `[process.container] network`: what a contained run reaches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ContainerNetwork {
    /// Nothing: its namespace's `lo` is down, so no address is reachable.
    #[default]
    None,
    /// Its own loopback, up: the run may listen on and connect to 127.0.0.1 and ::1 of
    /// its own namespace (a test suite's local server), and reaches nothing else, the
    /// host's loopback included.
    Loopback,
}

impl Default for ContainerConfig {
    fn default() -> Self {
        ContainerConfig {
            uid: 65534,
            gid: 65534,
            network: ContainerNetwork::None,
        }
    }
}

/// What runs a command (see the host's `[process.executor]`): made from the list of
/// executors, in [`crate::executor`].
pub use crate::executor::ExecutorKind;

/// `[process.sandbox]`: what a sandboxed run may do besides reading (everything but
/// the state directory) and writing its workspace and private temporary directory.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
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
    /// `[process.container]`, handed over from the host's `[process]` (not a key here).
    #[serde(skip)]
    pub container: ContainerConfig,
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
            container: ContainerConfig::default(),
        }
    }
}

/// A confinement the sandbox applies, with the Landlock ABI it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
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
    /// Every feature, by the ABI that brings it.
    pub const ALL: [SandboxFeature; 3] = [
        SandboxFeature::Fs,
        SandboxFeature::Net,
        SandboxFeature::Signals,
    ];

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

/// How runs are contained (`[process] containment`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
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
