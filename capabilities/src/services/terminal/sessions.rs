//! Sessions: the table of them, each one's output (a bounded scrollback, the `vt100`
//! screen, the exit state), and the send gate. A send goes through one gate, in this
//! order, every time: the caller must own the session (else `NOT_FOUND`, as for an
//! unknown id), the session must not be closing (`SESSION_CLOSING`), no person may hold
//! it (`TERMINAL_HELD`), and no other send may be unsettled (`SEND_ACTIVE`); the slot it
//! takes is released when the send settles.
//!
//! Opening checks the session limits (only live sessions count) and retires the
//! owner's exited sessions past [`EXITED_KEPT_PER_OWNER`]; closing kills every process
//! of the terminal's session, background ones included, and forgets the session.
//!
//! A session reports its output and its end, and the table the sessions it opens,
//! closes and retires, to the owner's resource changes.

use std::collections::{HashMap, VecDeque};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use tokio::io::unix::AsyncFd;
use tokio::sync::Notify;

use crate::error::{ErrorCode, ToolError};
use crate::services::resource_changes::{OwnerChanges, ResourceChange};
use dsh_launch::{containment, find_program};

use super::pty::{read_loop, start_shell, watch_shell};
use super::waiting::Watch;
use super::{OpenSpec, SessionInfo, TerminalService, EXITED_KEPT_PER_OWNER};

/// How much output the screen may lag behind: it is parsed when a `screen` view is read,
/// or once this much is pending (at most half the scrollback, so pending output is
/// always still in it). An echo's few bytes then cost no parsing on its way back.
const SCREEN_BATCH: usize = 64 * 1024;

pub(super) struct Output {
    pub(super) scrollback: VecDeque<u8>,
    pub(super) total: u64,
    /// The terminal emulator; it has seen the output up to `screen_seen`.
    screen: vt100::Parser,
    screen_seen: u64,
    pub(super) last_output: Instant,
    /// The session is over: its shell was reaped and its output drained (or it was
    /// closed).
    pub(super) exited: bool,
    /// The shell's exit code (128 + signal), once reaped.
    pub(super) exit_code: Option<i32>,
    /// When the session became exited (the order of retirement).
    pub(super) exited_at: Option<Instant>,
    /// The active send's wait, fed as output arrives.
    pub(super) watch: Option<Watch>,
}

/// One terminal session.
pub struct Session {
    pub id: String,
    pub owner: Arc<str>,
    pub shell: String,
    pub cwd: PathBuf,
    pub(super) created_at: SystemTime,
    /// Its columns and rows (a person holding it may resize it).
    pub(super) size: Mutex<(u16, u16)>,
    pub(super) leader: i32,
    /// Set once the shell is reaped: from then on its pid may belong to someone else.
    pub(super) reaped: AtomicBool,
    pub(super) master: AsyncFd<OwnedFd>,
    pub(super) output: Mutex<Output>,
    pub(super) changed: Notify,
    /// The owner's resource changes, and this session's id as they name it.
    pub(super) changes: OwnerChanges,
    pub(super) change_id: Arc<str>,
    pub(super) closing: AtomicBool,
    pub(super) sending: AtomicBool,
    pub(super) reader: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The session's container: every process it starts, wherever it goes.
    pub(super) run: containment::Run,
    pub(super) scrollback_bytes: usize,
    /// A sandboxed session's private `TMPDIR` (handed over at an upgrade, so the next
    /// binary removes it when the shell exits).
    pub(super) private_tmp: Option<PathBuf>,
    /// The last call that opened or sent to it, held live while the shell lives: what
    /// the shell changes in the workspace is recorded under that call (`[undo]`).
    pub(super) last_sender: Mutex<Option<crate::services::undo::ActivityHold>>,
    /// The person holding the terminal, if one took it over ([`super::person`]).
    pub(super) person: Mutex<Option<super::person::Person>>,
    /// Bumped at each change a person watching sees (output, a hold, the end); sent
    /// only while someone watches, so an unwatched session pays one atomic load.
    pub(super) viewed: tokio::sync::watch::Sender<u64>,
}

/// Marks the session's one active send; released on drop.
pub(super) struct SendSlot(pub(super) Arc<Session>);

