//! `dsh.toml`: the operator's configuration. Owns parsing and the defaults; every other
//! module reads its settings from here.
//!
//! ```toml
//! [limits]
//! output_budget_bytes = 30000   # what the model sees of one result at most
//! call_timeout_ms = 900000      # the execute stage's timeout for any tool call (and cap)
//! max_retries = 1               # retries of a failed idempotent tool (INTERNAL, TRAP, TIMEOUT)
//! max_spill_bytes = 1073741824  # a foreground output's spill file stops growing here
//! max_calls_in_flight = 64      # calls running at once (each holds one plugin instance);
//!                               # at most 416: the instance pool (512) less the load
//!                               # reserve (32) and the instances made ahead (64)
//! max_queued_calls = 1024       # calls waiting their turn (fair across owners); one more
//!                               # gets BUSY
//!
//! [pipeline]
//! guards = ["deny_destructive"] # guard plugins every call passes, in this order
//! filters = ["redact_secrets"]  # result filters every result passes, in this order
//!
//! [process]
//! kill_grace_ms = 2000          # TERM, this long, then KILL
//! containment = "auto"          # "cgroup" (required) | "subreaper" | "auto"
//! pids_max = 4096               # per run; 0 = no limit
//! memory_max_mb = 0             # per run, MiB; 0 = no limit
//!
//! [process.env]                 # the environment commands get
//! inherit = "safe"              # host variables minus secret-looking names; "none": a core
//! include = ["GITHUB_TOKEN"]    # name globs passed anyway
//! exclude = ["DATABASE_URL"]    # name globs never passed (wins over include)
//! set = { PAGER = "cat" }       # set after everything else
//!
//! [process.executor]            # what runs commands (bash, jobs, terminals)
//! default = "local"             # "local" | "sandbox" (Landlock + seccomp) | "container"
//!                               # (the sandbox + PID, network, IPC, UTS, user namespaces; root only)
//! scopes = { untrusted = "container" } # per scope; the strongest matching entry wins
//! tools = { bash = "sandbox" }  # per tool
//!
//! [process.sandbox]             # what a sandboxed run may do besides its workspace
//! write = []                    # further writable paths
//! tcp_ports = []                # TCP ports it may connect to, on any host
//! require = ["fs", "net", "signals"] # missing from the kernel: sandboxed calls refused
//! unix_sockets = false          # true: may connect to named Unix sockets
//!
//! [process.container]           # who a container's root (uid/gid 0 inside) is on the host
//! uid = 65534                   # never 0; an unused high id shares nothing with `nobody`
//! gid = 65534
//! network = "none"              # "loopback": its own 127.0.0.1, up (nothing else)
//!
//! [gate]
//! default = "allow"             # what a call matching no rule gets
//! [[gate.rules]]
//! action = "deny"
//! tool = "bash"                 # glob: `*` matches any run of characters
//! arg = "command"               # optional: a top-level argument ...
//! pattern = 'rm\s+-rf\s+/'      # ... whose string value matches this regex
//! reason = "no recursive delete from the root"
//!
//! [jobs]
//! max_running_per_owner = 64    # the next background start gets LIMIT_EXCEEDED
//! max_output_bytes = 1073741824 # a job printing more is killed (terminal jobs too)
//! tail_bytes = 1048576          # newest output kept in memory per running job
//! max_wait_ms = 60000           # the longest job_output waits
//! max_finished_per_owner = 256  # finished jobs kept per owner; older ones are retired
//! finished_retention_ms = 3600000 # a job finished this long ago is retired
//!
//! [terminal]
//! max_sessions_per_owner = 16
//! max_sessions = 64
//! scrollback_bytes = 4194304    # output kept per session
//! scrollback_lines = 10000      # lines the plain view returns at most
//! shell = "bash"
//!
//! [lsp]                         # language servers for the `lsp` tool
//! idle_ms = 600000              # a server unused this long is shut down
//! request_timeout_ms = 30000    # one query, the server's start included; then TIMEOUT
//! defaults = true               # use built-in servers found on PATH (rust-analyzer, pylsp,
//!                               # typescript-language-server, clangd, gopls)
//! [lsp.servers.pyright]         # replaces a default of the same name; an extension goes to
//! command = ["pyright-langserver", "--stdio"]   # one server (two claiming it: an error)
//! extensions = ["py"]
//! root_markers = ["pyproject.toml"]  # nearest directory with one is the server's root
//! settings = { python = { analysis = { typeCheckingMode = "basic" } } }
//! initialization_options = {}   # its initialize request's initializationOptions
//!
//! [files]                       # the file tools' reads and commits (the `files` interface)
//! max_tracked_files_per_owner = 10000 # reads remembered per owner; the oldest is forgotten
//!                               # (that file must be read again before a commit changes it)
//! max_read_bytes = 16777216     # the largest file one read returns (else LIMIT_EXCEEDED)
//! extra_roots = [               # directories besides the workspace the file tools reach
//!   { path = "/srv/docs" },     # read-only (the default): read, glob, grep
//!   { path = "/srv/scratch", write = true }, # and changed through commits too
//! ]                             # absolute; the deepest root holding a path decides
//!
//! [serve]
//! owner_grace_ms = 30000        # a gone connection's resources live this long
//! upgrade_drain_ms = 10000      # `dsh upgrade`: calls in flight get this long, then
//!                               # CANCELLED; new requests wait meanwhile
//! upgrade_check_ms = 10000      # `dsh upgrade`: the new binary's check of the snapshot
//! max_request_bytes = 4194304   # larger HTTP requests get 413
//! stdio_max_message_bytes = 16777216 # a longer stdin line gets a JSON-RPC error (-32600,
//!                               # the request's id when it is seen early); rest discarded
//! progress_interval_ms = 250    # progress notifications while a call runs
//! resource_update_interval_ms = 100 # a subscribed resource's updates, at most this often
//! http_session_idle_ms = 300000 # an HTTP session this long without a request or a call
//!                               # in flight is closed
//! http_max_sessions = 64        # one more MCP session gets 503
//! http_principals.alice = { scope = "default", token_env = "ALICE_TOKEN" }
//!                               # a named principal: its own token, its own terminals,
//!                               # jobs and tasks under MCP 2026-07-28 (see the book's protocol page)
//! http_max_connections = 256    # TCP connections at once (at most half the descriptor
//!                               # limit); past it the oldest that sent nothing is closed,
//!                               # or, all busy, the new one gets 503
//! http_header_timeout_ms = 10000 # a request head not complete this long after the
//!                               # connection opened or its last response: closed
//! http_body_timeout_ms = 30000  # a request body not complete this long after its head: 408
//! http_console_login_ms = 43200000  # a console login (DSH_CONSOLE_TOKEN) lasts this long
//! http_allowed_origins = []     # browser origins allowed besides loopback ones, e.g.
//!                               # "https://app.example", "http://dev.example:*"; others: 403
//! http_scope_tokens = {}        # more scopes served over HTTP, each to its own token, e.g.
//!                               # { untrusted = "DSH_UNTRUSTED_TOKEN" }: the scope, and the
//!                               # environment variable holding its token
//! reload_debounce_ms = 100      # a changed plugin reloads after this long without writes
//! approval_timeout_ms = 300000  # an approval asked of an MCP client (elicitation) not
//!                               # answered in this long is a denial
//! task_after_ms = 10000         # MCP 2026-07-28: a call of a client that speaks tasks
//!                               # still running this long is answered as a task
//!
//! [state]                       # past sessions kept in the state directory (checked at start)
//! max_sessions = 100            # the newest this many; older ones are removed
//! max_session_age_days = 30     # 0 = no age limit
//! max_sessions_mb = 2048        # all sessions together; the oldest go first; 0 = no limit
//!
//! [scopes]
//! readonly = ["lsp_*"]          # tool patterns a scope sees; `default` sees all
//!
//! [plugins.bash]
//! cpu_ms = 10000                # guest CPU time per call
//! memory_mb = 64                # linear memory cap
//! timeout_ms = 700000           # the execute stage's timeout for this plugin's tools
//! [plugins.bash.settings]       # handed to the plugin as JSON
//! default_timeout_ms = 120000
//! max_timeout_ms = 600000
//!
//! # Grants: a plugin gets nothing it is not granted. `[plugins.NAME]` applies to the
//! # plugin loaded as NAME; `[plugins."sha256:HEX"]` to exactly that build (it wins).
//! [plugins.reader]
//! interfaces = ["log"]          # host interfaces it may import: process, terminal, jobs, log, progress, lsp, files, undo, subagent, tally, sampling, elicitation, egress
//! env = ["LANG"]                # environment variables, values taken from the host
//! network = ["127.0.0.1:8080"]  # HOST:PORT it may connect to (alias `connect`; see below)
//! bind = ["127.0.0.1:9000"]     # HOST:PORT it may bind and listen on
//! dns = false                   # true: it may look up any host name
//! fs = [{ path = "/srv/data", mode = "ro" },              # seen at the same path
//!       { path = "/tmp/out", guest = "/out", mode = "rw" }] # or mapped elsewhere
//! ```
//!
//! A network pattern's HOST is an IP address (`[::1]` for IPv6), a CIDR block
//! (`10.0.0.0/8`), `*` (any address) or a host name, resolved when a call uses it (the
//! answer is reused for 5 s); its PORT is a number or `*`. `network` grants connecting
//! (and sending datagrams) only: binding or listening needs `bind`, except the wildcard
//! bind the OS does before a connect. A plugin may look up only the host names its
//! `network` and `bind` patterns name (any other name is refused before a resolver sees
//! it), or any name with `dns = true`; IP address literals need no lookup. The embedded plugins come with the one interface each needs
//! (`bash`: process, `jobs`: jobs, `terminal`: terminal); `interfaces` replaces that.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::services::{Capability, ServicesConfig};

