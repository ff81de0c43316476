//! Host capabilities: the native state that outlives any plugin (process trees, jobs,
//! terminal sessions), one folder each, and the one list that names them.
//!
//! A capability is a folder `services/NAME/`: its native service (`mod.rs` and what it
//! needs; no wasmtime), what the host sees of it (`capability.rs`: its [`Capability`]
//! impl), its `dsh.toml` section (`config.rs`, `[NAME]`), and its binding
//! (`wit.rs`: the `dsh:plugin/NAME` interface implemented for [`CallCtx`], whatever the
//! store's state type, through [`CallView`]). [`for_each_capability!`] is the list: the
//! [`Services`] struct, the grantable interface names ([`capabilities::NAMES`]), the
//! configuration sections (`crate::config::Config`) and the linker (`services::wit`) are
//! all generated from it, so adding a capability is its folder, its WIT interface and
//! one line there. [`resource_changes`] is no capability: it is how the terminal
//! sessions and the jobs tell the front end their owner's resources changed.

pub mod egress;
pub mod elicitation;
pub mod files;
pub mod handover;
pub mod jobs;
pub mod log;
pub mod lsp;
pub mod people;
pub mod process;
pub mod progress;
pub mod resource_changes;
pub mod resources;
pub mod sampling;
pub mod subagent;
pub mod tally;
pub mod terminal;
pub mod undo;
pub mod wit;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::call::CallContext;
use crate::error::ErrorCode;

/// The host's capabilities, one line each: `NAME: TYPE`. NAME is the grant (`interfaces =
/// ["NAME"]`), the WIT interface (`dsh:plugin/NAME`), the `dsh.toml` section (`[NAME]`)
/// and the field of [`Services`]; TYPE implements [`Capability`]. An owner's resources
/// are released, and everything is shut down, in this order.
///
/// `for_each_capability!(my_macro)` calls `my_macro! { NAME: TYPE, ... }`.
#[macro_export]
macro_rules! for_each_capability {
    ($callback:ident) => {
        $callback! {
            terminal: ::std::sync::Arc<$crate::services::terminal::TerminalService>,
            process: $crate::services::process::ProcessService,
            jobs: ::std::sync::Arc<$crate::services::jobs::JobRegistry>,
            log: $crate::services::log::LogCapability,
            progress: $crate::services::progress::ProgressCapability,
            lsp: ::std::sync::Arc<$crate::services::lsp::LspService>,
            files: ::std::sync::Arc<$crate::services::files::FileService>,
            subagent: ::std::sync::Arc<$crate::services::subagent::SubagentService>,
            sampling: $crate::services::sampling::SamplingCapability,
            elicitation: $crate::services::elicitation::ElicitationCapability,
            egress: ::std::sync::Arc<$crate::services::egress::EgressService>,
            tally: ::std::sync::Arc<$crate::services::tally::TallyService>,
            undo: $crate::services::undo::UndoService,
        }
    };
}

/// A boxed future of a tool call's result.
pub type CallFuture<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = crate::call::CallResult> + Send + 'a>>;

/// The pipeline as the capabilities see it (a layer above them, given to each once the
/// host has one: [`Capability::attach`]): the tools a scope sees, one call through the
/// whole pipeline, and the session's event log.
pub trait ToolRunner: Send + Sync {
    /// The manuals of the tools `scope` sees.
    fn tools(&self, scope: &str) -> Vec<crate::call::SampleTool>;
    /// Runs `request` through the whole pipeline; `cancel` cancels it (its processes
    /// killed).
    fn call<'a>(
        &'a self,
        request: crate::call::CallRequest,
        cancel: &'a tokio_util::sync::CancellationToken,
    ) -> CallFuture<'a>;
    /// Writes an event to the session's log.
    fn event(&self, event: &str, fields: serde_json::Value);
}

/// A figure a capability shows on `/metrics`, read at each scrape: one value, or a
/// family of counters by label.
pub struct Gauge {
    /// The metric's name (`dsh_…`; a counter family's without `_total`, which the
    /// encoding adds).
    pub name: &'static str,
    /// Its help line.
    pub help: &'static str,
    pub read: GaugeRead,
}

