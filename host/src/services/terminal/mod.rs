//! The terminal service: persistent PTY sessions owned by the host, so a REPL's state,
//! `cd` and exported variables live across calls and across plugin reloads.
//!
//! Each session is a shell that leads its own session (`setsid`) on a PTY whose master
//! side the host reads on its event loop: every byte goes into a bounded scrollback and
//! through a terminal emulator (`vt100`), which gives the `screen` view of full-screen
//! programs. A send goes through one gate, in this order, every time: the caller must
//! own the session (else `NOT_FOUND`, as for an unknown id), the session must not be
//! closing (`SESSION_CLOSING`), and no other send may be unsettled (`SEND_ACTIVE`).
//! Closing a session kills every process of its terminal session, background ones
//! included.
//!
//! The shell is waited for (its pidfd) from the moment it starts: when it exits it is
//! reaped at once, what is left of its session is killed (as a terminal's hangup
//! would), the output it left is drained, and the session is *exited*: listed with
//! its exit code, its output and screen still readable, no longer counted against
//! `max_sessions` and `max_sessions_per_owner`. Exited sessions are kept until closed,
//! up to [`EXITED_KEPT_PER_OWNER`] per owner: past that the ones that exited first are
//! retired (forgotten, as if closed) when the owner next opens or lists sessions.
//!
//! A send's `wait.pattern` is looked for in the output after the echo of its input
//! (see [`waiting`]), incrementally: each wake-up renders and searches only the output
//! that is new.
//!
//! The PTY is opened with `openpty` and the shell started by the process service's
//! spawner (clone with CLONE_VFORK, a parent-death signal, the PTY as controlling
//! terminal), rather than through `portable-pty`, whose fork-based spawn costs
//! milliseconds in a host this size, sets no parent-death signal, and reads with a
//! blocking thread per session.
//!
//! Native only: nothing here knows wasmtime. The WIT binding is in [`wit`].

pub mod capability;
pub mod config;
pub mod text;
pub mod waiting;
pub mod wit;

use std::collections::{HashMap, VecDeque};
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use tokio::io::unix::AsyncFd;
use tokio::sync::Notify;

use crate::error::{ErrorCode, ToolError};
use crate::services::jobs::{JobRegistry, JobState};
use crate::services::process::{containment, find_program, signal_group, spawn, Launch};
pub use config::TerminalConfig;

/// What to open.
#[derive(Debug, Clone)]
pub struct OpenSpec {
    pub cwd: PathBuf,
    pub env: Vec<(String, String)>,
    pub shell: Option<String>,
    pub cols: u16,
    pub rows: u16,
    /// What runs the shell (a sandboxed session may write `cwd`).
    pub executor: crate::services::process::Executor,
}

/// What is known of one session.
#[derive(Debug, Clone)]
pub struct SessionInfo {
    pub id: String,
    pub shell: String,
    pub cwd: PathBuf,
    pub cols: u16,
    pub rows: u16,
    pub created_at: SystemTime,
    pub alive: bool,
    /// The shell's exit code once it has exited (128 + the signal when one killed it).
    pub exit_code: Option<i32>,
    /// The command of the terminal's foreground process.
    pub foreground: Option<String>,
}

/// When a send is settled.
#[derive(Debug, Clone)]
pub struct SendWait {
    /// Settled when the output has been quiet this long.
    pub quiet: Duration,
    /// Settled when this appears in the (plain) output of the send, after the echo of
    /// its input. Shared, not cloned: a cloned regex starts with an empty search cache.
    pub pattern: Option<Arc<regex::Regex>>,
    /// Settled at the latest after this long.
    pub timeout: Duration,
}

/// What a send produced.
#[derive(Debug, Clone)]
pub struct SendOutcome {
    /// The plain output since the input was written.
    pub output: String,
    /// `quiet`, `pattern`, `timeout`, `exited`, or `background`.
    pub settled: &'static str,
    pub next_cursor: u64,
    /// The job id of a background send.
    pub job: Option<String>,
    pub alive: bool,
    /// The shell's exit code once it has exited.
    pub exit_code: Option<i32>,
}

/// Views of a session's output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    Screen,
    Plain,
    Raw,
}

