//! What the host sees of the process capability: its grant, how it starts, and what it
//! releases.

use crate::error::ErrorCode;
use crate::services::{Capability, CapabilityError, CapabilityInfo, Foundation, Gauge};

use super::{ProcessConfig, ProcessService};

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

    fn release_owner(&self, owner: &str) -> usize {
        self.kill_owner(owner)
    }

    fn shutdown(&self) {
        self.kill_all();
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
