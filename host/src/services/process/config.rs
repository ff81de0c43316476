//! `[process]` in `dsh.toml`: how the process capability runs and contains commands.
//!
//! `[process.executor]` picks what runs a command (foreground bash, background jobs,
//! terminal sessions alike): `local` (as the host's user, unconfined), `sandbox`
//! (Landlock and seccomp, see [`super::executor`]) or `container` (the sandbox's
//! confinement plus its own PID, network, UTS and user namespaces and a fresh `/proc`,
//! see [`super::container`]); `[process.sandbox]` says what a sandboxed (or contained)
//! run may do, `[process.container]` which host ids a container's root is:
//!
//! ```toml
//! [process.executor]
//! default = "local"                  # "local" | "sandbox" | "container"
//! scopes = { untrusted = "container" } # per scope (`dsh serve --scope`, `dsh call --scope`)
//! tools = { bash = "sandbox" }       # per tool (the tool whose call starts the run)
//!
//! [process.sandbox]
//! write = ["/var/cache/ccache"]      # writable besides the workspace and the run's TMPDIR
//! tcp_ports = [443]                  # TCP ports it may connect to (any host); none by default
//! require = ["fs", "net", "signals"] # features whose absence refuses sandboxed calls
//! unix_sockets = false               # true: may connect to named Unix sockets
//! # assume_abi = 3                   # test only: act as if the kernel's Landlock ABI were this
//!
//! [process.container]
//! uid = 65534                        # the host uid a container's root (uid 0 inside) is
//! gid = 65534                        # the host gid a container's root group is
//! ```
//!
//! A run's executor: if the call's tool or scope has entries, the strongest of them
//! (`container` over `sandbox` over `local`); else `default`. So a `local` entry never
//! lifts a `sandbox` or `container` one, nor a `sandbox` entry a `container` one.
//! `[process.sandbox] write` and `tcp_ports` do not apply to a container (it has its
//! own, empty network namespace, and only the workspace is mapped to its ids).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

/// How the process service treats process trees.
#[derive(Debug, Clone, Deserialize)]
#[serde(from = "ProcessToml")]
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
    /// What a sandboxed run may do (a contained one too; it carries `container`).
    pub sandbox: SandboxConfig,
    /// Who a container's root is on the host.
    pub container: ContainerConfig,
}

/// `[process]` as written: [`ProcessConfig`] with `[process.container]` also handed to
/// the sandbox's configuration (what prepares containers reads only that).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct ProcessToml {
    kill_grace_ms: u64,
    drain_ms: u64,
    containment: ContainmentMode,
    pids_max: u64,
    memory_max_mb: u64,
    env: super::environment::EnvPolicy,
    executor: ExecutorConfig,
    sandbox: SandboxConfig,
    container: ContainerConfig,
}

impl Default for ProcessToml {
    fn default() -> Self {
        let d = ProcessConfig::default();
        ProcessToml {
            kill_grace_ms: d.kill_grace_ms,
            drain_ms: d.drain_ms,
            containment: d.containment,
            pids_max: d.pids_max,
            memory_max_mb: d.memory_max_mb,
            env: d.env,
            executor: d.executor,
            sandbox: d.sandbox,
            container: d.container,
        }
    }
}

impl From<ProcessToml> for ProcessConfig {
    fn from(t: ProcessToml) -> Self {
        let mut sandbox = t.sandbox;
        sandbox.container = t.container.clone();
        ProcessConfig {
            kill_grace_ms: t.kill_grace_ms,
            drain_ms: t.drain_ms,
            containment: t.containment,
            pids_max: t.pids_max,
            memory_max_mb: t.memory_max_mb,
            env: t.env,
            executor: t.executor,
            sandbox,
            container: t.container,
        }
    }
}

/// `[process.container]`: the host ids a container's uid 0 and gid 0 are (see
/// [`super::executor::container`]), not 0: a container's root must not be the host's;
/// and the network it gets.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
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
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
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

impl ProcessConfig {
    /// The executor for a run started by `tool` in `scope` (see the module doc).
    pub fn executor_for(&self, scope: &str, tool: &str) -> ExecutorKind {
        let entries = [
            self.executor.tools.get(tool),
            self.executor.scopes.get(scope),
        ];
        // The strongest entry wins (the variants are ordered by strength).
        entries
            .into_iter()
            .flatten()
            .copied()
            .max()
            .unwrap_or(self.executor.default)
    }

    /// The executors this configuration names (the default, and every scope's and
    /// tool's), weakest first.
    pub fn kinds_named(&self) -> std::collections::BTreeSet<ExecutorKind> {
        std::iter::once(&self.executor.default)
            .chain(self.executor.scopes.values())
            .chain(self.executor.tools.values())
            .copied()
            .collect()
    }
}

/// What runs a command, weakest first (see [`ProcessConfig::executor_for`]).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, serde::Serialize,
)]
#[serde(rename_all = "lowercase")]
pub enum ExecutorKind {
    /// As the host's user, with its rights (contained and killed whole, not confined).
    #[default]
    Local,
    /// Confined by Landlock and seccomp before exec.
    Sandbox,
    /// The sandbox's confinement in namespaces of its own (PID, network, UTS, user, with
    /// a fresh `/proc`), its root an unprivileged host id ([`super::executor::container`]).
    Container,
}

/// `[process.executor]`: the default executor and overrides per scope and per tool.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExecutorConfig {
    pub default: ExecutorKind,
    pub scopes: BTreeMap<String, ExecutorKind>,
    pub tools: BTreeMap<String, ExecutorKind>,
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
    /// `[process.container]`, handed over from [`ProcessConfig`] (not a key here).
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
            container: Default::default(),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(toml_text: &str) -> ProcessConfig {
        toml::from_str(toml_text).unwrap()
    }

    #[test]
    fn the_strongest_executor_a_call_matches_wins() {
        let config = parsed(
            "[executor]\ndefault = \"sandbox\"\n\
             scopes = { untrusted = \"container\", trusted = \"local\" }\n\
             tools = { bash = \"sandbox\", lsp = \"local\" }\n",
        );
        assert_eq!(
            config.executor_for("untrusted", "lsp"),
            ExecutorKind::Container
        );
        assert_eq!(
            config.executor_for("trusted", "bash"),
            ExecutorKind::Sandbox
        );
        assert_eq!(config.executor_for("trusted", "lsp"), ExecutorKind::Local);
        assert_eq!(config.executor_for("other", "other"), ExecutorKind::Sandbox);
        assert_eq!(
            config.kinds_named().into_iter().collect::<Vec<_>>(),
            [
                ExecutorKind::Local,
                ExecutorKind::Sandbox,
                ExecutorKind::Container
            ]
        );
        assert_eq!(
            ProcessConfig::default()
                .kinds_named()
                .into_iter()
                .collect::<Vec<_>>(),
            [ExecutorKind::Local]
        );
    }

    #[test]
    fn the_container_ids_reach_the_sandbox_configuration() {
        let config = parsed("[container]\nuid = 100000\ngid = 100001\nnetwork = \"loopback\"\n");
        let expected = ContainerConfig {
            uid: 100000,
            gid: 100001,
            network: ContainerNetwork::Loopback,
        };
        assert_eq!(config.container, expected);
        assert_eq!(config.sandbox.container, expected);
        assert_eq!(ProcessConfig::default().sandbox.container.uid, 65534);
        assert!(toml::from_str::<ProcessConfig>("[container]\nuser = 1\n").is_err());
    }
}
