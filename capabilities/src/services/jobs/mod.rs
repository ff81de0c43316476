//! The job registry: every background producer's jobs (background commands today,
//! background terminal sends next) under one identity, access and lifecycle.
//!
//! The registry owns ids (`KIND-N`, a sequence per kind), owners, states and output;
//! producers own the execution resources (the process service owns a background
//! command's process group) and report into their [`Job`]. A running job's output is
//! written whole to its spill file as it arrives, and the newest bytes are kept in a
//! bounded in-memory tail, so a job printing 100 MB costs the tail, not 100 MB. The
//! spill file stops at the disk cap (`[jobs] max_output_bytes`), and the producer kills
//! the job and says why.
//!
//! A spill file that cannot be written (a full disk) does not stop the job: what was
//! written of the file is removed (it is not the full output, and it holds space), the
//! in-memory tail is kept for the job's life, reads older than the tail start at it, and
//! every read says the spill failed and why ([`OutputRead::spill_failed`]).
//!
//! A finished job holds no descriptor and no tail: its spill file is closed and its
//! output is read back from the file. Finished jobs are kept up to
//! `[jobs] max_finished_per_owner` per owner and for `finished_retention_ms`; past
//! either, a job is retired: forgotten and its spill file deleted, so a server that runs
//! thousands of jobs holds a bounded number of jobs, files and bytes. Retirement is
//! checked on every registry operation (no timer). The owner's last
//! [`RETIRED_IDS_REMEMBERED`] retired ids are remembered, so its `job_output` and
//! `job_kill` of one say it was retired rather than that it never existed.
//!
//! Access is by owner: an id of another owner (retired or not) is `NOT_FOUND`, word for
//! word the same as an id that never existed.
//!
//! A producer that asks its owner's client for a model's answer (a subagent) does so
//! only through the owner's reads that wait on it: a `job_output` with a wait lends the
//! job its call's client ([`Job::borrow_client`]) for the wait, and does not return
//! while a request it lent is out. A running job may carry a note its producer sets
//! (`waiting for job_output`, its turns), shown with its state.
//!
//! A job reports its new output and its end, and the registry the jobs it makes and
//! retires, to the owner's [`ResourceChanges`] channel (the terminal sessions report to
//! the same channels).
//!
//! Native only: nothing here knows wasmtime. The WIT binding is in [`wit`].

pub mod capability;
pub mod config;
pub mod handover;
pub mod wit;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::Notify;

use crate::call::Sampler;
use crate::error::{ErrorCode, ToolError};
use crate::services::resource_changes::{OwnerChanges, ResourceChange, ResourceChanges};
pub use config::JobsConfig;

/// Where a job is in its life.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum JobState {
    Running,
    Exited { code: i32 },
    Killed { signal: i32, reason: Option<String> },
    Failed { reason: String },
}

impl JobState {
    pub fn name(&self) -> &'static str {
        match self {
            JobState::Running => "running",
            JobState::Exited { .. } => "exited",
            JobState::Killed { .. } => "killed",
            JobState::Failed { .. } => "failed",
        }
    }
}

/// A snapshot of a job for listing.
#[derive(Debug, Clone)]
pub struct JobInfo {
    pub id: String,
    pub kind: String,
    pub state: JobState,
    pub description: String,
    pub command: String,
    pub started_at: SystemTime,
    pub runtime: Duration,
    /// What a running job is doing, when its producer says.
    pub note: Option<String>,
}

/// A read of a job's output.
#[derive(Debug, Clone)]
pub struct OutputRead {
    pub info: JobInfo,
    pub output: String,
    pub omitted_bytes: u64,
    pub next_cursor: u64,
    pub full_output_path: PathBuf,
    /// When the spill file could not be written: a note saying so and why, and that
    /// only the newest bytes (the in-memory tail) are kept.
    pub spill_failed: Option<String>,
}

/// What a kill did.
#[derive(Debug, Clone)]
pub struct KillReport {
    pub info: JobInfo,
    /// False when the job had already ended and nothing was sent.
    pub sent: bool,
    pub signal: &'static str,
    pub escalated: bool,
    pub waited: Duration,
}

/// The retired ids of one owner an answer can still name as retired, per owner.
pub const RETIRED_IDS_REMEMBERED: usize = 4096;

/// Output so far: the whole of it in the spill file, the newest bytes in memory while
/// the job runs (a finished job's output is read from the file).
struct Output {
    tail: VecDeque<u8>,
    total: u64,
    file: Option<File>,
    write_error: Option<String>,
}

struct Status {
    state: JobState,
    ended: Option<Instant>,
    /// Why dsh signalled the job, recorded as the reason of its end.
    kill_reason: Option<String>,
}

/// How a job's producer stops what it runs: `job_kill` asks through it. The registry
/// never signals a process itself; the producer that started the processes does.
pub trait JobSignal: Send + Sync {
    /// Sends `signal` (its number) to what the job runs.
    fn signal(&self, signal: i32);
}