/// How a [`Gauge`] is read.
pub enum GaugeRead {
    /// One value.
    One(Box<dyn Fn() -> i64 + Send + Sync>),
    /// Counters, one per set of labels (label values bounded by the configuration, as a
    /// model's name is).
    Counters(Box<dyn Fn() -> Vec<LabeledValue> + Send + Sync>),
}

/// A counter's labels and its value.
pub type LabeledValue = (Vec<(&'static str, String)>, f64);

impl Gauge {
    pub fn new(
        name: &'static str,
        help: &'static str,
        read: impl Fn() -> i64 + Send + Sync + 'static,
    ) -> Self {
        Gauge {
            name,
            help,
            read: GaugeRead::One(Box::new(read)),
        }
    }

    /// A family of counters read at each scrape.
    pub fn counters(
        name: &'static str,
        help: &'static str,
        read: impl Fn() -> Vec<LabeledValue> + Send + Sync + 'static,
    ) -> Self {
        Gauge {
            name,
            help,
            read: GaugeRead::Counters(Box::new(read)),
        }
    }
}

/// What a capability says of itself, for grants, `dsh plugins --grants` and the docs.
#[derive(Debug, Clone, Copy)]
pub struct CapabilityInfo {
    /// The grant, WIT interface and `dsh.toml` section name.
    pub name: &'static str,
    /// One line on what a plugin granted it can do.
    pub summary: &'static str,
    /// Whether a plugin needs `interfaces = ["NAME"]` to import it. An interface that
    /// reaches only the call's own caller (progress) needs none.
    pub needs_grant: bool,
    /// Whether it asks the caller's client (its model, its user): then only a tool may be
    /// granted it. A guard or a result filter runs on every call, so it would put a
    /// question to the client each time, and a guard's decision must not be the client's
    /// model's.
    pub asks_client: bool,
    /// The error codes its calls may give besides `INTERNAL`.
    pub errors: &'static [ErrorCode],
}

/// A directory a capability maps into a plugin granted it, read-only, beside the
/// plugin's own `fs` grants (`files`: the session workspace and the extra roots, so the
/// plugin walks and reads what the capability's calls reach). The engine checks each (it
/// must exist and stay clear of dsh's state directory) and maps it at its own path; when
/// one cannot be mapped the plugin gets none of them, and each of its calls says why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MappedRoot {
    /// The session workspace, at the path the calls' context names (symlinks resolved
    /// on the host side); nothing is mapped when it does not exist.
    Workspace(PathBuf),
    /// A root the configuration names (`[files] extra_roots`): it must be an absolute
    /// path to a directory, and is mapped at its canonical path and at `shown`, the path
    /// as configured (tidied), when a link leads there.
    ExtraRoot { configured: PathBuf, shown: PathBuf },
}

/// What the capabilities keep for one call of one plugin instance (what `files` read,
/// which its commits are checked against): one value per type, made at its first use
/// and dropped with the call.
#[derive(Default)]
pub struct CallScratch(HashMap<std::any::TypeId, Box<dyn std::any::Any + Send + Sync>>);

impl CallScratch {
    /// This call's `T` (made now if the call has none yet).
    pub fn get<T: Default + Send + Sync + 'static>(&mut self) -> &mut T {
        self.0
            .entry(std::any::TypeId::of::<T>())
            .or_insert_with(|| Box::<T>::default())
            .downcast_mut::<T>()
            .expect("a scratch value is stored under its own type")
    }
}

impl std::fmt::Debug for CallScratch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CallScratch({} values)", self.0.len())
    }
}

