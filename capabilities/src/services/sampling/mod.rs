//! The sampling capability: a tool plugin asks the caller's client's model for a message
//! during a call (`dsh:plugin/sampling`, MCP `sampling/createMessage` without tools),
//! through the same client path the subagents use ([`crate::call::Sampler`]). No state;
//! `[sampling]` in `dsh.toml` caps what a plugin may ask for. Never granted to a guard or
//! a result filter (the engine refuses such a load).

pub mod wit;

use serde::Deserialize;

use crate::error::ErrorCode;
use crate::services::{Capability, CapabilityError, CapabilityInfo, Foundation};

/// `[sampling]` in `dsh.toml`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct SamplingConfig {
    /// The most `maxTokens` a plugin's request carries; a plugin asking for more gets
    /// this many.
    pub max_tokens: u32,
    /// How long one request may wait for the client's model to answer; past it the
    /// plugin gets `TIMEOUT`.
    pub timeout_ms: u64,
}

impl Default for SamplingConfig {
    fn default() -> Self {
        SamplingConfig {
            max_tokens: 4096,
            timeout_ms: 300_000,
        }
    }
}

/// The sampling capability: its settings, nothing else.
#[derive(Debug, Clone)]
pub struct SamplingCapability {
    pub config: SamplingConfig,
}

impl Capability for SamplingCapability {
    type Config = SamplingConfig;
    const INFO: CapabilityInfo = CapabilityInfo {
        name: "sampling",
        summary: "ask the caller's client's model for a message during a call (MCP sampling); never a guard's",
        needs_grant: true,
        asks_client: true,
        errors: &[
            ErrorCode::SamplingUnavailable,
            ErrorCode::Denied,
            ErrorCode::Timeout,
            ErrorCode::InvalidArguments,
        ],
    };

    fn start(config: &SamplingConfig, _foundation: &Foundation) -> Result<Self, CapabilityError> {
        Ok(SamplingCapability {
            config: config.clone(),
        })
    }

    fn release_owner(&self, _owner: &str) -> usize {
        0
    }

    fn shutdown(&self) {}
}
