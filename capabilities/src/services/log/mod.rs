//! The log capability: a plugin's log lines go into the host's `tracing`, attributed to
//! the plugin and the call. No state and no `dsh.toml` settings.

pub mod wit;

use serde::Deserialize;

use crate::services::{Capability, CapabilityError, CapabilityInfo, Foundation};

/// The log capability (stateless).
#[derive(Debug, Clone, Copy, Default)]
pub struct LogCapability;

/// `[log]` in `dsh.toml`: nothing to set yet.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {}

impl Capability for LogCapability {
    type Config = LogConfig;
    const INFO: CapabilityInfo = CapabilityInfo {
        name: "log",
        summary: "write log lines into the host's log, attributed to the plugin and call",
        needs_grant: true,
        asks_client: false,
        errors: &[],
    };

    fn start(_config: &LogConfig, _foundation: &Foundation) -> Result<Self, CapabilityError> {
        Ok(LogCapability)
    }

    fn release_owner(&self, _owner: &str) -> usize {
        0
    }

    fn shutdown(&self) {}
}