/// Why a capability could not start.
#[derive(Debug, thiserror::Error)]
pub enum CapabilityError {
    #[error(transparent)]
    Containment(#[from] process::containment::ContainmentError),
    /// What its section asks cannot be set up (said whole).
    #[error("{0}")]
    Setup(String),
}

/// What every capability is built on: the launcher every process starts through
/// (containment and the environment policy), the registry of background jobs, which
/// commands and terminals both start, and the choice of executor. A capability depends on
/// another only through these, never through [`Services`].
#[derive(Debug, Clone)]
pub struct Foundation {
    pub launch: Arc<process::Launch>,
    pub jobs: Arc<jobs::JobRegistry>,
    /// Which executor runs a call's processes (`[process.executor]`).
    pub executors: Arc<process::config::ExecutorConfig>,
    /// What records the workspace's changes call by call (`[undo]`): the pipeline holds
    /// each call on it, a job or terminal session the call that started it.
    pub undo: Arc<undo::Recorder>,
}

/// The native part of a capability: built once per host from its `dsh.toml` section,
/// shared by every call.
pub trait Capability: Sized + Clone + std::fmt::Debug + Send + Sync + 'static {
    /// Its `[NAME]` section of `dsh.toml`; its JSON Schema (its fields' doc comments and
    /// defaults) is what the configuration reference is generated from.
    type Config: Clone
        + Default
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + schemars::JsonSchema;
    const INFO: CapabilityInfo;

    fn start(config: &Self::Config, foundation: &Foundation) -> Result<Self, CapabilityError>;

    /// What it refuses in its section of `dsh.toml`, said as the error to show (a
    /// configuration is checked whole before anything starts).
    fn check_config(_config: &Self::Config) -> Result<(), String> {
        Ok(())
    }

    /// The variables of dsh's own environment its section says hold secrets of dsh's
    /// (a model endpoint's key): no command gets them, whatever `[process.env]` says, and
    /// no plugin may be granted them.
    fn secret_variables(_config: &Self::Config) -> Vec<String> {
        Vec::new()
    }

    /// Releases what `owner` holds (its connection ended); returns how many things.
    fn release_owner(&self, owner: &str) -> usize;

    /// Stops everything it owns (host shutdown).
    fn shutdown(&self);

    /// The directories a plugin granted it also sees, read-only (none by default).
    fn mapped_roots(&self) -> Vec<MappedRoot> {
        Vec::new()
    }

    /// The figures it shows on `/metrics` (none by default).
    fn gauges(&self) -> Vec<Gauge> {
        Vec::new()
    }

    /// The kinds of resource it shows its owners (none by default); their changes it
    /// reports through [`resource_changes`] under each kind's scheme.
    fn resources(&self) -> Vec<Arc<dyn resources::ResourceSource>> {
        Vec::new()
    }

    /// The terminal sessions it lets a person watch and take over (none by default).
    fn for_people(&self) -> Option<Arc<dyn people::PeopleTerminals>> {
        None
    }

    /// Takes the pipeline, once the host has one: a capability that makes calls of its
    /// own (the subagents) keeps it; the rest ignore it.
    fn attach(&self, _pipeline: &Arc<dyn ToolRunner>) {}

    // At an upgrade ([`handover`]); a capability with nothing to hand over has none.

    /// What it holds that cannot be handed over yet, each saying what and what to do
    /// (an upgrade is refused while there is any).
    fn upgrade_blockers(&self) -> Vec<String> {
        Vec::new()
    }

