//! The process service: managed process trees on the host.
//!
//! Owns every process a call starts. Each command runs as `bash -c` in a new process
//! group and in a container of its own ([`containment`]: a cgroup, or the subreaper
//! fallback), with stdin from `/dev/null`, stdout and stderr on one pipe, a parent-death
//! signal and the environment of the `[process.env]` policy ([`environment`]). A command
//! longer than [`SCRIPT_THRESHOLD`] (the kernel refuses an argument over 128 KiB) goes in a
//! sealed memfd instead, which `bash -c` reads from descriptor 3, closes and `eval`s
//! ([`LONG_COMMAND`]). On
//! timeout the group gets TERM, then after a grace period the whole container gets
//! KILL; when the shell returns the container is killed too, so nothing it started is
//! left running, whatever session or group it moved to. Output reading stops a short
//! drain period after the shell exits, so a process that holds the pipe cannot hang the
//! call. A run whose future is dropped (a cancelled or timed-out call) is killed on the
//! spot.
//!
//! Every process starts through the [`launcher`] ([`Launch::start`]): the executor, the
//! environment, the containment run, the spawn and the leader, in one place. The
//! launcher, containment, the executors and the spawn are the launch platform, the crate
//! `dsh_launch` below every capability (re-exported here); this module is the `process`
//! capability built on it: commands run to their end or in the background, their
//! output, their timeouts and kills, and the handover of jobs at an upgrade.
//!
//! Each run has an executor ([`ExecutorKind`], chosen per call by `[process.executor]`):
//! `local` runs the command as described; `sandbox` ([`executor`]) also confines it
//! with namespaces, Landlock and seccomp, applied by the child just before `exec`, and
//! gives it a private `TMPDIR` removed when the run ends; `container`
//! ([`executor::container`]) adds PID, network and UTS namespaces, a user namespace
//! whose root is not the host's, a fresh `/proc` and an idmapped workspace.
//! Containment and the environment policy are the same for all three; a confined
//! outcome carries its `[sandbox: …]` line.
//!
//! Native only: nothing here knows wasmtime. The WIT binding is in [`wit`].

pub mod capability;
pub mod config;
pub mod environment;
pub mod handover;
pub mod wit;

pub use dsh_launch::{containment, executor, launcher, peer, seccomp};
pub use dsh_launch::{find_program, signal_group, HostPlaces, Launch, LaunchError as ProcessError};

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;

use std::os::unix::process::ExitStatusExt;

use crate::error::{ErrorCode, ToolError};
use crate::output::BoundedCapture;
use crate::services::jobs::{JobRegistry, JobSignal, JobState};
pub use config::{ContainmentMode, ExecutorKind, ProcessConfig};

/// The structured error a caller gets for a command that could not be run at all.
impl From<ProcessError> for ToolError {
    fn from(error: ProcessError) -> Self {
        match error {
            ProcessError::BadWorkdir(_) | ProcessError::NulByte => {
                ToolError::new(ErrorCode::InvalidArguments, error.to_string())
            }
            ProcessError::Sandbox(error) => error.into(),
            // Another executor's error, or one that cannot be built here: the host's.
            ProcessError::Executor(error) => {
                ToolError::new(ErrorCode::Internal, format!("sandbox unavailable: {error}"))
            }
            _ => ToolError::new(ErrorCode::Internal, error.to_string()),
        }
    }
}

/// The structured error a caller gets for a run that cannot be confined: the model's
/// mistake for a working directory outside the workspace, else the host's.
impl From<executor::SandboxError> for ToolError {
    fn from(error: executor::SandboxError) -> Self {
        match error {
            executor::SandboxError::OutsideWorkspace { .. } => {
                ToolError::new(ErrorCode::InvalidArguments, error.to_string())
            }
            _ => ToolError::new(ErrorCode::Internal, format!("sandbox unavailable: {error}")),
        }
    }
}