pub mod origin;
pub mod plugin;
#[cfg(test)]
mod reference;
mod serve;

/// Plugin instances that may be alive at once (the engine's instance pool).
pub const MAX_LIVE_INSTANCES: u32 = 512;
/// Instances kept for loading plugins (`describe()` runs one while calls are running).
const LOAD_RESERVE: u32 = 32;
/// The most observers `[pipeline] observers` may name: each holds one instance while it
/// sees a record, out of [`LOAD_RESERVE`] (loads take one at a time).
pub const MAX_OBSERVERS: usize = 8;
/// Instances made ahead of their calls that may exist at once (one per plugin version
/// at most: the plugins loaded past this many instantiate at the call).
pub const MAX_SPARES: u32 = 64;
/// The most calls that may be admitted at once (`[limits] max_calls_in_flight` is
/// checked against it): each holds one instance at a time (a guard's, the tool's, a
/// filter's), never two.
pub const MAX_CALL_SLOTS: usize = (MAX_LIVE_INSTANCES - LOAD_RESERVE - MAX_SPARES) as usize;

pub use plugin::{
    FsGrant, FsMode, PluginConfig, DEFAULT_CPU_MS, DEFAULT_GUARD_CPU_MS, DEFAULT_MEMORY_MB,
};
pub use serve::{HttpConfig, HttpPrincipal, ServeConfig, StdioConfig};

