//! Plugin loading and calling: a `.wasm` becomes a [`Plugin`] (compiled once, its
//! imports checked against its grants, linked once into an instance-pre, its tool
//! manuals read with `describe()`), and each call instantiates it in a fresh store. A
//! plugin is a tool, a guard, a middleware, a result filter or an observer, by the world
//! its component exports, and
//! is built against one version of the contract, by the names it imports and exports
//! ([`ContractVersion`]); a frozen version's exports are called through its adapter
//! (`bindings::v0_1_0`), so everything past this module sees the latest types.
//!
//! Fresh instances are made ahead: when a call of a plugin ends, a task instantiates
//! the next one (a [`Spare`]) in a store of its own, so the next call skips
//! instantiation (67 µs of a `terminal_send` measured after a pause, most of its cost
//! over the raw PTY). A spare has never run an export and gets its call's context and
//! bounds when the call takes it, so every call still gets an instance no call has
//! touched. A guest that calls the host while it is instantiated (it would act for no
//! call) gets no spare; at most [`MAX_SPARES`] exist at once, held out of the call
//! slots' share of the pool.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use sha2::{Digest, Sha256};

use super::cache::CacheOutcome;
use super::grants::{GrantError, Grants};
use super::store::{arm_for_call, metered, new_store, Bounds, CallState};
use super::Runtime;
use crate::bindings::dsh::plugin::types as wit;
use crate::bindings::guard::{Guard, GuardPre, Verdict as WitVerdict};
use crate::bindings::middleware::{Middleware, MiddlewarePre};
use crate::bindings::observer::{ObservedEvent, Observer, ObserverPre};
use crate::bindings::result_filter::{ResultFilter, ResultFilterPre};
use crate::bindings::{v0_1_0, ContractVersion, Tool, ToolPre, VersionError};
use crate::call::{CallContext, CallResult};
use crate::config::{
    PluginConfig, DEFAULT_CPU_MS, DEFAULT_GUARD_CPU_MS, DEFAULT_MEMORY_MB, MAX_SPARES,
};
use crate::error::{ErrorCode, ToolError};
use crate::metrics::Limit;

/// Where a plugin came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PluginSource {
    Embedded,
    Path(PathBuf),
}

impl std::fmt::Display for PluginSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PluginSource::Embedded => f.write_str("embedded"),
            PluginSource::Path(path) => write!(f, "{}", path.display()),
        }
    }
}

/// Why a plugin was refused.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("not a WebAssembly component: {0:#}")]
    Compile(wasmtime::Error),
    #[error("refused: it {0}")]
    Bounds(String),
    #[error("refused: {0}")]
    Version(#[from] VersionError),
    #[error("cannot be linked (an import dsh does not provide): {0:#}")]
    Link(wasmtime::Error),
    #[error("exports none of the worlds dsh runs (`tool`, `guard`, `middleware`, `result-filter`, `observer`)")]
    NoWorld,
    #[error("describe() failed: {0}")]
    Describe(ToolError),
    #[error("compilation task failed: {0}")]
    Join(String),
    #[error("{0}")]
    NotGranted(String),
    #[error(transparent)]
    Grant(#[from] GrantError),
}

/// Refuses a guard or a result filter granted an interface that asks the caller's client:
/// it runs on every call before (or after) the tool, so it would put a question to the
/// client's model or user each time, and a guard's decision must not be the client's
/// model's.
fn refuse_client_asks(name: &str, kind: PluginKind, granted: &[String]) -> Result<(), LoadError> {
    if kind == PluginKind::Tool {
        return Ok(());
    }
    let asks: Vec<String> = granted
        .iter()
        .filter(|interface| crate::services::capabilities::asks_client(interface))
        .map(|interface| format!("`{interface}`"))
        .collect();
    if asks.is_empty() {
        return Ok(());
    }
    let what = kind.with_article();
    Err(LoadError::NotGranted(format!(
        "it is {what} and is granted {}: only a tool plugin may ask the caller's client (its model or its user); {what} runs on every call and acts on its own. Take {} out of [plugins.{name}] interfaces in dsh.toml",
        asks.join(" and "),
        if asks.len() == 1 { "it" } else { "them" },
    )))
}

/// A tool's manual as a plugin declared it.
#[derive(Debug, Clone)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// Parsed JSON Schema of the arguments.
    pub input_schema: serde_json::Value,
    /// The raw schema text when it is not valid JSON (the registry refuses it).
    pub input_schema_text: String,
    pub idempotent: bool,
    pub output_budget: Option<u32>,
    /// Parsed JSON Schema of the structured output, when the tool declares one
    /// (`Null` when its text is not valid JSON).
    pub output_schema: Option<serde_json::Value>,
    /// The raw output schema text.
    pub output_schema_text: Option<String>,
}