/// A foreground command.
#[derive(Debug, Clone)]
pub struct RunSpec {
    /// Who the process tree belongs to.
    pub owner: Arc<str>,
    pub command: String,
    /// Absolute working directory.
    pub cwd: PathBuf,
    pub timeout: Duration,
    /// Most output bytes returned (head + tail).
    pub capture_bytes: usize,
    /// Where the full output goes when it is longer than `capture_bytes`.
    pub spill_path: PathBuf,
    /// The most bytes the spill file holds (`[limits] max_spill_bytes`).
    pub spill_cap: u64,
    pub env: Vec<(String, String)>,
    /// What runs it.
    pub executor: ExecutorKind,
    /// Its network by policy (`[egress]`), if the executor confines it and a policy
    /// allows any host.
    pub network: Option<dsh_launch::network::Network>,
}

/// How a command ended.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    pub output: crate::output::Bounded,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub duration: Duration,
    /// A sandboxed run's `[sandbox: …]` line.
    pub sandbox: Option<String>,
}

/// Live runs by process group, with their owners.
type LiveGroups = Arc<Mutex<HashMap<i32, (Arc<str>, Arc<containment::Run>)>>>;

/// The host's process service: runs commands and knows every live process group and
/// its owner, so that an owner's end or the host's shutdown can kill them.
#[derive(Debug, Clone)]
pub struct ProcessService {
    config: ProcessConfig,
    live_groups: LiveGroups,
    launch: Arc<Launch>,
    /// The background jobs' tasks, which an upgrade pauses ([`handover`]).
    job_tasks: Arc<handover::JobTasks>,
}

impl ProcessService {
    /// A service spawning through `launch` (shared with the terminal service).
    pub fn new(config: ProcessConfig, launch: Arc<Launch>) -> Self {
        ProcessService {
            live_groups: Arc::default(),
            launch,
            config,
            job_tasks: Arc::default(),
        }
    }

    /// The containment every run is made in.
    pub fn containment(&self) -> &containment::Containment {
        self.launch.containment()
    }

    /// Containment runs live now, whoever started them (foreground commands, jobs,
    /// terminals, language servers).
    pub fn live_runs(&self) -> usize {
        self.launch.containment().live_runs()
    }

    /// Kills every live run (host shutdown).
    pub fn kill_all(&self) {
        let runs: Vec<Arc<containment::Run>> = self
            .live_groups
            .lock()
            .unwrap()
            .drain()
            .map(|(_, (_, run))| run)
            .collect();
        for run in runs {
            run.kill();
        }
        self.launch.containment().kill_all();
    }

    /// Kills every live run of `owner` (the owner is gone).
    pub fn kill_owner(&self, owner: &str) -> usize {
        let mut live = self.live_groups.lock().unwrap();
        let groups: Vec<i32> = live
            .iter()
            .filter(|(_, (o, _))| &**o == owner)
            .map(|(pgid, _)| *pgid)
            .collect();
        for pgid in &groups {
            if let Some((_, run)) = live.remove(pgid) {
                run.kill();
            }
        }
        groups.len()
    }

    /// Runs `spec` to completion or timeout. The process group is gone when this returns
    /// (or when the future is dropped).
    pub async fn run(&self, spec: RunSpec) -> Result<RunOutcome, ProcessError> {
        let started = Instant::now();
        let tree = self.launch(
            &spec.owner,
            &spec.command,
            &spec.cwd,
            &spec.env,
            spec.executor,
            spec.network.as_ref(),
        )?;
        let mut sandbox = tree.sandbox.as_ref().map(|s| s.marker().to_string());
        let mut capture = BoundedCapture::new(spec.capture_bytes, spec.spill_path.clone())
            .spill_cap(spec.spill_cap);
        let ended = self
            .drive(tree, Some(spec.timeout), |chunk| {
                capture.push(chunk);
                Ok(())
            })
            .await?;
        if let (Some(marker), Some(line)) = (&mut sandbox, network_line(&ended.refused)) {
            marker.push('\n');
            marker.push_str(&line);
        }
        Ok(RunOutcome {
            output: capture.finish(),
            exit_code: ended.status.code(),
            signal: ended.status.signal(),
            timed_out: ended.timed_out,
            duration: started.elapsed(),
            sandbox,
        })
    }

