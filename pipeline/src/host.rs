//! Assembles a running host from its configuration: the services, the engine, the plugin
//! set (embedded defaults, overridden and extended by a plugin directory), the registry,
//! the session and the pipeline. The CLI and the MCP front end start from here.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::config::Config;
use crate::engine::plugin::{ComponentBytes, Plugin, PluginKind, PluginSource};
use crate::engine::{embedded, EngineError, Runtime};
use crate::pipeline::Pipeline;
use crate::registry::{Refusal, Registry};
use crate::services::{GaugeRead, Services};
use crate::session::{prepare_state_dir, Session, StateDirError};

/// The pipeline as the capabilities see it ([`crate::services::ToolRunner`]): weak, since
/// the pipeline holds the services that hold it.
struct PipelineRunner(std::sync::Weak<Pipeline>);

impl crate::services::ToolRunner for PipelineRunner {
    fn tools(&self, scope: &str) -> Vec<crate::call::SampleTool> {
        let Some(pipeline) = self.0.upgrade() else {
            return Vec::new();
        };
        let Ok(scope) = pipeline.registry.scope(scope) else {
            return Vec::new();
        };
        pipeline
            .registry
            .schemas(&scope)
            .into_iter()
            .map(|spec| crate::call::SampleTool {
                name: spec.name,
                description: spec.description,
                input_schema: spec.input_schema,
            })
            .collect()
    }

    fn call<'a>(
        &'a self,
        request: crate::call::CallRequest,
        cancel: &'a tokio_util::sync::CancellationToken,
    ) -> crate::services::CallFuture<'a> {
        Box::pin(async move {
            match self.0.upgrade() {
                Some(pipeline) => pipeline.call(request, cancel).await,
                None => crate::call::CallResult::failed(crate::error::ToolError::new(
                    crate::error::ErrorCode::Cancelled,
                    "the host is shutting down",
                )),
            }
        })
    }

    fn event(&self, event: &str, fields: serde_json::Value) {
        if let Some(pipeline) = self.0.upgrade() {
            pipeline.session.events.write(event, fields);
        }
    }
}

/// How long a host that ends waits for its observers to see the records they were given.
pub const OBSERVER_DRAIN: std::time::Duration = std::time::Duration::from_secs(5);

