//! Live configuration: `dsh serve` watches its `dsh.toml` (the `--config` file, or the
//! `./dsh.toml` it loaded) the way it watches its plugin directory. Once the file has
//! been quiet for the reload debounce it is read and checked whole; a valid version is
//! applied for the next call, an invalid one is refused with its error (logged, and
//! kept in [`ConfigStatus`] for `dsh plugins`) while the configuration in force keeps
//! serving.
//!
//! What changes live: `[pipeline]` (guards and filters and their order: an embedded
//! guard or filter newly named is loaded, one no longer named is unloaded), `[gate]`,
//! `[limits]`, `[scopes]`, and `[plugins.*]` (a plugin whose grants, bounds or settings
//! changed is linked again under them; if that is refused, the version serving is
//! withdrawn rather than left running on grants it no longer has). The pipeline's
//! configured parts are swapped whole, so calls in flight finish under the
//! configuration they started with. Everything else (`[process]` with its containment
//! and environment, `[jobs]`, `[terminal]`, `[serve]`, and any other section) is bound at
//! start: a change to it is named in a warning and in the status, and takes effect at
//! the next start.

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use notify::{RecursiveMode, Watcher};

use crate::config::Config;
use crate::engine::plugin::digest;
use crate::host::{load_plugin, plugin_set, relink_plugin, warn_about_missing_stages};
use crate::pipeline::Pipeline;
use crate::registry::PluginState;

/// The top-level sections of `dsh.toml` that change live; every other one is bound at
/// start (the engine's list, which the configuration reference shows too).
pub use crate::config::LIVE_SECTIONS;

/// What `dsh plugins` shows of the configuration a server runs under.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ConfigStatus {
    /// The file, or none when the server runs on the defaults.
    pub path: Option<String>,
    /// Whether changes to the file are applied while serving.
    pub watched: bool,
    /// SHA-256 of the text of the version in force, hex (empty for the defaults).
    pub digest: String,
    /// Seconds since the Unix epoch at which the version in force was loaded.
    pub loaded_at: u64,
    /// `serving` when the file's latest version is the one in force; `refused` when it
    /// was refused (see `reason`) and the earlier version keeps serving.
    pub status: String,
    /// Why the file's latest version was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When it was refused (seconds since the Unix epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused_at: Option<u64>,
    /// Settings whose value in force differs from the file's and that take effect at
    /// the next start (`serve.owner_grace_ms`, `process`, ...).
    #[serde(default)]
    pub restart_needed: Vec<String>,
}

impl ConfigStatus {
    /// The status of a configuration loaded from `path` (or the defaults) just now.
    pub fn loaded(path: Option<&Path>, text: &str, watched: bool) -> Self {
        ConfigStatus {
            path: path.map(|p| p.display().to_string()),
            watched,
            digest: if path.is_some() {
                digest(text.as_bytes())
            } else {
                String::new()
            },
            loaded_at: unix_now(),
            status: "serving".into(),
            reason: None,
            refused_at: None,
            restart_needed: Vec::new(),
        }
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A serving host's configuration file and what became of its latest version.
pub struct LiveConfig {
    /// Absolute.
    path: PathBuf,
    plugins_dir: Option<PathBuf>,
    pipeline: Arc<Pipeline>,
    /// The configuration the host started with: what the settings bound at start are.
    started: Arc<Config>,
    /// The text of the file the host started with, as TOML (to name changed keys).
    started_table: toml::Table,
    status: Mutex<ConfigStatus>,
}

/// The outcome of reading the file once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reloaded {
    /// A valid version was applied; the list says what changed live.
    Applied(Vec<String>),
    /// A valid version that changes nothing live (it may change settings bound at start).
    Unchanged,
    /// Refused with this reason; the configuration in force keeps serving.
    Refused(String),
}

impl LiveConfig {
    /// `path` is the file `started` was loaded from; `watched` says whether [`watch`]
    /// will follow it (the status says so).
    pub fn new(
        path: &Path,
        plugins_dir: Option<PathBuf>,
        pipeline: Arc<Pipeline>,
        started: Arc<Config>,
        watched: bool,
    ) -> LiveConfig {
        let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        LiveConfig {
            started_table: text.parse().unwrap_or_default(),
            status: Mutex::new(ConfigStatus::loaded(Some(&path), &text, watched)),
            path,
            plugins_dir,
            pipeline,
            started,
        }
    }

    /// The file watched.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn status(&self) -> ConfigStatus {
        self.status.lock().unwrap().clone()
    }