    /// Starts `command` as a background job of `jobs` (kind `bash`) and returns its id
    /// at once. The job's process group lives until it ends, is killed with `job_kill`,
    /// its owner goes away, or the host exits; its output goes to the job (a sandboxed
    /// job's ends with its `[sandbox: …]` line).
    #[allow(clippy::too_many_arguments)]
    pub fn start_background(
        &self,
        jobs: &JobRegistry,
        owner: Arc<str>,
        command: String,
        cwd: PathBuf,
        env: Vec<(String, String)>,
        description: String,
        executor: ExecutorKind,
        network: Option<dsh_launch::network::Network>,
    ) -> Result<String, ToolError> {
        let job = jobs.create("bash", owner.clone(), description, command.clone())?;
        let tree = match self.launch(&owner, &command, &cwd, &env, executor, network.as_ref()) {
            Ok(tree) => tree,
            Err(error) => {
                job.finish(JobState::Failed {
                    reason: error.to_string(),
                });
                return Err(error.into());
            }
        };
        let marker = tree.sandbox.as_ref().map(|s| format!("\n{}\n", s.marker()));
        job.set_signaller(Arc::new(GroupSignal(tree.child.pid())));
        let id = job.id.clone();
        self.drive_job(job, tree, marker);
        Ok(id)
    }

    /// Runs a background job's tree to its end in a task, reporting into `job`; an
    /// upgrade may pause it first ([`handover`]).
    fn drive_job(
        &self,
        job: Arc<crate::services::jobs::Job>,
        tree: ProcessTree,
        marker: Option<String>,
    ) {
        let service = self.clone();
        let tasks = self.job_tasks.clone();
        let pause = tasks.enter();
        tokio::spawn(async move {
            let sink = job.clone();
            let drove = service
                .drive_pausable(tree, None, |chunk| sink.push_output(chunk), Some(pause))
                .await;
            let ended = match drove {
                Ok(Drove::Paused(tree)) => {
                    tasks.paused(handover::PausedJob {
                        job,
                        tree: *tree,
                        marker,
                    });
                    return;
                }
                Ok(Drove::Ended(ended)) => Ok(ended),
                Err(error) => Err(error),
            };
            if let Some(marker) = marker {
                let _ = job.push_output(marker.as_bytes());
            }
            if let Some(line) = ended.as_ref().ok().and_then(|e| network_line(&e.refused)) {
                let _ = job.push_output(format!("{line}\n").as_bytes());
            }
            let state = match ended {
                Ok(Ended {
                    cut_off: Some(reason),
                    ..
                }) => JobState::Killed {
                    signal: dsh_launch::os::SIGKILL,
                    reason: Some(reason),
                },
                Ok(Ended { status, .. }) => match (status.code(), status.signal()) {
                    (Some(code), _) => JobState::Exited { code },
                    (None, Some(signal)) => JobState::Killed {
                        signal,
                        reason: None,
                    },
                    (None, None) => JobState::Failed {
                        reason: "ended with an unknown status".into(),
                    },
                },
                Err(error) => JobState::Failed {
                    reason: error.to_string(),
                },
            };
            job.finish(state);
            tasks.left();
        });
    }