/// A read of a session.
#[derive(Debug, Clone)]
pub struct ReadOutcome {
    pub text: String,
    pub next_cursor: u64,
    pub omitted_bytes: u64,
    /// The shell's exit code once it has exited.
    pub exit_code: Option<i32>,
}

struct Output {
    scrollback: VecDeque<u8>,
    total: u64,
    screen: vt100::Parser,
    last_output: Instant,
    /// The session is over: its shell was reaped and its output drained (or it was
    /// closed).
    exited: bool,
    /// The shell's exit code (128 + signal), once reaped.
    exit_code: Option<i32>,
    /// When the session became exited (the order of retirement).
    exited_at: Option<Instant>,
}

/// One terminal session.
pub struct Session {
    pub id: String,
    pub owner: Arc<str>,
    pub shell: String,
    pub cwd: PathBuf,
    created_at: SystemTime,
    size: (u16, u16),
    leader: i32,
    /// Set once the shell is reaped: from then on its pid may belong to someone else.
    reaped: AtomicBool,
    master: AsyncFd<OwnedFd>,
    output: Mutex<Output>,
    changed: Notify,
    closing: AtomicBool,
    sending: AtomicBool,
    reader: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The session's container: every process it starts, wherever it goes.
    run: containment::Run,
    scrollback_bytes: usize,
}

/// Marks the session's one active send; released on drop.
struct SendSlot(Arc<Session>);

impl Drop for SendSlot {
    fn drop(&mut self) {
        self.0.sending.store(false, Ordering::Release);
    }
}

impl Session {
    fn push(&self, bytes: &[u8]) {
        let mut output = self.output.lock().unwrap();
        output.total += bytes.len() as u64;
        crate::output::push_tail(&mut output.scrollback, bytes, self.scrollback_bytes);
        output.screen.process(bytes);
        output.last_output = Instant::now();
        drop(output);
        self.changed.notify_waiters();
    }

    fn mark_exited(&self) {
        let mut output = self.output.lock().unwrap();
        if !output.exited {
            output.exited = true;
            output.exited_at = Some(Instant::now());
        }
        drop(output);
        self.changed.notify_waiters();
    }

    fn alive(&self) -> bool {
        !self.output.lock().unwrap().exited
    }

    fn exit_code(&self) -> Option<i32> {
        self.output.lock().unwrap().exit_code
    }

    /// When the session became exited; `None` while it is alive.
    fn exited_at(&self) -> Option<Instant> {
        self.output.lock().unwrap().exited_at
    }

    /// The shell's pid while it is ours (not reaped yet).
    fn leader(&self) -> Option<i32> {
        (!self.reaped.load(Ordering::Acquire)).then_some(self.leader)
    }

    fn total(&self) -> u64 {
        self.output.lock().unwrap().total
    }