pub use crate::config::plugin::PluginKind;

/// The instance-pre of the plugin's world, in the contract version it is built against.
enum Pre {
    Tool(ToolPre<CallState>),
    Guard(GuardPre<CallState>),
    ResultFilter(ResultFilterPre<CallState>),
    Middleware(MiddlewarePre<CallState>),
    Observer(ObserverPre<CallState>),
    ToolV0_1_0(v0_1_0::ToolPre<CallState>),
    GuardV0_1_0(v0_1_0::guard::GuardPre<CallState>),
    ResultFilterV0_1_0(v0_1_0::result_filter::ResultFilterPre<CallState>),
}

/// A guard's decision on one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    /// Go on with these arguments (a JSON object as text) instead.
    Rewrite(String),
    Deny(String),
    Ask(String),
}

/// A call as a guard or result filter sees it.
pub struct PendingCall<'a> {
    pub tool: &'a str,
    pub args_json: &'a str,
    pub context: CallContext,
}

/// A loaded plugin version: compiled and linked, ready to instantiate per call.
pub struct Plugin {
    pub name: Arc<str>,
    pub source: PluginSource,
    /// SHA-256 of the `.wasm`, hex.
    pub digest: String,
    pub loaded_at: SystemTime,
    pub specs: Vec<ToolSpec>,
    pub config: PluginConfig,
    /// The plugin's settings as JSON, handed to every call.
    pub settings_json: String,
    pub bounds: Bounds,
    /// What it may reach.
    pub grants: Grants,
    /// What the component imports (WIT interface names).
    pub imports: Vec<String>,
    /// The contract version it is built against.
    pub version: ContractVersion,
    /// Calls running on this version now.
    in_flight: AtomicUsize,
    pre: Pre,
    /// Its compiled component, held so that a plugin loaded from the same bytes while
    /// this one lives shares it (see `cache`).
    _compiled: Arc<wasmtime::component::Component>,
    /// The instance made ahead for the next call, if any.
    spare: Mutex<Option<Spare>>,
    /// When its last call ended.
    last_finished: Mutex<Option<Instant>>,
}

/// A call that began less than this after the plugin's previous call ended is one of
/// calls back to back: no spare is made and its instance is dropped where it ends.
/// Measured: `echo` back to back through the pipeline took 58 µs with spares against
/// 34 µs without.
const BUSY_GAP: Duration = Duration::from_millis(1);

/// An instance of a contract 0.2.0 plugin made ahead of the call that will use it, in a
/// store of its own (see the module doc).
pub struct Spare {
    store: wasmtime::Store<CallState>,
    instance: Instance,
    _counted: SpareCount,
}

/// A spare's instance, by the plugin's kind.
enum Instance {
    Tool(Tool),
    Guard(Guard),
    ResultFilter(ResultFilter),
    Middleware(Middleware),
    Observer(Observer),
}

/// Counts one spare of the process for as long as it lives.
struct SpareCount(Arc<AtomicUsize>);

impl SpareCount {
    /// One more spare, unless there are [`MAX_SPARES`] already.
    fn take(spares: &Arc<AtomicUsize>) -> Option<SpareCount> {
        spares
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < MAX_SPARES as usize).then_some(n + 1)
            })
            .ok()
            .map(|_| SpareCount(spares.clone()))
    }
}

impl Drop for SpareCount {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Counts one call in flight on a plugin version for as long as it lives.
struct InFlight<'a>(&'a AtomicUsize);

