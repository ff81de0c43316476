//! The session event log: one JSON object per line, appended and flushed as each event
//! happens, so a `tool/call` event is on disk before the call executes. The file is
//! private (0600): it holds the calls' raw arguments. It is created with its session
//! directory at the first event, so a command that makes no call leaves no session.
//!
//! A write that fails (a full disk) leaves no partial line: the file is cut back to
//! where the line began, so the lines before it and after it (once there is room
//! again) stay whole. The `tool/call` event is written with [`EventLog::try_write`],
//! whose error refuses the call: nothing runs unlogged.
//!
//! A [`EventTap`] (the observer components' queues) is told of each line once it is in
//! the file; with none set, a write checks one flag.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use serde::Serialize;

/// Why an event could not be written.
#[derive(Debug, thiserror::Error)]
pub enum EventLogError {
    #[error("cannot serialize the {event} event: {source}")]
    Serialize {
        event: String,
        source: serde_json::Error,
    },
    #[error("cannot write the event log {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// An append-only JSONL file, opened at its first event.
pub struct EventLog {
    path: PathBuf,
    file: Mutex<Option<File>>,
    /// The longest line written so far (up to [`MAX_LINE_HINT`]): the next line's
    /// buffer starts that big.
    longest_line: AtomicUsize,
    /// Told of each line written, by name (the observers, the console).
    tap: RwLock<Vec<(&'static str, Arc<dyn EventTap>)>>,
    tapped: AtomicBool,
}

/// What is told of each record once it is in the file.
pub trait EventTap: Send + Sync {
    /// `event` is the record's kind, `line` the record (one JSON object, no newline).
    /// Called on the writer's path: it must not block.
    fn written(&self, event: &str, line: &[u8]);
}

/// A line longer than this (a call with a large argument) does not make every later
/// line's buffer as big.
const MAX_LINE_HINT: usize = 64 * 1024;

impl EventLog {
    /// A log at `path`; the file (and its directory, 0700) is made by the first write.
    pub fn create(path: &Path) -> EventLog {
        EventLog {
            path: path.to_path_buf(),
            file: Mutex::new(None),
            longest_line: AtomicUsize::new(256),
            tap: RwLock::new(Vec::new()),
            tapped: AtomicBool::new(false),
        }
    }

    /// Tells `tap` of every line written from now on, in place of the tap named `name`
    /// (`None`: no tap of that name any more).
    pub fn set_tap(&self, name: &'static str, tap: Option<Arc<dyn EventTap>>) {
        let mut current = self.tap.write().unwrap_or_else(|e| e.into_inner());
        current.retain(|(named, _)| *named != name);
        if let Some(tap) = tap {
            current.push((name, tap));
        }
        self.tapped.store(!current.is_empty(), Ordering::Release);
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
        if let Err(error) = self.try_write(event, fields) {
            tracing::error!(%error, event, "cannot write an event");
        }
    }

    /// Like [`EventLog::write`], but says when the line could not be written (then none
    /// of it is in the file).
    pub fn try_write(&self, event: &str, fields: impl Serialize) -> Result<(), EventLogError> {
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
        // Sized from the longest line so far (a call's arguments make most of it), so
        // the buffer is not grown and copied again and again as the line is written.
        let mut line = Vec::with_capacity(self.longest_line.load(Ordering::Relaxed) + 1);
        serde_json::to_writer(
            &mut line,
            &Record {
                ts_ms,
                event,
                fields,
            },
        )
        .map_err(|source| EventLogError::Serialize {
            event: event.to_string(),
            source,
        })?;
        line.push(b'\n');
        self.longest_line
            .fetch_max(line.len().min(MAX_LINE_HINT), Ordering::Relaxed);
        // One write per line on an O_APPEND file: lines never interleave.
        let mut file = self
            .file
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut opened = match file.take() {
            Some(opened) => opened,
            None => self.open().map_err(|source| EventLogError::Write {
                path: self.path.clone(),
                source,
            })?,
        };
        let (written, failed) = write_counted(&mut opened, &line);
        if let Some(source) = failed {
            // A partial line would break every line after it: cut it off. The file's
            // length is read only now: a `statx` on every write would also make the
            // kernel stamp the next write's times finely, dirtying the inode each time.
            if written > 0 {
                let cut = opened
                    .metadata()
                    .and_then(|meta| opened.set_len(meta.len().saturating_sub(written)));
                if let Err(error) = cut {
                    tracing::warn!(%error, path = %self.path.display(), "cannot cut a partial line off the event log");
                }
            }
            *file = Some(opened);
            return Err(EventLogError::Write {
                path: self.path.clone(),
                source,
            });
        }
        *file = Some(opened);
        drop(file);
        if self.tapped.load(Ordering::Acquire) {
            let taps = self.tap.read().unwrap_or_else(|e| e.into_inner());
            for (_, tap) in taps.iter() {
                tap.written(event, &line[..line.len() - 1]);
            }
        }
        Ok(())
    }
}

/// Writes all of `line` (as `write_all` does), saying how many bytes went out before an
/// error, if one stopped it.
fn write_counted(file: &mut File, line: &[u8]) -> (u64, Option<std::io::Error>) {
    let mut written = 0;
    while written < line.len() {
        match file.write(&line[written..]) {
            Ok(0) => return (written as u64, Some(std::io::ErrorKind::WriteZero.into())),
            Ok(n) => written += n,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(error) => return (written as u64, Some(error)),
        }
    }
    (written as u64, None)
}