    /// Raw bytes from `since` on (from the start of the scrollback when `since` is older);
    /// the second value counts the bytes no longer kept.
    fn raw_since(&self, since: u64) -> (Vec<u8>, u64, u64) {
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

    fn info(&self) -> SessionInfo {
        SessionInfo {
            id: self.id.clone(),
            shell: self.shell.clone(),
            cwd: self.cwd.clone(),
            cols: self.size.0,
            rows: self.size.1,
            created_at: self.created_at,
            alive: self.alive(),
            exit_code: self.exit_code(),
            foreground: self.foreground_group().and_then(|pgid| {
                std::fs::read_to_string(format!("/proc/{pgid}/comm"))
                    .ok()
                    .map(|c| c.trim().to_string())
            }),
        }
    }

    /// The terminal's foreground process group.
    fn foreground_group(&self) -> Option<i32> {
        self.leader()?;
        // SAFETY: tcgetpgrp on our own open master descriptor.
        let pgid = unsafe { libc::tcgetpgrp(self.master.get_ref().as_raw_fd()) };
        (pgid > 0).then_some(pgid)
    }

    async fn write_all(&self, mut bytes: &[u8]) -> Result<(), ToolError> {
        while !bytes.is_empty() {
            let mut ready = self.master.writable().await.map_err(write_error)?;
            // SAFETY: writing from a valid slice to our own descriptor.
            match ready.try_io(|fd| {
                let n = unsafe {
                    libc::write(fd.get_ref().as_raw_fd(), bytes.as_ptr().cast(), bytes.len())
                };
                if n < 0 {
                    Err(std::io::Error::last_os_error())
                } else {
                    Ok(n as usize)
                }
            }) {
                Ok(Ok(n)) => bytes = &bytes[n..],
                Ok(Err(error)) => return Err(write_error(error)),
                Err(_would_block) => continue,
            }
        }
        Ok(())
    }

    /// Whether input typed now is echoed by the terminal, as far as the terminal's
    /// modes tell: not in canonical mode with echo off (a password prompt). A program
    /// in non-canonical mode (readline, a REPL, a full-screen program) echoes by itself,
    /// or not: [`waiting::Echo`] copes with both.
    fn echoes(&self) -> bool {
        // SAFETY: termios is plain data; tcgetattr on the master reads the terminal's
        // (the slave's) modes.
        let mut modes: libc::termios = unsafe { std::mem::zeroed() };
        if unsafe { libc::tcgetattr(self.master.get_ref().as_raw_fd(), &mut modes) } != 0 {
            return true;
        }
        modes.c_lflag & libc::ICANON == 0 || modes.c_lflag & libc::ECHO != 0
    }

    /// Waits until the send that began at `start` (when the output was `from` bytes
    /// long) settles. `on_output` runs each time new output arrived. A pattern is
    /// looked for in the output after `echo` (see [`waiting`]), each wake-up searching
    /// only what is new.
    async fn settle(
        &self,
        from: u64,
        start: Instant,
        wait: &SendWait,
        echo: waiting::Echo,
        cancel: Option<&tokio_util::sync::CancellationToken>,
        mut on_output: impl FnMut(),
    ) -> &'static str {
        let deadline = start + wait.timeout;
        let mut pattern = wait
            .pattern
            .clone()
            .map(|regex| waiting::PatternWait::new(regex, echo));
        let mut looked = from;
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let (last_output, exited, total) = {
                let output = self.output.lock().unwrap();
                (output.last_output, output.exited, output.total)
            };
            on_output();
            if exited {
                return "exited";
            }
            if let Some(pattern) = &mut pattern {
                if total > looked {
                    let (bytes, _, upto) = self.raw_since(looked);
                    looked = upto;
                    if pattern.feed(&bytes) {
                        return "pattern";
                    }
                }
            }
            let quiet_at = last_output.max(start) + wait.quiet;
            let now = Instant::now();
            if wait.pattern.is_none() && now >= quiet_at {
                return "quiet";
            }
            if now >= deadline {
                return "timeout";
            }
            let wake = if wait.pattern.is_none() {
                quiet_at.min(deadline)
            } else {
                deadline
            };
            let cancelled = async {
                match cancel {
                    Some(token) => token.cancelled().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep_until(wake.into()) => {}
                _ = cancelled => return "cancelled",
            }
        }
    }

    /// Kills every process of the session: its container, which holds those that
    /// left the terminal's session too. Returns how many were in the terminal session.
    fn kill_all(&self) -> usize {
        let members = self.leader().map(session_members).unwrap_or_default();
        self.run.kill();
        for pid in &members {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(*pid, libc::SIGKILL) };
        }
        members.len()
    }
}

fn write_error(error: std::io::Error) -> ToolError {
    ToolError::new(
        ErrorCode::Internal,
        format!("cannot write to the terminal: {error}"),
    )
}

/// Pids whose session id is `sid`.
fn session_members(sid: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
                    fields.get(3)?.parse::<i32>().ok()
                })
                .is_some_and(|session| session == sid)
        })
        .collect()
}

/// The signals a terminal's foreground may be sent.
pub fn parse_signal(name: &str) -> Option<i32> {
    match name.trim_start_matches("SIG").to_ascii_uppercase().as_str() {
        "INT" => Some(libc::SIGINT),
        "TERM" => Some(libc::SIGTERM),
        "KILL" => Some(libc::SIGKILL),
        "HUP" => Some(libc::SIGHUP),
        "QUIT" => Some(libc::SIGQUIT),
        "TSTP" => Some(libc::SIGTSTP),
        "CONT" => Some(libc::SIGCONT),
        _ => None,
    }
}

#[derive(Default)]
struct Table {
    next: u64,
    sessions: HashMap<String, Arc<Session>>,
}