/// One job. Producers report into it; the registry reads it.
pub struct Job {
    pub id: String,
    pub kind: String,
    pub owner: Arc<str>,
    pub description: String,
    pub command: String,
    pub spill_path: PathBuf,
    started_at: SystemTime,
    started: Instant,
    /// How its producer signals what it runs (none until the producer has processes;
    /// a background terminal send has none and stops on `cancel`).
    signaller: Mutex<Option<Arc<dyn JobSignal>>>,
    status: Mutex<Status>,
    output: Mutex<Output>,
    changed: Notify,
    /// The owner's resource changes, and this job's id as they name it.
    changes: OwnerChanges,
    change_id: Arc<str>,
    /// Cancelled by `kill`: producers without a process group of their own (a
    /// background terminal send) stop on it.
    pub cancel: tokio_util::sync::CancellationToken,
    tail_bytes: usize,
    max_output_bytes: u64,
    /// What it is doing, when its producer says (shown while it runs).
    note: Mutex<Option<String>>,
    /// The clients the owner's waiting reads lend it (used only by a producer that
    /// borrows them).
    lenders: Mutex<Vec<Lender>>,
    lenders_changed: Notify,
    next_lender: std::sync::atomic::AtomicU64,
    borrows_clients: std::sync::atomic::AtomicBool,
    /// Where its `job/end` event goes (the session's event log, once the host has one).
    events: Option<JobEvents>,
    /// The call that started it, held live while it runs: what it changes in the
    /// workspace is recorded under that call (`[undo]`).
    workspace_changes: Mutex<Option<crate::services::undo::ActivityHold>>,
}

/// A client lent to a job by a read waiting on it.
struct Lender {
    id: u64,
    sampler: Arc<dyn Sampler>,
    /// Lent out: a request of the producer's is on it now.
    busy: bool,
}

/// A client a job's producer borrowed from a waiting read: returned when dropped.
pub struct BorrowedClient {
    job: Arc<Job>,
    id: u64,
    pub sampler: Arc<dyn Sampler>,
}

impl Drop for BorrowedClient {
    fn drop(&mut self) {
        if let Some(lender) = self
            .job
            .lenders
            .lock()
            .unwrap()
            .iter_mut()
            .find(|l| l.id == self.id)
        {
            lender.busy = false;
        }
        self.job.lenders_changed.notify_waiters();
    }
}

/// A read's loan of its client to a job, taken back when dropped.
struct Loan {
    job: Arc<Job>,
    id: u64,
}

impl Loan {
    /// Waits until no request of the producer's is on this loan.
    async fn returned(&self) {
        loop {
            let changed = self.job.lenders_changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let busy = self
                .job
                .lenders
                .lock()
                .unwrap()
                .iter()
                .any(|l| l.id == self.id && l.busy);
            if !busy {
                return;
            }
            changed.await;
        }
    }
}

impl Drop for Loan {
    fn drop(&mut self) {
        self.job.lenders.lock().unwrap().retain(|l| l.id != self.id);
        self.job.lenders_changed.notify_waiters();
    }
}

impl Job {
    /// Says what the running job is doing (`None`: nothing to say).
    pub fn set_note(&self, note: Option<String>) {
        *self.note.lock().unwrap() = note;
        self.changes.report(ResourceChange::Listed);
    }

