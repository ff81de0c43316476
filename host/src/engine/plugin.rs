//! Plugin loading and calling: a `.wasm` becomes a [`Plugin`] (compiled once, its
//! imports checked against its grants, linked once into an instance-pre, its tool
//! manuals read with `describe()`), and each call instantiates it in a fresh store. A
//! plugin is a tool, a guard or a result filter, by the world its component exports.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};

use super::cache::CacheOutcome;
use super::grants::{GrantError, Grants};
use super::store::{metered, new_store, Bounds, CallState};
use super::Runtime;
use crate::bindings::dsh::plugin::types as wit;
use crate::bindings::guard::{GuardPre, Verdict as WitVerdict};
use crate::bindings::result_filter::ResultFilterPre;
use crate::bindings::ToolPre;
use crate::call::{CallContext, CallResult};
use crate::config::{PluginConfig, DEFAULT_CPU_MS, DEFAULT_GUARD_CPU_MS, DEFAULT_MEMORY_MB};
use crate::error::{ErrorCode, ToolError};

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
    #[error("cannot be linked (an import dsh does not provide): {0:#}")]
    Link(wasmtime::Error),
    #[error("exports none of the worlds dsh runs (`tool`, `guard`, `result-filter`)")]
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
}

/// What a plugin is, by the world its component exports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PluginKind {
    Tool,
    Guard,
    ResultFilter,
}

impl std::fmt::Display for PluginKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PluginKind::Tool => "tool",
            PluginKind::Guard => "guard",
            PluginKind::ResultFilter => "result-filter",
        })
    }
}

/// The instance-pre of the plugin's world.
enum Pre {
    Tool(ToolPre<CallState>),
    Guard(GuardPre<CallState>),
    ResultFilter(ResultFilterPre<CallState>),
}

/// A guard's decision on one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allow,
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
    /// Calls running on this version now.
    in_flight: AtomicUsize,
    pre: Pre,
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