/// Why a configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("invalid {path}: {message}")]
    Invalid { path: String, message: String },
}

macro_rules! define_config {
    ($($name:ident: $ty:ty,)*) => {
        /// The whole of `dsh.toml`: the host's own sections, and one section per
        /// capability (`[process]`, `[jobs]`, `[terminal]`, ...: see
        /// [`crate::services::for_each_capability`]).
        #[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
        #[serde(deny_unknown_fields)]
        pub struct Config {
            #[serde(default)]
            pub limits: Limits,
            #[serde(default)]
            pub gate: GateConfig,
            #[serde(default)]
            pub serve: ServeConfig,
            /// Scope name → tool name patterns the scope may see.
            #[serde(default)]
            pub scopes: BTreeMap<String, Vec<String>>,
            /// Plugin name → its bounds, settings and grants.
            #[serde(default)]
            pub plugins: BTreeMap<String, PluginConfig>,
            #[serde(default)]
            pub pipeline: PipelineConfig,
            #[serde(default)]
            pub state: StateConfig,
            #[serde(default)]
            pub traces: TracesConfig,
            $(
                #[serde(default)]
                pub $name: <$ty as Capability>::Config,
            )*
        }

        impl Config {
            /// The capabilities' sections, to start the services with.
            pub fn services(&self) -> ServicesConfig {
                ServicesConfig {
                    $($name: self.$name.clone(),)*
                }
            }

            /// Sets section `section` (a top-level key: `limits`, `process`, ...) back to
            /// its default; false when there is no such section.
            pub fn reset_section(&mut self, section: &str) -> bool {
                match section {
                    "limits" => self.limits = Default::default(),
                    "gate" => self.gate = Default::default(),
                    "serve" => self.serve = Default::default(),
                    "scopes" => self.scopes = Default::default(),
                    "plugins" => self.plugins = Default::default(),
                    "pipeline" => self.pipeline = Default::default(),
                    "state" => self.state = Default::default(),
                    "traces" => self.traces = Default::default(),
                    $(stringify!($name) => self.$name = Default::default(),)*
                    _ => return false,
                }
                true
            }

            /// What the capabilities refuse in their sections (the first found).
            fn check_capabilities(&self) -> Result<(), String> {
                use crate::services::Capability;
                $(<$ty as Capability>::check_config(&self.$name)?;)*
                Ok(())
            }
        }
    };
}

crate::for_each_capability!(define_config);

/// The top-level sections of `dsh.toml` whose changes a serving host applies live (at
/// the next call: `config_watch` in the pipeline crate); every other section is bound
/// at start and waits for a restart. The one list: the reload and the configuration
/// reference (`reference`) both read it.
pub const LIVE_SECTIONS: &[&str] = &["pipeline", "gate", "limits", "scopes", "plugins"];

impl Config {
    /// This configuration with every section of [`LIVE_SECTIONS`] at its default: what
    /// is left is what is bound at start.
    pub fn bound_at_start(&self) -> Config {
        let mut config = self.clone();
        for section in LIVE_SECTIONS {
            let known = config.reset_section(section);
            debug_assert!(
                known,
                "LIVE_SECTIONS names {section:?}, no section of Config"
            );
        }
        config
    }
}

