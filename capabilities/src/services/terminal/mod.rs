//! The terminal service: persistent PTY sessions owned by the host, so a REPL's state,
//! `cd` and exported variables live across calls and across plugin reloads.
//!
//! Each session is a shell that leads its own session (`setsid`) on a PTY whose master
//! side the host reads on its event loop: every byte goes into a bounded scrollback and
//! through a terminal emulator (`vt100`), which gives the `screen` view of full-screen
//! programs. The shell is waited for (its pidfd) from the moment it starts: when it
//! exits it is reaped at once, what is left of its session is killed (as a terminal's
//! hangup would), the output it left is drained, and the session is *exited*: listed
//! with its exit code, its output and screen still readable, no longer counted against
//! `max_sessions` and `max_sessions_per_owner`. Exited sessions are kept until closed,
//! up to [`EXITED_KEPT_PER_OWNER`] per owner: past that the ones that exited first are
//! retired (forgotten, as if closed) when the owner next opens or lists sessions.
//!
//! This module holds the public service type, its `send` (gate, write, settle) and
//! `signal`; the rest is split by concern:
//! - `pty`: the PTY pair, the shell started on it, the read loop and the shell's
//!   watcher, writes to the terminal and questions asked of it;
//! - `sessions`: the session table, each session's output state, the send gate, open,
//!   close and list;
//! - [`waiting`]: when a send is settled (quiet, pattern after the echo of its input,
//!   timeout, exit), incrementally;
//! - `views`: the screen, plain and raw views a read returns, and [`text`] the plain
//!   rendering;
//! - [`handover`]: the sessions handed to the next binary at an upgrade, and taken back;
//! - [`person`]: a person at the terminal: watching it, taking it over, typing, resizing.
//!
//! Native only: nothing here knows wasmtime. The WIT binding is in [`wit`].

pub mod capability;
pub mod config;
pub mod handover;
pub mod person;
mod pty;
mod sessions;
pub mod text;
mod views;
pub mod waiting;
pub mod wit;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crate::error::{ErrorCode, ToolError};
use crate::services::jobs::signal_named;
use crate::services::jobs::{JobRegistry, JobState};
use crate::services::resource_changes::ResourceChanges;
pub use config::TerminalConfig;
use dsh_launch::{signal_group, Launch};

pub use sessions::Session;
pub use views::{ReadOutcome, View};

use sessions::Table;

/// What to open.
#[derive(Debug, Clone)]
pub struct OpenSpec {
    pub cwd: PathBuf,
    pub env: Vec<(String, String)>,
    pub shell: Option<String>,
    pub cols: u16,
    pub rows: u16,
    /// What runs the shell (a sandboxed session may write `cwd`).
    pub executor: dsh_launch::ExecutorKind,
    /// Its network by policy (`[egress]`), kept for the session's life.
    pub network: Option<dsh_launch::network::Network>,
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
    /// Who holds the terminal, when a person took it over (`console`, `attach (pid N)`).
    pub held_by: Option<String>,
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

/// The signals a terminal's foreground may be sent.
const TERMINAL_SIGNALS: &[&str] = &["INT", "TERM", "KILL", "HUP", "QUIT", "TSTP", "CONT"];

/// Every terminal session of the host.
pub struct TerminalService {
    config: TerminalConfig,
    launch: Arc<Launch>,
    jobs: Arc<JobRegistry>,
    /// The owners' resource changes (the job registry's channels).
    changes: ResourceChanges,
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
            changes: jobs.changes().clone(),
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
        let slot = self.gate(owner, id)?;
        let session = slot.0.clone();
        let mut bytes = input.as_bytes().to_vec();
        if enter {
            bytes.push(b'\r');
        }
        let echo = waiting::Echo::of(&String::from_utf8_lossy(&bytes), session.echoes());
        let pattern = wait
            .pattern
            .clone()
            .map(|regex| waiting::PatternWait::new(regex, echo));
        let from = session.begin_wait(waiting::Watch::new(pattern, background));
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
                    .settle(started, &wait, Some(&job.cancel), || {
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
                            signal_group(pgid, dsh_launch::os::SIGINT);
                        }
                        JobState::Killed {
                            signal: dsh_launch::os::SIGINT,
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
        let settled = session.settle(started, &wait, None, || {}).await;
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

    /// Sends `signal` to the terminal's foreground process group.
    pub fn signal(&self, owner: &str, id: &str, signal: &str) -> Result<String, ToolError> {
        let (number, _) = signal_named(signal, TERMINAL_SIGNALS).ok_or_else(|| {
            ToolError::new(
                ErrorCode::InvalidArguments,
                format!(
                    "unknown signal {signal:?}: use {}",
                    TERMINAL_SIGNALS.join(", ")
                ),
            )
        })?;
        let session = self.get(owner, id)?;
        session.not_held()?;
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
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn service() -> TerminalService {
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

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn input_longer_than_the_terminal_queue_is_written_whole() {
        // 64 KB typed: more than the terminal's input queue holds, so the write waits
        // for the shell to read (the master is registered for reading only).
        let terminals = service();
        let owner: Arc<str> = Arc::from("test");
        let spec = OpenSpec {
            cwd: std::env::temp_dir(),
            env: Vec::new(),
            shell: Some("bash".into()),
            cols: 120,
            rows: 40,
            executor: crate::services::process::ExecutorKind::Local,
            network: None,
        };
        let id = terminals.open(owner.clone(), spec).unwrap().id;
        let wait = SendWait {
            quiet: Duration::from_millis(300),
            pattern: Some(terminals.wait_pattern(r"\$ $").unwrap()),
            timeout: Duration::from_secs(20),
        };
        terminals
            .send(&owner, &id, "", true, wait.clone(), false)
            .await
            .unwrap();
        let long = "x".repeat(64 * 1024);
        let wait = SendWait {
            pattern: Some(terminals.wait_pattern("length-65536").unwrap()),
            timeout: Duration::from_secs(60),
            ..wait
        };
        let input = format!("v={long}; echo length-${{#v}}");
        let sent = terminals
            .send(&owner, &id, &input, true, wait, false)
            .await
            .unwrap();
        assert_eq!(
            sent.settled,
            "pattern",
            "{}",
            &sent.output[sent.output.len().saturating_sub(300)..]
        );
        terminals.close(&owner, &id).unwrap();
    }
}