/// SHA-256 of `bytes`, hex.
pub fn digest(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl Plugin {
    /// Compiles (off the async threads), links and describes a plugin.
    pub async fn load(
        runtime: &Arc<Runtime>,
        name: &str,
        source: PluginSource,
        bytes: Arc<[u8]>,
        config: PluginConfig,
    ) -> Result<Plugin, LoadError> {
        let digest = digest(&bytes);
        let (engine, cache, key) = (
            runtime.engine.clone(),
            runtime.cache.clone(),
            digest.clone(),
        );
        let (component, outcome) =
            tokio::task::spawn_blocking(move || cache.load(&engine, &bytes, &key))
                .await
                .map_err(|e| LoadError::Join(e.to_string()))?
                .map_err(|error| match super::bounds_refusal(&error) {
                    Some(why) => LoadError::Bounds(why),
                    None => LoadError::Compile(error),
                })?;
        match outcome {
            CacheOutcome::Hit => tracing::info!(plugin = name, "compile cache hit"),
            CacheOutcome::Miss => tracing::info!(plugin = name, "compile cache miss: compiled"),
            CacheOutcome::Corrupt => {
                tracing::warn!(plugin = name, "compile cache entry corrupt: recompiled")
            }
            CacheOutcome::Disabled => tracing::debug!(plugin = name, "compiled (no cache)"),
        }
        let imports: Vec<String> = component
            .component_type()
            .imports(&runtime.engine)
            .map(|(import, _)| import.to_string())
            .collect();
        let grants = Grants::resolve(name, &source, &config, runtime.state_dir.as_deref()).await?;
        grants
            .check_imports(name, &imports)
            .map_err(LoadError::NotGranted)?;
        let instance_pre = runtime
            .linker
            .instantiate_pre(&component)
            .map_err(LoadError::Link)?;
        let pre = if let Ok(tool) = ToolPre::new(instance_pre.clone()) {
            Pre::Tool(tool)
        } else if let Ok(guard) = GuardPre::new(instance_pre.clone()) {
            Pre::Guard(guard)
        } else if let Ok(filter) = ResultFilterPre::new(instance_pre) {
            Pre::ResultFilter(filter)
        } else {
            return Err(LoadError::NoWorld);
        };
        let settings_json = serde_json::to_string(&config.settings).unwrap_or_else(|_| "{}".into());
        let default_cpu_ms = match pre {
            Pre::Tool(_) => DEFAULT_CPU_MS,
            Pre::Guard(_) | Pre::ResultFilter(_) => DEFAULT_GUARD_CPU_MS,
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
            in_flight: AtomicUsize::new(0),
            pre,
        };
        if let Pre::Tool(tool) = &plugin.pre {
            plugin.specs = plugin
                .describe(runtime, tool)
                .await
                .map_err(LoadError::Describe)?;
        }
        Ok(plugin)
    }

    /// Whether it is a tool, a guard or a result filter.
    pub fn kind(&self) -> PluginKind {
        match self.pre {
            Pre::Tool(_) => PluginKind::Tool,
            Pre::Guard(_) => PluginKind::Guard,
            Pre::ResultFilter(_) => PluginKind::ResultFilter,
        }
    }

    async fn describe(
        &self,
        runtime: &Runtime,
        pre: &ToolPre<CallState>,
    ) -> Result<Vec<ToolSpec>, ToolError> {
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
        };
        let mut store = self.store(runtime, context);
        let guest_cpu = store.data().guest_cpu.clone();
        let described = metered(guest_cpu, async {
            let tool = pre.instantiate_async(&mut store).await?;
            tool.call_describe(&mut store).await
        })
        .await;
        let specs = match described {
            Ok(specs) => specs,
            Err(error) => return Err(store.data().classify(error)),
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
            })
            .collect())
    }

    /// A fresh store for one call of this plugin, with its bounds armed.
    fn store(&self, runtime: &Runtime, context: CallContext) -> wasmtime::Store<CallState> {
        let mut state = CallState::new(
            context,
            self.name.clone(),
            runtime.services.clone(),
            self.bounds,
            self.grants.wasi_ctx(),
        );
        state.names = self.grants.name_policy();
        new_store(&runtime.engine, state)
    }

    /// Calls running on this version now.
    pub fn calls_in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Runs tool `name` of this plugin in a fresh instance.
    pub async fn call(
        &self,
        runtime: &Runtime,
        context: CallContext,
        name: &str,
        args_json: &str,
    ) -> CallResult {
        let _in_flight = InFlight::enter(&self.in_flight);
        let Pre::Tool(pre) = &self.pre else {
            return CallResult::failed(self.not_a(PluginKind::Tool));
        };
        let wit_context = self.wit_context(&context);
        let mut store = self.store(runtime, context);
        let guest_cpu = store.data().guest_cpu.clone();
        let outcome = metered(guest_cpu, async {
            let tool = pre.instantiate_async(&mut store).await?;
            tool.call_call(&mut store, &wit_context, name, args_json)
                .await
        })
        .await;
        match outcome {
            Ok(result) => result.into(),
            Err(error) => CallResult::failed(store.data().classify(error)),
        }
    }

    /// Asks this guard about `call` in a fresh instance. An error is the guard failing
    /// (a trap, its CPU or memory bound), not a decision.
    pub async fn check(
        &self,
        runtime: &Runtime,
        call: PendingCall<'_>,
    ) -> Result<Verdict, ToolError> {
        let _in_flight = InFlight::enter(&self.in_flight);
        let Pre::Guard(pre) = &self.pre else {
            return Err(self.not_a(PluginKind::Guard));
        };
        let pending = self.wit_pending(&call);
        let mut store = self.store(runtime, call.context);
        let guest_cpu = store.data().guest_cpu.clone();
        let outcome = metered(guest_cpu, async {
            let guard = pre.instantiate_async(&mut store).await?;
            guard.call_check(&mut store, &pending).await
        })
        .await;
        match outcome {
            Ok(WitVerdict::Allow) => Ok(Verdict::Allow),
            Ok(WitVerdict::Deny(reason)) => Ok(Verdict::Deny(reason)),
            Ok(WitVerdict::Ask(reason)) => Ok(Verdict::Ask(reason)),
            Err(error) => Err(store.data().classify(error)),
        }
    }

    /// Runs this result filter on `result` in a fresh instance: `None` keeps it, `Some`
    /// replaces it. An error is the filter failing.
    pub async fn filter(
        &self,
        runtime: &Runtime,
        call: PendingCall<'_>,
        result: &CallResult,
    ) -> Result<Option<CallResult>, ToolError> {
        let _in_flight = InFlight::enter(&self.in_flight);
        let Pre::ResultFilter(pre) = &self.pre else {
            return Err(self.not_a(PluginKind::ResultFilter));
        };
        let pending = self.wit_pending(&call);
        let outcome_in = wit::ToolResult {
            content: result.content.clone(),
            error: result.error.clone().map(Into::into),
            full_output_path: result
                .full_output_path
                .as_ref()
                .map(|p| p.display().to_string()),
        };
        let mut store = self.store(runtime, call.context);
        let guest_cpu = store.data().guest_cpu.clone();
        let outcome = metered(guest_cpu, async {
            let filter = pre.instantiate_async(&mut store).await?;
            filter.call_filter(&mut store, &pending, &outcome_in).await
        })
        .await;
        match outcome {
            Ok(replaced) => Ok(replaced.map(Into::into)),
            Err(error) => Err(store.data().classify(error)),
        }
    }

    fn not_a(&self, kind: PluginKind) -> ToolError {
        ToolError::new(
            ErrorCode::Internal,
            format!("plugin {} is a {}, not a {kind}", self.name, self.kind()),
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

impl From<wit::ToolResult> for CallResult {
    fn from(result: wit::ToolResult) -> Self {
        CallResult {
            content: result.content,
            error: result
                .error
                .map(|e| ToolError::new(e.code.into(), e.message)),
            full_output_path: result.full_output_path.map(PathBuf::from),
        }
    }
}
