//! What the host sees of the terminal capability: its grant, how it starts, and what it
//! releases.

use std::sync::Arc;

use crate::error::ErrorCode;
use crate::services::{Capability, CapabilityError, CapabilityInfo, Foundation, Gauge};

use super::{TerminalConfig, TerminalService};

impl Capability for Arc<TerminalService> {
    type Config = TerminalConfig;
    const INFO: CapabilityInfo = CapabilityInfo {
        name: "terminal",
        summary: "open, drive, read and close interactive PTY sessions",
        needs_grant: true,
        asks_client: false,
        errors: &[
            ErrorCode::NotFound,
            ErrorCode::InvalidArguments,
            ErrorCode::LimitExceeded,
            ErrorCode::SendActive,
            ErrorCode::SessionClosing,
            ErrorCode::Timeout,
        ],
    };

    fn start(config: &TerminalConfig, foundation: &Foundation) -> Result<Self, CapabilityError> {
        Ok(Arc::new(TerminalService::new(
            config.clone(),
            foundation.launch.clone(),
            foundation.jobs.clone(),
        )))
    }

    fn release_owner(&self, owner: &str) -> usize {
        self.close_owner(owner)
    }

    fn shutdown(&self) {
        self.close_all();
    }

    fn gauges(&self) -> Vec<Gauge> {
        let terminal = self.clone();
        vec![Gauge::new(
            "dsh_terminals",
            "Live terminal sessions, of every owner",
            move || terminal.live() as i64,
        )]
    }
}