    /// Starts `bash -c COMMAND` (a long command through [`LONG_COMMAND`]) as the leader
    /// of a new process group, under `executor` (a sandboxed run may write `cwd`).
    fn launch(
        &self,
        owner: &Arc<str>,
        command: &str,
        cwd: &std::path::Path,
        env: &[(String, String)],
        executor: ExecutorKind,
        network: Option<&dsh_launch::network::Network>,
    ) -> Result<ProcessTree, ProcessError> {
        let (pipe_writer, output) = tokio::net::unix::pipe::pipe().map_err(ProcessError::Spawn)?;
        let write_fd: OwnedFd = pipe_writer
            .into_blocking_fd()
            .map_err(ProcessError::Spawn)?;
        if command.as_bytes().contains(&0) {
            return Err(ProcessError::NulByte);
        }
        // A long command cannot be an argument: it reaches bash in a memfd on descriptor 3.
        let script = if command.len() > SCRIPT_THRESHOLD {
            Some(dsh_launch::sealed_script(command.as_bytes()).map_err(ProcessError::Script)?)
        } else {
            None
        };
        let argument = match script {
            Some(_) => LONG_COMMAND.to_bytes(),
            None => command.as_bytes(),
        };
        let launcher::Contained {
            child,
            run,
            sandbox,
            egress,
        } = self.launch.start(&launcher::Command {
            program: self.launch.bash(),
            args: &[b"bash", b"-c", argument],
            env,
            cwd,
            stdio: launcher::Stdio::Output(write_fd.as_fd()),
            executor,
            fd3: script.as_ref().map(|script| script.as_fd()),
            network,
        })?;
        // The pipe's write end (and the script) now live only in the child.
        drop(write_fd);
        drop(script);
        let group = GroupGuard::new(child.pid(), owner.clone(), run, self.live_groups.clone());
        Ok(ProcessTree {
            child,
            output,
            group,
            sandbox,
            handed_tmp: None,
            egress,
        })
    }

    /// Feeds the tree's output to `sink` until the shell has exited and the output is
    /// drained, killing the group on `timeout` or when the sink says stop. The whole
    /// group is gone when this returns.
    async fn drive(
        &self,
        tree: ProcessTree,
        timeout: Option<Duration>,
        sink: impl FnMut(&[u8]) -> Result<(), String>,
    ) -> Result<Ended, ProcessError> {
        match self.drive_pausable(tree, timeout, sink, None).await? {
            Drove::Ended(ended) => Ok(ended),
            Drove::Paused(_) => unreachable!("a drive without a pause token never pauses"),
        }
    }

    /// [`Self::drive`], which also stops when `pause` is cancelled while the shell runs,
    /// between two reads of its output, and gives the tree back whole (an upgrade).
    async fn drive_pausable(
        &self,
        tree: ProcessTree,
        timeout: Option<Duration>,
        mut sink: impl FnMut(&[u8]) -> Result<(), String>,
        pause: Option<tokio_util::sync::CancellationToken>,
    ) -> Result<Drove, ProcessError> {
        let ProcessTree {
            mut child,
            output: mut pipe_reader,
            group,
            sandbox,
            handed_tmp,
            egress,
        } = tree;
        let pgid = child.pid();
        let mut buf = vec![0u8; 64 * 1024];
        let grace = Duration::from_millis(self.config.kill_grace_ms);
        let drain = Duration::from_millis(self.config.drain_ms);
        let timeout_at = timeout.map(|t| tokio::time::Instant::now() + t);
        let mut kill_at: Option<tokio::time::Instant> = None;
        let mut drain_until: Option<tokio::time::Instant> = None;
        let mut status: Option<ExitStatus> = None;
        let mut timed_out = false;
        let mut cut_off: Option<String> = None;
        let mut eof = false;

        while !(eof && status.is_some()) {
            tokio::select! {
                _ = cancelled(pause.as_ref()), if status.is_none() => {
                    return Ok(Drove::Paused(Box::new(ProcessTree {
                        child,
                        output: pipe_reader,
                        group,
                        sandbox,
                        handed_tmp,
                        egress,
                    })));
                },
                read = pipe_reader.read(&mut buf), if !eof => match read {
                    Ok(0) => eof = true,
                    Ok(n) => match sink(&buf[..n]) {
                        Ok(()) => {}
                        // A limit was passed: kill the group, keep draining.
                        Err(reason) => {
                            if cut_off.is_none() {
                                tracing::info!(pgid, %reason, "stopping a run");
                                group.kill();
                                cut_off = Some(reason);
                            }
                        }
                    },
                    Err(e) => {
                        tracing::warn!(error = %e, "reading command output failed");
                        eof = true;
                    }
                },
                exited = child.wait(), if status.is_none() => {
                    status = Some(exited.map_err(ProcessError::Spawn)?);
                    // The shell is done: whatever it left in its group goes too (TERM
                    // first; then KILL to the whole run).
                    group.signal(dsh_launch::os::SIGTERM);
                    kill_at = Some(tokio::time::Instant::now() + drain.min(grace));
                    drain_until = Some(tokio::time::Instant::now() + drain);
                },
                _ = sleep_until_opt(timeout_at), if timeout_at.is_some() && !timed_out && status.is_none() => {
                    timed_out = true;
                    group.signal(dsh_launch::os::SIGTERM);
                    kill_at = Some(tokio::time::Instant::now() + grace);
                },
                _ = sleep_until_opt(kill_at), if kill_at.is_some() => {
                    group.kill();
                    kill_at = None;
                },
                _ = sleep_until_opt(drain_until), if drain_until.is_some() && !eof => {
                    // The select may pick this timer over a pipe that is ready (a task
                    // that ran late, behind busy workers, finds both): what is in the pipe
                    // now was written before the shell exited or since, and is kept.
                    drain_ready(&pipe_reader, &mut buf, &mut sink);
                    tracing::debug!(pgid, "output pipe still open after the drain period; a process escaped the group");
                    break;
                },
            }
        }
        // Killing the run: everything in its container, escapees included; then its
        // private temporary directory goes.
        drop(group);
        drop(sandbox);
        if let Some(tmp) = handed_tmp {
            let _ = std::fs::remove_dir_all(tmp);
        }
        // Its proxy's connections end with it.
        let refused = egress.map(|egress| egress.refused()).unwrap_or_default();
        let status = status.expect("loop ends only after the shell exited");
        Ok(Drove::Ended(Ended {
            status,
            timed_out,
            cut_off,
            refused,
        }))
    }
}