/// Every terminal session of the host.
pub struct TerminalService {
    config: TerminalConfig,
    launch: Arc<Launch>,
    jobs: Arc<JobRegistry>,
    table: Mutex<Table>,
    /// Recently used wait patterns, compiled, newest first: an agent waits for the same
    /// prompt again and again, and compiling a regex costs more than the echo.
    patterns: Mutex<Vec<(String, Arc<regex::Regex>)>>,
}

/// How many compiled wait patterns are kept.
const PATTERN_CACHE: usize = 16;

/// How many exited sessions an owner keeps (listed, readable) until it closes them:
/// past this the ones that exited first are retired.
pub const EXITED_KEPT_PER_OWNER: usize = 16;

/// How long an exited shell's output may take to drain before the session is marked
/// exited anyway (a process that escaped the kill still holds the terminal).
const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

impl std::fmt::Debug for TerminalService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TerminalService")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl TerminalService {
    pub fn new(config: TerminalConfig, launch: Arc<Launch>, jobs: Arc<JobRegistry>) -> Self {
        TerminalService {
            config,
            launch,
            jobs,
            table: Mutex::default(),
            patterns: Mutex::default(),
        }
    }

    /// `pattern` compiled, from the cache of recent ones when it is there.
    pub fn wait_pattern(&self, pattern: &str) -> Result<Arc<regex::Regex>, regex::Error> {
        let mut cache = self.patterns.lock().unwrap();
        if let Some(at) = cache.iter().position(|(text, _)| text == pattern) {
            let hit = cache.remove(at);
            let regex = hit.1.clone();
            cache.insert(0, hit);
            return Ok(regex);
        }
        let regex = Arc::new(regex::Regex::new(pattern)?);
        cache.insert(0, (pattern.to_string(), regex.clone()));
        cache.truncate(PATTERN_CACHE);
        Ok(regex)
    }

    /// The session `id` if `owner` owns it, else `NOT_FOUND` (the same as for an
    /// unknown id).
    fn get(&self, owner: &str, id: &str) -> Result<Arc<Session>, ToolError> {
        match self.table.lock().unwrap().sessions.get(id) {
            Some(session) if &*session.owner == owner => Ok(session.clone()),
            _ => Err(ToolError::new(
                ErrorCode::NotFound,
                format!("no terminal session {id:?}"),
            )),
        }
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

        let internal = |what: &str, error: std::io::Error| {
            ToolError::new(ErrorCode::Internal, format!("{what}: {error}"))
        };
        let (master, slave) =
            open_pty(spec.cols, spec.rows).map_err(|e| internal("cannot open a PTY", e))?;
        let mut argv =
            vec![CString::new(shell_name.as_bytes())
                .map_err(|_| invalid("NUL byte in shell".into()))?];
        if is_bash {
            argv.extend([
                c"--noprofile".to_owned(),
                c"--norc".to_owned(),
                c"-i".to_owned(),
            ]);
        }
        let mut env = vec![("TERM".to_string(), "xterm-256color".to_string())];
        if is_bash {
            env.push(("PS1".to_string(), "$ ".to_string()));
        }
        env.extend(spec.env.iter().cloned());
        // A sandboxed session's confinement; its TMPDIR goes when the shell exits.
        let sandbox = self.launch.prepare(spec.executor, &spec.cwd)?;
        if let Some(prepared) = &sandbox {
            env.push(("TMPDIR".into(), prepared.tmp().display().to_string()));
        }
        let run = self
            .launch
            .containment
            .new_run()
            .map_err(|e| internal("cannot contain the session", std::io::Error::other(e)))?;
        let placement = run.placement();
        let envp = self
            .launch
            .envp(&env, &placement)
            .map_err(|e| invalid(e.to_string()))?;
        let program_c = CString::new(program.as_os_str().as_bytes())
            .map_err(|_| invalid("NUL byte in shell path".into()))?;
        let cwd = CString::new(spec.cwd.as_os_str().as_bytes())
            .map_err(|_| invalid("NUL byte in cwd".into()))?;
        let child = spawn::spawn(&spawn::SpawnSpec {
            program: &program_c,
            argv: &argv,
            envp: &envp,
            cwd: &cwd,
            output: slave.as_raw_fd(),
            input: slave.as_raw_fd(),
            terminal: true,
            cgroup: placement.cgroup,
            join: &placement.join,
            die_with_parent: true,
            sandbox: self.launch.child_sandbox(sandbox.as_ref()),
        })
        .map_err(|e| internal("cannot start the shell", e))?;
        run.set_leader(child.pid());
        drop(slave);
        // SAFETY: registering our own descriptor, owned by the AsyncFd from here on.
        let master = unsafe {
            AsyncFd::register_with_interest(
                master,
                tokio::io::Interest::READABLE | tokio::io::Interest::WRITABLE,
            )
        }
        .map_err(|e| internal("cannot watch the PTY", e.into()))?;

        table.next += 1;
        let id = format!("term-{}", table.next);
        let session = Arc::new(Session {
            id: id.clone(),
            owner,
            shell: shell_name,
            cwd: spec.cwd,
            created_at: SystemTime::now(),
            size: (spec.cols, spec.rows),
            leader: child.pid(),
            reaped: AtomicBool::new(false),
            master,
            output: Mutex::new(Output {
                scrollback: VecDeque::new(),
                total: 0,
                screen: vt100::Parser::new(spec.rows, spec.cols, 0),
                last_output: Instant::now(),
                exited: false,
                exit_code: None,
                exited_at: None,
            }),
            changed: Notify::new(),
            closing: AtomicBool::new(false),
            sending: AtomicBool::new(false),
            reader: Mutex::new(None),
            run,
            scrollback_bytes: self.config.scrollback_bytes.max(1024),
        });
        let reader = tokio::spawn(read_loop(session.clone()));
        *session.reader.lock().unwrap() = Some(reader);
        let watched = session.clone();
        tokio::spawn(async move {
            watch_shell(watched, child).await;
            drop(sandbox);
        });
        table.sessions.insert(id, session.clone());
        Ok(session.info())
    }

    /// Writes `input` (and Enter when `enter`) and returns the output it produced when
    /// the send settles; with `background` returns at once with a job id instead.
    pub async fn send(
        &self,
        owner: &str,
        id: &str,
        input: &str,
        enter: bool,
        wait: SendWait,
        background: bool,
    ) -> Result<SendOutcome, ToolError> {
        // The send gate: owner, closing, active send — in this order, every time.
        let session = self.get(owner, id)?;
        if session.closing.load(Ordering::Acquire) {
            return Err(ToolError::new(
                ErrorCode::SessionClosing,
                format!("terminal session {id} is closing"),
            ));
        }
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
        let from = session.total();
        let mut bytes = input.as_bytes().to_vec();
        if enter {
            bytes.push(b'\r');
        }
        let echo = waiting::Echo::of(&String::from_utf8_lossy(&bytes), session.echoes());
        let started = Instant::now();
        session.write_all(&bytes).await?;
        if background {
            let job = self.jobs.create(
                "terminal",
                session.owner.clone(),
                format!("send to {id}"),
                input.to_string(),
            )?;
            let job_id = job.id.clone();
            tokio::spawn(async move {
                let _slot = slot;
                let mut forwarded = from;
                // Past the job cap ([jobs] max_output_bytes) the send is cancelled like
                // a job_kill, with the cap as its reason.
                let mut capped: Option<String> = None;
                let settled = session
                    .settle(from, started, &wait, echo, Some(&job.cancel), || {
                        let (bytes, _, total) = session.raw_since(forwarded);
                        if !bytes.is_empty() {
                            if let Err(reason) = job.push_output(text::plain(&bytes).as_bytes()) {
                                capped.get_or_insert(reason);
                                job.cancel.cancel();
                            }
                        }
                        forwarded = total;
                    })
                    .await;
                let settled = if capped.is_some() {
                    "cancelled"
                } else {
                    settled
                };
                let state = match settled {
                    "cancelled" => {
                        if let Some(pgid) = session
                            .foreground_group()
                            .filter(|pgid| Some(*pgid) != session.leader())
                        {
                            signal_group(pgid, libc::SIGINT);
                        }
                        JobState::Killed {
                            signal: libc::SIGINT,
                            reason: Some(
                                capped.unwrap_or_else(|| "send cancelled by job_kill".into()),
                            ),
                        }
                    }
                    "exited" => JobState::Failed {
                        reason: "the terminal's shell exited".into(),
                    },
                    _ => JobState::Exited { code: 0 },
                };
                job.finish(state);
            });
            return Ok(SendOutcome {
                output: String::new(),
                settled: "background",
                next_cursor: from,
                job: Some(job_id),
                alive: true,
                exit_code: None,
            });
        }
        let settled = session
            .settle(from, started, &wait, echo, None, || {})
            .await;
        drop(slot);
        let (bytes, _, total) = session.raw_since(from);
        Ok(SendOutcome {
            output: text::plain(&bytes),
            settled,
            next_cursor: total,
            job: None,
            alive: session.alive(),
            exit_code: session.exit_code().filter(|_| !session.alive()),
        })
    }

    /// Reads a session's output in one of its views.
    pub fn read(
        &self,
        owner: &str,
        id: &str,
        view: View,
        since: u64,
        max_bytes: usize,
    ) -> Result<ReadOutcome, ToolError> {
        let session = self.get(owner, id)?;
        if view == View::Screen {
            let output = session.output.lock().unwrap();
            let contents = output.screen.screen().contents();
            let text = contents.trim_end_matches('\n').to_string();
            return Ok(ReadOutcome {
                text,
                next_cursor: output.total,
                omitted_bytes: 0,
                exit_code: output.exit_code.filter(|_| output.exited),
            });
        }
        let (bytes, mut omitted, total) = session.raw_since(since);
        let mut text = match view {
            View::Raw => String::from_utf8_lossy(&bytes).into_owned(),
            _ => text::plain(&bytes),
        };
        if view == View::Plain {
            let lines: Vec<&str> = text.split_inclusive('\n').collect();
            if lines.len() > self.config.scrollback_lines {
                let cut = lines.len() - self.config.scrollback_lines;
                omitted += lines[..cut].iter().map(|l| l.len() as u64).sum::<u64>();
                text = lines[cut..].concat();
            }
        }
        if text.len() > max_bytes {
            let mut start = text.len() - max_bytes;
            while !text.is_char_boundary(start) {
                start += 1;
            }
            omitted += start as u64;
            text = text[start..].to_string();
        }
        Ok(ReadOutcome {
            text,
            next_cursor: total,
            omitted_bytes: omitted,
            exit_code: session.exit_code().filter(|_| !session.alive()),
        })
    }

    /// Sends `signal` to the terminal's foreground process group.
    pub fn signal(&self, owner: &str, id: &str, signal: &str) -> Result<String, ToolError> {
        let number = parse_signal(signal).ok_or_else(|| {
            ToolError::new(
                ErrorCode::InvalidArguments,
                format!("unknown signal {signal:?}: use INT, TERM, KILL, HUP, QUIT, TSTP or CONT"),
            )
        })?;
        let session = self.get(owner, id)?;
        let Some(leader) = session.leader().filter(|_| session.alive()) else {
            return Err(ToolError::new(
                ErrorCode::SessionClosing,
                format!("the shell of terminal session {id} has exited; close it"),
            ));
        };
        let pgid = session.foreground_group().unwrap_or(leader);
        let target = std::fs::read_to_string(format!("/proc/{pgid}/comm"))
            .map(|c| c.trim().to_string())
            .unwrap_or_default();
        signal_group(pgid, number);
        Ok(format!(
            "sent SIG{} to the foreground process group of {id} ({target}, pgid {pgid})",
            signal.trim_start_matches("SIG").to_ascii_uppercase()
        ))
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
        Ok(format!(
            "closed {id}; {killed} processes of its session were killed"
        ))
    }

    fn shut(&self, session: &Arc<Session>) -> usize {
        session.closing.store(true, Ordering::Release);
        let killed = session.kill_all();
        if let Some(reader) = session.reader.lock().unwrap().take() {
            reader.abort();
        }
        // The shell, killed, is reaped by its watcher.
        session.mark_exited();
        self.table.lock().unwrap().sessions.remove(&session.id);
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

    /// Closes every session (host shutdown).
    pub fn close_all(&self) {
        let sessions: Vec<Arc<Session>> = self
            .table
            .lock()
            .unwrap()
            .sessions
            .values()
            .cloned()
            .collect();
        for session in &sessions {
            self.shut(session);
        }
    }
}