    /// Marks the job as one whose producer borrows its owner's client: the owner's
    /// waiting reads lend it theirs.
    pub fn borrows_clients(&self) {
        self.borrows_clients
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// Waits for a client lent by one of the owner's waiting reads and borrows it; the
    /// read does not return before it is given back (dropped).
    pub async fn borrow_client(self: &Arc<Self>) -> BorrowedClient {
        loop {
            let changed = self.lenders_changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            {
                let mut lenders = self.lenders.lock().unwrap();
                if let Some(lender) = lenders.iter_mut().rev().find(|l| !l.busy) {
                    lender.busy = true;
                    return BorrowedClient {
                        job: self.clone(),
                        id: lender.id,
                        sampler: lender.sampler.clone(),
                    };
                }
            }
            changed.await;
        }
    }

    /// Lends `sampler` to the job until the loan is dropped.
    fn lend(self: &Arc<Self>, sampler: Arc<dyn Sampler>) -> Loan {
        let id = self
            .next_lender
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.lenders.lock().unwrap().push(Lender {
            id,
            sampler,
            busy: false,
        });
        self.lenders_changed.notify_waiters();
        Loan {
            job: self.clone(),
            id,
        }
    }

    /// How the producer signals what the job runs.
    pub fn set_signaller(&self, signaller: Arc<dyn JobSignal>) {
        *self.signaller.lock().unwrap() = Some(signaller);
    }

    /// Sends `signal` through the producer's signaller, if it gave one.
    fn signal(&self, signal: i32) {
        let signaller = self.signaller.lock().unwrap().clone();
        if let Some(signaller) = signaller {
            signaller.signal(signal);
        }
    }

    /// Appends output. `Err` with the reason when the job's output passed the disk cap
    /// (the producer then kills it): the bytes past the cap are dropped, so the spill
    /// file never holds more than the cap.
    pub fn push_output(&self, chunk: &[u8]) -> Result<(), String> {
        let mut output = self.output.lock().unwrap();
        let room = self.max_output_bytes.saturating_sub(output.total);
        let kept = &chunk[..room.min(chunk.len() as u64) as usize];
        output.total += kept.len() as u64;
        if let Some(file) = &mut output.file {
            if let Err(error) = file.write_all(kept) {
                tracing::warn!(job = %self.id, %error, path = %self.spill_path.display(), "cannot write a job's spill file; keeping its tail only");
                output.write_error = Some(crate::output::spill_error_text(&error));
                output.file = None;
                // What was written of it is not the full output: it goes, and frees its space.
                remove_spill_file(&self.spill_path);
            }
        }
        crate::output::push_tail(&mut output.tail, kept, self.tail_bytes);
        let over = kept.len() < chunk.len();
        drop(output);
        self.changed.notify_waiters();
        self.changes.report(ResourceChange::Updated {
            scheme: capability::OUTPUT_SCHEME,
            id: self.change_id.clone(),
        });
        if over {
            return Err(format!(
                "its output passed the cap of {} bytes ([jobs] max_output_bytes)",
                self.max_output_bytes
            ));
        }
        Ok(())
    }

    /// Attributes what the job changes in the workspace to the call `hold` holds, until
    /// the job ends (at once when it has ended already).
    pub fn hold_workspace_changes(&self, hold: crate::services::undo::ActivityHold) {
        if self.ended().is_none() {
            *self.workspace_changes.lock().unwrap() = Some(hold);
        }
    }

    /// Records the end of the job.
    pub fn finish(&self, state: JobState) {
        // Its changes are recorded under the call that started it, now that it is done.
        drop(self.workspace_changes.lock().unwrap().take());
        if let Some(events) = &self.events {
            let detail = match &state {
                JobState::Exited { code } => serde_json::json!({ "exit_code": code }),
                JobState::Killed { signal, reason } => {
                    serde_json::json!({ "signal": signal, "reason": reason })
                }
                JobState::Failed { reason } => serde_json::json!({ "reason": reason }),
                JobState::Running => serde_json::json!({}),
            };
            events(
                "job/end",
                serde_json::json!({
                    "job": self.id,
                    "kind": self.kind,
                    "owner": &*self.owner,
                    "state": state.name(),
                    "detail": detail,
                    "duration_ms": self.started.elapsed().as_millis() as u64,
                }),
            );
        }
        let mut status = self.status.lock().unwrap();
        let state = match state {
            JobState::Killed {
                signal,
                reason: None,
            } => JobState::Killed {
                signal,
                reason: status.kill_reason.clone(),
            },
            other => other,
        };
        status.state = state;
        status.ended = Some(Instant::now());
        drop(status);
        // Nothing more is written: close the spill file and drop the tail (reads come
        // from the file now), unless the file could not be written, where the tail is
        // all there is.
        let mut output = self.output.lock().unwrap();
        output.file = None;
        if output.write_error.is_none() {
            output.tail = VecDeque::new();
        }
        drop(output);
        self.changed.notify_waiters();
        self.changes.report(ResourceChange::Updated {
            scheme: capability::OUTPUT_SCHEME,
            id: self.change_id.clone(),
        });
        self.changes.report(ResourceChange::Listed);
    }

    /// When the job ended, if it has.
    fn ended(&self) -> Option<Instant> {
        self.status.lock().unwrap().ended
    }

    /// Notes why dsh is about to signal the job; becomes the reason of its end.
    pub fn set_kill_reason(&self, reason: String) {
        self.status
            .lock()
            .unwrap()
            .kill_reason
            .get_or_insert(reason);
    }

    fn state(&self) -> JobState {
        self.status.lock().unwrap().state.clone()
    }

    fn info(&self) -> JobInfo {
        let status = self.status.lock().unwrap();
        let runtime = status
            .ended
            .unwrap_or_else(Instant::now)
            .duration_since(self.started);
        JobInfo {
            id: self.id.clone(),
            kind: self.kind.clone(),
            state: status.state.clone(),
            description: self.description.clone(),
            command: self.command.clone(),
            started_at: self.started_at,
            runtime,
            note: match status.state {
                JobState::Running => self.note.lock().unwrap().clone(),
                _ => None,
            },
        }
    }

    /// Waits until the job has output past `cursor`, has ended, or `wait` passed.
    /// How many bytes of output it has had in all.
    fn output_total(&self) -> u64 {
        self.output.lock().unwrap().total
    }

    async fn wait_for_news(&self, cursor: u64, wait: Duration) {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.output.lock().unwrap().total > cursor || self.state() != JobState::Running {
                return;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return;
            }
        }
    }

    /// Waits up to `wait` for the job to end; true when it has.
    async fn wait_for_end(&self, wait: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.state() != JobState::Running {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.state() != JobState::Running;
            }
        }
    }

    /// When the spill file could not be written, the note every read carries.
    fn spill_failed(&self) -> Option<String> {
        let output = self.output.lock().unwrap();
        let why = output.write_error.as_ref()?;
        Some(format!(
            "[spill failed: the full output could not be kept in {}: {why}; only its newest {} bytes (from byte {}) are kept, in memory]",
            self.spill_path.display(),
            output.tail.len(),
            output.total - output.tail.len() as u64
        ))
    }

    /// Output from `since`, at most `max_bytes` (the newest ones when more are there).
    fn read(&self, since: u64, max_bytes: u64) -> Result<(Vec<u8>, u64, u64), ToolError> {
        let output = self.output.lock().unwrap();
        if since > output.total {
            return Err(ToolError::new(
                ErrorCode::InvalidArguments,
                format!(
                    "since {since} is past the end of {}'s output ({} bytes)",
                    self.id, output.total
                ),
            ));
        }
        let tail_start = output.total - output.tail.len() as u64;
        let mut start = since.max(output.total.saturating_sub(max_bytes));
        if output.write_error.is_some() {
            // There is no spill file: the tail is all there is.
            start = start.max(tail_start);
        }
        let omitted = start - since;
        let bytes = if start >= tail_start {
            output
                .tail
                .iter()
                .skip((start - tail_start) as usize)
                .copied()
                .collect()
        } else {
            let len = output.total - start;
            drop(output);
            let mut file = File::open(&self.spill_path).map_err(|e| {
                if e.kind() == std::io::ErrorKind::NotFound && self.ended().is_some() {
                    // Retired while this read was on its way.
                    ToolError::new(
                        ErrorCode::NotFound,
                        format!(
                            "job {:?} finished and was retired; its output was deleted",
                            self.id
                        ),
                    )
                } else {
                    internal(&self.spill_path, e)
                }
            })?;
            file.seek(SeekFrom::Start(start))
                .map_err(|e| internal(&self.spill_path, e))?;
            let mut bytes = Vec::with_capacity(len as usize);
            file.take(len)
                .read_to_end(&mut bytes)
                .map_err(|e| internal(&self.spill_path, e))?;
            bytes
        };
        let next = start + bytes.len() as u64;
        Ok((bytes, omitted, next))
    }
}