impl Output {
    /// The output of a session handed over at an upgrade: its scrollback, the count of
    /// bytes it has seen, and its screen as the `vt100` state that redraws it.
    pub(super) fn restored(
        rows: u16,
        cols: u16,
        scrollback: &[u8],
        total: u64,
        screen: &[u8],
    ) -> Output {
        let mut output = Output::new(rows, cols);
        output.screen.process(screen);
        output.scrollback.extend(scrollback);
        output.total = total;
        output.screen_seen = total;
        output
    }

    /// The screen's state as the bytes that redraw it (contents, attributes, cursor).
    pub(super) fn screen_state(&mut self) -> Vec<u8> {
        self.screen().state_formatted()
    }

    pub(super) fn new(rows: u16, cols: u16) -> Output {
        Output {
            scrollback: VecDeque::new(),
            total: 0,
            screen: vt100::Parser::new(rows, cols, 0),
            screen_seen: 0,
            last_output: Instant::now(),
            exited: false,
            exit_code: None,
            exited_at: None,
            watch: None,
        }
    }

    /// Appends output to a scrollback of `keep` bytes.
    fn push(&mut self, bytes: &[u8], keep: usize) {
        let pending = (self.total - self.screen_seen) as usize + bytes.len();
        if pending > SCREEN_BATCH.min(keep / 2) {
            // Before the scrollback may drop what the screen has not seen.
            self.catch_up_screen();
            self.screen.process(bytes);
            self.screen_seen += bytes.len() as u64;
        }
        self.total += bytes.len() as u64;
        crate::output::push_tail(&mut self.scrollback, bytes, keep);
    }

    /// Resizes the screen (its output so far parsed at the old size).
    pub(super) fn set_size(&mut self, rows: u16, cols: u16) {
        self.catch_up_screen();
        self.screen.screen_mut().set_size(rows, cols);
    }

    /// The screen, with all the output parsed.
    pub(super) fn screen(&mut self) -> &vt100::Screen {
        self.catch_up_screen();
        self.screen.screen()
    }

    /// Parses the output the screen has not seen (the scrollback's last bytes).
    fn catch_up_screen(&mut self) {
        let pending = (self.total - self.screen_seen) as usize;
        let (front, back) = self.scrollback.as_slices();
        if pending > back.len() {
            self.screen
                .process(&front[front.len() - (pending - back.len())..]);
            self.screen.process(back);
        } else {
            self.screen.process(&back[back.len() - pending..]);
        }
        self.screen_seen = self.total;
    }
}

impl Drop for SendSlot {
    fn drop(&mut self) {
        self.0.output.lock().unwrap().watch = None;
        self.0.sending.store(false, Ordering::Release);
    }
}

impl Session {
    pub(super) fn push(&self, bytes: &[u8]) {
        let mut output = self.output.lock().unwrap();
        output.push(bytes, self.scrollback_bytes);
        output.last_output = Instant::now();
        let wake = output
            .watch
            .as_mut()
            .is_none_or(|watch| watch.output(bytes));
        drop(output);
        if wake {
            self.changed.notify_waiters();
        }
        self.changes.report(ResourceChange::Updated {
            scheme: super::capability::SCREEN_SCHEME,
            id: self.change_id.clone(),
        });
        self.tell_viewers();
    }

    /// Wakes the people watching, if any.
    pub(super) fn tell_viewers(&self) {
        if self.viewed.receiver_count() > 0 {
            self.viewed.send_modify(|n| *n += 1);
        }
    }

    /// Puts the wait of the send about to write its input in place; returns the length
    /// of the output so far (where the send's output begins).
    pub(super) fn begin_wait(&self, watch: Watch) -> u64 {
        let mut output = self.output.lock().unwrap();
        output.watch = Some(watch);
        output.total
    }

    pub(super) fn mark_exited(&self) {
        drop(self.last_sender.lock().unwrap().take());
        let mut output = self.output.lock().unwrap();
        let newly = !output.exited;
        if newly {
            output.exited = true;
            output.exited_at = Some(Instant::now());
        }
        drop(output);
        self.changed.notify_waiters();
        self.tell_viewers();
        if newly {
            self.changes.report(ResourceChange::Updated {
                scheme: super::capability::SCREEN_SCHEME,
                id: self.change_id.clone(),
            });
            self.changes.report(ResourceChange::Listed);
        }
    }

    pub(super) fn alive(&self) -> bool {
        !self.output.lock().unwrap().exited
    }