    /// First: stops what would change what it hands over (reading its PTYs, its jobs'
    /// pipes), or says why it cannot now.
    fn pause(&self) -> handover::HandoverFuture<'_, Result<(), handover::HandoverError>> {
        Box::pin(async { Ok(()) })
    }

    /// Then: its entries of the snapshot (keys of its own); the descriptors they name are
    /// made to stay open across the `exec`.
    #[allow(clippy::type_complexity)]
    fn hand_over(
        &self,
    ) -> handover::HandoverFuture<
        '_,
        Result<Vec<(&'static str, serde_json::Value)>, handover::HandoverError>,
    > {
        Box::pin(async { Ok(Vec::new()) })
    }

    /// The upgrade did not happen: undoes `pause` and `hand_over`.
    fn take_back(&self) -> handover::HandoverFuture<'_, ()> {
        Box::pin(async {})
    }

    /// In the next binary, in the check it runs before the `exec`: why its entries
    /// cannot be read, if they cannot.
    fn check_handed(_handed: &handover::Handed) -> Result<(), String> {
        Ok(())
    }

    /// In the next binary, before anything starts: the descriptors its entries hold
    /// (kept open across the `exec`) and the processes (adopted as children at once).
    fn handed_descriptors(_handed: &handover::Handed) -> Vec<i32> {
        Vec::new()
    }
    fn handed_children(_handed: &handover::Handed) -> Vec<i32> {
        Vec::new()
    }

    /// In the next binary: rebuilds its records from its entries, before any capability
    /// takes its processes back (the jobs the processes report into).
    fn restore_records(&self, _handed: &handover::Handed) {}

    /// Then takes its processes back from `adopted` (from a tokio context).
    fn restore(
        &self,
        _handed: &handover::Handed,
        _adopted: &mut handover::Adopted,
        _foundation: &Foundation,
    ) {
    }
}

/// What a capability's binding gets for one host call: the call's context (owner,
/// workdir, ...), the plugin making it, the capability's own service `S` (its field of
/// [`Services`], and nothing of any other capability's), the [`Foundation`] every
/// capability is built on, and the call's clock of time spent in host calls. The engine's
/// store gives the whole ([`CallView`]); each binding narrows it to its own service
/// ([`CallCtx::narrow`]) when it is added to the linker.
pub struct CallCtx<'a, S> {
    pub call: &'a CallContext,
    pub plugin: &'a str,
    pub service: &'a S,
    pub foundation: &'a Foundation,
    /// Wall time spent in dsh's host calls; a binding adds what a slow call took.
    pub host_time: &'a mut Duration,
    /// What the capabilities keep for this call.
    pub scratch: &'a mut CallScratch,
}

impl<'a> CallCtx<'a, Services> {
    /// This call as one capability's binding sees it: `pick` its own service.
    pub fn narrow<S>(self, pick: impl FnOnce(&'a Services) -> &'a S) -> CallCtx<'a, S> {
        CallCtx {
            call: self.call,
            plugin: self.plugin,
            service: pick(self.service),
            foundation: self.foundation,
            host_time: self.host_time,
            scratch: self.scratch,
        }
    }
}

impl<S> CallCtx<'_, S> {
    /// The executor every process this call starts runs under (a command, a job, a
    /// terminal, a language server): the one place it is chosen, from the call's scope
    /// and tool by `[process.executor]` (the strongest entry wins).
    pub fn executor(&self) -> process::ExecutorKind {
        self.foundation
            .executors
            .executor_for(&self.call.scope, &self.call.tool)
    }

    /// The network by policy (`[egress]`) a run this call starts gets under its
    /// executor: none under `local`, or where no policy allows a host.
    pub fn network(&self) -> Option<dsh_launch::network::Network> {
        self.foundation.launch.network_for(
            self.executor(),
            &self.call.scope,
            &self.call.tool,
            &self.call.owner,
            &self.call.call_id,
        )
    }

    /// Attributes what the caller's job `job` (started by this call) changes in the
    /// workspace to this call, until the job ends (`[undo]`).
    pub async fn record_job_under_this_call(&self, job: &str) {
        let hold = self
            .foundation
            .undo
            .hold_async(undo::CallRef::of(self.call))
            .await;
        self.foundation
            .jobs
            .hold_workspace_changes(&self.call.owner, job, hold);
    }

    /// Runs `work`, the host call `name` (`process.run`, `lsp.query`, …): its wall time
    /// counts as host time, not the guest's, and with traces on it is a span of its own
    /// under the call's stage.
    pub async fn host_call<T>(
        &mut self,
        name: &'static str,
        work: impl std::future::Future<Output = T>,
    ) -> T {
        use tracing::Instrument as _;
        let started = std::time::Instant::now();
        let result = work.instrument(crate::traces::host_call_span(name)).await;
        *self.host_time += started.elapsed();
        result
    }
}

