//! Hot reload: watches the plugin directory and, off the call path, loads each changed
//! `.wasm` once its writes have settled (the debounce), checks it (it compiles, links,
//! `describe()` works, every schema is valid, no tool name collides) and swaps it in
//! whole. Calls in flight finish on the version they started on — they hold it — and
//! calls that start after the swap get the new one. A version that fails its checks is
//! refused with its reason and the old one keeps serving. A deleted file removes its
//! tools (an embedded plugin of that name serves again). Every change reaches MCP
//! clients as `notifications/tools/list_changed` through the registry. Terminals and
//! jobs live in the host services and are not touched. A version is linked under the
//! configuration in force when it loads (`dsh.toml` may have changed since start; see
//! [`crate::config_watch`]).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};

use crate::engine::embedded;
use crate::engine::plugin::{ComponentBytes, PluginSource};
use crate::host::load_plugin;
use crate::pipeline::Pipeline;
use crate::registry::Refusal;

/// A running watcher; dropping it stops watching.
pub struct PluginWatcher {
    _watcher: notify::RecommendedWatcher,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for PluginWatcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Watches `dir` and reloads what changes in it, `debounce` after its last write.
pub fn watch(
    pipeline: Arc<Pipeline>,
    dir: &Path,
    debounce: Duration,
) -> Result<PluginWatcher, notify::Error> {
    let (changes, mut changed) = tokio::sync::mpsc::unbounded_channel::<PathBuf>();
    let mut watcher =
        notify::recommended_watcher(move |event: notify::Result<notify::Event>| match event {
            // Reading a file (our own loads included) is not a change.
            Ok(event) if matches!(event.kind, notify::EventKind::Access(_)) => {}
            Ok(event) => {
                for path in event.paths {
                    if path.extension().is_some_and(|ext| ext == "wasm") {
                        let _ = changes.send(path);
                    }
                }
            }
            Err(error) => tracing::warn!(%error, "plugin directory watch error"),
        })?;
    watcher.watch(dir, RecursiveMode::NonRecursive)?;
    let task = tokio::spawn(async move {
        while let Some(first) = changed.recv().await {
            let mut paths = BTreeSet::from([first]);
            // Wait until the directory has been quiet for `debounce`.
            loop {
                match tokio::time::timeout(debounce, changed.recv()).await {
                    Ok(Some(path)) => {
                        paths.insert(path);
                    }
                    Ok(None) => return,
                    Err(_quiet) => break,
                }
            }
            let _loading = pipeline.loads.lock().await;
            for path in paths {
                reload(&pipeline, &path).await;
            }
        }
    });
    tracing::info!(dir = %dir.display(), debounce_ms = debounce.as_millis() as u64, "watching plugins");
    Ok(PluginWatcher {
        _watcher: watcher,
        task,
    })
}

/// Brings plugin `path` up to date with the file.
async fn reload(pipeline: &Pipeline, path: &Path) {
    let config = pipeline.config();
    let (runtime, registry, config) = (&pipeline.runtime, &*pipeline.registry, &*config);
    let Some(name) = path.file_stem().and_then(|s| s.to_str()).map(str::to_owned) else {
        return;
    };
    let source = PluginSource::Path(path.to_path_buf());
    match tokio::fs::read(path).await {
        Ok(bytes) => {
            let bytes = ComponentBytes::from(bytes);
            if registry.has_version(&name, bytes.digest()) {
                tracing::debug!(plugin = %name, "already serving or refused; nothing to reload");
                return;
            }
            let loaded = load_plugin(runtime, registry, config, &name, source, bytes).await;
            count(pipeline, loaded);
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            registry.remove(&name);
            tracing::info!(plugin = %name, "plugin file deleted; its tools are gone");
            if let Some(component) =
                embedded::component(&name).filter(|_| embedded::wanted(&name, config))
            {
                let loaded = load_plugin(
                    runtime,
                    registry,
                    config,
                    &name,
                    PluginSource::Embedded,
                    component,
                )
                .await;
                count(pipeline, loaded);
            }
        }
        Err(error) => {
            registry.record_refusal(
                &name,
                Refusal::new(&source, "", format!("cannot read: {error}")),
            );
            count(pipeline, false);
        }
    }
}

/// Counts a version swapped in (`loaded`) or refused in the host's metrics.
fn count(pipeline: &Pipeline, loaded: bool) {
    match loaded {
        true => pipeline.runtime.metrics.plugin_reloaded(),
        false => pipeline.runtime.metrics.plugin_refused(),
    }
}
