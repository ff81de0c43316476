//! Host services: the native state that outlives any plugin, each in its own folder with
//! its WIT binding beside it. Adding a capability adds a folder here, a WIT interface,
//! and a line in [`add_to_linker`].

pub mod jobs;
pub mod log;
pub mod process;

use wasmtime::component::{HasSelf, Linker};

use crate::config::Config;
use crate::engine::bindings::dsh::plugin;
use crate::engine::store::CallState;

/// Every host service, shared by all calls.
#[derive(Debug, Clone)]
pub struct Services {
    pub process: process::ProcessService,
    pub jobs: std::sync::Arc<jobs::JobRegistry>,
}

impl Services {
    /// `spill_dir` holds the jobs' output files.
    pub fn new(config: &Config, spill_dir: std::path::PathBuf) -> Self {
        Services {
            process: process::ProcessService::new(config.process.clone()),
            jobs: std::sync::Arc::new(jobs::JobRegistry::new(
                config.jobs.clone(),
                std::time::Duration::from_millis(config.process.kill_grace_ms),
                spill_dir,
            )),
        }
    }

    /// Stops everything the services own (host shutdown): no process is left behind.
    pub fn shutdown(&self) {
        self.process.kill_all();
    }

    /// Releases everything `owner` holds (its connection ended).
    pub fn release_owner(&self, owner: &str) {
        let processes = self.process.kill_owner(owner);
        tracing::info!(
            owner,
            processes,
            "released the resources of an owner that went away"
        );
    }

    /// Releases everything `owner` holds after `grace` (from a tokio context).
    pub fn release_owner_after(&self, owner: std::sync::Arc<str>, grace: std::time::Duration) {
        let services = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            services.release_owner(&owner);
        });
    }
}

/// Adds every host interface to the linker.
pub fn add_to_linker(linker: &mut Linker<CallState>) -> wasmtime::Result<()> {
    plugin::process::add_to_linker::<CallState, HasSelf<CallState>>(linker, |state| state)?;
    plugin::jobs::add_to_linker::<CallState, HasSelf<CallState>>(linker, |state| state)?;
    plugin::log::add_to_linker::<CallState, HasSelf<CallState>>(linker, |state| state)?;
    Ok(())
}