/// A store state the capabilities' bindings can serve: it gives the whole [`CallCtx`],
/// which each binding narrows to its own service.
pub trait CallView: Send {
    fn call_ctx(&mut self) -> CallCtx<'_, Services>;
}

macro_rules! define_services {
    ($($name:ident: $ty:ty,)*) => {
        /// Every capability's native part, shared by all calls.
        #[derive(Debug, Clone)]
        pub struct Services {
            $(pub $name: $ty,)*
            /// Owners gone whose resources are released at the end of their grace period.
            releases: Arc<Releases>,
            /// Every owner's resource changes (what its terminal sessions and jobs report).
            changes: resource_changes::ResourceChanges,
            /// What the capabilities were started on.
            foundation: Foundation,
            /// Every capability's kinds of resource, in list order.
            resources: Arc<[Arc<dyn resources::ResourceSource>]>,
            /// The terminal sessions a person may watch and take over, if a capability
            /// offers them.
            people: Option<Arc<dyn people::PeopleTerminals>>,
        }

        /// Every capability's `dsh.toml` section.
        #[derive(Debug, Clone, Default)]
        pub struct ServicesConfig {
            $(pub $name: <$ty as Capability>::Config,)*
        }

        impl ServicesConfig {
            /// Every capability's [`Capability::secret_variables`].
            pub fn secret_variables(&self) -> Vec<String> {
                let mut names = Vec::new();
                $(names.extend(<$ty as Capability>::secret_variables(&self.$name));)*
                names
            }
        }

        /// The capabilities, in list order.
        pub mod capabilities {
            use super::*;

            /// What each says of itself.
            pub const ALL: &[CapabilityInfo] = &[$(<$ty as Capability>::INFO,)*];
            /// Their names: the interfaces a plugin can be granted.
            pub const NAMES: &[&str] = &[$(<$ty as Capability>::INFO.name,)*];

            /// Whether importing `name` needs a grant (unknown names do).
            pub fn needs_grant(name: &str) -> bool {
                ALL.iter().find(|c| c.name == name).is_none_or(|c| c.needs_grant)
            }

            /// Whether `name` asks the caller's client (only a tool may be granted it).
            pub fn asks_client(name: &str) -> bool {
                ALL.iter().any(|c| c.name == name && c.asks_client)
            }
        }

        impl Services {
            /// Starts every capability. `spill_dir` holds the background jobs' output
            /// files. Fails when the configured containment cannot be set up.
            pub fn new(config: &ServicesConfig, spill_dir: PathBuf) -> Result<Self, CapabilityError> {
                Self::for_host(config, spill_dir, process::HostPlaces::default())
            }

            /// Starts every capability for a host whose session workspace and own files
            /// are `places` (what sandboxed runs may write and may not reach).
            pub fn for_host(
                config: &ServicesConfig,
                spill_dir: PathBuf,
                places: process::HostPlaces,
            ) -> Result<Self, CapabilityError> {
                let foundation = Foundation::new(config, spill_dir, places)?;
                $(let $name = <$ty as Capability>::start(&config.$name, &foundation)?;)*
                let mut resources = Vec::new();
                $(resources.extend(<$ty as Capability>::resources(&$name));)*
                let mut people = None;
                $(people = people.or_else(|| <$ty as Capability>::for_people(&$name));)*
                Ok(Services {
                    $($name,)*
                    releases: Arc::default(),
                    changes: foundation.jobs.changes().clone(),
                    resources: resources.into(),
                    people,
                    foundation,
                })
            }

            /// Stops everything the capabilities own (host shutdown): no process is
            /// left behind.
            pub fn shutdown(&self) {
                $(self.$name.shutdown();)*
            }

            /// What every capability is built on.
            pub fn foundation(&self) -> &Foundation {
                &self.foundation
            }

            /// Every capability's kinds of resource, in list order.
            pub fn resources(&self) -> &[Arc<dyn resources::ResourceSource>] {
                &self.resources
            }

            /// The terminal sessions a person may watch and take over (the console,
            /// `dsh attach`), if a capability offers them.
            pub fn for_people(&self) -> Option<&Arc<dyn people::PeopleTerminals>> {
                self.people.as_ref()
            }

            /// What keeps the host from being upgraded now (empty when nothing does).
            pub fn upgrade_blockers(&self) -> Vec<String> {
                let mut blockers = Vec::new();
                $(blockers.extend(<$ty as Capability>::upgrade_blockers(&self.$name));)*
                blockers
            }

            /// At an upgrade: pauses every capability, in list order.
            pub async fn pause(&self) -> Result<(), handover::HandoverError> {
                $(<$ty as Capability>::pause(&self.$name).await?;)*
                Ok(())
            }

            /// Then every capability's entries of the snapshot.
            pub async fn hand_over(&self) -> Result<handover::Handed, handover::HandoverError> {
                let mut handed = handover::Handed::new();
                $(
                    for (key, value) in <$ty as Capability>::hand_over(&self.$name).await? {
                        handed.insert(key.to_string(), value);
                    }
                )*
                Ok(handed)
            }

            /// The upgrade did not happen: every capability takes back what it paused.
            pub async fn take_back(&self) {
                $(<$ty as Capability>::take_back(&self.$name).await;)*
            }

            /// Why the entries `handed` cannot be read, if one cannot (the first found).
            pub fn check_handed(handed: &handover::Handed) -> Result<(), String> {
                $(<$ty as Capability>::check_handed(handed)?;)*
                Ok(())
            }

            /// The descriptors the entries `handed` hold.
            pub fn handed_descriptors(handed: &handover::Handed) -> Vec<i32> {
                let mut fds = Vec::new();
                $(fds.extend(<$ty as Capability>::handed_descriptors(handed));)*
                fds
            }

            /// The processes the entries `handed` name.
            pub fn handed_children(handed: &handover::Handed) -> Vec<i32> {
                let mut pids = Vec::new();
                $(pids.extend(<$ty as Capability>::handed_children(handed));)*
                pids
            }

            /// Rebuilds every capability from `handed`: the records, then the processes
            /// (from a tokio context).
            pub fn restore(&self, handed: &handover::Handed, adopted: &mut handover::Adopted) {
                $(<$ty as Capability>::restore_records(&self.$name, handed);)*
                $(<$ty as Capability>::restore(&self.$name, handed, adopted, &self.foundation);)*
            }

            /// The directories a plugin granted `interface` also sees, read-only (see
            /// [`MappedRoot`]).
            pub fn mapped_roots(&self, interface: &str) -> Vec<MappedRoot> {
                $(
                    if <$ty as Capability>::INFO.name == interface {
                        return <$ty as Capability>::mapped_roots(&self.$name);
                    }
                )*
                Vec::new()
            }

            /// Every capability's figures for `/metrics`, in list order.
            pub fn gauges(&self) -> Vec<Gauge> {
                let mut gauges = Vec::new();
                $(gauges.extend(<$ty as Capability>::gauges(&self.$name));)*
                gauges
            }

            /// Gives every capability the pipeline (the host has one now).
            pub fn attach(&self, pipeline: &Arc<dyn ToolRunner>) {
                $(<$ty as Capability>::attach(&self.$name, pipeline);)*
            }

            /// Releases everything `owner` holds (its connection ended).
            pub fn release_owner(&self, owner: &str) {
                $(let $name = self.$name.release_owner(owner);)*
                tracing::info!(
                    owner,
                    $($name,)*
                    "released the resources of an owner that went away"
                );
            }
        }
    };
}