impl<'a> InFlight<'a> {
    fn enter(counter: &'a AtomicUsize) -> Self {
        counter.fetch_add(1, Ordering::Relaxed);
        InFlight(counter)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What a component says of itself once compiled, whatever becomes of it after: the
/// contract version it is built against and what it imports. Kept for the newest
/// components compiled ([`ComponentFacts::of`]), so that a refusal made from the
/// digest alone (the registry's [`crate::registry::Refusal`]) can still name them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ComponentFacts {
    /// `0.1.0`, `0.2.0`, or the unsupported version it names; none when it names none
    /// or several.
    pub contract: Option<String>,
    /// Everything it imports (WIT names).
    pub imports: Vec<String>,
}

/// How many components' facts are kept (a bound on memory, far above the plugins a
/// host loads).
const FACTS_KEPT: usize = 256;

/// The facts of the newest components compiled, by digest, the oldest first.
static FACTS: Mutex<std::collections::VecDeque<(String, ComponentFacts)>> =
    Mutex::new(std::collections::VecDeque::new());

impl ComponentFacts {
    /// The facts of the component whose bytes have SHA-256 `digest`, if it was compiled
    /// lately in this process.
    pub fn of(digest: &str) -> Option<ComponentFacts> {
        if digest.is_empty() {
            return None;
        }
        let facts = FACTS.lock().unwrap_or_else(|e| e.into_inner());
        facts
            .iter()
            .rev()
            .find(|(d, _)| d == digest)
            .map(|(_, f)| f.clone())
    }

