//! What the host sees of the process capability: its grant, how it starts, and what it
//! releases.

use crate::error::ErrorCode;
use crate::services::{Capability, CapabilityError, CapabilityInfo, Foundation};

use super::{ProcessConfig, ProcessService};

impl Capability for ProcessService {
    type Config = ProcessConfig;
    const INFO: CapabilityInfo = CapabilityInfo {
        name: "process",
        summary:
            "run shell commands as contained process trees, in the foreground or as background jobs",
        needs_grant: true,
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
}