for_each_capability!(define_services);

impl Foundation {
    fn new(
        config: &ServicesConfig,
        spill_dir: PathBuf,
        places: process::HostPlaces,
    ) -> Result<Self, CapabilityError> {
        // The capabilities' secrets never reach a command: `exclude` wins over `include`.
        let mut process = config.process.clone();
        process.env.exclude.extend(config.secret_variables());
        let undo = match (&places.workspace, &places.own.state_dir) {
            (Some(workspace), Some(state_dir)) => {
                undo::Recorder::start(&config.undo, workspace, state_dir)
            }
            _ => undo::Recorder::off(
                &config.undo,
                "this host has no workspace or no state directory",
            ),
        };
        Ok(Foundation {
            undo,
            launch: Arc::new(process::Launch::for_host(&process, places)?),
            jobs: Arc::new(jobs::JobRegistry::new(
                config.jobs.clone(),
                Duration::from_millis(config.process.kill_grace_ms),
                spill_dir,
            )),
            executors: Arc::new(config.process.executor.clone()),
        })
    }
}

/// The owners whose grace period runs, each with its end, and the timer sleeping for
/// each (one per owner however often its grace period starts again: a principal of MCP
/// 2026-07-28 starts one at the end of each request); and the owners held by requests in
/// flight (no grace period runs for those).
#[derive(Debug, Default)]
struct Releases {
    pending: std::sync::Mutex<PendingReleases>,
    next_timer: std::sync::atomic::AtomicU64,
    held: std::sync::Mutex<HashMap<Arc<str>, usize>>,
}