/// Commands longer than this many bytes reach bash in a memfd rather than as its `-c`
/// argument. The kernel refuses a single argument of 128 KiB or more (`MAX_ARG_STRLEN`,
/// `E2BIG`); half of that leaves room for the environment under a small `ARG_MAX`, and
/// keeps every shorter command on the plain `bash -c COMMAND` path.
pub const SCRIPT_THRESHOLD: usize = 64 * 1024;

/// The `-c` argument of a long command, whose text is on descriptor 3 (a sealed memfd at
/// offset 0). `mapfile` reads it whole (buffered, on a regular file; with no delimiter in
/// it, byte for byte) into `BASH_EXECUTION_STRING`, where `bash -c` keeps its command too
/// (here as a one-element array), so no other variable or positional parameter is set;
/// descriptor 3 is closed, and `eval` runs the text. `$0` is `bash`, `$#` is 0, `$-` has
/// `c`, `return` outside a function fails as under `-c`, runtime errors read the same and
/// the exit status is the command's; a syntax error reads `bash: eval: line N: …` where
/// `bash -c` says `bash: -c: line N: …`. No descriptor is reopened by path, so neither the
/// sandbox's Landlock domain nor its mount namespace is in the way.
pub const LONG_COMMAND: &std::ffi::CStr = c"mapfile -d '' -u 3 BASH_EXECUTION_STRING || exit 126; exec 3<&-; eval \"$BASH_EXECUTION_STRING\"";

/// Reads what `pipe` holds now, without waiting, into `sink`: at most
/// [`FINAL_DRAIN_READS`] reads, so a writer that never stops cannot hold the call. A sink
/// that has passed a limit takes no more (the run is being killed already).
fn drain_ready(
    pipe: &tokio::net::unix::pipe::Receiver,
    buf: &mut [u8],
    sink: &mut impl FnMut(&[u8]) -> Result<(), String>,
) {
    for _ in 0..FINAL_DRAIN_READS {
        match pipe.try_read(buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => match sink(&buf[..n]) {
                Ok(()) => {}
                Err(_) => break,
            },
        }
    }
}

/// The most reads of 64 KiB [`drain_ready`] makes (4 MiB).
const FINAL_DRAIN_READS: usize = 64;