/// Why a host could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    StateDir(#[from] StateDirError),
    #[error("plugin directory {path}: {source}")]
    PluginDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot open the session under {path}: {source}")]
    Session {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Capability(#[from] crate::services::CapabilityError),
}

/// What a host starts from.
#[derive(Debug, Clone)]
pub struct HostOptions {
    pub config: Config,
    /// Overrides and extends the embedded plugins.
    pub plugins_dir: Option<PathBuf>,
    pub state_dir: PathBuf,
    pub workdir: PathBuf,
    /// The configuration file `config` was read from (kept out of confined runs' reach).
    pub config_file: Option<PathBuf>,
    /// The session to go on with (after an upgrade), instead of a new one.
    pub resume: Option<crate::session::SessionHandover>,
}

/// A running host.
pub struct Host {
    /// The configuration the host started with: what the settings bound at start
    /// (`[process]`, `[jobs]`, `[terminal]`, `[serve]`) are. The one calls run under,
    /// which `dsh.toml` may change while serving, is [`Pipeline::config`].
    pub config: Arc<Config>,
    pub pipeline: Arc<Pipeline>,
    pub registry: Arc<Registry>,
    pub services: Services,
    /// Removing past sessions beyond `[state]`, started with the host and waited for at
    /// shutdown (so a short `dsh call` finishes it too).
    retiring: std::sync::Mutex<Option<std::thread::JoinHandle<usize>>>,
    /// The plugin set loading in the background (see [`Host::ready`]).
    loading: PluginLoading,
}

/// How far the plugin set a host started with has loaded: first the embedded plugins and
/// the guards and filters `[pipeline]` names (what every call needs), then the rest (the
/// plugin directory's tools, each delaying only its own).
#[derive(Debug, Clone)]
struct PluginLoading {
    ready: tokio::sync::watch::Receiver<bool>,
    complete: tokio::sync::watch::Receiver<bool>,
}

impl Host {
    pub async fn start(options: HostOptions) -> Result<Host, StartError> {
        let config = Arc::new(options.config);
        prepare_state_dir(&options.state_dir)?;
        // Off the way of start-up: removing old sessions may take a while.
        let retiring = {
            let (state_dir, limits) = (options.state_dir.clone(), config.state.clone());
            std::thread::Builder::new()
                .name("dsh-retire-sessions".into())
                .spawn(move || crate::session::retention::retire_sessions(&state_dir, &limits))
                .ok()
        };
        let session = match &options.resume {
            Some(resumed) => Session::resume(
                &options.state_dir,
                options.workdir,
                &resumed.id,
                resumed.next_call,
            ),
            None => Session::open(&options.state_dir, options.workdir),
        }
        .map_err(|source| StartError::Session {
            path: options.state_dir.clone(),
            source,
        })?;
        let places = dsh_launch::HostPlaces {
            workspace: Some(session.workdir.clone()),
            own: crate::own_files::OwnFiles::new(
                &options.state_dir,
                options.config_file.as_deref(),
                options.plugins_dir.as_deref(),
            ),
        };
        let services = Services::for_host(&config.services(), session.spill_dir.clone(), places)?;
        let runtime = Arc::new(Runtime::new(
            services.clone(),
            Some(options.state_dir.clone()),
        )?);
        let registry = Arc::new(Registry::new(config.scopes.clone()));
        let loading =
            load_in_background(&runtime, &registry, &config, options.plugins_dir.as_deref())?;
        tracing::info!(session = %session.id, events = %session.events.path().display(), "session started");
        register_live_gauges(&runtime.metrics, &services);
        let pipeline = Arc::new(Pipeline::new(
            runtime,
            registry.clone(),
            Arc::new(session),
            config.clone(),
        ));
        let runner: Arc<dyn crate::services::ToolRunner> =
            Arc::new(PipelineRunner(Arc::downgrade(&pipeline)));
        services.attach(&runner);
        Ok(Host {
            config,
            pipeline,
            registry,
            services,
            retiring: std::sync::Mutex::new(retiring),
            loading,
        })
    }

    /// Waits until the embedded plugins and the guards and filters `[pipeline]` names have
    /// loaded or been refused: the catalog a client is first shown, and what every call
    /// passes through.
    pub async fn ready(&self) {
        let mut ready = self.loading.ready.clone();
        let _ = ready.wait_for(|done| *done).await;
    }

    /// Waits until every plugin the host started with has loaded or been refused.
    pub async fn loaded(&self) {
        let mut complete = self.loading.complete.clone();
        let _ = complete.wait_for(|done| *done).await;
    }

    /// Waits (up to a minute) until undo has taken the workspace's baseline, so what
    /// the next call changes is recorded under it (`dsh call`, which makes its call at
    /// once; a server's first calls before it are recorded as made outside dsh).
    pub async fn baseline_taken(&self) {
        let recorder = self.services.foundation().undo.clone();
        let _ = tokio::task::spawn_blocking(move || {
            recorder.wait_ready(std::time::Duration::from_secs(60))
        })
        .await;
    }

    /// The host's metrics (what `/metrics` serves).
    pub fn metrics(&self) -> &Arc<crate::metrics::Metrics> {
        &self.pipeline.runtime.metrics
    }

    /// Whether the plugin set has loaded whole.
    pub fn is_loaded(&self) -> bool {
        *self.loading.complete.borrow()
    }

    /// Lets the observers see what they were given, for at most [`OBSERVER_DRAIN`]: the
    /// first step of a host that ends (then [`Host::shutdown`]).
    pub async fn close_observers(&self) {
        self.pipeline.close_observers(OBSERVER_DRAIN).await;
    }

    /// Kills everything the host owns, and lets the removal of past sessions finish.
    pub fn shutdown(&self) {
        self.services.shutdown();
        if let Some(retiring) = self.retiring.lock().unwrap().take() {
            let _ = retiring.join();
        }
    }
}

/// The gauges read from the services when `/metrics` is scraped: what they hold now.
fn register_live_gauges(metrics: &crate::metrics::Metrics, services: &Services) {
    for gauge in services.gauges() {
        match gauge.read {
            GaugeRead::One(read) => metrics.gauge_fn(gauge.name, gauge.help, read),
            GaugeRead::Counters(read) => metrics.counters_fn(gauge.name, gauge.help, read),
        }
    }
}

/// Says so when a stage that `[pipeline]` names is not serving: until it is, every call
/// is denied (a guard), fails (a middleware), has its result withheld (a filter), or goes
/// unobserved (an observer).
pub fn warn_about_missing_stages(registry: &Registry, config: &Config) {
    let catalog = registry.snapshot();
    for (name, kind) in config.pipeline.stages() {
        if catalog.stage(name, kind).is_none() {
            let effect = match kind {
                PluginKind::Guard => "every call is denied",
                PluginKind::Middleware => "every call it is for fails",
                PluginKind::ResultFilter => "every result is withheld",
                _ => "no record reaches it",
            };
            tracing::warn!(plugin = %name, %kind, "named in [pipeline] but no {kind} of that name is serving: {effect} until it loads");
        }
    }
}

/// Loads the embedded plugins and those in `dir` (a file `NAME.wasm` replaces the
/// embedded plugin `NAME`). A plugin that fails is recorded as refused with its reason;
/// it never takes the others down.
pub async fn load_plugin_set(
    runtime: &Arc<Runtime>,
    registry: &Registry,
    config: &Config,
    dir: Option<&Path>,
) -> Result<(), StartError> {
    for (name, (source, bytes)) in plugin_set(registry, config, dir)? {
        load_plugin(runtime, registry, config, &name, source, bytes).await;
    }
    Ok(())
}

/// Starts loading the plugin set off the caller's way: the embedded plugins and the
/// pipeline's stages first, in name order, then the plugin directory's other plugins,
/// side by side (two of them claiming one tool name: the first loaded serves it, the
/// other is refused). Reading the directory is done here (an unreadable directory fails
/// the start).
fn load_in_background(
    runtime: &Arc<Runtime>,
    registry: &Arc<Registry>,
    config: &Arc<Config>,
    dir: Option<&Path>,
) -> Result<PluginLoading, StartError> {
    let set = plugin_set(registry, config, dir)?;
    let is_stage = |name: &str| config.pipeline.names(name);
    let (first, later): (Vec<_>, Vec<_>) = set
        .into_iter()
        .partition(|(name, (source, _))| *source == PluginSource::Embedded || is_stage(name));
    let (ready_tx, ready) = tokio::sync::watch::channel(false);
    let (complete_tx, complete) = tokio::sync::watch::channel(false);
    let (runtime, registry, config) = (runtime.clone(), registry.clone(), config.clone());
    tokio::spawn(async move {
        let started = std::time::Instant::now();
        for (name, (source, bytes)) in first {
            load_plugin(&runtime, &registry, &config, &name, source, bytes).await;
        }
        let _ = ready_tx.send(true);
        tracing::info!(
            elapsed_ms = started.elapsed().as_millis() as u64,
            "embedded plugins and pipeline stages loaded"
        );
        // The plugin directory's other plugins load side by side, each registered when it
        // is ready: one that compiles long or whose describe() spins delays only its own
        // tools.
        let loads: Vec<_> = later
            .into_iter()
            .map(|(name, (source, bytes))| {
                let (runtime, registry, config) =
                    (runtime.clone(), registry.clone(), config.clone());
                tokio::spawn(async move {
                    load_plugin(&runtime, &registry, &config, &name, source, bytes).await;
                })
            })
            .collect();
        for load in loads {
            let _ = load.await;
        }
        warn_about_missing_stages(&registry, &config);
        let _ = complete_tx.send(true);
    });
    Ok(PluginLoading { ready, complete })
}

/// Plugins by name, each with where it comes from and its bytes.
pub type PluginSet = BTreeMap<String, (PluginSource, ComponentBytes)>;

/// The plugins `config` and `dir` call for, by name: the embedded ones it wants, each
/// replaced by a file `NAME.wasm` in `dir`, and the other files there. A file that
/// cannot be read is recorded as refused.
pub fn plugin_set(
    registry: &Registry,
    config: &Config,
    dir: Option<&Path>,
) -> Result<PluginSet, StartError> {
    let mut set: PluginSet = embedded::PLUGINS
        .iter()
        .filter(|plugin| embedded::wanted(plugin.name, config))
        .map(|plugin| {
            (
                plugin.name.to_string(),
                (PluginSource::Embedded, plugin.component()),
            )
        })
        .collect();
    if let Some(dir) = dir {
        let plugin_dir_error = |source| StartError::PluginDir {
            path: dir.to_path_buf(),
            source,
        };
        let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(plugin_dir_error)?
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|path| path.extension().is_some_and(|ext| ext == "wasm"))
            .collect();
        paths.sort();
        for path in paths {
            let Some(name) = path.file_stem().and_then(|s| s.to_str()).map(str::to_owned) else {
                continue;
            };
            match std::fs::read(&path) {
                Ok(bytes) => {
                    set.insert(name, (PluginSource::Path(path), bytes.into()));
                }
                Err(error) => registry.record_refusal(
                    &name,
                    Refusal::new(
                        &PluginSource::Path(path.clone()),
                        "",
                        format!("cannot read: {error}"),
                    ),
                ),
            }
        }
    }
    Ok(set)
}

