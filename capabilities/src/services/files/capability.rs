//! What the host sees of the files capability: its grant (which also maps the session
//! workspace and the extra roots into the plugin read-only: its `mapped_roots`), how
//! it starts (with the session workspace and dsh's own files the process launcher
//! knows, and `[files]`), and what it releases: the owner's remembered reads.

use std::sync::Arc;

use crate::error::ErrorCode;
use crate::services::{Capability, CapabilityError, CapabilityInfo, Foundation, MappedRoot};

use super::config::tidy;
use super::{FileService, FilesConfig};

impl Capability for Arc<FileService> {
    type Config = FilesConfig;
    const INFO: CapabilityInfo = CapabilityInfo {
        name: "files",
        summary: "read the workspace and the extra roots (also mapped read-only into the \
                  plugin) and change their files atomically (a read-only extra root's never), \
                  never over a change the caller has not read",
        needs_grant: true,
        asks_client: false,
        errors: &[
            ErrorCode::InvalidArguments,
            ErrorCode::Denied,
            ErrorCode::NotFound,
            ErrorCode::LimitExceeded,
            ErrorCode::StaleFile,
            ErrorCode::IoError,
        ],
    };

    fn start(config: &FilesConfig, foundation: &Foundation) -> Result<Self, CapabilityError> {
        let places = foundation.launch.places();
        Ok(Arc::new(FileService::new(
            config.clone(),
            places.workspace.clone(),
            places.own.clone(),
        )))
    }

    fn check_config(config: &Self::Config) -> Result<(), String> {
        config.check().map_err(|e| e.to_string())
    }

    fn release_owner(&self, owner: &str) -> usize {
        self.forget_owner(owner)
    }

    /// Nothing runs: the reads it remembers go with it.
    fn shutdown(&self) {}

    /// The session workspace and the extra roots: a plugin granted `files` walks and
    /// reads them itself (its changes go through the host).
    fn mapped_roots(&self) -> Vec<MappedRoot> {
        let workspace = self
            .workspace()
            .map(|w| MappedRoot::Workspace(w.to_path_buf()));
        let extra = self.extra_roots().iter().map(|root| MappedRoot::ExtraRoot {
            configured: root.path.clone(),
            shown: tidy(&root.path),
        });
        workspace.into_iter().chain(extra).collect()
    }
}