/// How much of past sessions the state directory keeps (`[state]`).
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct StateConfig {
    /// Sessions kept (the newest); older ones are removed when a host starts.
    pub max_sessions: usize,
    /// Sessions older than this many days are removed; 0 = no age limit.
    pub max_session_age_days: u64,
    /// The most MiB all sessions may take together (the oldest go first); 0 = no limit.
    pub max_sessions_mb: u64,
}

impl Default for StateConfig {
    fn default() -> Self {
        StateConfig {
            max_sessions: 100,
            max_session_age_days: 30,
            max_sessions_mb: 2048,
        }
    }
}

/// Where traces of calls go (`[traces]`): nowhere unless `endpoint` is set. Read at
/// start: a change waits for a restart (or an upgrade).
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct TracesConfig {
    /// An OTLP/HTTP endpoint (`http://HOST:4318`, or a whole URL ending in the traces
    /// path); spans go there as protobuf. No endpoint, no traces.
    pub endpoint: Option<String>,
    /// How long one export (a batch of spans) may take before it is given up.
    pub export_timeout_ms: u64,
}

impl Default for TracesConfig {
    fn default() -> Self {
        TracesConfig {
            endpoint: None,
            export_timeout_ms: 2_000,
        }
    }
}

impl TracesConfig {
    /// The endpoint's whole URL, when traces are on ([`crate::traces::endpoint_url`]).
    pub fn endpoint_url(&self) -> Result<Option<String>, String> {
        self.endpoint
            .as_deref()
            .map(crate::traces::endpoint_url)
            .transpose()
            .map_err(|error| format!("traces.endpoint: {error}"))
    }

    fn check(&self) -> Result<(), String> {
        self.endpoint_url()?;
        if self.export_timeout_ms == 0 {
            return Err("traces.export_timeout_ms must be at least 1".into());
        }
        Ok(())
    }
}

/// Which guards, middleware, result filters and observers every call passes, in order,
/// and which calls each is for.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct PipelineConfig {
    /// Guard plugins by name, in the order they run (after the gate).
    pub guards: Vec<String>,
    /// Middleware plugins by name, the first outermost: each wraps the ones after it and
    /// the tool's execution.
    pub middleware: Vec<String>,
    /// Result filter plugins by name, in the order they run (before finalize).
    pub filters: Vec<String>,
    /// Observer plugins by name: each sees the event log's records of every call,
    /// approval and job, off the call's path.
    pub observers: Vec<String>,
    /// Which calls a guard, middleware or filter is for (`[pipeline.select.NAME]`): one
    /// not named here is for every call.
    pub select: BTreeMap<String, StageSelect>,
}

/// The calls one stage is for: those whose tool matches one of `tools` and whose scope
/// matches one of `scopes` (globs, `*` any run of characters; empty: any).
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct StageSelect {
    /// Tool name globs; empty: any tool.
    pub tools: Vec<String>,
    /// Scope globs; empty: any scope.
    pub scopes: Vec<String>,
}

impl StageSelect {
    /// Whether a call of `tool` in `scope` is one of these.
    pub fn selects(&self, tool: &str, scope: &str) -> bool {
        let any = |patterns: &[String], text: &str| {
            patterns.is_empty() || patterns.iter().any(|p| crate::glob::glob_match(p, text))
        };
        any(&self.tools, tool) && any(&self.scopes, scope)
    }
}

impl PipelineConfig {
    /// Every stage named, with the kind of plugin it must be.
    pub fn stages(&self) -> impl Iterator<Item = (&str, plugin::PluginKind)> {
        use plugin::PluginKind;
        [
            (&self.guards, PluginKind::Guard),
            (&self.middleware, PluginKind::Middleware),
            (&self.filters, PluginKind::ResultFilter),
            (&self.observers, PluginKind::Observer),
        ]
        .into_iter()
        .flat_map(|(names, kind)| names.iter().map(move |name| (name.as_str(), kind)))
    }

    /// Whether `name` is a stage of this pipeline.
    pub fn names(&self, name: &str) -> bool {
        self.stages().any(|(stage, _)| stage == name)
    }

    /// Whether stage `name` is for a call of `tool` in `scope`.
    pub fn selects(&self, name: &str, tool: &str, scope: &str) -> bool {
        self.select
            .get(name)
            .is_none_or(|select| select.selects(tool, scope))
    }

