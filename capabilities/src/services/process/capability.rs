//! What the host sees of the process capability: its grant, how it starts, and what it
//! releases.

use crate::error::ErrorCode;
use crate::services::handover::{
    checked_entry, entry, to_entry, Adopted, Handed, HandoverError, HandoverFuture,
};
use crate::services::{Capability, CapabilityError, CapabilityInfo, Foundation, Gauge};

use super::handover::JobProcessHandover;
use super::{ProcessConfig, ProcessService};

/// The snapshot's entry of the background jobs' processes.
const HANDED: &str = "job_processes";

/// How long an upgrade waits for the background jobs to pause.
const PAUSE_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

impl Capability for ProcessService {
    type Config = ProcessConfig;
    const INFO: CapabilityInfo = CapabilityInfo {
        name: "process",
        summary:
            "run shell commands as contained process trees, in the foreground or as background jobs",
        needs_grant: true,
        asks_client: false,
        errors: &[ErrorCode::InvalidArguments, ErrorCode::LimitExceeded],
    };

    fn start(config: &ProcessConfig, foundation: &Foundation) -> Result<Self, CapabilityError> {
        Ok(ProcessService::new(
            config.clone(),
            foundation.launch.clone(),
        ))
    }

    fn check_config(config: &Self::Config) -> Result<(), String> {
        config.env.check()
    }

    fn release_owner(&self, owner: &str) -> usize {
        self.kill_owner(owner)
    }

    fn shutdown(&self) {
        self.kill_all();
    }

    fn pause(&self) -> HandoverFuture<'_, Result<(), HandoverError>> {
        Box::pin(async {
            self.pause_jobs(PAUSE_LIMIT)
                .await
                .map_err(HandoverError::Blocked)
        })
    }

    fn hand_over(
        &self,
    ) -> HandoverFuture<'_, Result<Vec<(&'static str, serde_json::Value)>, HandoverError>> {
        let handed = self
            .hand_over_jobs()
            .map_err(HandoverError::from)
            .and_then(|processes| to_entry(HANDED, &processes));
        Box::pin(async move { Ok(vec![handed?]) })
    }

    fn take_back(&self) -> HandoverFuture<'_, ()> {
        self.resume_jobs();
        Box::pin(async {})
    }

    fn check_handed(handed: &Handed) -> Result<(), String> {
        entry::<Vec<JobProcessHandover>>(handed, HANDED).map(drop)
    }

    fn handed_descriptors(handed: &Handed) -> Vec<i32> {
        let processes: Vec<JobProcessHandover> = checked_entry(handed, HANDED);
        processes.iter().map(|p| p.pipe).collect()
    }

    fn handed_children(handed: &Handed) -> Vec<i32> {
        let processes: Vec<JobProcessHandover> = checked_entry(handed, HANDED);
        processes.iter().map(|p| p.leader).collect()
    }

    fn restore(&self, handed: &Handed, adopted: &mut Adopted, foundation: &Foundation) {
        self.restore_jobs(checked_entry(handed, HANDED), &foundation.jobs, adopted);
    }

    fn gauges(&self) -> Vec<Gauge> {
        let process = self.clone();
        vec![Gauge::new(
            "dsh_containment_runs",
            "Containment runs live (a foreground command, a job, a terminal or a language \
             server each has one)",
            move || process.live_runs() as i64,
        )]
    }
}