/// What becomes of the version serving when a new one is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OnRefusal {
    /// It keeps serving (a broken new file must not take a working plugin down).
    KeepServing,
    /// It is taken out of service: it was linked under grants and bounds the
    /// configuration no longer gives, so it must not run on them.
    Withdraw,
}

/// Loads one plugin version and swaps it in; a version that fails is recorded as
/// refused and whatever served before keeps serving. True when it now serves.
pub async fn load_plugin(
    runtime: &Arc<Runtime>,
    registry: &Registry,
    config: &Config,
    name: &str,
    source: PluginSource,
    bytes: ComponentBytes,
) -> bool {
    load(
        runtime,
        registry,
        config,
        name,
        source,
        bytes,
        OnRefusal::KeepServing,
    )
    .await
}

/// Loads plugin `name` again under `config` because its grants, bounds or settings
/// changed there. When the new link is refused (say an interface it imports is no
/// longer granted), the version serving is withdrawn too: its tools go, and a guard or
/// filter of that name then fails closed. True when it now serves.
pub async fn relink_plugin(
    runtime: &Arc<Runtime>,
    registry: &Registry,
    config: &Config,
    name: &str,
    source: PluginSource,
    bytes: ComponentBytes,
) -> bool {
    load(
        runtime,
        registry,
        config,
        name,
        source,
        bytes,
        OnRefusal::Withdraw,
    )
    .await
}

async fn load(
    runtime: &Arc<Runtime>,
    registry: &Registry,
    config: &Config,
    name: &str,
    source: PluginSource,
    bytes: ComponentBytes,
    on_refusal: OnRefusal,
) -> bool {
    let file_digest = bytes.digest().to_string();
    let plugin_config = config.plugin(name, &file_digest);
    let loaded = Plugin::load(runtime, name, source.clone(), bytes, plugin_config).await;
    let outcome = loaded.map_err(|e| e.to_string()).and_then(|plugin| {
        registry
            .register(Arc::new(plugin))
            .map_err(|e| e.to_string())
    });
    match outcome {
        Ok(()) => {
            tracing::info!(plugin = %name, %source, digest = %&file_digest[..12], "plugin serving");
            true
        }
        Err(reason) => {
            if on_refusal == OnRefusal::Withdraw && registry.remove(name) {
                tracing::warn!(plugin = %name, %source, %reason, "plugin refused under the new configuration; the version serving was withdrawn");
            } else {
                tracing::warn!(plugin = %name, %source, %reason, "plugin refused");
            }
            registry.record_refusal(name, Refusal::new(&source, &file_digest, reason));
            false
        }
    }
}