    fn check(&self, limits: &Limits) -> Result<(), String> {
        for (name, _) in self.stages() {
            if self.stages().filter(|(other, _)| *other == name).count() > 1 {
                return Err(format!(
                    "pipeline: {name:?} is named twice (a plugin is one stage, once)"
                ));
            }
        }
        for name in self.select.keys() {
            if !self.names(name) || self.observers.contains(name) {
                return Err(format!(
                    "pipeline.select.{name}: no guard, middleware or filter of that name in [pipeline] (observers see every record)"
                ));
            }
        }
        if self.observers.len() > MAX_OBSERVERS {
            return Err(format!(
                "pipeline.observers: at most {MAX_OBSERVERS} observers (each holds one plugin instance of the pool's reserve while it sees a record), not {}",
                self.observers.len()
            ));
        }
        // A call holds an instance of each middleware around the tool's: the calls in
        // flight times that must fit the instance pool's share for calls.
        let held = self.middleware.len() + 1;
        if limits.max_calls_in_flight.saturating_mul(held) > MAX_CALL_SLOTS {
            return Err(format!(
                "pipeline.middleware: with {} middleware a call holds {held} plugin instances at once, and limits.max_calls_in_flight = {} such calls would need {} of the {MAX_CALL_SLOTS} the pool has for calls; lower max_calls_in_flight to {} or name fewer middleware",
                self.middleware.len(),
                limits.max_calls_in_flight,
                limits.max_calls_in_flight * held,
                MAX_CALL_SLOTS / held,
            ));
        }
        Ok(())
    }
}

/// Limits that apply to every call.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// The most bytes of a result's content the model sees (when the tool sets none).
    pub output_budget_bytes: u32,
    /// The execute stage's timeout for a call (when the plugin sets none), and the cap
    /// on any plugin's `timeout_ms`.
    pub call_timeout_ms: u64,
    /// Further attempts of an idempotent tool whose call failed with `INTERNAL`,
    /// `PLUGIN_TRAP` or `TIMEOUT` (never for a tool that is not idempotent, like bash).
    pub max_retries: u32,
    /// The most bytes a foreground command's spill file (its full output) holds; the
    /// command keeps running, the rest of its output is not kept on disk, and the result
    /// says where the file was cut.
    pub max_spill_bytes: u64,
    /// Calls running at once, from their guards to their last filter. Each holds one
    /// plugin instance at a time (a guard's, then the tool's, then each filter's), so
    /// this many calls can never exhaust the instance pool. Sized for a 2-core machine:
    /// most calls wait on processes, not on a core. At most
    /// [`MAX_CALL_SLOTS`].
    pub max_calls_in_flight: usize,
    /// Calls waiting for a turn when `max_calls_in_flight` are running; they are taken
    /// round-robin between owners, each owner's in order. One more call gets `BUSY`.
    pub max_queued_calls: usize,
    /// The most times the middleware of one call may run the rest of it (`next.run`),
    /// all of them together; the run past it stops the middleware and fails the call
    /// (`LIMIT_EXCEEDED`, naming it).
    pub max_next_runs: u32,
    /// Records each observer's queue holds; what arrives while it is full is dropped
    /// and counted (`dsh_observer_dropped_total`, an `observer/dropped` event).
    pub observer_queue: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            output_budget_bytes: 30_000,
            call_timeout_ms: 900_000,
            max_retries: 1,
            max_spill_bytes: 1 << 30,
            max_calls_in_flight: 64,
            max_queued_calls: 1024,
            max_next_runs: 8,
            observer_queue: 1024,
        }
    }
}

impl Limits {
    /// Checks the admission limits against the instance pool.
    fn check(&self) -> Result<(), String> {
        let most = MAX_CALL_SLOTS;
        if !(1..=most).contains(&self.max_calls_in_flight) {
            return Err(format!(
                "limits.max_calls_in_flight must be between 1 and {most} (the plugin instance pool less its reserve for loads), not {}",
                self.max_calls_in_flight
            ));
        }
        if self.max_next_runs == 0 {
            return Err("limits.max_next_runs must be at least 1 (a middleware that runs the call needs one)".into());
        }
        if !(1..=1 << 20).contains(&self.observer_queue) {
            return Err(format!(
                "limits.observer_queue must be between 1 and 1048576 records, not {}",
                self.observer_queue
            ));
        }
        Ok(())
    }
}

/// The pre-execute gate's rules.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GateConfig {
    /// What a call that matches no rule gets.
    #[serde(default)]
    pub default: GateAction,
    /// Checked in order; the first rule that matches decides.
    #[serde(default)]
    pub rules: Vec<GateRule>,
}

#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema, serde::Serialize,
)]
#[serde(rename_all = "lowercase")]
pub enum GateAction {
    #[default]
    Allow,
    Deny,
}

/// One gate rule. Every field given must match for the rule to apply.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GateRule {
    /// What a call the rule matches gets.
    pub action: GateAction,
    /// Tool name glob (`*` matches any run of characters); all tools when absent.
    pub tool: Option<String>,
    /// Scope glob; all scopes when absent.
    pub scope: Option<String>,
    /// A top-level argument whose string value `pattern` is matched against.
    pub arg: Option<String>,
    /// Regex matched against `arg` (required when `arg` is given).
    pub pattern: Option<String>,
    /// Shown to the model when the rule denies.
    pub reason: Option<String>,
}