    pub(super) fn exit_code(&self) -> Option<i32> {
        self.output.lock().unwrap().exit_code
    }

    /// When the session became exited; `None` while it is alive.
    pub(super) fn exited_at(&self) -> Option<Instant> {
        self.output.lock().unwrap().exited_at
    }

    /// The shell's pid while it is ours (not reaped yet).
    pub(super) fn leader(&self) -> Option<i32> {
        (!self.reaped.load(Ordering::Acquire)).then_some(self.leader)
    }

    /// Raw bytes from `since` on (from the start of the scrollback when `since` is older);
    /// the second value counts the bytes no longer kept.
    pub(super) fn raw_since(&self, since: u64) -> (Vec<u8>, u64, u64) {
        let output = self.output.lock().unwrap();
        let kept_from = output.total - output.scrollback.len() as u64;
        let start = since.clamp(kept_from, output.total);
        let skip = (start - kept_from) as usize;
        let (front, back) = output.scrollback.as_slices();
        let mut bytes = Vec::with_capacity(output.scrollback.len() - skip);
        if skip < front.len() {
            bytes.extend_from_slice(&front[skip..]);
            bytes.extend_from_slice(back);
        } else {
            bytes.extend_from_slice(&back[skip - front.len()..]);
        }
        (bytes, start.saturating_sub(since), output.total)
    }

    /// The count of output bytes so far, and where the scrollback begins.
    pub(super) fn output_span(&self) -> (u64, u64) {
        let output = self.output.lock().unwrap();
        (output.total, output.total - output.scrollback.len() as u64)
    }

    /// The screen now, parsed, and the output count it shows.
    pub(super) fn screen_parsed(&self) -> (vt100::Screen, u64) {
        let mut output = self.output.lock().unwrap();
        (output.screen().clone(), output.total)
    }

    /// The bytes that redraw the screen now, and the output count they show.
    pub(super) fn screen_now(&self) -> (Vec<u8>, u64) {
        let mut output = self.output.lock().unwrap();
        (output.screen_state(), output.total)
    }

    pub(super) fn info(&self) -> SessionInfo {
        let (cols, rows) = *self.size.lock().unwrap();
        SessionInfo {
            id: self.id.clone(),
            shell: self.shell.clone(),
            cwd: self.cwd.clone(),
            cols,
            rows,
            created_at: self.created_at,
            alive: self.alive(),
            exit_code: self.exit_code(),
            foreground: self.foreground_group().and_then(|pgid| {
                std::fs::read_to_string(format!("/proc/{pgid}/comm"))
                    .ok()
                    .map(|c| c.trim().to_string())
            }),
            held_by: self.held_by(),
        }
    }
}

#[derive(Default)]
pub(super) struct Table {
    pub(super) next: u64,
    pub(super) sessions: HashMap<String, Arc<Session>>,
}

impl TerminalService {
    /// The session `id` if `owner` owns it, else `NOT_FOUND` (the same as for an
    /// unknown id).
    pub(super) fn get(&self, owner: &str, id: &str) -> Result<Arc<Session>, ToolError> {
        match self.table.lock().unwrap().sessions.get(id) {
            Some(session) if &*session.owner == owner => Ok(session.clone()),
            _ => Err(ToolError::new(
                ErrorCode::NotFound,
                format!("no terminal session {id:?}"),
            )),
        }
    }