/// Forgets `owner`'s exited sessions past the [`EXITED_KEPT_PER_OWNER`] that exited
/// last.
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
        }
    }
}

/// Waits for the session's shell (its pidfd) and reaps it the moment it exits; then
/// kills what is left of its session, lets the reader drain the output the shell left,
/// and marks the session exited with the shell's code.
async fn watch_shell(session: Arc<Session>, mut child: spawn::Child) {
    let status = child.wait().await;
    let code = status.ok().and_then(|status| {
        use std::os::unix::process::ExitStatusExt;
        status.code().or_else(|| status.signal().map(|n| 128 + n))
    });
    // The pid is still the session's id (and group id) for whatever is left in it, so
    // it cannot have been reused yet: kill them, then forget the pid.
    let members = session_members(session.leader);
    session.run.kill();
    for pid in &members {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }
    session.run.set_leader(0);
    session.reaped.store(true, Ordering::Release);
    session.output.lock().unwrap().exit_code = code;
    tracing::debug!(id = %session.id, ?code, left = members.len(), "terminal shell exited");
    let reader = session.reader.lock().unwrap().take();
    if let Some(mut reader) = reader {
        if tokio::time::timeout(DRAIN_TIMEOUT, &mut reader)
            .await
            .is_err()
        {
            reader.abort();
        }
    }
    session.mark_exited();
}

