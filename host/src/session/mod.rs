//! A session: one run of the host serving calls. Owns the session id, the workspace
//! calls run in, the state directory with the event log and the spill files, and the
//! call id sequence.

pub mod event_log;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub use event_log::EventLog;

/// One session of the host.
pub struct Session {
    pub id: Arc<str>,
    /// The workspace relative paths resolve against.
    pub workdir: PathBuf,
    /// `STATE_DIR/sessions/ID`.
    pub dir: PathBuf,
    pub spill_dir: PathBuf,
    pub events: EventLog,
    next_call: AtomicU64,
}

impl Session {
    /// Opens a new session under `state_dir` with its event log.
    pub fn open(state_dir: &Path, workdir: PathBuf) -> std::io::Result<Session> {
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let id = format!("s{}-{}", started.as_millis(), std::process::id());
        let dir = state_dir.join("sessions").join(&id);
        let spill_dir = dir.join("spill");
        std::fs::create_dir_all(&spill_dir)?;
        let events = EventLog::create(&dir.join("events.jsonl"))?;
        Ok(Session {
            id: id.into(),
            workdir,
            dir,
            spill_dir,
            events,
            next_call: AtomicU64::new(1),
        })
    }

    /// The next call id: `call-N`.
    pub fn next_call_id(&self) -> String {
        format!("call-{}", self.next_call.fetch_add(1, Ordering::Relaxed))
    }
}

/// The default state directory: `$XDG_STATE_HOME/dsh`, else `~/.local/state/dsh`.
pub fn default_state_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join("dsh");
    }
    match std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        Some(home) => PathBuf::from(home).join(".local/state/dsh"),
        None => std::env::temp_dir().join("dsh"),
    }
}