    /// Reads the file and applies it, or refuses it and keeps the configuration in force.
    pub async fn reload(&self) -> Reloaded {
        let path = self.path.display().to_string();
        let text = match tokio::fs::read_to_string(&self.path).await {
            Ok(text) => text,
            Err(error) => return self.refuse(format!("cannot read {path}: {error}")),
        };
        let config = match Config::parse(&text) {
            Ok(config) => Arc::new(config),
            Err(message) => return self.refuse(format!("invalid {path}: {message}")),
        };
        let restart_needed = self.restart_needed(&config, &text);
        let outcome = self.apply(config).await;
        let mut status = self.status.lock().unwrap();
        if status.restart_needed != restart_needed && !restart_needed.is_empty() {
            tracing::warn!(path = %path, settings = %restart_needed.join(", "), "dsh.toml changed settings that are bound at start: they take effect when dsh serve restarts");
        }
        status.restart_needed = restart_needed;
        status.status = "serving".into();
        status.reason = None;
        status.refused_at = None;
        status.digest = digest(text.as_bytes());
        status.loaded_at = unix_now();
        if let Reloaded::Applied(changed) = &outcome {
            tracing::info!(path = %path, changed = %changed.join(", "), "dsh.toml reloaded: the next call runs under it");
        }
        outcome
    }

    fn refuse(&self, reason: String) -> Reloaded {
        tracing::warn!(%reason, "dsh.toml refused; the configuration in force keeps serving");
        let mut status = self.status.lock().unwrap();
        status.status = "refused".into();
        status.reason = Some(reason.clone());
        status.refused_at = Some(unix_now());
        Reloaded::Refused(reason)
    }

    /// The settings bound at start whose value in `config` (from `text`) differs from the
    /// value they started with, as dotted keys.
    fn restart_needed(&self, config: &Config, text: &str) -> Vec<String> {
        if same(&bound_at_start(&self.started), &bound_at_start(config)) {
            return Vec::new();
        }
        let table: toml::Table = text.parse().unwrap_or_default();
        let mut changed = BTreeSet::new();
        let sections: BTreeSet<&String> = self.started_table.keys().chain(table.keys()).collect();
        for section in sections {
            if !LIVE_SECTIONS.contains(&section.as_str()) {
                differing_keys(
                    section,
                    self.started_table.get(section),
                    table.get(section),
                    &mut changed,
                );
            }
        }
        if changed.is_empty() {
            // Only values restated at their defaults, or the start file differed from
            // what was read just now: the sections are all that can be named.
            changed.insert("settings bound at start".into());
        }
        changed.into_iter().collect()
    }

    /// Applies a valid `config`: plugins first (so a guard newly named serves before the
    /// pipeline asks for it), then scopes, then the pipeline swap, then the plugins no
    /// longer wanted go.
    async fn apply(&self, config: Arc<Config>) -> Reloaded {
        let pipeline = &self.pipeline;
        let _loading = pipeline.loads.lock().await;
        let old = pipeline.config();
        let mut changed = Vec::new();
        for (key, before, now) in [
            ("guards", &old.pipeline.guards, &config.pipeline.guards),
            (
                "middleware",
                &old.pipeline.middleware,
                &config.pipeline.middleware,
            ),
            ("filters", &old.pipeline.filters, &config.pipeline.filters),
            (
                "observers",
                &old.pipeline.observers,
                &config.pipeline.observers,
            ),
        ] {
            if before != now {
                changed.push(format!("pipeline.{key} {now:?}"));
            }
        }
        if !same(&old.pipeline.select, &config.pipeline.select) {
            changed.push("pipeline.select".into());
        }
        if !same(&old.gate, &config.gate) {
            changed.push("gate".into());
        }
        if !same(&old.limits, &config.limits) {
            changed.push("limits".into());
        }
        if old.scopes != config.scopes {
            changed.push("scopes".into());
        }
        let (runtime, registry) = (&pipeline.runtime, &*pipeline.registry);
        let wanted = match plugin_set(registry, &config, self.plugins_dir.as_deref()) {
            Ok(set) => Some(set),
            Err(error) => {
                tracing::warn!(%error, "cannot list the plugins the new configuration wants; plugins are left as they are");
                None
            }
        };
        for (name, (source, bytes)) in wanted.iter().flatten() {
            let file_digest = bytes.digest();
            if !same(
                &old.plugin(name, file_digest),
                &config.plugin(name, file_digest),
            ) {
                changed.push(format!("plugins.{name} (relinked)"));
                relink_plugin(
                    runtime,
                    registry,
                    &config,
                    name,
                    source.clone(),
                    bytes.clone(),
                )
                .await;
            } else if !registry.has_version(name, file_digest) {
                changed.push(format!("{name} loaded"));
                load_plugin(
                    runtime,
                    registry,
                    &config,
                    name,
                    source.clone(),
                    bytes.clone(),
                )
                .await;
            }
        }
        if !same(&old.plugins, &config.plugins) && !changed.iter().any(|c| c.contains("plugins.")) {
            // Grants of plugins that are not loaded: nothing to relink, still a change.
            changed.push("plugins".into());
        }
        registry.set_scopes(config.scopes.clone());
        pipeline.reconfigure(config.clone());
        if let Some(wanted) = &wanted {
            for status in registry.plugins() {
                if status.status == PluginState::Serving && !wanted.contains_key(&status.name) {
                    registry.remove(&status.name);
                    tracing::info!(plugin = %status.name, "no longer named in [pipeline]: unloaded");
                    changed.push(format!("{} unloaded", status.name));
                }
            }
        }
        warn_about_missing_stages(registry, &config);
        if changed.is_empty() {
            Reloaded::Unchanged
        } else {
            Reloaded::Applied(changed)
        }
    }
}

