//! What the host sees of the lsp capability: its grant, how it starts, and what it
//! releases. Servers are per workspace root and shared by every caller, so an owner
//! going away releases nothing; idle servers shut down after `[lsp] idle_ms`, and all
//! at host exit.

use std::sync::Arc;

use crate::error::ErrorCode;
use crate::services::handover::{
    checked_entry, entry, to_entry, Adopted, Handed, HandoverError, HandoverFuture,
};
use crate::services::{Capability, CapabilityError, CapabilityInfo, Foundation, Gauge};

use super::handover::SlotHandover;
use super::{LspConfig, LspService};

/// The snapshot's entry of the running language servers.
const HANDED: &str = "language_servers";

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

    fn pause(&self) -> HandoverFuture<'_, Result<(), HandoverError>> {
        Box::pin(async {
            self.pause_all().await;
            Ok(())
        })
    }

    fn hand_over(
        &self,
    ) -> HandoverFuture<'_, Result<Vec<(&'static str, serde_json::Value)>, HandoverError>> {
        Box::pin(async {
            let servers = LspService::hand_over(self).await?;
            Ok(vec![to_entry(HANDED, &servers)?])
        })
    }

    fn take_back(&self) -> HandoverFuture<'_, ()> {
        Box::pin(self.resume_all())
    }

    fn check_handed(handed: &Handed) -> Result<(), String> {
        entry::<Vec<SlotHandover>>(handed, HANDED).map(drop)
    }

    fn handed_descriptors(handed: &Handed) -> Vec<i32> {
        let servers: Vec<SlotHandover> = checked_entry(handed, HANDED);
        servers
            .iter()
            .flat_map(|slot| [slot.server.writer, slot.server.reader])
            .collect()
    }

    fn handed_children(handed: &Handed) -> Vec<i32> {
        let servers: Vec<SlotHandover> = checked_entry(handed, HANDED);
        servers.iter().map(|slot| slot.server.pid).collect()
    }

    fn restore(&self, handed: &Handed, adopted: &mut Adopted, _foundation: &Foundation) {
        LspService::restore(self, checked_entry(handed, HANDED), adopted);
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
