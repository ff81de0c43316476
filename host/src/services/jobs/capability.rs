//! What the host sees of the jobs capability: its grant, how it starts (the job registry
//! is part of the foundation: commands and terminals start jobs too), and what it
//! releases.

use std::sync::Arc;

use crate::error::ErrorCode;
use crate::services::{Capability, CapabilityError, CapabilityInfo, Foundation, Gauge};

use super::{JobRegistry, JobsConfig};

impl Capability for Arc<JobRegistry> {
    type Config = JobsConfig;
    const INFO: CapabilityInfo = CapabilityInfo {
        name: "jobs",
        summary: "list, read and kill the caller's background jobs",
        needs_grant: true,
        asks_client: false,
        errors: &[ErrorCode::NotFound, ErrorCode::InvalidArguments],
    };

    fn start(_config: &JobsConfig, foundation: &Foundation) -> Result<Self, CapabilityError> {
        Ok(foundation.jobs.clone())
    }

    fn release_owner(&self, owner: &str) -> usize {
        self.forget_owner(owner)
    }

    /// Job processes belong to the process and terminal capabilities, which stop them.
    fn shutdown(&self) {}

    fn gauges(&self) -> Vec<Gauge> {
        let jobs = self.clone();
        vec![Gauge::new(
            "dsh_jobs_running",
            "Background jobs running, of every owner",
            move || jobs.running() as i64,
        )]
    }
}
