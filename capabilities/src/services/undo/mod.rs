//! The undo capability: dsh records what every call changes in the workspace, whichever
//! tool made the change (the file tools, `bash` in the foreground or as a job, a
//! terminal, a subagent's steps), and an owner can list its calls that changed files and
//! put one back.
//!
//! The mechanism ([`recorder`]): the kernel's change notifications over the workspace
//! ([`watch`]), a content-addressed store of file contents ([`state::Blobs`]) seeded by a
//! one-time baseline, and a journal of records in the state directory ([`journal`]). A
//! change is attributed to the calls live when it happened (a call in the pipeline, and
//! the jobs and terminal sessions calls started, each held by an [`ActivityHold`]); a
//! change made while none was live is recorded as made outside dsh. `[undo]` in
//! `dsh.toml` ([`config`]) bounds what is kept and says what is ignored.
//!
//! The recorder is part of the [`crate::services::Foundation`] (the pipeline, the jobs
//! and the terminals hold activities on it); this capability is what plugins reach of
//! it: the `dsh:plugin/undo` interface ([`wit`]).

pub mod capability;
pub mod config;
pub mod journal;
pub mod recorder;
pub mod state;
pub mod watch;
pub mod wit;

pub use config::UndoConfig;
pub use recorder::{ActivityHold, Asker, CallRef, Recorder};

use std::sync::Arc;

/// What the `undo` interface serves: the host's recorder.
#[derive(Debug, Clone)]
pub struct UndoService {
    pub recorder: Arc<Recorder>,
}
