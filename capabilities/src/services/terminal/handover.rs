//! The terminal sessions at an upgrade (`dsh upgrade`: the same process executes a new
//! binary): their read loops paused so no output is taken from a PTY that the snapshot
//! would not hold, each session written down (its PTY master kept open across the
//! `exec`, its scrollback, its screen's state, its shell and container), and the
//! sessions rebuilt by the next binary, which reads on where the last one stopped: what a
//! shell prints meanwhile waits in the PTY.

use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use dsh_launch::containment::{self, RunHandover};
use dsh_launch::Child;

use super::pty::{adopt_master, read_loop, watch_shell};
use super::sessions::{Output, Session};
use super::TerminalService;

/// Every session, handed over.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TerminalsHandover {
    /// The number of the last session opened (ids never repeat).
    pub next: u64,
    pub sessions: Vec<SessionHandover>,
}

/// One session, handed over.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SessionHandover {
    pub id: String,
    pub owner: String,
    pub shell: String,
    pub cwd: PathBuf,
    /// Milliseconds since the epoch.
    pub created_at_ms: u64,
    pub cols: u16,
    pub rows: u16,
    /// The shell's pid (its session and group id).
    pub leader: i32,
    /// The shell was reaped already: no child to adopt.
    pub reaped: bool,
    /// The PTY master, open across the `exec`.
    pub master: i32,
    /// The scrollback, base64.
    pub scrollback: String,
    /// Bytes of output seen in all (the cursors' origin).
    pub total: u64,
    /// The screen's state (`vt100`'s `state_formatted`), base64.
    pub screen: String,
    pub exited: bool,
    pub exit_code: Option<i32>,
    pub run: RunHandover,
    pub private_tmp: Option<PathBuf>,
}

/// Why sessions could not be handed over or taken back.
#[derive(Debug, thiserror::Error)]
pub enum HandoverError {
    #[error("terminal session {id}: {message}")]
    Session { id: String, message: String },
}

impl TerminalService {
    /// Stops reading every session's PTY: what the shells print from now on stays in the
    /// PTY until the sessions are read again (by this binary, [`Self::resume_reading`],
    /// or the next).
    pub fn pause_reading(&self) {
        for session in self.table.lock().unwrap().sessions.values() {
            if let Some(reader) = session.reader.lock().unwrap().as_ref() {
                reader.abort();
            }
        }
    }

    /// Reads every live session's PTY again (an upgrade that did not happen).
    pub fn resume_reading(&self) {
        for session in self.table.lock().unwrap().sessions.values() {
            let mut reader = session.reader.lock().unwrap();
            if reader.as_ref().is_some_and(|r| r.is_finished())
                && !session.reaped.load(Ordering::Acquire)
            {
                *reader = Some(tokio::spawn(read_loop(session.clone())));
            }
        }
    }

