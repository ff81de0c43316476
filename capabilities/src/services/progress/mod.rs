//! The progress capability: a plugin reports how far a long call is (a fraction and a
//! message), for the caller of that call only. No state and no `dsh.toml` settings; for
//! now a report goes into the host's `tracing`, attributed to the plugin and the call.

pub mod wit;

use serde::Deserialize;

use crate::services::{Capability, CapabilityError, CapabilityInfo, Foundation};

/// The progress capability (stateless).
#[derive(Debug, Clone, Copy, Default)]
pub struct ProgressCapability;

/// `[progress]` in `dsh.toml`: nothing to set yet.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProgressConfig {}

impl Capability for ProgressCapability {
    type Config = ProgressConfig;
    const INFO: CapabilityInfo = CapabilityInfo {
        name: "progress",
        summary: "report a call's progress (a fraction and a message) to its caller",
        needs_grant: false,
        asks_client: false,
        errors: &[],
    };

    fn start(_config: &ProgressConfig, _foundation: &Foundation) -> Result<Self, CapabilityError> {
        Ok(ProgressCapability)
    }

    fn release_owner(&self, _owner: &str) -> usize {
        0
    }

    fn shutdown(&self) {}
}