    /// The send gate: owner, closing, active send — in this order, every time. The slot
    /// returned is the send's until it is dropped.
    pub(super) fn gate(&self, owner: &str, id: &str) -> Result<SendSlot, ToolError> {
        let session = self.get(owner, id)?;
        if session.closing.load(Ordering::Acquire) {
            return Err(ToolError::new(
                ErrorCode::SessionClosing,
                format!("terminal session {id} is closing"),
            ));
        }
        session.not_held()?;
        if session
            .sending
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Err(ToolError::new(
                ErrorCode::SendActive,
                format!("terminal session {id} has a send that has not settled yet; wait for it or read with terminal_read"),
            ));
        }
        let slot = SendSlot(session.clone());
        if !session.alive() {
            return Err(ToolError::new(
                ErrorCode::SessionClosing,
                format!("the shell of terminal session {id} has exited; close it"),
            ));
        }
        Ok(slot)
    }

    /// Opens a session: a shell on a new PTY.
    pub fn open(&self, owner: Arc<str>, spec: OpenSpec) -> Result<SessionInfo, ToolError> {
        let invalid = |message: String| ToolError::new(ErrorCode::InvalidArguments, message);
        if !spec.cwd.is_dir() {
            return Err(invalid(format!(
                "cwd {} is not a directory",
                spec.cwd.display()
            )));
        }
        let shell_name = spec
            .shell
            .clone()
            .unwrap_or_else(|| self.config.shell.clone());
        let program = find_program(&shell_name)
            .ok_or_else(|| invalid(format!("no shell {shell_name:?} on PATH")))?;
        let is_bash = program.file_name().is_some_and(|n| n == "bash");
        let mut table = self.table.lock().unwrap();
        retire_exited(&mut table, &owner);
        // Only live sessions count: an exited one holds no process and no slot.
        let owned = table
            .sessions
            .values()
            .filter(|s| s.owner == owner && s.alive())
            .count();
        if owned >= self.config.max_sessions_per_owner {
            return Err(ToolError::new(
                ErrorCode::LimitExceeded,
                format!("already {owned} live terminal sessions, the most per owner ([terminal] max_sessions_per_owner); close one"),
            ));
        }
        let live = table.sessions.values().filter(|s| s.alive()).count();
        if live >= self.config.max_sessions {
            return Err(ToolError::new(
                ErrorCode::LimitExceeded,
                format!(
                    "already {live} live terminal sessions, the most in all ([terminal] max_sessions)"
                ),
            ));
        }

        let shell = start_shell(&self.launch, &spec, &shell_name, &program, is_bash)?;
        let (master, child, run, sandbox, egress) = (
            shell.master,
            shell.child,
            shell.run,
            shell.sandbox,
            shell.egress,
        );

        table.next += 1;
        let id = format!("term-{}", table.next);
        let changes = self.changes.for_owner(&owner);
        let session = Arc::new(Session {
            id: id.clone(),
            owner,
            shell: shell_name,
            cwd: spec.cwd,
            created_at: SystemTime::now(),
            size: Mutex::new((spec.cols, spec.rows)),
            leader: child.pid(),
            reaped: AtomicBool::new(false),
            master,
            output: Mutex::new(Output::new(spec.rows, spec.cols)),
            changed: Notify::new(),
            changes,
            change_id: id.as_str().into(),
            closing: AtomicBool::new(false),
            sending: AtomicBool::new(false),
            reader: Mutex::new(None),
            run,
            scrollback_bytes: self.config.scrollback_bytes.max(1024),
            private_tmp: sandbox.as_ref().map(|s| s.tmp().to_path_buf()),
            last_sender: Mutex::new(None),
            person: Mutex::new(None),
            viewed: tokio::sync::watch::Sender::new(0),
        });
        let reader = tokio::spawn(read_loop(session.clone()));
        *session.reader.lock().unwrap() = Some(reader);
        let watched = session.clone();
        tokio::spawn(async move {
            watch_shell(watched, child).await;
            drop(sandbox);
            drop(egress);
        });
        table.sessions.insert(id, session.clone());
        drop(table);
        session.changes.report(ResourceChange::Listed);
        Ok(session.info())
    }

    /// Attributes what `owner`'s session `id` changes in the workspace to the call
    /// `hold` holds (the one opening or sending to it now), until the next call that
    /// sends to it or the shell's end.
    pub fn hold_workspace_changes(
        &self,
        owner: &str,
        id: &str,
        hold: crate::services::undo::ActivityHold,
    ) {
        if let Ok(session) = self.get(owner, id) {
            if session.alive() {
                let previous = session.last_sender.lock().unwrap().replace(hold);
                drop(previous);
            }
        }
    }

    /// Closes a session: every process of it is killed.
    pub fn close(&self, owner: &str, id: &str) -> Result<String, ToolError> {
        let session = self.get(owner, id)?;
        if session.closing.swap(true, Ordering::AcqRel) {
            return Err(ToolError::new(
                ErrorCode::SessionClosing,
                format!("terminal session {id} is already closing"),
            ));
        }
        let killed = self.shut(&session);
        Ok(closed_message(id, killed))
    }

    pub(super) fn shut(&self, session: &Arc<Session>) -> usize {
        session.closing.store(true, Ordering::Release);
        let killed = session.kill_all();
        if let Some(reader) = session.reader.lock().unwrap().take() {
            reader.abort();
        }
        // The shell, killed, is reaped by its watcher.
        session.mark_exited();
        self.table.lock().unwrap().sessions.remove(&session.id);
        session.changes.report(ResourceChange::Listed);
        killed
    }

    /// The owner's sessions.
    pub fn list(&self, owner: &str) -> Vec<SessionInfo> {
        let mut table = self.table.lock().unwrap();
        retire_exited(&mut table, owner);
        let mut sessions: Vec<SessionInfo> = table
            .sessions
            .values()
            .filter(|s| &*s.owner == owner)
            .map(|s| s.info())
            .collect();
        sessions.sort_by_key(|s| s.created_at);
        sessions
    }

    /// Live sessions of every owner (exited ones not counted).
    pub fn live(&self) -> usize {
        let table = self.table.lock().unwrap();
        table.sessions.values().filter(|s| s.alive()).count()
    }

    /// Closes every session of `owner`.
    pub fn close_owner(&self, owner: &str) -> usize {
        let sessions: Vec<Arc<Session>> = self
            .table
            .lock()
            .unwrap()
            .sessions
            .values()
            .filter(|s| &*s.owner == owner)
            .cloned()
            .collect();
        for session in &sessions {
            self.shut(session);
        }
        sessions.len()
    }

    /// Every session of every owner, taken out of the table's lock.
    pub(super) fn all_sessions(&self) -> Vec<Arc<Session>> {
        self.table
            .lock()
            .unwrap()
            .sessions
            .values()
            .cloned()
            .collect()
    }

    /// Closes every session (host shutdown).
    pub fn close_all(&self) {
        for session in &self.all_sessions() {
            self.shut(session);
        }
    }
}