/// A running process tree: its leader, the read end of its output, its group.
struct ProcessTree {
    child: dsh_launch::Child,
    output: tokio::net::unix::pipe::Receiver,
    group: GroupGuard,
    /// A sandboxed run's confinement (its temporary directory lives as long).
    sandbox: Option<executor::Prepared>,
    /// A sandboxed run handed over at an upgrade: its temporary directory, removed at
    /// its end.
    handed_tmp: Option<PathBuf>,
    /// Its egress proxy (a run with a network by policy), which ends with it.
    egress: Option<Box<dyn dsh_launch::network::RunEgress>>,
}

/// How a drive stopped.
enum Drove {
    Ended(Ended),
    /// Paused by an upgrade: the tree, whole.
    Paused(Box<ProcessTree>),
}

/// Waits for `token`, or forever without one.
async fn cancelled(token: Option<&tokio_util::sync::CancellationToken>) {
    match token {
        Some(token) => token.cancelled().await,
        None => std::future::pending().await,
    }
}

/// How a tree ended.
struct Ended {
    status: ExitStatus,
    timed_out: bool,
    /// Set when the sink stopped the tree.
    cut_off: Option<String>,
    /// What its egress proxy refused (`host:port (why)`).
    refused: Vec<String>,
}

/// The line a result with a network ends with when the proxy refused a connection:
/// `[network: refused example.com:443 (not allowed)]`; none when it refused nothing.
pub fn network_line(refused: &[String]) -> Option<String> {
    (!refused.is_empty()).then(|| format!("[network: refused {}]", refused.join(", ")))
}