/// Reads the PTY until the shell side is gone (every process holding the terminal has
/// closed it).
async fn read_loop(session: Arc<Session>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let mut ready = match session.master.readable().await {
            Ok(ready) => ready,
            Err(_) => break,
        };
        // SAFETY: reading into a valid buffer from our own descriptor.
        let read = ready.try_io(|fd| {
            let n =
                unsafe { libc::read(fd.get_ref().as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n < 0 {
                Err(std::io::Error::last_os_error())
            } else {
                Ok(n as usize)
            }
        });
        match read {
            Ok(Ok(0)) => break,
            Ok(Ok(n)) => session.push(&buf[..n]),
            // EIO: every process holding the terminal is gone.
            Ok(Err(_)) => break,
            Err(_would_block) => continue,
        }
    }
}

/// A new PTY pair sized `cols` x `rows`; the master is non-blocking, both close on exec.
fn open_pty(cols: u16, rows: u16) -> std::io::Result<(OwnedFd, OwnedFd)> {
    let (mut master, mut slave) = (-1, -1);
    let size = libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: openpty writes two descriptors; the name and termios pointers may be null.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            &size,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors are fresh and ours.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    // SAFETY: fcntl on our own descriptors.
    unsafe {
        libc::fcntl(master.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC);
        libc::fcntl(slave.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC);
        let flags = libc::fcntl(master.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(master.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK);
    }
    Ok((master, slave))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service() -> TerminalService {
        let jobs = Arc::new(JobRegistry::new(
            crate::services::jobs::JobsConfig::default(),
            Duration::from_millis(100),
            std::env::temp_dir(),
        ));
        TerminalService::new(
            TerminalConfig::default(),
            Arc::new(Launch::new(&crate::services::process::ProcessConfig::default()).unwrap()),
            jobs,
        )
    }

    #[test]
    fn wait_patterns_are_compiled_once_and_the_cache_stays_bounded() {
        let terminals = service();
        let prompt = terminals.wait_pattern(r"\$ $").unwrap();
        assert!(prompt.is_match("user@host:~$ "));
        for n in 0..PATTERN_CACHE * 2 {
            terminals.wait_pattern(&format!("line {n}")).unwrap();
        }
        assert_eq!(terminals.patterns.lock().unwrap().len(), PATTERN_CACHE);
        assert_eq!(
            terminals.patterns.lock().unwrap()[0].0,
            format!("line {}", PATTERN_CACHE * 2 - 1)
        );
        terminals.wait_pattern("line 20").unwrap();
        assert_eq!(
            terminals.patterns.lock().unwrap()[0].0,
            "line 20",
            "a hit moves to the front"
        );
        assert!(terminals.wait_pattern("(").is_err());
    }
}
