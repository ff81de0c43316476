//! The session event log: one JSON object per line, appended and flushed as each event
//! happens, so a `tool/call` event is on disk before the call executes. The file is
//! private (0600): it holds the calls' raw arguments. It is created with its session
//! directory at the first event, so a command that makes no call leaves no session.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::Serialize;

/// An append-only JSONL file, opened at its first event.
pub struct EventLog {
    path: PathBuf,
    file: Mutex<Option<File>>,
}

impl EventLog {
    /// A log at `path`; the file (and its directory, 0700) is made by the first write.
    pub fn create(path: &Path) -> EventLog {
        EventLog {
            path: path.to_path_buf(),
            file: Mutex::new(None),
        }
    }

    fn open(&self) -> std::io::Result<File> {
        if let Some(dir) = self.path.parent() {
            crate::private::create_dir_all(dir)?;
        }
        crate::private::open_file(&self.path, OpenOptions::new().create(true).append(true))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `{"ts_ms": …, "event": EVENT, …fields}` as one line (`fields` serializes
    /// to an object). A failed write is logged, never fatal to the call.
    pub fn write(&self, event: &str, fields: impl Serialize) {
        #[derive(Serialize)]
        struct Record<'a, F> {
            ts_ms: u64,
            event: &'a str,
            #[serde(flatten)]
            fields: F,
        }
        let ts_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let mut line = match serde_json::to_vec(&Record {
            ts_ms,
            event,
            fields,
        }) {
            Ok(line) => line,
            Err(error) => {
                tracing::error!(%error, event, "cannot serialize an event");
                return;
            }
        };
        line.push(b'\n');
        // One write per line on an O_APPEND file: lines never interleave.
        let mut file = self.file.lock().unwrap();
        let written = match &mut *file {
            Some(file) => file.write_all(&line),
            None => self.open().and_then(|mut opened| {
                let written = opened.write_all(&line);
                *file = Some(opened);
                written
            }),
        };
        if let Err(error) = written {
            tracing::error!(%error, path = %self.path.display(), "cannot write the event log");
        }
    }
}