    /// Every session as the next binary takes it back (call [`Self::pause_reading`]
    /// first). Their PTY masters are named by number (see
    /// [`crate::upgrade::Snapshot::descriptors`]).
    pub fn hand_over(&self) -> Result<TerminalsHandover, HandoverError> {
        let table = self.table.lock().unwrap();
        let mut sessions = Vec::new();
        for session in table.sessions.values() {
            let master = session.master.get_ref().as_raw_fd();
            let size = *session.size.lock().unwrap();
            let (scrollback, total, screen, exited, exit_code) = {
                let mut output = session.output.lock().unwrap();
                let screen = output.screen_state();
                let (front, back) = output.scrollback.as_slices();
                let scrollback = [front, back].concat();
                (
                    scrollback,
                    output.total,
                    screen,
                    output.exited,
                    output.exit_code,
                )
            };
            let base64 = base64::engine::general_purpose::STANDARD;
            sessions.push(SessionHandover {
                id: session.id.clone(),
                owner: session.owner.to_string(),
                shell: session.shell.clone(),
                cwd: session.cwd.clone(),
                created_at_ms: session
                    .created_at
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64),
                cols: size.0,
                rows: size.1,
                leader: session.leader,
                reaped: session.reaped.load(Ordering::Acquire),
                master,
                scrollback: base64.encode(scrollback),
                total,
                screen: base64.encode(screen),
                exited,
                exit_code,
                run: session.run.hand_over(),
                private_tmp: session.private_tmp.clone(),
            });
        }
        Ok(TerminalsHandover {
            next: table.next,
            sessions,
        })
    }

    /// Makes the PTY masters close on `exec` again (an upgrade that did not happen).
    pub fn take_back(&self) {
        for session in self.table.lock().unwrap().sessions.values() {
            containment::close_on_exec(session.master.get_ref());
        }
    }

    /// Rebuilds the sessions the binary before handed over (from a tokio context):
    /// their shells (taken from `children`, adopted before the orphan reaper started)
    /// are watched and their PTYs read again. A session that cannot be rebuilt is
    /// skipped, its shell killed.
    pub fn restore(&self, handover: TerminalsHandover, children: &mut HashMap<i32, Child>) {
        let base64 = base64::engine::general_purpose::STANDARD;
        let mut table = self.table.lock().unwrap();
        table.next = table.next.max(handover.next);
        for handed in handover.sessions {
            // The master first: owned (closed on drop) whatever happens next.
            let master = match adopt_master(handed.master) {
                Ok(master) => master,
                Err(error) => {
                    tracing::warn!(id = %handed.id, %error, "cannot watch a handed-over PTY; the session is dropped");
                    continue;
                }
            };
            let child = if handed.reaped {
                None
            } else {
                children.remove(&handed.leader)
            };
            let run = match self.launch.containment().adopt_run(&handed.run) {
                Ok(run) => run,
                Err(error) => {
                    tracing::warn!(id = %handed.id, %error, "cannot adopt a terminal session's container; its shell is killed");
                    continue;
                }
            };
            let scrollback = base64.decode(&handed.scrollback).unwrap_or_default();
            let screen = base64.decode(&handed.screen).unwrap_or_default();
            let mut output =
                Output::restored(handed.rows, handed.cols, &scrollback, handed.total, &screen);
            output.exited = handed.exited;
            output.exit_code = handed.exit_code;
            if handed.exited {
                output.exited_at = Some(std::time::Instant::now());
            }
            let owner: Arc<str> = Arc::from(handed.owner.as_str());
            let session = Arc::new(Session {
                id: handed.id.clone(),
                changes: self.changes.for_owner(&owner),
                change_id: handed.id.as_str().into(),
                owner,
                shell: handed.shell,
                cwd: handed.cwd,
                created_at: UNIX_EPOCH + Duration::from_millis(handed.created_at_ms),
                size: std::sync::Mutex::new((handed.cols, handed.rows)),
                leader: handed.leader,
                reaped: AtomicBool::new(handed.reaped || child.is_none()),
                master,
                output: Mutex::new(output),
                changed: Notify::new(),
                closing: AtomicBool::new(false),
                sending: AtomicBool::new(false),
                reader: Mutex::new(None),
                run,
                scrollback_bytes: self.config.scrollback_bytes.max(1024),
                private_tmp: handed.private_tmp.clone(),
                last_sender: Mutex::new(None),
                // A person's hold ends with the connection it came on: not handed over.
                person: Mutex::new(None),
                viewed: tokio::sync::watch::Sender::new(0),
            });
            if !handed.exited {
                let reader = tokio::spawn(read_loop(session.clone()));
                *session.reader.lock().unwrap() = Some(reader);
                let watched = session.clone();
                let private_tmp = handed.private_tmp;
                match child {
                    Some(mut child) => {
                        child.watch();
                        tokio::spawn(async move {
                            watch_shell(watched, child).await;
                            if let Some(tmp) = private_tmp {
                                let _ = std::fs::remove_dir_all(tmp);
                            }
                        });
                    }
                    // Ended during the exec: what it printed is read, then it is exited.
                    None => {
                        tokio::spawn(async move {
                            tokio::time::sleep(super::DRAIN_TIMEOUT).await;
                            watched.run.kill();
                            watched.mark_exited();
                        });
                    }
                }
            }
            table.sessions.insert(handed.id, session);
        }
    }
}