/// Equal effective values: every configuration type derives `Debug`, and its maps are
/// ordered, so equal `Debug` text is equal values.
fn same<T: Debug>(a: &T, b: &T) -> bool {
    format!("{a:?}") == format!("{b:?}")
}

/// `config` with the sections that change live ([`LIVE_SECTIONS`]) reset: what is left
/// is bound at start.
fn bound_at_start(config: &Config) -> Config {
    config.bound_at_start()
}

/// Adds the dotted keys under `prefix` whose values differ between `a` and `b`.
fn differing_keys(
    prefix: &str,
    a: Option<&toml::Value>,
    b: Option<&toml::Value>,
    out: &mut BTreeSet<String>,
) {
    let empty = toml::Value::Table(Default::default());
    // A table that is absent on one side is compared as empty, so its keys are named.
    let (a, b) = match (a, b) {
        (None, Some(table @ toml::Value::Table(_))) => (Some(&empty), Some(table)),
        (Some(table @ toml::Value::Table(_)), None) => (Some(table), Some(&empty)),
        other => other,
    };
    match (a, b) {
        (Some(toml::Value::Table(a)), Some(toml::Value::Table(b))) => {
            let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for key in keys {
                differing_keys(&format!("{prefix}.{key}"), a.get(key), b.get(key), out);
            }
        }
        (a, b) if a != b => {
            out.insert(prefix.to_string());
        }
        _ => {}
    }
}

/// A running watcher of the configuration file; dropping it stops watching.
pub struct ConfigWatcher {
    _watcher: notify::RecommendedWatcher,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ConfigWatcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Watches `live`'s file and reloads it `debounce` after its last change. The directory
/// holding it is watched (and that of the file a symlink points to), so a file replaced
/// by a rename (how editors and tools write atomically) is seen as well as one written
/// in place.
pub fn watch(live: Arc<LiveConfig>, debounce: Duration) -> Result<ConfigWatcher, notify::Error> {
    let mut files = vec![live.path.clone()];
    if let Ok(target) = std::fs::canonicalize(&live.path) {
        if target != live.path {
            files.push(target);
        }
    }
    let (changes, mut changed) = tokio::sync::mpsc::unbounded_channel::<()>();
    let watched = files.clone();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        match event {
            Ok(event) => {
                use notify::event::{AccessKind, AccessMode, EventKind};
                // Reading the file (our own reads included) is not a change; closing
                // it after a write is.
                if matches!(event.kind, EventKind::Access(kind) if kind != AccessKind::Close(AccessMode::Write))
                {
                    return;
                }
                if event.paths.iter().any(|path| watched.contains(path)) {
                    let _ = changes.send(());
                }
            }
            Err(error) => tracing::warn!(%error, "configuration watch error"),
        }
    })?;
    let mut dirs = BTreeSet::new();
    for file in &files {
        if let Some(dir) = file.parent() {
            dirs.insert(dir.to_path_buf());
        }
    }
    for dir in &dirs {
        watcher.watch(dir, RecursiveMode::NonRecursive)?;
    }
    let task = tokio::spawn(async move {
        while changed.recv().await.is_some() {
            // Wait until the file has been quiet for `debounce`.
            loop {
                match tokio::time::timeout(debounce, changed.recv()).await {
                    Ok(Some(())) => {}
                    Ok(None) => return,
                    Err(_quiet) => break,
                }
            }
            live.reload().await;
        }
    });
    tracing::info!(path = %files[0].display(), debounce_ms = debounce.as_millis() as u64, "watching the configuration");
    Ok(ConfigWatcher {
        _watcher: watcher,
        task,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changed_keys_are_named_down_to_the_leaf() {
        let a: toml::Table = "[serve]\nowner_grace_ms = 1\n[process]\npids_max = 5\n"
            .parse()
            .unwrap();
        let b: toml::Table =
            "[serve]\nowner_grace_ms = 2\n[process]\npids_max = 5\n[jobs]\ntail_bytes = 9\n"
                .parse()
                .unwrap();
        let mut out = BTreeSet::new();
        for section in ["serve", "process", "jobs"] {
            differing_keys(section, a.get(section), b.get(section), &mut out);
        }
        assert_eq!(
            out.into_iter().collect::<Vec<_>>(),
            ["jobs.tail_bytes", "serve.owner_grace_ms"]
        );
    }

    #[test]
    fn only_sections_bound_at_start_count_for_a_restart() {
        let a = Config::parse("[limits]\nmax_retries = 0\n[pipeline]\nguards = [\"x\"]\n").unwrap();
        let b = Config::default();
        assert!(same(&bound_at_start(&a), &bound_at_start(&b)));
        let c = Config::parse("[serve]\nowner_grace_ms = 5\n").unwrap();
        assert!(!same(&bound_at_start(&c), &bound_at_start(&b)));
    }
}
