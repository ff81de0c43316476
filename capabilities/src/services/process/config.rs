//! `[process]` in `dsh.toml`: how the process capability runs and contains commands.
//!
//! `[process.executor]` picks what runs a command (foreground bash, background jobs,
//! terminal sessions alike): `local` (as the host's user, unconfined), `sandbox`
//! (Landlock and seccomp, see [`dsh_launch::executor`]) or `container` (the sandbox's
//! confinement plus its own PID, network, UTS and user namespaces and a fresh `/proc`,
//! see [`dsh_launch::executor::container`]); `[process.sandbox]` says what a sandboxed (or contained)
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

use serde::Deserialize;

pub use dsh_launch::config::{
    ContainerConfig, ContainerNetwork, ContainmentMode, ExecutorKind, LaunchConfig, SandboxConfig,
    SandboxFeature,
};

/// How the process service treats process trees.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(from = "ProcessToml")]
// The configuration reference reads its own fields (the same as `ProcessToml`'s, with
// the docs) through schemars' serialize contract, and their defaults from `Default`.
#[schemars(default)]
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
/// the sandbox's configuration (what prepares containers reads only that). Its schema
/// is only there for `from` (schemars names it); the reference reads [`ProcessConfig`]'s.
#[derive(Deserialize, schemars::JsonSchema)]
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

impl ProcessConfig {
    /// The executor for a run started by `tool` in `scope` (see the module doc).
    pub fn executor_for(&self, scope: &str, tool: &str) -> ExecutorKind {
        self.executor.executor_for(scope, tool)
    }

    /// The executors this configuration names (the default, and every scope's and
    /// tool's), weakest first (a set of kinds is ordered by their declared strength).
    pub fn kinds_named(&self) -> std::collections::BTreeSet<ExecutorKind> {
        std::iter::once(&self.executor.default)
            .chain(self.executor.scopes.values())
            .chain(self.executor.tools.values())
            .copied()
            .collect()
    }
}

/// `[process.executor]`: the default executor and overrides per scope and per tool.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ExecutorConfig {
    /// What runs a call's commands when neither its scope nor its tool has an entry.
    pub default: ExecutorKind,
    /// Per scope: the executor of its calls' commands (the strongest entry that
    /// matches wins).
    pub scopes: BTreeMap<String, ExecutorKind>,
    /// Per tool: the executor of the commands its calls start (the strongest entry that
    /// matches wins).
    pub tools: BTreeMap<String, ExecutorKind>,
}

impl ExecutorConfig {
    /// The executor for a run started by `tool` in `scope`: the strongest of the entries
    /// for both, by the strength each executor declares, or the default.
    pub fn executor_for(&self, scope: &str, tool: &str) -> ExecutorKind {
        let entries = [self.tools.get(tool), self.scopes.get(scope)];
        ExecutorKind::strongest(entries.into_iter().flatten().copied()).unwrap_or(self.default)
    }
}

/// What the launch platform reads of `[process]`, with the commands' environment built
/// from the host's by the `[process.env]` policy.
impl From<&ProcessConfig> for LaunchConfig {
    fn from(config: &ProcessConfig) -> Self {
        LaunchConfig {
            containment: config.containment,
            pids_max: config.pids_max,
            memory_max_mb: config.memory_max_mb,
            sandbox: config.sandbox.clone(),
            named: config.kinds_named(),
            environment: super::environment::command_environment(&config.env, std::env::vars_os()),
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