    fn record(digest: &str, facts: ComponentFacts) {
        let mut kept = FACTS.lock().unwrap_or_else(|e| e.into_inner());
        kept.retain(|(d, _)| d != digest);
        if kept.len() >= FACTS_KEPT {
            kept.pop_front();
        }
        kept.push_back((digest.to_string(), facts));
    }
}

/// SHA-256 of `bytes`, hex.
pub fn digest(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A component's bytes and their SHA-256 (hex), computed once. An embedded component's
/// bytes are borrowed from the binary and its digest was computed when dsh was built,
/// so loading it from the compile cache never reads them: they stay on disk, out of
/// the server's memory.
#[derive(Debug, Clone)]
pub struct ComponentBytes {
    bytes: bytes::Bytes,
    digest: Arc<str>,
    /// Its code precompiled when dsh was built (embedded components only).
    precompiled: Option<&'static [u8]>,
}

impl ComponentBytes {
    /// An embedded component: its bytes in the binary, their digest and its code
    /// precompiled at build time.
    pub fn embedded(embedded: &crate::engine::embedded::EmbeddedComponent) -> Self {
        ComponentBytes {
            bytes: bytes::Bytes::from_static(embedded.bytes),
            digest: Arc::from(embedded.digest),
            precompiled: embedded.precompiled,
        }
    }

    /// These bytes with `code` as their precompiled code (tests of what wasmtime refuses).
    #[cfg(test)]
    pub fn with_precompiled(mut self, code: Option<&'static [u8]>) -> Self {
        self.precompiled = code;
        self
    }

    /// Its code compiled when dsh was built, which wasmtime checks against the engine
    /// that loads it (`None`: compile it).
    pub fn precompiled(&self) -> Option<&'static [u8]> {
        self.precompiled
    }

    /// SHA-256 of the bytes, hex.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// The component's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

impl From<Vec<u8>> for ComponentBytes {
    fn from(bytes: Vec<u8>) -> Self {
        let digest = digest(&bytes).into();
        ComponentBytes {
            bytes: bytes.into(),
            digest,
            precompiled: None,
        }
    }
}

impl Plugin {
    /// Compiles (off the async threads), links and describes a plugin.
    pub async fn load(
        runtime: &Arc<Runtime>,
        name: &str,
        source: PluginSource,
        bytes: ComponentBytes,
        config: PluginConfig,
    ) -> Result<Plugin, LoadError> {
        let digest = bytes.digest().to_string();
        let (engine, cache) = (runtime.engine.clone(), runtime.cache.clone());
        let (component, outcome) = tokio::task::spawn_blocking(move || cache.load(&engine, &bytes))
            .await
            .map_err(|e| LoadError::Join(e.to_string()))?
            .map_err(|error| match super::bounds_refusal(&error) {
                Some(why) => LoadError::Bounds(why),
                None => LoadError::Compile(error),
            })?;
        match outcome {
            CacheOutcome::Shared => tracing::info!(
                plugin = name,
                "compiled code shared with a loaded plugin of the same bytes"
            ),
            CacheOutcome::Hit => tracing::info!(plugin = name, "compile cache hit"),
            CacheOutcome::Miss => tracing::info!(plugin = name, "compile cache miss: compiled"),
            CacheOutcome::Precompiled => {
                tracing::info!(plugin = name, "compile cache miss: precompiled code stored");
            }
            CacheOutcome::Corrupt => {
                tracing::warn!(plugin = name, "compile cache entry corrupt: replaced")
            }
            CacheOutcome::Disabled => tracing::debug!(plugin = name, "compiled (no cache)"),
        }
        let component_type = component.component_type();
        let imports: Vec<String> = component_type
            .imports(&runtime.engine)
            .map(|(import, _)| import.to_string())
            .collect();
        let exports: Vec<String> = component_type
            .exports(&runtime.engine)
            .map(|(export, _)| export.to_string())
            .collect();
        // A component naming no `dsh:plugin` interface targets none of the worlds.
        let version =
            ContractVersion::of_component(imports.iter().chain(&exports).map(String::as_str));
        ComponentFacts::record(
            &digest,
            ComponentFacts {
                contract: match &version {
                    Ok(version) => Some(version.to_string()),
                    Err(VersionError::Unsupported { found }) => Some(found.clone()),
                    Err(_) => None,
                },
                imports: imports.clone(),
            },
        );
        let version = match version {
            Ok(version) => version,
            Err(VersionError::None) => return Err(LoadError::NoWorld),
            Err(other) => return Err(other.into()),
        };
        let grants = Grants::resolve(
            name,
            &source,
            &config,
            runtime.state_dir.as_deref(),
            |interface| runtime.services.mapped_roots(interface),
        )
        .await?;
        grants
            .check_imports(name, &imports)
            .map_err(LoadError::NotGranted)?;
        let instance_pre = runtime
            .linker
            .instantiate_pre(&component)
            .map_err(LoadError::Link)?;
        let pre = match version {
            ContractVersion::V0_2_0 => {
                if let Ok(tool) = ToolPre::new(instance_pre.clone()) {
                    Pre::Tool(tool)
                } else if let Ok(guard) = GuardPre::new(instance_pre.clone()) {
                    Pre::Guard(guard)
                } else if let Ok(filter) = ResultFilterPre::new(instance_pre.clone()) {
                    Pre::ResultFilter(filter)
                } else if let Ok(middleware) = MiddlewarePre::new(instance_pre.clone()) {
                    Pre::Middleware(middleware)
                } else if let Ok(observer) = ObserverPre::new(instance_pre) {
                    Pre::Observer(observer)
                } else {
                    return Err(LoadError::NoWorld);
                }
            }
            ContractVersion::V0_1_0 => {
                if let Ok(tool) = v0_1_0::ToolPre::new(instance_pre.clone()) {
                    Pre::ToolV0_1_0(tool)
                } else if let Ok(guard) = v0_1_0::guard::GuardPre::new(instance_pre.clone()) {
                    Pre::GuardV0_1_0(guard)
                } else if let Ok(filter) = v0_1_0::result_filter::ResultFilterPre::new(instance_pre)
                {
                    Pre::ResultFilterV0_1_0(filter)
                } else {
                    return Err(LoadError::NoWorld);
                }
            }
        };
        refuse_client_asks(name, kind_of(&pre), &grants.view.interfaces)?;
        refuse_next_outside_middleware(kind_of(&pre), &imports)?;
        // Only a tool can answer a call with why its `files` directories were withheld:
        // a pipeline stage without them is refused, as it would fail closed anyway.
        if let (Some(why), kind) = (&grants.withheld, kind_of(&pre)) {
            if kind != PluginKind::Tool {
                return Err(LoadError::NotGranted(why.clone()));
            }
        }
        let settings_json = serde_json::to_string(&config.settings).unwrap_or_else(|_| "{}".into());
        let default_cpu_ms = match kind_of(&pre) {
            PluginKind::Tool => DEFAULT_CPU_MS,
            _ => DEFAULT_GUARD_CPU_MS,
        };
        let bounds = Bounds {
            cpu: Duration::from_millis(config.cpu_ms.unwrap_or(default_cpu_ms)),
            memory_bytes: (config.memory_mb.unwrap_or(DEFAULT_MEMORY_MB) as usize) << 20,
        };
        let mut plugin = Plugin {
            name: name.into(),
            source,
            digest,
            loaded_at: SystemTime::now(),
            specs: Vec::new(),
            config,
            settings_json,
            bounds,
            grants,
            imports,
            version,
            in_flight: AtomicUsize::new(0),
            pre,
            _compiled: component,
            spare: Mutex::new(None),
            last_finished: Mutex::new(None),
        };
        if plugin.kind() == PluginKind::Tool {
            plugin.specs = plugin
                .describe(runtime)
                .await
                .map_err(LoadError::Describe)?;
        }
        Ok(plugin)
    }

    /// Whether it is a tool, a guard or a result filter.
    pub fn kind(&self) -> PluginKind {
        kind_of(&self.pre)
    }

    async fn describe(&self, runtime: &Runtime) -> Result<Vec<ToolSpec>, ToolError> {
        let context = CallContext {
            owner: "dsh".into(),
            session: "load".into(),
            call_id: "describe".into(),
            workdir: std::env::temp_dir(),
            scope: "default".into(),
            tool: "describe".into(),
            spill_dir: std::env::temp_dir(),
            output_budget: 0,
            spill_cap: 0,
            notices: Default::default(),
            sampler: None,
            step: None,
        };
        let mut store = self.store(runtime, context);
        let guest_cpu = store.data().guest_cpu.clone();
        let described = metered(guest_cpu, async {
            match &self.pre {
                Pre::Tool(pre) => {
                    let tool = pre.instantiate_async(&mut store).await?;
                    tool.call_describe(&mut store).await
                }
                Pre::ToolV0_1_0(pre) => v0_1_0::describe(pre, &mut store).await,
                _ => Err(wasmtime::Error::msg("not a tool")),
            }
        })
        .await;
        let specs = match described {
            Ok(specs) => specs,
            Err(error) => return Err(self.failure(runtime, store.data(), error)),
        };
        Ok(specs
            .into_iter()
            .map(|spec| ToolSpec {
                input_schema: serde_json::from_str(&spec.input_schema)
                    .unwrap_or(serde_json::Value::Null),
                input_schema_text: spec.input_schema,
                name: spec.name,
                description: spec.description,
                idempotent: spec.idempotent,
                output_budget: spec.output_budget,
                output_schema: spec
                    .output_schema
                    .as_deref()
                    .map(|text| serde_json::from_str(text).unwrap_or(serde_json::Value::Null)),
                output_schema_text: spec.output_schema,
            })
            .collect())
    }

    /// A fresh store for one call of this plugin, with its bounds armed.
    fn store(&self, runtime: &Runtime, context: CallContext) -> wasmtime::Store<CallState> {
        self.fresh_store(&runtime.engine, runtime.services.clone(), Some(context))
    }

    /// A fresh store with its bounds armed: for `call`, or (`None`) for an instance
    /// made ahead of its call.
    fn fresh_store(
        &self,
        engine: &wasmtime::Engine,
        services: crate::services::Services,
        call: Option<CallContext>,
    ) -> wasmtime::Store<CallState> {
        let (name, wasi) = (self.name.clone(), self.grants.wasi_ctx());
        let mut state = match call {
            Some(call) => CallState::new(call, name, services, self.bounds, wasi),
            None => CallState::warming(name, services, self.bounds, wasi),
        };
        state.names = self.grants.name_policy();
        new_store(engine, state)
    }

    /// Calls running on this version now.
    pub fn calls_in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// The spare instance made for the next call, armed for `context`, or a fresh store
    /// to instantiate in (`None`: no spare).
    fn store_for_call(
        &self,
        runtime: &Runtime,
        context: CallContext,
    ) -> (wasmtime::Store<CallState>, Option<Instance>) {
        let spare = self.spare_slot().take();
        match spare {
            Some(Spare {
                mut store,
                instance,
                ..
            }) => {
                tracing::debug!(plugin = %self.name, call = %context.call_id, "the call takes an instance made ahead");
                arm_for_call(&mut store, context);
                (store, Some(instance))
            }
            None => (self.store(runtime, context), None),
        }
    }

    /// Ends a call's use of `used`: in a task, drops it (returning its memory to the pool
    /// takes tens of µs the caller need not wait for) and makes the next call's instance
    /// ahead, unless there is one. Both count against [`MAX_SPARES`]; past it, `used` is
    /// dropped here and no spare is made. Contract 0.1.0 plugins (their adapter
    /// instantiates) get no spare, nor does a plugin a granted directory of which is
    /// missing now.
    fn finish(self: &Arc<Self>, runtime: &Runtime, used: wasmtime::Store<CallState>) {
        let began = used.data().call_began();
        let previous = self
            .last_finished
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .replace(Instant::now());
        if previous.is_some_and(|previous| began.saturating_duration_since(previous) < BUSY_GAP) {
            // Calls back to back (or side by side): work in another task would compete
            // with the next call, and instantiating at the call is cheaper hot.
            return;
        }
        let (Ok(tokio), Some(counted)) = (
            tokio::runtime::Handle::try_current(),
            SpareCount::take(&runtime.spares),
        ) else {
            return;
        };
        let plugin = self.clone();
        let (engine, services) = (runtime.engine.clone(), runtime.services.clone());
        tokio.spawn(async move {
            drop(used);
            let instantiable = matches!(
                plugin.pre,
                Pre::Tool(_)
                    | Pre::Guard(_)
                    | Pre::ResultFilter(_)
                    | Pre::Middleware(_)
                    | Pre::Observer(_)
            );
            if !instantiable
                || plugin.spare_slot().is_some()
                || !plugin.grants.view.fs.iter().all(|dir| dir.path.is_dir())
            {
                return;
            }
            let mut store = plugin.fresh_store(&engine, services, None);
            let instance = match &plugin.pre {
                Pre::Tool(pre) => pre.instantiate_async(&mut store).await.map(Instance::Tool),
                Pre::Guard(pre) => pre.instantiate_async(&mut store).await.map(Instance::Guard),
                Pre::ResultFilter(pre) => pre
                    .instantiate_async(&mut store)
                    .await
                    .map(Instance::ResultFilter),
                Pre::Middleware(pre) => pre
                    .instantiate_async(&mut store)
                    .await
                    .map(Instance::Middleware),
                Pre::Observer(pre) => pre
                    .instantiate_async(&mut store)
                    .await
                    .map(Instance::Observer),
                _ => return,
            };
            match instance {
                Ok(instance) => {
                    plugin.spare_slot().get_or_insert(Spare {
                        store,
                        instance,
                        _counted: counted,
                    });
                }
                Err(error) => {
                    tracing::debug!(plugin = %plugin.name, error = %format!("{error:#}"), "no instance made ahead");
                }
            }
        });
    }

    /// The spare, if any (its lock, even if a panic poisoned it: an `Option` stays
    /// consistent).
    fn spare_slot(&self) -> std::sync::MutexGuard<'_, Option<Spare>> {
        self.spare
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs tool `name` of this plugin in a fresh instance.
    pub async fn call(
        self: &Arc<Self>,
        runtime: &Runtime,
        context: CallContext,
        name: &str,
        args_json: &str,
    ) -> CallResult {
        let _in_flight = InFlight::enter(&self.in_flight);
        if self.kind() != PluginKind::Tool {
            return CallResult::failed(self.not_a(PluginKind::Tool));
        }
        if let Some(why) = &self.grants.withheld {
            // Refused, kept listed so that a call says why and how to fix it.
            return CallResult::failed(ToolError::new(
                ErrorCode::Denied,
                format!("{name} cannot run: plugin {} is refused: {why}", self.name),
            ));
        }
        let wit_context = self.wit_context(&context);
        let (mut store, spare) = self.store_for_call(runtime, context);
        let guest_cpu = store.data().guest_cpu.clone();
        let outcome = metered(guest_cpu, async {
            match (&self.pre, spare) {
                (_, Some(Instance::Tool(tool))) => {
                    tool.call_call(&mut store, &wit_context, name, args_json)
                        .await
                }
                (Pre::Tool(pre), _) => {
                    let tool = pre.instantiate_async(&mut store).await?;
                    tool.call_call(&mut store, &wit_context, name, args_json)
                        .await
                }
                (Pre::ToolV0_1_0(pre), _) => {
                    v0_1_0::call(pre, &mut store, wit_context, name, args_json).await
                }
                _ => Err(wasmtime::Error::msg("not a tool")),
            }
        })
        .await;
        let result = match outcome {
            Ok(result) => result.into(),
            Err(error) => CallResult::failed(self.failure(runtime, store.data(), error)),
        };
        self.finish(runtime, store);
        result
    }

    /// Asks this guard about `call` in a fresh instance. An error is the guard failing
    /// (a trap, its CPU or memory bound), not a decision.
    pub async fn check(
        self: &Arc<Self>,
        runtime: &Runtime,
        call: PendingCall<'_>,
    ) -> Result<Verdict, ToolError> {
        let _in_flight = InFlight::enter(&self.in_flight);
        if self.kind() != PluginKind::Guard {
            return Err(self.not_a(PluginKind::Guard));
        }
        let pending = self.wit_pending(&call);
        let (mut store, spare) = self.store_for_call(runtime, call.context);
        let guest_cpu = store.data().guest_cpu.clone();
        let outcome = metered(guest_cpu, async {
            match (&self.pre, spare) {
                (_, Some(Instance::Guard(guard))) => guard.call_check(&mut store, &pending).await,
                (Pre::Guard(pre), _) => {
                    let guard = pre.instantiate_async(&mut store).await?;
                    guard.call_check(&mut store, &pending).await
                }
                (Pre::GuardV0_1_0(pre), _) => v0_1_0::check(pre, &mut store, pending).await,
                _ => Err(wasmtime::Error::msg("not a guard")),
            }
        })
        .await;
        let verdict = match outcome {
            Ok(WitVerdict::Allow) => Ok(Verdict::Allow),
            Ok(WitVerdict::Rewrite(args_json)) => Ok(Verdict::Rewrite(args_json)),
            Ok(WitVerdict::Deny(reason)) => Ok(Verdict::Deny(reason)),
            Ok(WitVerdict::Ask(reason)) => Ok(Verdict::Ask(reason)),
            Err(error) => Err(self.failure(runtime, store.data(), error)),
        };
        self.finish(runtime, store);
        verdict
    }

    /// Runs this result filter on `result` in a fresh instance: `None` keeps it, `Some`
    /// replaces it. An error is the filter failing.
    pub async fn filter(
        self: &Arc<Self>,
        runtime: &Runtime,
        call: PendingCall<'_>,
        result: &CallResult,
    ) -> Result<Option<CallResult>, ToolError> {
        let _in_flight = InFlight::enter(&self.in_flight);
        if self.kind() != PluginKind::ResultFilter {
            return Err(self.not_a(PluginKind::ResultFilter));
        }
        let pending = self.wit_pending(&call);
        let outcome_in = wit::ToolResult::from(result.clone());
        let (mut store, spare) = self.store_for_call(runtime, call.context);
        let guest_cpu = store.data().guest_cpu.clone();
        let outcome = metered(guest_cpu, async {
            match (&self.pre, spare) {
                (_, Some(Instance::ResultFilter(filter))) => {
                    filter.call_filter(&mut store, &pending, &outcome_in).await
                }
                (Pre::ResultFilter(pre), _) => {
                    let filter = pre.instantiate_async(&mut store).await?;
                    filter.call_filter(&mut store, &pending, &outcome_in).await
                }
                (Pre::ResultFilterV0_1_0(pre), _) => {
                    v0_1_0::filter(pre, &mut store, pending, outcome_in).await
                }
                _ => Err(wasmtime::Error::msg("not a result filter")),
            }
        })
        .await;
        let filtered = match outcome {
            Ok(replaced) => Ok(replaced.map(Into::into)),
            Err(error) => Err(self.failure(runtime, store.data(), error)),
        };
        self.finish(runtime, store);
        filtered
    }

    /// Runs this middleware on `call` in a fresh instance, `rest` being what its
    /// `next.run` runs. An error is the middleware failing (a trap, its CPU or memory
    /// bound, running the rest past the cap), never the call's own failure, which is a
    /// result. Its own time (not the rest's) goes to the metrics.
    pub async fn handle(
        self: &Arc<Self>,
        runtime: &Runtime,
        call: PendingCall<'_>,
        rest: super::middleware::RestOfCall,
    ) -> Result<CallResult, ToolError> {
        let _in_flight = InFlight::enter(&self.in_flight);
        if self.kind() != PluginKind::Middleware {
            return Err(self.not_a(PluginKind::Middleware));
        }
        let started = Instant::now();
        let pending = self.wit_pending(&call);
        let (mut store, spare) = self.store_for_call(runtime, call.context);
        store.data_mut().rest = Some(rest);
        let guest_cpu = store.data().guest_cpu.clone();
        let outcome = metered(guest_cpu, async {
            match (&self.pre, spare) {
                (_, Some(Instance::Middleware(middleware))) => {
                    middleware.call_handle(&mut store, &pending).await
                }
                (Pre::Middleware(pre), _) => {
                    let middleware = pre.instantiate_async(&mut store).await?;
                    middleware.call_handle(&mut store, &pending).await
                }
                _ => Err(wasmtime::Error::msg("not a middleware")),
            }
        })
        .await;
        let handled = match outcome {
            Ok(result) => Ok(result.into()),
            Err(error) => Err(self.failure(runtime, store.data(), error)),
        };
        let own = started.elapsed().saturating_sub(store.data().in_next);
        runtime.metrics.observe_middleware(&self.name, own);
        store.data_mut().rest = None;
        self.finish(runtime, store);
        handled
    }

    /// Gives this observer one record of the event log (`kind`, the record as JSON
    /// text) in a fresh instance, as `owner`'s. An error is the observer failing.
    pub async fn observe(
        self: &Arc<Self>,
        runtime: &Runtime,
        context: CallContext,
        kind: &str,
        json: &str,
    ) -> Result<(), ToolError> {
        let _in_flight = InFlight::enter(&self.in_flight);
        if self.kind() != PluginKind::Observer {
            return Err(self.not_a(PluginKind::Observer));
        }
        let event = ObservedEvent {
            kind: kind.to_string(),
            json: json.to_string(),
            settings_json: self.settings_json.clone(),
        };
        let (mut store, spare) = self.store_for_call(runtime, context);
        let guest_cpu = store.data().guest_cpu.clone();
        let outcome = metered(guest_cpu, async {
            match (&self.pre, spare) {
                (_, Some(Instance::Observer(observer))) => {
                    observer.call_observe(&mut store, &event).await
                }
                (Pre::Observer(pre), _) => {
                    let observer = pre.instantiate_async(&mut store).await?;
                    observer.call_observe(&mut store, &event).await
                }
                _ => Err(wasmtime::Error::msg("not an observer")),
            }
        })
        .await;
        let observed = outcome.map_err(|error| self.failure(runtime, store.data(), error));
        self.finish(runtime, store);
        observed
    }

    /// A failed guest run as the model sees it; a CPU or memory limit hit is counted in
    /// the host's metrics.
    fn failure(&self, runtime: &Runtime, state: &CallState, error: wasmtime::Error) -> ToolError {
        let error = state.classify(error);
        let limit = match error.code {
            ErrorCode::PluginCpuLimit => Some(Limit::Cpu),
            ErrorCode::PluginOutOfMemory => Some(Limit::Memory),
            _ => None,
        };
        if let Some(limit) = limit {
            runtime.metrics.limit_hit(&self.name, limit);
        }
        error
    }

    fn not_a(&self, kind: PluginKind) -> ToolError {
        ToolError::new(
            ErrorCode::Internal,
            format!(
                "plugin {} is {}, not {}",
                self.name,
                self.kind().with_article(),
                kind.with_article()
            ),
        )
    }

    fn wit_context(&self, context: &CallContext) -> wit::CallContext {
        wit::CallContext {
            owner: context.owner.to_string(),
            session: context.session.to_string(),
            call_id: context.call_id.clone(),
            workdir: context.workdir.display().to_string(),
            scope: context.scope.to_string(),
            settings_json: self.settings_json.clone(),
            output_budget: context.output_budget,
        }
    }

    fn wit_pending(&self, call: &PendingCall<'_>) -> wit::PendingCall {
        wit::PendingCall {
            tool: call.tool.to_string(),
            args_json: call.args_json.to_string(),
            context: self.wit_context(&call.context),
        }
    }
}

/// Whether an instance-pre is a tool, a guard or a result filter.
fn kind_of(pre: &Pre) -> PluginKind {
    match pre {
        Pre::Tool(_) | Pre::ToolV0_1_0(_) => PluginKind::Tool,
        Pre::Guard(_) | Pre::GuardV0_1_0(_) => PluginKind::Guard,
        Pre::ResultFilter(_) | Pre::ResultFilterV0_1_0(_) => PluginKind::ResultFilter,
        Pre::Middleware(_) => PluginKind::Middleware,
        Pre::Observer(_) => PluginKind::Observer,
    }
}

/// Refuses any plugin but a middleware that imports `next`: only a middleware's call
/// has a rest to run.
fn refuse_next_outside_middleware(kind: PluginKind, imports: &[String]) -> Result<(), LoadError> {
    let imports_next = imports
        .iter()
        .any(|import| import.starts_with(&format!("{}next@", crate::bindings::PACKAGE)));
    if imports_next && kind != PluginKind::Middleware {
        return Err(LoadError::NotGranted(format!(
            "it is {} and imports `dsh:plugin/next`, which only a middleware may import (the rest of a call is a middleware's to run)",
            kind.with_article()
        )));
    }
    Ok(())
}