fn internal(path: &std::path::Path, error: std::io::Error) -> ToolError {
    ToolError::new(
        ErrorCode::Internal,
        format!("cannot read {}: {error}", path.display()),
    )
}

/// The signals a job may be sent.
/// A signal by name, with or without `SIG`, in any case, among `allowed` (names
/// without `SIG`): its number and its name (`job_kill`, `terminal_kill`).
pub fn signal_named(name: &str, allowed: &[&'static str]) -> Option<(i32, &'static str)> {
    const SIGNALS: &[(&str, i32)] = &[
        ("TERM", dsh_launch::os::SIGTERM),
        ("INT", dsh_launch::os::SIGINT),
        ("HUP", dsh_launch::os::SIGHUP),
        ("QUIT", dsh_launch::os::SIGQUIT),
        ("KILL", dsh_launch::os::SIGKILL),
        ("TSTP", dsh_launch::os::SIGTSTP),
        ("CONT", dsh_launch::os::SIGCONT),
    ];
    let wanted = name.trim_start_matches("SIG").to_ascii_uppercase();
    let name = allowed.iter().find(|allowed| **allowed == wanted)?;
    SIGNALS
        .iter()
        .find(|(known, _)| known == name)
        .map(|(_, number)| (*number, *name))
}

const JOB_SIGNALS: &[&str] = &["TERM", "INT", "HUP", "QUIT", "KILL"];

#[derive(Default)]
struct Table {
    next: HashMap<String, u64>,
    /// Insertion order, for listing oldest first.
    order: BTreeMap<u64, Arc<Job>>,
    by_id: HashMap<String, (u64, Arc<Job>)>,
    sequence: u64,
    /// Per owner, the ids it had retired, newest last (at most
    /// [`RETIRED_IDS_REMEMBERED`]).
    retired: HashMap<Arc<str>, RetiredIds>,
}

/// One owner's remembered retired ids.
#[derive(Default)]
struct RetiredIds {
    order: VecDeque<String>,
    ids: HashSet<String>,
}

impl RetiredIds {
    fn remember(&mut self, id: String) {
        if self.order.len() >= RETIRED_IDS_REMEMBERED {
            if let Some(oldest) = self.order.pop_front() {
                self.ids.remove(&oldest);
            }
        }
        self.ids.insert(id.clone());
        self.order.push_back(id);
    }
}

/// What a job is made of, besides what every job starts with.
struct JobParts {
    id: String,
    kind: String,
    owner: Arc<str>,
    description: String,
    command: String,
    spill_path: PathBuf,
    started_at: SystemTime,
    started: Instant,
    status: Status,
    output: Output,
    note: Option<String>,
}

/// The registry of every job.
pub struct JobRegistry {
    config: JobsConfig,
    kill_grace: Duration,
    spill_dir: PathBuf,
    table: Mutex<Table>,
    changes: ResourceChanges,
    /// Where the jobs' `job/start` and `job/end` events go, once the host has a pipeline.
    events: std::sync::OnceLock<JobEvents>,
}

/// Writes an event (its kind and fields) to the session's event log.
pub type JobEvents = Arc<dyn Fn(&str, serde_json::Value) + Send + Sync>;

impl std::fmt::Debug for JobRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobRegistry")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl JobRegistry {
    pub fn new(config: JobsConfig, kill_grace: Duration, spill_dir: PathBuf) -> Self {
        JobRegistry {
            config,
            kill_grace,
            spill_dir,
            table: Mutex::default(),
            changes: ResourceChanges::default(),
            events: std::sync::OnceLock::new(),
        }
    }

    /// Sends the jobs' start and end events to `events` from now on (set once).
    pub fn set_events(&self, events: JobEvents) {
        let _ = self.events.set(events);
    }

    /// Every owner's resource changes: what its jobs (and terminal sessions) report.
    pub fn changes(&self) -> &ResourceChanges {
        &self.changes
    }

    /// Retires the finished jobs past the count or the age kept per owner: they leave
    /// the table (their ids are remembered for their owner) and their spill files are
    /// deleted.
    fn retire(&self, table: &mut Table) {
        let now = Instant::now();
        let retention = Duration::from_millis(self.config.finished_retention_ms);
        let mut finished: HashMap<&Arc<str>, Vec<(Instant, u64)>> = HashMap::new();
        for (sequence, job) in &table.order {
            if let Some(ended) = job.ended() {
                finished
                    .entry(&job.owner)
                    .or_default()
                    .push((ended, *sequence));
            }
        }
        let mut retiring = Vec::new();
        for mut jobs in finished.into_values() {
            // Newest first: the first `max_finished_per_owner` young enough stay.
            jobs.sort_unstable_by(|a, b| b.cmp(a));
            retiring.extend(
                jobs.iter()
                    .enumerate()
                    .filter(|(rank, (ended, _))| {
                        *rank >= self.config.max_finished_per_owner
                            || now.saturating_duration_since(*ended) >= retention
                    })
                    .map(|(_, (_, sequence))| *sequence),
            );
        }
        for sequence in retiring {
            let Some(job) = table.order.remove(&sequence) else {
                continue;
            };
            table.by_id.remove(&job.id);
            job.changes.report(ResourceChange::Listed);
            table
                .retired
                .entry(job.owner.clone())
                .or_default()
                .remember(job.id.clone());
            remove_spill_file(&job.spill_path);
            tracing::debug!(job = %job.id, owner = %job.owner, "retired a finished job");
        }
    }

    /// Registers a new running job of `kind` for `owner`, or refuses with
    /// `LIMIT_EXCEEDED` when the owner already runs the most jobs allowed.
    pub fn create(
        &self,
        kind: &str,
        owner: Arc<str>,
        description: String,
        command: String,
    ) -> Result<Arc<Job>, ToolError> {
        let mut table = self.table.lock().unwrap();
        self.retire(&mut table);
        let running = table
            .order
            .values()
            .filter(|job| job.owner == owner && job.state() == JobState::Running)
            .count();
        if running >= self.config.max_running_per_owner {
            return Err(ToolError::new(
                ErrorCode::LimitExceeded,
                format!(
                    "already {running} running jobs, the most allowed per owner ([jobs] max_running_per_owner); kill or wait for one"
                ),
            ));
        }
        let n = {
            let counter = table.next.entry(kind.to_string()).or_insert(0);
            *counter += 1;
            *counter
        };
        let id = format!("{kind}-{n}");
        let spill_path = self.spill_dir.join(format!("job-{id}.txt"));
        let file = crate::private::create_dir_all(&self.spill_dir)
            .and_then(|_| crate::private::create_file(&spill_path));
        let (file, write_error) = match file {
            Ok(file) => (Some(file), None),
            Err(error) => {
                tracing::warn!(job = %id, %error, path = %spill_path.display(), "cannot create a job's spill file; keeping its tail only");
                remove_spill_file(&spill_path);
                (None, Some(crate::output::spill_error_text(&error)))
            }
        };
        let job = self.enter(
            &mut table,
            JobParts {
                id,
                kind: kind.to_string(),
                owner,
                description,
                command,
                spill_path,
                started_at: SystemTime::now(),
                started: Instant::now(),
                status: Status {
                    state: JobState::Running,
                    ended: None,
                    kill_reason: None,
                },
                output: Output {
                    tail: VecDeque::new(),
                    total: 0,
                    file,
                    write_error,
                },
                note: None,
            },
        );
        drop(table);
        if let Some(events) = &job.events {
            events(
                "job/start",
                serde_json::json!({
                    "job": job.id,
                    "kind": job.kind,
                    "owner": &*job.owner,
                    "description": job.description,
                    "command": job.command,
                }),
            );
        }
        job.changes.report(ResourceChange::Listed);
        Ok(job)
    }

    /// Makes the job `parts` describe (with no signaller, no loans and a fresh cancel
    /// token) and enters it in `table`, newest.
    fn enter(&self, table: &mut Table, parts: JobParts) -> Arc<Job> {
        let job = Arc::new(Job {
            changes: self.changes.for_owner(&parts.owner),
            change_id: parts.id.as_str().into(),
            id: parts.id,
            kind: parts.kind,
            owner: parts.owner,
            description: parts.description,
            command: parts.command,
            spill_path: parts.spill_path,
            started_at: parts.started_at,
            started: parts.started,
            signaller: Mutex::new(None),
            status: Mutex::new(parts.status),
            output: Mutex::new(parts.output),
            changed: Notify::new(),
            cancel: tokio_util::sync::CancellationToken::new(),
            tail_bytes: self.config.tail_bytes.max(1),
            max_output_bytes: self.config.max_output_bytes,
            note: Mutex::new(parts.note),
            lenders: Mutex::new(Vec::new()),
            lenders_changed: Notify::new(),
            next_lender: std::sync::atomic::AtomicU64::new(0),
            borrows_clients: std::sync::atomic::AtomicBool::new(false),
            events: self.events.get().cloned(),
            workspace_changes: Mutex::new(None),
        });
        table.sequence += 1;
        let sequence = table.sequence;
        table.order.insert(sequence, job.clone());
        table.by_id.insert(job.id.clone(), (sequence, job.clone()));
        job
    }

    /// The job `id` if `owner` owns it; `NOT_FOUND` saying so when it was one of the
    /// owner's jobs and was retired; otherwise the same `NOT_FOUND` as for an id that
    /// never existed (another owner's id, retired or not, is not told apart).
    fn get(&self, owner: &str, id: &str) -> Result<Arc<Job>, ToolError> {
        let mut table = self.table.lock().unwrap();
        self.retire(&mut table);
        match table.by_id.get(id) {
            Some((_, job)) if &*job.owner == owner => return Ok(job.clone()),
            _ => {}
        }
        let retired = table
            .retired
            .get(owner)
            .is_some_and(|retired| retired.ids.contains(id));
        if retired {
            return Err(ToolError::new(
                ErrorCode::NotFound,
                format!(
                    "job {id:?} finished and was retired, its output deleted: dsh keeps an owner's newest {} finished jobs, each for {} ([jobs] max_finished_per_owner, finished_retention_ms)",
                    self.config.max_finished_per_owner,
                    duration_text(self.config.finished_retention_ms),
                ),
            ));
        }
        Err(ToolError::new(
            ErrorCode::NotFound,
            format!("no job {id:?}"),
        ))
    }

    /// Attributes what `owner`'s job `id` changes in the workspace to the call `hold`
    /// holds (the call that started it, still running now), until the job ends.
    pub fn hold_workspace_changes(
        &self,
        owner: &str,
        id: &str,
        hold: crate::services::undo::ActivityHold,
    ) {
        if let Ok(job) = self.get(owner, id) {
            job.hold_workspace_changes(hold);
        }
    }

    /// The owner's jobs, oldest first.
    pub fn list(&self, owner: &str) -> Vec<JobInfo> {
        let mut table = self.table.lock().unwrap();
        self.retire(&mut table);
        table
            .order
            .values()
            .filter(|job| &*job.owner == owner)
            .map(|job| job.info())
            .collect()
    }

    /// Every owner's jobs, oldest first, for the operator (the console).
    pub fn every_job(&self) -> Vec<(Arc<str>, JobInfo)> {
        let mut table = self.table.lock().unwrap();
        self.retire(&mut table);
        table
            .order
            .values()
            .map(|job| (job.owner.clone(), job.info()))
            .collect()
    }

    /// Reads a job's output from `since`, waiting up to `wait` for something new.
    pub async fn output(
        &self,
        owner: &str,
        id: &str,
        since: u64,
        max_bytes: u64,
        wait: Duration,
    ) -> Result<OutputRead, ToolError> {
        self.output_lending(owner, id, Some(since), max_bytes, wait, None)
            .await
    }

    /// [`JobRegistry::output`], lending the job `client` while it waits when its
    /// producer borrows clients; it then returns only once a request on it is answered.
    pub async fn output_lending(
        &self,
        owner: &str,
        id: &str,
        since: Option<u64>,
        max_bytes: u64,
        wait: Duration,
        client: Option<Arc<dyn Sampler>>,
    ) -> Result<OutputRead, ToolError> {
        let job = self.get(owner, id)?;
        let from = since.unwrap_or(0);
        if !wait.is_zero() {
            let borrows = job
                .borrows_clients
                .load(std::sync::atomic::Ordering::Acquire);
            let loan = match client {
                Some(client) if borrows && job.state() == JobState::Running => {
                    Some(job.lend(client))
                }
                _ => None,
            };
            // A wait is for what is new: past `since`, or without one past what the job
            // had when the read began (the read still returns everything from the start).
            // A wait that lends the client waits for what the job does with it, whatever
            // its `since` says. Else a model that reads without `since` would get the
            // output so far at once, every time: a busy poll, and a job on the client's
            // model would never get the client for its next step.
            let news_after = match (since, &loan) {
                (Some(since), Some(_)) => since.max(job.output_total()),
                (Some(since), None) => since,
                (None, _) => job.output_total(),
            };
            job.wait_for_news(
                news_after,
                wait.min(Duration::from_millis(self.config.max_wait_ms)),
            )
            .await;
            if let Some(loan) = loan {
                loan.returned().await;
            }
        }
        let (bytes, omitted_bytes, next_cursor) = job.read(from, max_bytes)?;
        let spill_failed = job.spill_failed();
        Ok(OutputRead {
            info: job.info(),
            output: String::from_utf8_lossy(&bytes).into_owned(),
            omitted_bytes,
            next_cursor,
            full_output_path: job.spill_path.clone(),
            spill_failed,
        })
    }

    /// Signals the job's whole process group; after a catchable signal, a group still
    /// alive after the grace period gets KILL.
    pub async fn kill(&self, owner: &str, id: &str, signal: &str) -> Result<KillReport, ToolError> {
        let (number, name) = signal_named(signal, JOB_SIGNALS).ok_or_else(|| {
            ToolError::new(
                ErrorCode::InvalidArguments,
                format!("unknown signal {signal:?}: use {}", JOB_SIGNALS.join(", ")),
            )
        })?;
        let job = self.get(owner, id)?;
        let started = Instant::now();
        if job.state() != JobState::Running {
            return Ok(KillReport {
                info: job.info(),
                sent: false,
                signal: name,
                escalated: false,
                waited: Duration::ZERO,
            });
        }
        job.set_kill_reason(format!("SIG{name} sent by job_kill"));
        job.signal(number);
        job.cancel.cancel();
        let mut escalated = false;
        if !job.wait_for_end(self.kill_grace).await && number != dsh_launch::os::SIGKILL {
            escalated = true;
            job.signal(dsh_launch::os::SIGKILL);
            job.wait_for_end(Duration::from_secs(5)).await;
        }
        Ok(KillReport {
            info: job.info(),
            sent: true,
            signal: name,
            escalated,
            waited: started.elapsed(),
        })
    }

    /// Forgets every job of `owner` and deletes their spill files (its processes are
    /// killed by their producer; nobody can ask for these jobs any more).
    pub fn forget_owner(&self, owner: &str) -> usize {
        let mut table = self.table.lock().unwrap();
        let mut gone = Vec::new();
        table.order.retain(|_, job| {
            let keep = &*job.owner != owner;
            if !keep {
                gone.push(job.spill_path.clone());
            }
            keep
        });
        table.by_id.retain(|_, (_, job)| &*job.owner != owner);
        table.retired.remove(owner);
        drop(table);
        self.changes.forget_owner(owner);
        for path in &gone {
            remove_spill_file(path);
        }
        gone.len()
    }

    /// How many jobs are running, of every owner.
    pub fn running(&self) -> usize {
        let table = self.table.lock().unwrap();
        let running = table.order.values();
        running
            .filter(|job| job.state() == JobState::Running)
            .count()
    }

    /// How many jobs the registry holds, running and finished (for tests and stats).
    pub fn len(&self) -> usize {
        self.table.lock().unwrap().order.len()
    }

    /// True when the registry holds no job.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Deletes a retired or forgotten job's spill file (gone already is fine).
fn remove_spill_file(path: &std::path::Path) {
    if let Err(error) = std::fs::remove_file(path) {
        if error.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(path = %path.display(), %error, "cannot delete a job's spill file");
        }
    }
}

