//! Host services: the native state that outlives any plugin, each in its own folder with
//! its WIT binding beside it. Adding a capability adds a folder here, a WIT interface,
//! and a line in [`add_to_linker`].

pub mod jobs;
pub mod log;
pub mod process;
pub mod terminal;

use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::{HasSelf, Linker};

use crate::config::Config;
use crate::engine::bindings::dsh::plugin;
use crate::engine::store::CallState;

/// Every host service, shared by all calls.
#[derive(Debug, Clone)]
pub struct Services {
    pub process: process::ProcessService,
    pub jobs: Arc<jobs::JobRegistry>,
    pub terminal: Arc<terminal::TerminalService>,
}

impl Services {
    /// `spill_dir` holds the jobs' output files. Fails when the configured containment
    /// cannot be set up.
    pub fn new(
        config: &Config,
        spill_dir: std::path::PathBuf,
    ) -> Result<Self, process::containment::ContainmentError> {
        let jobs = Arc::new(jobs::JobRegistry::new(
            config.jobs.clone(),
            Duration::from_millis(config.process.kill_grace_ms),
            spill_dir,
        ));
        let launch = Arc::new(process::Launch::new(&config.process)?);
        Ok(Services {
            process: process::ProcessService::new(config.process.clone(), launch.clone()),
            terminal: Arc::new(terminal::TerminalService::new(
                config.terminal.clone(),
                launch,
                jobs.clone(),
            )),
            jobs,
        })
    }

    /// Stops everything the services own (host shutdown): no process is left behind.
    pub fn shutdown(&self) {
        self.terminal.close_all();
        self.process.kill_all();
    }

    /// Releases everything `owner` holds (its connection ended).
    pub fn release_owner(&self, owner: &str) {
        let terminals = self.terminal.close_owner(owner);
        let processes = self.process.kill_owner(owner);
        let jobs = self.jobs.forget_owner(owner);
        tracing::info!(
            owner,
            terminals,
            processes,
            jobs,
            "released the resources of an owner that went away"
        );
    }

    /// Releases everything `owner` holds after `grace` (from a tokio context).
    pub fn release_owner_after(&self, owner: Arc<str>, grace: Duration) {
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
    plugin::terminal::add_to_linker::<CallState, HasSelf<CallState>>(linker, |state| state)?;
    plugin::jobs::add_to_linker::<CallState, HasSelf<CallState>>(linker, |state| state)?;
    plugin::log::add_to_linker::<CallState, HasSelf<CallState>>(linker, |state| state)?;
    Ok(())
}
