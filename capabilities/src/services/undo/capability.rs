//! What the host sees of the undo capability: its name, its errors, its check of
//! `[undo]`, its shutdown (the recorder keeps what every path is, so the next start
//! reads no file it need not), and the owners' records as resources
//! (`checkpoint://SESSION_call-N/changes`).

use std::sync::Arc;

use super::{Asker, UndoConfig, UndoService};
use crate::error::{ErrorCode, ToolError};
use crate::services::resources::{OwnedResource, ReadFuture, ResourceKind, ResourceSource};
use crate::services::{Capability, CapabilityError, CapabilityInfo, Foundation};

/// The most records an owner's resource list shows (its newest).
const LISTED: usize = 50;

impl Capability for UndoService {
    type Config = UndoConfig;
    const INFO: CapabilityInfo = CapabilityInfo {
        name: "undo",
        summary: "list the caller's recorded changes to the workspace and put a call's changes back (its own calls only)",
        needs_grant: true,
        asks_client: false,
        errors: &[ErrorCode::NotFound, ErrorCode::UndoConflict, ErrorCode::IoError, ErrorCode::InvalidArguments],
    };

    fn start(_config: &UndoConfig, foundation: &Foundation) -> Result<Self, CapabilityError> {
        Ok(UndoService {
            recorder: foundation.undo.clone(),
        })
    }

    fn check_config(config: &UndoConfig) -> Result<(), String> {
        config.check()
    }

    fn release_owner(&self, _owner: &str) -> usize {
        0
    }

    fn shutdown(&self) {
        self.recorder.shutdown();
    }

    fn resources(&self) -> Vec<Arc<dyn ResourceSource>> {
        vec![Arc::new(Checkpoints {
            service: self.clone(),
            kind: ResourceKind {
                scheme: "checkpoint",
                part: "changes",
                name: "checkpoint changes",
                title: "Recorded changes of a call",
                description: "What one of your calls changed in the workspace (JSON: its paths, \
                              each created, modified, deleted, renamed or its mode changed, with \
                              sizes); undo it with the undo tool"
                    .into(),
            },
        })]
    }
}

/// The owners' records as resources: the id is the record's with `_` for `/`.
#[derive(Debug)]
struct Checkpoints {
    service: UndoService,
    kind: ResourceKind,
}

fn owner_asker(owner: &str) -> Asker {
    Asker::Owner {
        owner: owner.into(),
        session: "".into(),
    }
}

impl ResourceSource for Checkpoints {
    fn kind(&self) -> &ResourceKind {
        &self.kind
    }

    fn list(&self, owner: &str) -> Vec<OwnedResource> {
        let mut listed: Vec<OwnedResource> = self
            .service
            .recorder
            .checkpoints(&owner_asker(owner), LISTED)
            .into_iter()
            .filter_map(|record| {
                let id = record["call_id"].as_str()?.replace('/', "_");
                let changes = record["changes"].as_array().map_or(0, Vec::len);
                let tool = record["tool"].as_str().unwrap_or("?");
                Some(OwnedResource {
                    name: format!("{id} changes"),
                    title: format!("{tool}: {changes} path(s) changed"),
                    description: format!(
                        "What {} ({tool}, {}) changed in the workspace",
                        record["call_id"].as_str().unwrap_or("?"),
                        record["at"].as_str().unwrap_or("?")
                    ),
                    id,
                })
            })
            .collect();
        listed.reverse();
        listed
    }

    fn read<'a>(&'a self, owner: &'a str, id: &'a str) -> ReadFuture<'a> {
        Box::pin(async move {
            let record_id = match id.rfind('_') {
                Some(at) => format!("{}/{}", &id[..at], &id[at + 1..]),
                None => id.to_string(),
            };
            let record = self
                .service
                .recorder
                .checkpoint(&owner_asker(owner), &record_id)
                .ok_or_else(|| {
                    ToolError::new(
                        ErrorCode::NotFound,
                        format!("no recorded call {record_id:?}"),
                    )
                })?;
            Ok(serde_json::to_string_pretty(&record).unwrap_or_default())
        })
    }
}