/// `ms` as the model reads it: whole seconds when it is some, else milliseconds.
fn duration_text(ms: u64) -> String {
    if ms >= 1000 && ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else {
        format!("{ms} ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registry(dir: &std::path::Path, tail: usize) -> JobRegistry {
        let config = JobsConfig {
            tail_bytes: tail,
            ..JobsConfig::default()
        };
        JobRegistry::new(config, Duration::from_millis(100), dir.to_path_buf())
    }

    #[tokio::test]
    async fn a_job_whose_spill_fails_keeps_its_tail_and_every_read_says_so() {
        let dir = tempfile::tempdir().unwrap();
        // The spill directory is a file: no spill file can be made.
        let blocked = dir.path().join("blocked");
        std::fs::write(&blocked, "").unwrap();
        let jobs = registry(&blocked, 4);
        let job = jobs
            .create("bash", "a".into(), "d".into(), "c".into())
            .unwrap();
        job.push_output(b"12345678").unwrap();
        job.finish(JobState::Exited { code: 0 });
        let read = jobs
            .output("a", &job.id, 0, 100, Duration::ZERO)
            .await
            .unwrap();
        assert_eq!(read.output, "5678", "the tail, from where it starts");
        assert_eq!((read.omitted_bytes, read.next_cursor), (4, 8));
        let note = read.spill_failed.expect("the read says the spill failed");
        assert!(
            note.contains("spill failed: the full output could not be kept in")
                && note.contains("newest 4 bytes (from byte 4)"),
            "{note}"
        );
        assert!(!job.spill_path.exists());
    }

    /// A running job keeps its newest `tail_bytes` (1 MiB by default) in memory, however
    /// much it prints: after 100 MB, the tail holds exactly the newest MiB and its buffer
    /// never grew past twice that; the rest is in the spill file only.
    #[tokio::test]
    async fn a_running_job_keeps_only_its_newest_mib_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        let jobs = JobRegistry::new(
            JobsConfig::default(),
            Duration::from_millis(100),
            dir.path().to_path_buf(),
        );
        let job = jobs
            .create("bash", "o".into(), "d".into(), "c".into())
            .unwrap();
        let mib = JobsConfig::default().tail_bytes;
        assert_eq!(mib, 1 << 20);
        let chunk: Vec<u8> = (0..65536u32).map(|i| (i % 251) as u8).collect();
        let mut largest = 0;
        for _ in 0..(100 << 20) / chunk.len() {
            job.push_output(&chunk).unwrap();
            largest = largest.max(job.output.lock().unwrap().tail.capacity());
        }
        let output = job.output.lock().unwrap();
        assert_eq!(output.total, 100 << 20);
        assert_eq!(output.tail.len(), mib);
        assert!(
            largest <= 2 * mib,
            "the tail's buffer grew to {largest} bytes"
        );
        let newest: Vec<u8> = output.tail.iter().copied().collect();
        assert_eq!(&newest[..], &chunk.repeat(mib / chunk.len())[..]);
        drop(output);
        assert_eq!(std::fs::metadata(&job.spill_path).unwrap().len(), 100 << 20);
    }

    #[tokio::test]
    async fn ids_count_per_kind_and_other_owners_get_not_found() {
        let dir = tempfile::tempdir().unwrap();
        let jobs = registry(dir.path(), 100);
        let a = jobs
            .create("bash", "a".into(), "d".into(), "c".into())
            .unwrap();
        let b = jobs
            .create("bash", "b".into(), "d".into(), "c".into())
            .unwrap();
        let t = jobs
            .create("terminal", "a".into(), "d".into(), "c".into())
            .unwrap();
        assert_eq!(
            (a.id.as_str(), b.id.as_str(), t.id.as_str()),
            ("bash-1", "bash-2", "terminal-1")
        );
        let foreign = jobs
            .output("a", "bash-2", 0, 10, Duration::ZERO)
            .await
            .unwrap_err();
        let missing = jobs
            .output("a", "bash-99", 0, 10, Duration::ZERO)
            .await
            .unwrap_err();
        assert_eq!(foreign.code, ErrorCode::NotFound);
        assert_eq!(
            foreign.message.replace("bash-2", "X"),
            missing.message.replace("bash-99", "X")
        );
        assert_eq!(jobs.list("a").len(), 2);
    }

    #[tokio::test]
    async fn reads_follow_the_cursor_and_old_bytes_come_from_the_spill_file() {
        let dir = tempfile::tempdir().unwrap();
        let jobs = registry(dir.path(), 4);
        let job = jobs
            .create("bash", "o".into(), "d".into(), "c".into())
            .unwrap();
        job.push_output(b"hello ").unwrap();
        job.push_output(b"world").unwrap();
        let read = jobs
            .output("o", &job.id, 0, 100, Duration::ZERO)
            .await
            .unwrap();
        assert_eq!(
            (read.output.as_str(), read.omitted_bytes, read.next_cursor),
            ("hello world", 0, 11)
        );
        let again = jobs
            .output("o", &job.id, read.next_cursor, 100, Duration::ZERO)
            .await
            .unwrap();
        assert_eq!(again.output, "");
        let newest = jobs
            .output("o", &job.id, 0, 3, Duration::ZERO)
            .await
            .unwrap();
        assert_eq!((newest.output.as_str(), newest.omitted_bytes), ("rld", 8));
        let past = jobs
            .output("o", &job.id, 12, 3, Duration::ZERO)
            .await
            .unwrap_err();
        assert_eq!(past.code, ErrorCode::InvalidArguments);
    }

    #[tokio::test]
    async fn the_running_limit_is_per_owner() {
        let dir = tempfile::tempdir().unwrap();
        let config = JobsConfig {
            max_running_per_owner: 1,
            ..JobsConfig::default()
        };
        let jobs = JobRegistry::new(config, Duration::from_millis(100), dir.path().to_path_buf());
        let first = jobs
            .create("bash", "o".into(), "d".into(), "c".into())
            .unwrap();
        let refused = jobs
            .create("bash", "o".into(), "d".into(), "c".into())
            .err()
            .expect("refused");
        assert_eq!(refused.code, ErrorCode::LimitExceeded);
        assert!(jobs
            .create("bash", "other".into(), "d".into(), "c".into())
            .is_ok());
        first.finish(JobState::Exited { code: 0 });
        assert!(jobs
            .create("bash", "o".into(), "d".into(), "c".into())
            .is_ok());
    }

    fn registry_with(dir: &std::path::Path, config: JobsConfig) -> JobRegistry {
        JobRegistry::new(config, Duration::from_millis(100), dir.to_path_buf())
    }

    #[tokio::test]
    async fn a_finished_job_closes_its_file_drops_its_tail_and_is_read_from_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let jobs = registry(dir.path(), 1 << 20);
        let job = jobs
            .create("bash", "o".into(), "d".into(), "c".into())
            .unwrap();
        job.push_output(b"hello world").unwrap();
        assert!(job.output.lock().unwrap().file.is_some());
        job.finish(JobState::Exited { code: 0 });
        {
            let output = job.output.lock().unwrap();
            assert!(output.file.is_none(), "the spill file is closed");
            assert_eq!(output.tail.capacity(), 0, "the tail is dropped");
        }
        let read = jobs
            .output("o", &job.id, 6, 100, Duration::ZERO)
            .await
            .unwrap();
        assert_eq!((read.output.as_str(), read.next_cursor), ("world", 11));
    }

    #[tokio::test]
    async fn output_past_the_cap_is_refused_and_never_reaches_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let config = JobsConfig {
            max_output_bytes: 8,
            ..JobsConfig::default()
        };
        let jobs = registry_with(dir.path(), config);
        let job = jobs
            .create("terminal", "o".into(), "d".into(), "c".into())
            .unwrap();
        job.push_output(b"12345").unwrap();
        let over = job.push_output(b"6789").unwrap_err();
        assert!(over.contains("max_output_bytes"), "{over}");
        assert!(job.push_output(b"more").is_err());
        job.finish(JobState::Exited { code: 0 });
        assert_eq!(std::fs::read(&job.spill_path).unwrap(), b"12345678");
    }

    #[tokio::test]
    async fn past_the_count_the_oldest_finished_are_retired_and_their_files_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let config = JobsConfig {
            max_finished_per_owner: 2,
            ..JobsConfig::default()
        };
        let jobs = registry_with(dir.path(), config);
        let running = jobs
            .create("bash", "o".into(), "d".into(), "c".into())
            .unwrap();
        let mut finished = Vec::new();
        for _ in 0..4 {
            let job = jobs
                .create("bash", "o".into(), "d".into(), "c".into())
                .unwrap();
            job.push_output(b"x").unwrap();
            job.finish(JobState::Exited { code: 0 });
            finished.push(job);
        }
        let ids: Vec<String> = jobs.list("o").into_iter().map(|info| info.id).collect();
        assert_eq!(ids, [running.id.as_str(), &finished[2].id, &finished[3].id]);
        assert!(!finished[0].spill_path.exists() && !finished[1].spill_path.exists());
        assert!(finished[3].spill_path.exists() && running.spill_path.exists());
        let retired = jobs
            .output("o", &finished[0].id, 0, 10, Duration::ZERO)
            .await
            .unwrap_err();
        assert_eq!(retired.code, ErrorCode::NotFound);
        assert!(retired.message.contains("retired"), "{}", retired.message);
        let killed = jobs.kill("o", &finished[1].id, "TERM").await.unwrap_err();
        assert!(killed.message.contains("retired"), "{}", killed.message);
    }

    #[tokio::test]
    async fn another_owner_cannot_tell_a_retired_id_from_one_that_never_existed() {
        let dir = tempfile::tempdir().unwrap();
        let config = JobsConfig {
            finished_retention_ms: 0,
            ..JobsConfig::default()
        };
        let jobs = registry_with(dir.path(), config);
        let job = jobs
            .create("bash", "a".into(), "d".into(), "c".into())
            .unwrap();
        job.finish(JobState::Exited { code: 0 });
        assert!(jobs.list("a").is_empty(), "retired at once (retention 0)");
        let own = jobs
            .output("a", &job.id, 0, 10, Duration::ZERO)
            .await
            .unwrap_err();
        assert!(own.message.contains("retired"), "{}", own.message);
        let foreign = jobs
            .output("b", &job.id, 0, 10, Duration::ZERO)
            .await
            .unwrap_err();
        let missing = jobs
            .output("b", "bash-99", 0, 10, Duration::ZERO)
            .await
            .unwrap_err();
        assert_eq!(foreign.code, ErrorCode::NotFound);
        assert_eq!(
            foreign.message.replace(&job.id, "X"),
            missing.message.replace("bash-99", "X")
        );
    }

    #[tokio::test]
    async fn a_gone_owner_leaves_no_job_and_no_spill_file() {
        let dir = tempfile::tempdir().unwrap();
        let jobs = registry(dir.path(), 100);
        let job = jobs
            .create("bash", "o".into(), "d".into(), "c".into())
            .unwrap();
        job.finish(JobState::Exited { code: 0 });
        assert_eq!(jobs.forget_owner("o"), 1);
        assert!(jobs.is_empty());
        assert!(!job.spill_path.exists());
    }

    #[tokio::test]
    async fn waiting_returns_on_new_output() {
        let dir = tempfile::tempdir().unwrap();
        let jobs = Arc::new(registry(dir.path(), 100));
        let job = jobs
            .create("bash", "o".into(), "d".into(), "c".into())
            .unwrap();
        let writer = job.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            writer.push_output(b"late").unwrap();
        });
        let started = Instant::now();
        let read = jobs
            .output("o", &job.id, 0, 100, Duration::from_secs(10))
            .await
            .unwrap();
        assert_eq!(read.output, "late");
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
