//! What the host sees of the subagent capability: its grant, how it starts (on the job
//! registry: every subagent is a job), and what it ends when an owner goes.

use std::sync::Arc;

use crate::error::ErrorCode;
use crate::services::{Capability, CapabilityError, CapabilityInfo, Foundation, ToolRunner};

use super::{SubagentConfig, SubagentService};

impl Capability for Arc<SubagentService> {
    type Config = SubagentConfig;
    const INFO: CapabilityInfo = CapabilityInfo {
        name: "subagent",
        summary: "run subagents: the caller's client's model, through MCP sampling, with the caller's tools",
        needs_grant: true,
        asks_client: false,
        errors: &[
            ErrorCode::SamplingUnavailable,
            ErrorCode::LimitExceeded,
            ErrorCode::InvalidArguments,
            ErrorCode::Timeout,
            ErrorCode::Cancelled,
        ],
    };

    fn start(config: &SubagentConfig, foundation: &Foundation) -> Result<Self, CapabilityError> {
        Ok(Arc::new(SubagentService::new(
            config.clone(),
            foundation.jobs.clone(),
        )))
    }

    fn release_owner(&self, owner: &str) -> usize {
        self.end_owner(owner)
    }

    fn shutdown(&self) {
        self.end_all();
    }

    fn attach(&self, pipeline: &Arc<dyn ToolRunner>) {
        self.set_runner(pipeline.clone());
    }
}