/// Kept under one lock: a timer that finds its owner no longer pending stops, and the
/// next grace period then starts a timer of its own.
#[derive(Debug, Default)]
struct PendingReleases {
    ends: HashMap<Arc<str>, std::time::Instant>,
    /// The owner's timer: when it wakes next, and its number (a timer replaced by one
    /// waking sooner finds another number here and stops).
    timers: HashMap<Arc<str>, (std::time::Instant, u64)>,
}

/// An owner held while a request of it is served ([`Services::hold_owner`]): its grace
/// period starts when the last hold of it is dropped.
#[derive(Debug)]
pub struct OwnerHold {
    services: Services,
    owner: Arc<str>,
    grace: Duration,
}

impl OwnerHold {
    /// The owner held.
    pub fn owner(&self) -> &Arc<str> {
        &self.owner
    }
}

impl Clone for OwnerHold {
    /// One more hold of the same owner (a call that outlives its request holds it too).
    fn clone(&self) -> Self {
        self.services.hold_owner(self.owner.clone(), self.grace)
    }
}

impl Drop for OwnerHold {
    fn drop(&mut self) {
        let last = {
            let mut held = self.services.releases.held.lock().unwrap();
            let count = held.get_mut(&self.owner).expect("a hold is counted");
            *count -= 1;
            let last = *count == 0;
            if last {
                held.remove(&self.owner);
            }
            last
        };
        if !last {
            return;
        }
        if tokio::runtime::Handle::try_current().is_ok() {
            self.services
                .release_owner_after(self.owner.clone(), self.grace);
        } else {
            self.services.release_owner(&self.owner);
        }
    }
}

impl Services {
    /// The launch platform every capability starts its processes through (its
    /// containment is what an upgrade hands over beside the capabilities).
    pub fn launch(&self) -> &Arc<process::Launch> {
        &self.foundation.launch
    }

    /// Every owner's resource changes: a watcher of an owner's hears what its resources
    /// report ([`Capability::resources`]).
    pub fn resource_changes(&self) -> &resource_changes::ResourceChanges {
        &self.changes
    }

    /// Holds `owner` while a request of it is served: a grace period running for it
    /// stops, and none starts until the last hold is dropped, when `grace` starts (an
    /// owner without a connection, a principal of MCP 2026-07-28, lives from its last
    /// request).
    pub fn hold_owner(&self, owner: Arc<str>, grace: Duration) -> OwnerHold {
        *self
            .releases
            .held
            .lock()
            .unwrap()
            .entry(owner.clone())
            .or_default() += 1;
        // A timer sleeping for the owner finds it no longer pending and stops.
        self.releases.pending.lock().unwrap().ends.remove(&owner);
        OwnerHold {
            services: self.clone(),
            owner,
            grace,
        }
    }

