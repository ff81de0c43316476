//! What the host sees of the undo capability: its name, its errors, its check of
//! `[undo]`, and its shutdown (the recorder keeps what every path is, so the next start
//! reads no file it need not).

use super::{UndoConfig, UndoService};
use crate::error::ErrorCode;
use crate::services::{Capability, CapabilityError, CapabilityInfo, Foundation};

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
}