async fn sleep_until_opt(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// A background job's process group, signalled for `job_kill`.
struct GroupSignal(i32);

impl JobSignal for GroupSignal {
    fn signal(&self, signal: i32) {
        signal_group(self.0, signal);
    }
}

/// A live run: registered while it lives, killed whole (container and group) when
/// dropped.
struct GroupGuard {
    pgid: i32,
    run: Arc<containment::Run>,
    live_groups: LiveGroups,
}

impl GroupGuard {
    fn new(pgid: i32, owner: Arc<str>, run: containment::Run, live_groups: LiveGroups) -> Self {
        let run = Arc::new(run);
        live_groups
            .lock()
            .unwrap()
            .insert(pgid, (owner, run.clone()));
        GroupGuard {
            pgid,
            run,
            live_groups,
        }
    }

    /// Signals the process group (the shell and what stayed in its group).
    fn signal(&self, signal: i32) {
        signal_group(self.pgid, signal);
    }

    /// SIGKILL to every process of the run.
    fn kill(&self) {
        self.run.kill();
    }
}

impl Drop for GroupGuard {
    /// The run is killed when its last holder lets go (this guard, or the owner table).
    fn drop(&mut self) {
        self.live_groups.lock().unwrap().remove(&self.pgid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service() -> ProcessService {
        service_with(crate::services::process::ContainmentMode::Auto)
    }

    fn service_with(containment: crate::services::process::ContainmentMode) -> ProcessService {
        let config = ProcessConfig {
            containment,
            ..ProcessConfig::default()
        };
        let launch = Arc::new(Launch::new(&config).unwrap());
        ProcessService::new(config, launch)
    }

    /// Live (not zombie) processes whose command line holds `marker`, after waiting up
    /// to a second for them to go.
    fn live_with(marker: &str) -> Vec<i32> {
        let deadline = Instant::now() + Duration::from_secs(1);
        loop {
            let live: Vec<i32> = std::fs::read_dir("/proc")
                .unwrap()
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
                .filter(|pid| {
                    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                    let stat =
                        std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                    String::from_utf8_lossy(&cmdline).contains(marker)
                        && !stat
                            .rsplit_once(") ")
                            .is_some_and(|(_, rest)| rest.starts_with('Z'))
                })
                .collect();
            if live.is_empty() || Instant::now() > deadline {
                return live;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    async fn escapees_die_with_their_run(containment: crate::services::process::ContainmentMode) {
        let dir = tempfile::tempdir().unwrap();
        let service = service_with(containment);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let marker = format!("{}{nanos:09}", std::process::id());
        // Each escapee writes its pid before it sleeps, and the command returns only once
        // both have: they are proven to have run before they are proven gone.
        let command = format!(
            "(setsid sh -c 'echo $$ > escapee-1.pid; exec sleep 97{marker}' >/dev/null 2>&1 &); \
             setsid -f sh -c 'echo $$ > escapee-2.pid; exec sleep 98{marker}' >/dev/null 2>&1; \
             while [ ! -s escapee-1.pid ] || [ ! -s escapee-2.pid ]; do sleep 0.01; done; echo ok"
        );
        let out = service.run(spec(&command, dir.path())).await.unwrap();
        assert_eq!(out.output.text, "ok\n");
        for name in ["escapee-1.pid", "escapee-2.pid"] {
            let pid = std::fs::read_to_string(dir.path().join(name)).unwrap();
            assert!(!pid.trim().is_empty(), "{name}: the escapee never ran");
        }
        assert_eq!(live_with(&marker), Vec::<i32>::new());
    }

    #[tokio::test]
    async fn in_a_cgroup_processes_that_leave_the_group_die_with_their_run() {
        escapees_die_with_their_run(crate::services::process::ContainmentMode::Cgroup).await;
    }

    #[tokio::test]
    async fn marked_processes_that_leave_the_group_die_with_their_run() {
        escapees_die_with_their_run(crate::services::process::ContainmentMode::Subreaper).await;
    }

    /// A live run holds one descriptor of its cgroups (its `cgroup.kill`): those only
    /// the spawn needed (the directory, `cgroup.procs`) are closed once its process has
    /// started. The command counts the host's descriptors into its own cgroup.
    #[tokio::test]
    async fn a_started_run_holds_only_its_kill_descriptor() {
        let dir = tempfile::tempdir().unwrap();
        let service = service_with(crate::services::process::ContainmentMode::Cgroup);
        let command = format!(
            "run=$(sed -n 's|^0::.*/||p' /proc/self/cgroup); \
             for _ in $(seq 100); do \
               n=$(for f in /proc/{}/fd/*; do readlink $f; done | grep -cE \"/$run(/|\\$)\"); \
               [ $n -le 1 ] && break; sleep 0.02; \
             done; echo $run $n",
            std::process::id()
        );
        let out = service.run(spec(&command, dir.path())).await.unwrap();
        let text = out.output.text.trim().to_string();
        assert!(text.starts_with("run-"), "{text}");
        assert!(
            text.ends_with(" 1"),
            "descriptors into the run's cgroups: {text}"
        );
    }

    fn spec(command: &str, dir: &std::path::Path) -> RunSpec {
        RunSpec {
            owner: "test".into(),
            command: command.into(),
            cwd: dir.to_path_buf(),
            timeout: Duration::from_secs(10),
            capture_bytes: 1000,
            spill_path: dir.join("spill.txt"),
            spill_cap: crate::output::DEFAULT_SPILL_CAP,
            env: Vec::new(),
            executor: ExecutorKind::Local,
            network: None,
        }
    }

    #[tokio::test]
    async fn stdout_and_stderr_are_combined_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let service = service();
        let out = service
            .run(spec(
                "echo one; echo two >&2; echo three; exit 4",
                dir.path(),
            ))
            .await
            .unwrap();
        assert_eq!(out.output.text, "one\ntwo\nthree\n");
        assert_eq!(out.exit_code, Some(4));
        assert!(!out.timed_out);
    }

    #[tokio::test]
    async fn a_command_too_long_for_an_argument_runs_whole_through_a_memfd() {
        let dir = tempfile::tempdir().unwrap();
        let service = service();
        // Over the kernel's 128 KiB limit on one argument; trailing newlines kept.
        let command = format!(
            "# {}\necho \"$0 $# $(ls -l /proc/$$/fd | grep -c memfd)\"; exit 5 \\\n\n\n",
            "x".repeat(200 * 1024)
        );
        assert!(command.len() > SCRIPT_THRESHOLD);
        let out = service.run(spec(&command, dir.path())).await.unwrap();
        // `$0` and `$#` as under `-c`; the shell holds no descriptor of the memfd.
        assert_eq!(out.output.text, "bash 0 0\n");
        assert_eq!(out.exit_code, Some(5));
    }

    /// The launch platform's errors reach a caller with the codes and messages they had
    /// when the platform was part of this module: a working directory outside the
    /// workspace, a missing one or a NUL byte are the model's mistakes, the rest the host's.
    #[test]
    fn launch_errors_keep_their_codes_and_messages() {
        let outside = || executor::SandboxError::OutsideWorkspace {
            path: "/elsewhere".into(),
            workspace: "/work".into(),
        };
        let error = ToolError::from(outside());
        assert_eq!(error.code, ErrorCode::InvalidArguments);
        assert_eq!(error.message, outside().to_string());
        let error = ToolError::from(ProcessError::Sandbox(outside()));
        assert_eq!(error.code, ErrorCode::InvalidArguments);
        let error = ToolError::from(executor::SandboxError::Setup("no workspace".into()));
        assert_eq!(error.code, ErrorCode::Internal);
        assert_eq!(error.message, "sandbox unavailable: no workspace");
        let error = ToolError::from(ProcessError::Sandbox(executor::SandboxError::NoRuleset));
        assert_eq!(error.code, ErrorCode::Internal);
        assert!(
            error.message.starts_with("sandbox unavailable: "),
            "{}",
            error.message
        );
        for (error, code) in [
            (ProcessError::NulByte, ErrorCode::InvalidArguments),
            (
                ProcessError::BadWorkdir("/nope".into()),
                ErrorCode::InvalidArguments,
            ),
            (
                ProcessError::Spawn(std::io::Error::other("gone")),
                ErrorCode::Internal,
            ),
        ] {
            let message = error.to_string();
            let error = ToolError::from(error);
            assert_eq!((error.code, error.message), (code, message));
        }
    }

    /// A confined run under an executor this host cannot build is refused with that
    /// executor's reason as the host's error (`sandbox unavailable: …`), like any error
    /// of an executor's own; here the host has no session workspace.
    #[tokio::test]
    async fn an_executor_that_cannot_be_built_refuses_its_runs_with_its_reason() {
        let dir = tempfile::tempdir().unwrap();
        let service = service();
        for executor in [ExecutorKind::Sandbox, ExecutorKind::Container] {
            let mut s = spec("true", dir.path());
            s.executor = executor;
            let error = service.run(s).await.unwrap_err();
            assert!(matches!(error, ProcessError::Executor(_)), "{error:?}");
            let error = ToolError::from(error);
            assert_eq!(error.code, ErrorCode::Internal);
            assert_eq!(
                error.message,
                "sandbox unavailable: this host has no session workspace for confined runs"
            );
        }
        let error = ToolError::from(ProcessError::Executor("its own reason".into()));
        assert_eq!(
            (error.code, error.message.as_str()),
            (ErrorCode::Internal, "sandbox unavailable: its own reason")
        );
    }

    #[tokio::test]
    async fn a_missing_workdir_is_an_error_not_a_spawn() {
        let dir = tempfile::tempdir().unwrap();
        let service = service();
        let mut s = spec("true", dir.path());
        s.cwd = dir.path().join("nope");
        assert!(matches!(
            service.run(s).await,
            Err(ProcessError::BadWorkdir(_))
        ));
    }

    #[tokio::test]
    async fn a_background_child_does_not_hold_the_call() {
        let dir = tempfile::tempdir().unwrap();
        let service = service();
        let started = Instant::now();
        let out = service
            .run(spec("sleep 1000 & echo started", dir.path()))
            .await
            .unwrap();
        assert_eq!(out.output.text, "started\n");
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(service.live_groups.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn killing_an_owner_ends_its_running_command() {
        let dir = tempfile::tempdir().unwrap();
        let service = service();
        let running = tokio::spawn({
            let service = service.clone();
            let spec = spec("sleep 100", dir.path());
            async move { service.run(spec).await }
        });
        while service.live_groups.lock().unwrap().is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(service.kill_owner("someone-else"), 0);
        assert_eq!(service.kill_owner("test"), 1);
        let outcome = running.await.unwrap().unwrap();
        assert_eq!(outcome.signal, Some(dsh_launch::os::SIGKILL));
    }
}