    /// Releases everything `owner` holds after `grace` (from a tokio context). A grace
    /// period that starts again moves the end of the one running, and the timer already
    /// sleeping for the owner serves it unless it would wake too late.
    pub fn release_owner_after(&self, owner: Arc<str>, grace: Duration) {
        use std::sync::atomic::Ordering;
        let end = std::time::Instant::now() + grace;
        let number = {
            let mut pending = self.releases.pending.lock().unwrap();
            pending.ends.insert(owner.clone(), end);
            if pending
                .timers
                .get(&owner)
                .is_some_and(|(wakes, _)| *wakes <= end)
            {
                return;
            }
            let number = self.releases.next_timer.fetch_add(1, Ordering::Relaxed);
            pending.timers.insert(owner.clone(), (end, number));
            number
        };
        let services = self.clone();
        tokio::spawn(async move {
            loop {
                let wake = {
                    let mut pending = services.releases.pending.lock().unwrap();
                    if pending.timers.get(&owner).map(|(_, n)| *n) != Some(number) {
                        return;
                    }
                    let held = services.releases.held.lock().unwrap().contains_key(&owner);
                    match pending.ends.get(&owner).copied() {
                        Some(end) if !held && end > std::time::Instant::now() => {
                            pending.timers.insert(owner.clone(), (end, number));
                            end
                        }
                        Some(_) if !held => {
                            pending.ends.remove(&owner);
                            pending.timers.remove(&owner);
                            break;
                        }
                        _ => {
                            pending.timers.remove(&owner);
                            return;
                        }
                    }
                };
                tokio::time::sleep_until(wake.into()).await;
            }
            services.release_owner(&owner);
        });
    }

    /// How many release timers sleep.
    #[cfg(test)]
    fn release_timers(&self) -> usize {
        self.releases.pending.lock().unwrap().timers.len()
    }

    /// The owners whose grace period runs, with how long it has left (an upgrade hands
    /// them over, so the next binary releases them on time).
    pub fn pending_releases(&self) -> Vec<(String, u64)> {
        let now = std::time::Instant::now();
        self.releases
            .pending
            .lock()
            .unwrap()
            .ends
            .iter()
            .map(|(owner, at)| {
                (
                    owner.to_string(),
                    at.saturating_duration_since(now).as_millis() as u64,
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn services() -> (Services, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let services = Services::new(&Default::default(), dir.path().join("spill")).unwrap();
        (services, dir)
    }

    /// A principal of MCP 2026-07-28 starts a grace period at the end of every request:
    /// thousands of requests leave one timer sleeping, not thousands.
    #[tokio::test]
    async fn thousands_of_requests_of_one_owner_leave_one_release_timer() {
        let (services, _dir) = services();
        let owner: Arc<str> = Arc::from("@principal");
        for _ in 0..5_000 {
            drop(services.hold_owner(owner.clone(), Duration::from_secs(300)));
        }
        tokio::task::yield_now().await;
        assert_eq!(services.release_timers(), 1);
        assert_eq!(services.pending_releases().len(), 1);
        // A request in flight stops the grace period; its timer finds that and stops.
        let hold = services.hold_owner(owner.clone(), Duration::from_secs(300));
        assert!(services.pending_releases().is_empty());
        drop(hold);
        assert_eq!(services.release_timers(), 1);
    }

    /// A grace period shorter than the one running ends when it says, though a timer
    /// already sleeps for the owner until later.
    #[tokio::test]
    async fn a_shorter_grace_period_ends_on_time() {
        let (services, _dir) = services();
        let owner: Arc<str> = Arc::from("@principal");
        services.release_owner_after(owner.clone(), Duration::from_secs(3600));
        services.release_owner_after(owner.clone(), Duration::from_millis(20));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !services.pending_releases().is_empty() {
            assert!(std::time::Instant::now() < deadline, "not released");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // The hour-long timer finds itself replaced and stops.
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(services.release_timers(), 0);
    }
}