/// Forgets `owner`'s exited sessions past the [`EXITED_KEPT_PER_OWNER`] that exited
/// last.
/// What closing session `id` answers: how many of its processes were killed.
fn closed_message(id: &str, killed: usize) -> String {
    let processes = if killed == 1 { "process" } else { "processes" };
    let were = if killed == 1 { "was" } else { "were" };
    format!("closed {id}; {killed} {processes} of its session {were} killed")
}

fn retire_exited(table: &mut Table, owner: &str) {
    let mut exited: Vec<(Instant, String)> = table
        .sessions
        .values()
        .filter(|s| &*s.owner == owner)
        .filter_map(|s| Some((s.exited_at()?, s.id.clone())))
        .collect();
    if exited.len() <= EXITED_KEPT_PER_OWNER {
        return;
    }
    exited.sort();
    for (_, id) in &exited[..exited.len() - EXITED_KEPT_PER_OWNER] {
        if let Some(session) = table.sessions.remove(id) {
            tracing::debug!(id = %session.id, "exited terminal session retired");
            session.changes.report(ResourceChange::Listed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{closed_message, Output};

    #[test]
    fn the_closed_message_counts_in_the_singular_and_the_plural() {
        assert_eq!(
            closed_message("term-1", 1),
            "closed term-1; 1 process of its session was killed"
        );
        assert_eq!(
            closed_message("term-1", 0),
            "closed term-1; 0 processes of its session were killed"
        );
        assert_eq!(
            closed_message("term-2", 3),
            "closed term-2; 3 processes of its session were killed"
        );
    }

    #[test]
    fn the_screen_parsed_late_and_in_batches_is_the_screen_parsed_at_once() {
        // A scrollback of 1024 bytes: pending output is parsed before it would leave it.
        for chunk in [7, 100, 511, 600, 3000] {
            let mut output = Output::new(5, 20);
            let mut direct = vt100::Parser::new(5, 20, 0);
            let mut raw = Vec::new();
            for n in 0..400 {
                raw.extend_from_slice(format!("\x1b[1mline {n}\x1b[0m\r\n").as_bytes());
                if n % 37 == 0 {
                    raw.extend_from_slice(b"\x1b[2J\x1b[Htop\r\n");
                }
            }
            for piece in raw.chunks(chunk) {
                output.push(piece, 1024);
                direct.process(piece);
                assert!(output.total - output.screen_seen <= 512);
                if piece.len() % 3 == 0 {
                    assert_eq!(output.screen().contents(), direct.screen().contents());
                }
            }
            assert_eq!(
                output.screen().contents(),
                direct.screen().contents(),
                "chunks of {chunk}"
            );
            assert!(output.screen().contents().contains("line 399"));
        }
    }
}
