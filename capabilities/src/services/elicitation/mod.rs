//! The elicitation capability: a tool plugin asks the caller's client's user to fill in
//! a form during a call (`dsh:plugin/elicitation`, MCP `elicitation/create` in form
//! mode), through the same client path as sampling ([`crate::call::Sampler`]). No state
//! and no settings (it waits at most `[serve] approval_timeout_ms`, as a guard's
//! approval does). Never granted to a guard or a result filter.

pub mod wit;

use serde::Deserialize;

use crate::error::ErrorCode;
use crate::services::{Capability, CapabilityError, CapabilityInfo, Foundation};

/// `[elicitation]` in `dsh.toml`: nothing to set yet.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ElicitationConfig {}

/// The elicitation capability (stateless).
#[derive(Debug, Clone, Copy, Default)]
pub struct ElicitationCapability;

impl Capability for ElicitationCapability {
    type Config = ElicitationConfig;
    const INFO: CapabilityInfo = CapabilityInfo {
        name: "elicitation",
        summary: "ask the caller's client's user to fill in a form during a call (MCP elicitation); never a guard's",
        needs_grant: true,
        asks_client: true,
        errors: &[
            ErrorCode::ElicitationUnavailable,
            ErrorCode::Denied,
            ErrorCode::Timeout,
            ErrorCode::InvalidArguments,
        ],
    };

    fn start(
        _config: &ElicitationConfig,
        _foundation: &Foundation,
    ) -> Result<Self, CapabilityError> {
        Ok(ElicitationCapability)
    }

    fn release_owner(&self, _owner: &str) -> usize {
        0
    }

    fn shutdown(&self) {}
}
