//! What the host sees of the jobs capability: its grant, how it starts (the job registry
//! is part of the foundation: commands and terminals start jobs too), and what it
//! releases.

use std::sync::Arc;

use crate::error::ErrorCode;
use crate::services::handover::{
    checked_entry, entry, to_entry, Handed, HandoverError, HandoverFuture,
};
use crate::services::resources::{OwnedResource, ReadFuture, ResourceKind, ResourceSource};
use crate::services::{Capability, CapabilityError, CapabilityInfo, Foundation, Gauge, ToolRunner};

use super::handover::JobsHandover;
use super::{JobInfo, JobRegistry, JobsConfig};

/// The snapshot's entry of the jobs (running and finished).
const HANDED: &str = "jobs";

/// The scheme of a job's output URI (what a job's changes are reported under).
pub const OUTPUT_SCHEME: &str = "job";

/// The most of a job's output one read of its resource returns (its newest bytes).
pub const OUTPUT_RESOURCE_MAX_BYTES: u64 = 1024 * 1024;

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

    /// The jobs' starts and ends go to the session's event log from now on.
    fn attach(&self, pipeline: &Arc<dyn ToolRunner>) {
        let pipeline = pipeline.clone();
        self.set_events(Arc::new(move |event, fields| pipeline.event(event, fields)));
    }

    fn resources(&self) -> Vec<Arc<dyn ResourceSource>> {
        vec![Arc::new(Outputs {
            jobs: self.clone(),
            kind: ResourceKind {
                scheme: OUTPUT_SCHEME,
                part: "output",
                name: "job output",
                title: "Job output",
                description: format!(
                    "The output so far of a background job (job_list); id: bash-N, terminal-N. \
                     At most the newest {} MiB.",
                    OUTPUT_RESOURCE_MAX_BYTES / (1024 * 1024)
                ),
            },
        })]
    }

    fn upgrade_blockers(&self) -> Vec<String> {
        let jobs = self.running_not_handed_over();
        if jobs.is_empty() {
            return Vec::new();
        }
        vec![format!(
            "running {} (background terminal sends and subagents are not handed over yet: wait for them or job_kill them)",
            jobs.join(", ")
        )]
    }

    fn hand_over(
        &self,
    ) -> HandoverFuture<'_, Result<Vec<(&'static str, serde_json::Value)>, HandoverError>> {
        let handed = to_entry(HANDED, &JobRegistry::hand_over(self));
        Box::pin(async move { Ok(vec![handed?]) })
    }

    fn check_handed(handed: &Handed) -> Result<(), String> {
        entry::<JobsHandover>(handed, HANDED).map(drop)
    }

    fn restore_records(&self, handed: &Handed) {
        JobRegistry::restore(self, checked_entry(handed, HANDED));
    }

    fn gauges(&self) -> Vec<Gauge> {
        let jobs = self.clone();
        vec![Gauge::new(
            "dsh_jobs_running",
            "Background jobs running, of every owner",
            move || jobs.running() as i64,
        )]
    }
}

/// The jobs' output so far: its newest [`OUTPUT_RESOURCE_MAX_BYTES`], with a note first
/// when older bytes were cut.
#[derive(Debug)]
struct Outputs {
    jobs: Arc<JobRegistry>,
    kind: ResourceKind,
}

impl ResourceSource for Outputs {
    fn kind(&self) -> &ResourceKind {
        &self.kind
    }

    fn list(&self, owner: &str) -> Vec<OwnedResource> {
        self.jobs.list(owner).iter().map(listed).collect()
    }

    fn read<'a>(&'a self, owner: &'a str, id: &'a str) -> ReadFuture<'a> {
        Box::pin(async move {
            let read = self
                .jobs
                .output(
                    owner,
                    id,
                    0,
                    OUTPUT_RESOURCE_MAX_BYTES,
                    std::time::Duration::ZERO,
                )
                .await?;
            Ok(if read.omitted_bytes > 0 {
                format!(
                    "[{} earlier bytes omitted; the whole output is in {}]\n{}",
                    read.omitted_bytes,
                    read.full_output_path.display(),
                    read.output
                )
            } else {
                read.output
            })
        })
    }
}

fn listed(job: &JobInfo) -> OwnedResource {
    OwnedResource {
        id: job.id.clone(),
        name: format!("{} output", job.id),
        title: format!("Job {}: {}", job.id, job.description),
        description: format!(
            "The output so far of background job {} ({}, {}): {}",
            job.id,
            job.kind,
            job.state.name(),
            job.command
        ),
    }
}