impl Config {
    /// Reads `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Config::parse(&text).map_err(|message| ConfigError::Invalid {
            path: path.display().to_string(),
            message,
        })
    }

    /// Parses the text of a `dsh.toml` and checks what can be checked up front.
    pub fn parse(text: &str) -> Result<Config, String> {
        let config: Config = toml::from_str(text).map_err(|e| e.to_string())?;
        for (index, rule) in config.gate.rules.iter().enumerate() {
            if rule.arg.is_some() != rule.pattern.is_some() {
                return Err(format!(
                    "gate.rules[{index}]: `arg` and `pattern` go together"
                ));
            }
            if let Some(pattern) = &rule.pattern {
                regex::Regex::new(pattern)
                    .map_err(|e| format!("gate.rules[{index}].pattern: {e}"))?;
            }
        }
        config.check_capabilities()?;
        config.serve.check()?;
        config.limits.check()?;
        config.pipeline.check(&config.limits)?;
        config.traces.check()?;
        let secrets = config.services().secret_variables();
        for (name, plugin) in &config.plugins {
            plugin
                .check()
                .map_err(|message| format!("plugins.{name}: {message}"))?;
            if let Some(secret) = plugin.env.iter().find(|key| secrets.contains(key)) {
                return Err(format!(
                    "plugins.{name}: env grants `{secret}`, which holds a key of dsh's own (a model endpoint's api_key_env); no plugin may be given it"
                ));
            }
        }
        Ok(config)
    }

    /// The bounds, settings and grants of the plugin loaded as `plugin` whose file has
    /// SHA-256 `digest`: `[plugins."sha256:DIGEST"]`, else `[plugins.NAME]`, else none.
    pub fn plugin(&self, plugin: &str, digest: &str) -> PluginConfig {
        self.plugins
            .get(&format!("sha256:{digest}"))
            .or_else(|| self.plugins.get(plugin))
            .cloned()
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod proptests;

#[cfg(test)]
mod tests {

    #[test]
    fn middleware_that_cannot_fit_the_instance_pool_is_refused() {
        let fits = "[pipeline]\nmiddleware = [\"a\", \"b\", \"c\", \"d\", \"e\"]\n";
        assert!(
            Config::parse(fits).is_ok(),
            "64 calls × 6 instances fit 416"
        );
        let too_many =
            "[pipeline]\nmiddleware = [\"a\", \"b\", \"c\", \"d\", \"e\", \"f\", \"g\"]\n";
        let refused = Config::parse(too_many).unwrap_err();
        assert!(
            refused.contains("holds 8 plugin instances")
                && refused.contains("lower max_calls_in_flight to 52"),
            "{refused}"
        );
        let lowered = format!("{too_many}[limits]\nmax_calls_in_flight = 52\n");
        assert!(Config::parse(&lowered).is_ok());
        let twice = "[pipeline]\nguards = [\"x\"]\nmiddleware = [\"x\"]\n";
        assert!(Config::parse(twice).unwrap_err().contains("named twice"));
        let stray = "[pipeline.select.nobody]\ntools = [\"bash\"]\n";
        assert!(Config::parse(stray)
            .unwrap_err()
            .contains("pipeline.select.nobody"));
        let observers = format!(
            "[pipeline]\nobservers = [{}]\n",
            (0..9)
                .map(|n| format!("\"o{n}\""))
                .collect::<Vec<_>>()
                .join(", ")
        );
        assert!(Config::parse(&observers)
            .unwrap_err()
            .contains("at most 8 observers"));
    }

    use super::*;

    #[test]
    fn network_grants_connect_bind_and_dns() {
        let config = Config::parse(
            "[plugins.a]\nconnect = [\"10.0.0.1:80\"]\nbind = [\"127.0.0.1:9000\"]\ndns = true\n",
        )
        .unwrap();
        let plugin = &config.plugins["a"];
        assert_eq!(plugin.network, ["10.0.0.1:80"]);
        assert_eq!(plugin.bind, ["127.0.0.1:9000"]);
        assert!(plugin.dns);
        let error = Config::parse("[plugins.a]\nbind = [\"127.0.0.1\"]\n").unwrap_err();
        assert!(error.contains("bind pattern"), "{error}");
    }

    #[test]
    fn arg_without_pattern_is_rejected() {
        let err =
            Config::parse("[[gate.rules]]\naction = \"deny\"\narg = \"command\"\n").unwrap_err();
        assert!(err.contains("go together"), "{err}");
    }

    #[test]
    fn bad_regex_is_rejected_with_its_rule() {
        let err = Config::parse(
            "[[gate.rules]]\naction = \"deny\"\narg = \"command\"\npattern = \"(\"\n",
        )
        .unwrap_err();
        assert!(err.contains("gate.rules[0].pattern"), "{err}");
    }

    #[test]
    fn the_example_config_parses() {
        let config = Config::parse(include_str!("../../../examples/dsh.toml")).unwrap();
        assert_eq!(config.gate.rules.len(), 1);
        assert_eq!(config.jobs.max_running_per_owner, 64);
        assert_eq!(config.jobs.max_finished_per_owner, 256);
        assert_eq!(config.jobs.finished_retention_ms, 3_600_000);
        assert_eq!(config.limits.max_spill_bytes, 1 << 30);
        assert_eq!(config.pipeline.guards.len(), 3);
        assert_eq!(config.pipeline.filters, ["redact_secrets"]);
        assert_eq!(config.process.env.exclude, ["DATABASE_URL"]);
        assert_eq!(config.process.env.set["PAGER"], "cat");
    }

    /// `path` as a TOML table name.
    fn dotted(path: &[String]) -> String {
        path.join(".")
    }

    /// The keys the table at `path` accepts (`[[path]]`, an element of an array of
    /// tables, with `array`), read from the loader's own "unknown field" error; none when
    /// what is there is not a struct (a map, a value, a list of values).
    fn accepted_fields(path: &[String], array: bool) -> Option<Vec<String>> {
        let header = match (path.is_empty(), array) {
            (true, _) => String::new(),
            (false, false) => format!("[{}]\n", dotted(path)),
            (false, true) => format!("[[{}]]\n", dotted(path)),
        };
        let error = Config::parse(&format!("{header}zzz_probe = 0\n")).err()?;
        let listed = error.split("unknown field `zzz_probe`").nth(1)?;
        let listed = listed.lines().next().unwrap_or_default();
        // serde: "expected one of `a`, `b`", "expected `a` or `b`", "expected `a`".
        Some(
            listed
                .split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect(),
        )
    }

    /// Whether the key at `path` holds a table: `[path]` is accepted as one, or fails
    /// only for a required key of a table around it.
    fn holds_a_table(path: &[String]) -> bool {
        match Config::parse(&format!("[{}]\n", dotted(path))) {
            Ok(_) => true,
            Err(error) => error.contains("missing field"),
        }
    }

    /// Every key (`keys`) and every table (`sections`) `dsh.toml` accepts, found by
    /// asking the loader, as dotted paths; `*` stands for a name of the user's (a
    /// plugin's, a server's). The configuration reference's test compares its keys.
    pub(super) fn walk(
        path: &[String],
        shown: &str,
        array: bool,
        keys: &mut Vec<String>,
        sections: &mut Vec<String>,
    ) {
        let Some(fields) = accepted_fields(path, array) else {
            return;
        };
        for field in fields {
            let inner: Vec<String> = path.iter().cloned().chain([field.clone()]).collect();
            let shown = if shown.is_empty() {
                field.clone()
            } else {
                format!("{shown}.{field}")
            };
            if accepted_fields(&inner, false).is_some_and(|fields| fields.is_empty()) {
                continue; // A section with nothing to set yet (`[log]`).
            }
            keys.push(shown.clone());
            if holds_a_table(&inner) {
                sections.push(shown.clone());
                if accepted_fields(&inner, false).is_some() {
                    walk(&inner, &shown, false, keys, sections);
                } else {
                    // A map: of tables of known keys (`[plugins.NAME]`), or of values.
                    let named: Vec<String> =
                        inner.iter().cloned().chain(["zzz_name".into()]).collect();
                    if accepted_fields(&named, false).is_some() {
                        let shown = format!("{shown}.*");
                        sections.push(shown.clone());
                        walk(&named, &shown, false, keys, sections);
                    }
                }
            } else if accepted_fields(&inner, true).is_some() {
                // An array of tables (`[[gate.rules]]`, `fs = [{ ... }]`).
                sections.push(shown.clone());
                walk(&inner, &shown, true, keys, sections);
            }
        }
    }

    /// Whether `value` has something at `path` (`*`: under any name; through an array,
    /// in any element) for which `what` holds.
    fn has(value: &toml::Value, path: &[&str], what: &dyn Fn(&toml::Value) -> bool) -> bool {
        match (value, path.split_first()) {
            (toml::Value::Array(items), Some(_)) => items.iter().any(|v| has(v, path, what)),
            (_, None) => what(value),
            (toml::Value::Table(table), Some((&"*", rest))) => {
                table.values().any(|v| has(v, rest, what))
            }
            (toml::Value::Table(table), Some((key, rest))) => {
                table.get(*key).is_some_and(|v| has(v, rest, what))
            }
            _ => false,
        }
    }

    /// `examples/dsh.toml` says it shows every setting: every section and every key the
    /// configuration accepts (asked of the loader itself, so a new one is missed here
    /// until the example shows it) appears in it.
    #[test]
    fn the_example_config_shows_every_section_and_key() {
        let (mut keys, mut sections) = (Vec::new(), Vec::new());
        walk(&[], "", false, &mut keys, &mut sections);
        // The walk finds what it must (a check of the walk itself).
        for expected in [
            "lsp",
            "lsp.servers.*",
            "lsp.servers.*.settings",
            "process.executor",
            "process.sandbox",
            "plugins.*.settings",
            "gate.rules",
        ] {
            assert!(
                sections.iter().any(|s| s == expected),
                "{expected} not found: {sections:?}"
            );
        }
        for expected in [
            "lsp.servers.*.initialization_options",
            "process.sandbox.tcp_ports",
        ] {
            assert!(
                keys.iter().any(|k| k == expected),
                "{expected} not found: {keys:?}"
            );
        }
        /// Keys for tests only, not shown to users.
        const TEST_ONLY: &[&str] = &["process.sandbox.assume_abi"];
        /// Other names of keys the example shows (serde lists aliases among the fields).
        const ALIASES: &[&str] = &["plugins.*.connect"];
        let example: toml::Value =
            toml::from_str(include_str!("../../../examples/dsh.toml")).unwrap();
        let is_table = |v: &toml::Value| match v {
            toml::Value::Array(items) => !items.is_empty() && items.iter().all(|v| v.is_table()),
            v => v.is_table(),
        };
        let anything = |_: &toml::Value| true;
        let missing_sections: Vec<&String> = sections
            .iter()
            .filter(|s| !has(&example, &s.split('.').collect::<Vec<_>>(), &is_table))
            .collect();
        assert!(
            missing_sections.is_empty(),
            "examples/dsh.toml lacks these sections: {missing_sections:?}"
        );
        let missing_keys: Vec<&String> = keys
            .iter()
            .filter(|k| !TEST_ONLY.contains(&k.as_str()) && !ALIASES.contains(&k.as_str()))
            .filter(|k| !has(&example, &k.split('.').collect::<Vec<_>>(), &anything))
            .collect();
        assert!(
            missing_keys.is_empty(),
            "examples/dsh.toml lacks these keys: {missing_keys:?}"
        );
    }

    #[test]
    fn a_bad_process_env_is_rejected_naming_the_key() {
        let err = Config::parse("[process.env.set]\n\"A=B\" = \"x\"\n").unwrap_err();
        assert!(err.contains("process.env.set"), "{err}");
    }

    /// The docs name the grantable interfaces where `interfaces` is described: the
    /// book's Grants page's and this module's `dsh.toml` examples list exactly the
    /// capability list.
    #[test]
    fn the_docs_list_every_capability() {
        let names = |doc: &str| -> Vec<String> {
            let line = doc
                .lines()
                .find(|line| line.contains("host interfaces it may import:"))
                .expect("the `interfaces` line");
            let list = line.split("import:").nth(1).unwrap();
            let mut names: Vec<String> = list.split(',').map(|n| n.trim().to_string()).collect();
            names.sort();
            names
        };
        let mut expected: Vec<String> = crate::services::capabilities::NAMES
            .iter()
            .map(|n| n.to_string())
            .collect();
        expected.sort();
        assert_eq!(
            names(include_str!("../../../docs/src/plugins/grants.md")),
            expected,
            "docs/src/plugins/grants.md"
        );
        assert_eq!(names(include_str!("mod.rs")), expected, "config/mod.rs");
    }

    #[test]
    fn unknown_keys_are_errors() {
        assert!(Config::parse("[limits]\noutput_budget = 3\n").is_err());
    }

    #[test]
    fn bad_http_origins_and_zero_http_limits_are_rejected_naming_the_key() {
        let error =
            Config::parse("[serve]\nhttp_allowed_origins = [\"app.example\"]\n").unwrap_err();
        assert!(error.contains("serve.http_allowed_origins"), "{error}");
        let error = Config::parse("[serve]\nhttp_max_sessions = 0\n").unwrap_err();
        assert!(error.contains("serve.http_max_sessions"), "{error}");
        let config =
            Config::parse("[serve]\nhttp_allowed_origins = [\"https://app.example\"]\n").unwrap();
        assert_eq!(config.serve.http.allowed_origins, ["https://app.example"]);
    }

    #[test]
    fn admission_limits_have_defaults_and_are_checked_against_the_pool() {
        let config = Config::parse("").unwrap();
        assert_eq!(config.limits.max_calls_in_flight, 64);
        assert_eq!(config.limits.max_queued_calls, 1024);
        // At most 416: the instance pool (512) less its reserve for loads and the
        // instances made ahead.
        for bad in ["0", "417", "100000"] {
            let error =
                Config::parse(&format!("[limits]\nmax_calls_in_flight = {bad}\n")).unwrap_err();
            assert!(error.contains("limits.max_calls_in_flight"), "{error}");
        }
        let config = Config::parse("[limits]\nmax_calls_in_flight = 416\n").unwrap();
        assert_eq!(config.limits.max_calls_in_flight, 416);
        let config =
            Config::parse("[limits]\nmax_calls_in_flight = 2\nmax_queued_calls = 0\n").unwrap();
        assert_eq!(config.limits.max_calls_in_flight, 2);
        assert_eq!(config.limits.max_queued_calls, 0);
    }
}
