//! What the host sees of the lsp capability: its grant, how it starts, and what it
//! releases. Servers are per workspace root and shared by every caller, so an owner
//! going away releases nothing; idle servers shut down after `[lsp] idle_ms`, and all
//! at host exit.

use std::sync::Arc;

use crate::error::ErrorCode;
use crate::services::{Capability, CapabilityError, CapabilityInfo, Foundation, Gauge};

use super::{LspConfig, LspService};

impl Capability for Arc<LspService> {
    type Config = LspConfig;
    const INFO: CapabilityInfo = CapabilityInfo {
        name: "lsp",
        summary: "ask language servers the host owns for definitions, references, hovers \
                  and document symbols",
        needs_grant: true,
        asks_client: false,
        errors: &[
            ErrorCode::InvalidArguments,
            ErrorCode::LspUnavailable,
            ErrorCode::Timeout,
        ],
    };

    fn start(config: &LspConfig, foundation: &Foundation) -> Result<Self, CapabilityError> {
        Ok(Arc::new(LspService::new(
            config.clone(),
            foundation.launch.clone(),
        )))
    }

    fn release_owner(&self, _owner: &str) -> usize {
        0
    }

    fn shutdown(&self) {
        self.shutdown_all();
    }

    fn gauges(&self) -> Vec<Gauge> {
        let lsp = self.clone();
        vec![Gauge::new(
            "dsh_language_servers",
            "Language servers running",
            move || lsp.server_pids().len() as i64,
        )]
    }
}
