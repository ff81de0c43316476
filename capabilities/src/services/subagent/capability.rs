//! What the host sees of the subagent capability: its grant, how it starts (on the job
//! registry: every subagent is a job), and what it ends when an owner goes.

use std::sync::Arc;

use crate::error::ErrorCode;
use crate::services::{
    Capability, CapabilityError, CapabilityInfo, Foundation, Gauge, LabeledValue, ToolRunner,
};

use super::models::ModelCounts;
use super::{SubagentConfig, SubagentService};

impl Capability for Arc<SubagentService> {
    type Config = SubagentConfig;
    const INFO: CapabilityInfo = CapabilityInfo {
        name: "subagent",
        summary: "run subagents: the operator's model or the caller's client's own (through MCP sampling), with the caller's tools",
        needs_grant: true,
        asks_client: false,
        errors: &[
            ErrorCode::SamplingUnavailable,
            ErrorCode::ModelUnavailable,
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

    fn check_config(config: &SubagentConfig) -> Result<(), String> {
        config.check()
    }

    fn secret_variables(config: &SubagentConfig) -> Vec<String> {
        config.key_variables()
    }

    fn release_owner(&self, owner: &str) -> usize {
        self.end_owner(owner)
    }

    fn shutdown(&self) {
        self.end_all();
    }

    /// Per operator model: its requests (each try), answers, errors, retries, tokens in
    /// and out, and the seconds its answers took.
    fn gauges(&self) -> Vec<Gauge> {
        use std::sync::atomic::Ordering::Relaxed;
        type Read = fn(&ModelCounts) -> f64;
        let families: [(&'static str, &'static str, Read); 6] = [
            (
                "dsh_model_requests",
                "Requests sent to an operator's model endpoint, each try counted",
                |c| c.requests.load(Relaxed) as f64,
            ),
            (
                "dsh_model_errors",
                "Requests to an operator's model that failed (a retry counts its failed try)",
                |c| c.errors.load(Relaxed) as f64,
            ),
            (
                "dsh_model_retries",
                "Tries an operator's model request was given again",
                |c| c.retries.load(Relaxed) as f64,
            ),
            (
                "dsh_model_input_tokens",
                "Tokens sent to an operator's model, as it counted them",
                |c| c.input_tokens.load(Relaxed) as f64,
            ),
            (
                "dsh_model_output_tokens",
                "Tokens an operator's model answered with, as it counted them",
                |c| c.output_tokens.load(Relaxed) as f64,
            ),
            (
                "dsh_model_answer_seconds",
                "Seconds an operator's model took for the requests it answered",
                |c| c.latency_us.load(Relaxed) as f64 / 1e6,
            ),
        ];
        if self.models().is_empty() {
            return Vec::new();
        }
        families
            .into_iter()
            .map(|(name, help, read)| {
                let service = self.clone();
                Gauge::counters(name, help, move || {
                    service
                        .models()
                        .iter()
                        .map(|(model, m)| -> LabeledValue {
                            (vec![("model", model.clone())], read(&m.counts))
                        })
                        .collect()
                })
            })
            .collect()
    }

    fn attach(&self, pipeline: &Arc<dyn ToolRunner>) {
        self.set_runner(pipeline.clone());
    }
}
