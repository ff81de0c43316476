//! Containment: every run (a foreground command, a background job, a terminal session)
//! lives in a container the host can kill whole, whatever its processes do (`setsid`,
//! a double fork, `nohup … & disown`), and nothing outlives the host however it dies.
//!
//! Two modes, chosen once at start and logged with the reason:
//! - **cgroup** ([`cgroup`]): one cgroup v2 per run under dsh's own node, killed with
//!   `cgroup.kill`; per-run `pids.max` and `memory.max` where the controllers exist.
//! - **subreaper** ([`marks`]), where no cgroup can be made: dsh is a child subreaper, so
//!   escaped processes are reparented to it, and each run's processes carry a mark in
//!   their environment (`DSH_RUN`) by which dsh finds and kills them. A process that
//!   rewrites its environment and leaves its session escapes this mode; the cgroup mode
//!   has no such gap.
//!
//! In both modes dsh is a child subreaper and reaps what it adopts (PID 1 may not), and
//! a **keeper** ([`keeper`]), a small process started from the dsh binary, waits for
//! dsh's end on a pipe and then kills what is left: the cgroup node, or every marked
//! process. SIGKILL and the OOM killer included.
//!
//! At an upgrade (`dsh upgrade`: the same process executes a new binary) the containment
//! is handed over whole ([`ContainmentHandover`]): the new executable adopts the node,
//! the marks' numbering and the keeper (its lifeline is kept open across the `exec`), and
//! each live run by its directory or mark ([`RunHandover`]), so the runs it inherits and
//! those it starts are killed by the same keeper and never share a name.
//!
//! Native only: nothing here knows wasmtime.

pub(crate) mod cgroup;
pub mod keeper;
pub(crate) mod marks;

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::config::{ContainmentMode, LaunchConfig};

/// Why containment could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ContainmentError {
    #[error("no cgroup containment: {0}")]
    CgroupUnavailable(String),
    #[error("cannot prepare a run's cgroup: {0}")]
    Cgroup(String),
    #[error("cannot start the keeper process: {0}")]
    Keeper(std::io::Error),
}

/// The host's containment: how runs are made, killed and cleaned up.
#[derive(Debug, Clone)]
pub struct Containment {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    mode: Mode,
    /// To the housekeeping thread: runs that ended.
    retired: Mutex<mpsc::Sender<Retired>>,
    /// The keeper process (only under the dsh binary).
    _keeper: Option<keeper::Keeper>,
    description: String,
    /// Runs made and not yet dropped.
    live: Arc<AtomicUsize>,
}

#[derive(Debug)]
enum Mode {
    Cgroup(Arc<cgroup::CgroupTree>),
    Marks(marks::Marks),
}

/// Work for the housekeeping thread.
enum Retired {
    /// A cgroup run ended: remove it once empty, prepare another.
    Cgroup(cgroup::CgroupRun),
    /// A marked run ended or was killed: find and kill its processes.
    Marked(Vec<u8>),
}

/// One run's container. Killed and retired when dropped.
#[derive(Debug)]
pub struct Run {
    kind: RunKind,
    /// The run's process group (its leader's pid), once spawned.
    leader: AtomicI32,
    retired: mpsc::Sender<Retired>,
    /// The host's count of live runs, this one in it until dropped.
    live: Arc<AtomicUsize>,
}

#[derive(Debug)]
enum RunKind {
    Cgroup(Option<cgroup::CgroupRun>),
    /// `DSH_RUN=VALUE`.
    Marked(Vec<u8>),
}

/// Where a spawn puts a run's first process.
#[derive(Debug, Default)]
pub(crate) struct SpawnPlacement {
    /// The v2 cgroup directory and its `cgroup.procs`.
    pub cgroup: Option<(i32, i32)>,
    /// v1 `cgroup.procs` files to join.
    pub join: Vec<i32>,
    /// `DSH_RUN=VALUE`, added to the environment.
    pub mark: Option<(String, String)>,
}

/// The containment a host hands the executable that replaces it in the same process.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ContainmentHandover {
    pub mode: HandedMode,
    /// The next number of [`next_number`] (marks and run names never repeat).
    pub next_number: u64,
    /// The keeper's lifeline (a descriptor kept open across the `exec`) and its pid.
    pub keeper: Option<(i32, i32)>,
}

/// The mode of a handed-over containment.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum HandedMode {
    /// dsh's cgroup node, its v1 nodes, and the next run's number.
    Cgroup {
        node: PathBuf,
        v1_nodes: Vec<PathBuf>,
        next_run: u64,
    },
    /// The marks' prefix (`DSH_RUN=PID.`).
    Marks { prefix: String },
}

/// One live run, handed over.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunHandover {
    /// Its v2 cgroup directory and v1 directories, or its mark (`DSH_RUN=PID.N`).
    pub cgroup: Option<(PathBuf, Vec<PathBuf>)>,
    pub mark: Option<String>,
    pub leader: i32,
}

/// A containment handed over by the executable this process ran before, for the first
/// [`Containment::start`] to adopt.
static INHERITED: Mutex<Option<ContainmentHandover>> = Mutex::new(None);

/// Makes the next [`Containment::start`] adopt `handover` instead of making its own.
pub fn inherit(handover: ContainmentHandover) {
    *INHERITED.lock().unwrap() = Some(handover);
}

/// Set when this process supervises everything its hosts start (the `dsh` binary).
static SUPERVISOR: std::sync::OnceLock<()> = std::sync::OnceLock::new();

/// Makes this process the supervisor of what its hosts start: a child subreaper that
/// reaps what it adopts, with a keeper. Only the `dsh` binary calls this: the keeper is
/// its own executable started as `dsh-keeper`, and reaping every orphan would take the
/// exit statuses of children that other code in a library user's process waits for.
pub fn supervise_children() {
    let _ = SUPERVISOR.set(());
}

fn supervising() -> bool {
    SUPERVISOR.get().is_some()
}

impl Containment {
    /// Chooses the mode by `config`, prepares it, and starts the keeper; or adopts the
    /// containment handed over by the executable this process ran before ([`inherit`]).
    pub fn start(config: &LaunchConfig) -> Result<Containment, ContainmentError> {
        if let Some(handover) = INHERITED.lock().unwrap().take() {
            return Containment::adopt(config, handover);
        }
        let mode = match config.containment {
            ContainmentMode::Subreaper => {
                Mode::Marks(marks::Marks::new("[process] containment = \"subreaper\""))
            }
            ContainmentMode::Cgroup => Mode::Cgroup(Arc::new(cgroup::CgroupTree::create(
                config.pids_max,
                config.memory_max_mb,
            )?)),
            ContainmentMode::Auto => {
                match cgroup::CgroupTree::create(config.pids_max, config.memory_max_mb) {
                    Ok(tree) => Mode::Cgroup(Arc::new(tree)),
                    Err(error) => {
                        tracing::warn!(%error, "falling back to subreaper containment: escaped processes are found by a mark in their environment, and there are no per-run limits");
                        Mode::Marks(marks::Marks::new(&error.to_string()))
                    }
                }
            }
        };
        if supervising() {
            marks::become_subreaper();
        }
        let description = match &mode {
            Mode::Cgroup(tree) => format!(
                "cgroup: one cgroup v2 per run under {} ({})",
                tree.node().display(),
                tree.summary
            ),
            Mode::Marks(marks) => format!(
                "subreaper: runs are followed by the DSH_RUN mark in their environment ({})",
                marks.reason
            ),
        };
        let keeper = if supervising() {
            Some(
                match &mode {
                    Mode::Cgroup(tree) => {
                        keeper::Keeper::start_cgroup(tree.node(), &tree.v1_nodes())
                    }
                    Mode::Marks(marks) => keeper::Keeper::start_marks(marks.prefix()),
                }
                .map_err(ContainmentError::Keeper)?,
            )
        } else {
            None
        };
        Containment::run(mode, keeper, description)
    }

    /// Adopts a handed-over containment: its node (or marks), its numbering, its keeper.
    fn adopt(
        config: &LaunchConfig,
        handover: ContainmentHandover,
    ) -> Result<Containment, ContainmentError> {
        NUMBERS.fetch_max(handover.next_number, Ordering::Relaxed);
        let mode = match handover.mode {
            HandedMode::Cgroup {
                node,
                v1_nodes,
                next_run,
            } => Mode::Cgroup(Arc::new(cgroup::CgroupTree::adopt(
                node,
                &v1_nodes,
                next_run,
                config.pids_max,
                config.memory_max_mb,
            )?)),
            HandedMode::Marks { prefix } => Mode::Marks(marks::Marks::adopt(prefix)),
        };
        if supervising() {
            marks::become_subreaper();
        }
        let keeper = handover.keeper.map(|(lifeline, pid)| {
            // SAFETY: the descriptor was kept open across the exec for us alone, its
            // number written in the handover by the executable that held it.
            let lifeline = unsafe { OwnedFd::from_raw_fd(lifeline) };
            keeper::Keeper::adopt(lifeline, pid)
        });
        let description = match &mode {
            Mode::Cgroup(tree) => format!(
                "cgroup: one cgroup v2 per run under {} (adopted at an upgrade)",
                tree.node().display()
            ),
            Mode::Marks(marks) => format!(
                "subreaper: runs are followed by the DSH_RUN mark in their environment ({}; adopted at an upgrade)",
                marks.reason
            ),
        };
        Containment::run(mode, keeper, description)
    }

    /// Starts the housekeeping thread (and the orphan reaper) for `mode`.
    fn run(
        mode: Mode,
        keeper: Option<keeper::Keeper>,
        description: String,
    ) -> Result<Containment, ContainmentError> {
        let (sender, receiver) = mpsc::channel();
        let tree = match &mode {
            Mode::Cgroup(tree) => Some(tree.clone()),
            Mode::Marks(_) => None,
        };
        std::thread::Builder::new()
            .name("dsh-containment".into())
            .spawn(move || housekeeping(tree, receiver))
            .map_err(ContainmentError::Keeper)?;
        if supervising() {
            marks::start_orphan_reaper();
        }
        tracing::info!(containment = %description, keeper = keeper.is_some(), "containment ready");
        Ok(Containment {
            inner: Arc::new(Inner {
                mode,
                retired: Mutex::new(sender),
                _keeper: keeper,
                description,
                live: Arc::default(),
            }),
        })
    }

    /// The mode and why, as logged at start.
    pub fn description(&self) -> &str {
        &self.inner.description
    }

    /// A new container for one run.
    pub(crate) fn new_run(&self) -> Result<Run, ContainmentError> {
        let kind = match &self.inner.mode {
            Mode::Cgroup(tree) => RunKind::Cgroup(Some(tree.take()?)),
            Mode::Marks(marks) => RunKind::Marked(marks.next_mark()),
        };
        self.inner.live.fetch_add(1, Ordering::Relaxed);
        Ok(Run {
            kind,
            leader: AtomicI32::new(0),
            retired: self.inner.retired.lock().unwrap().clone(),
            live: self.inner.live.clone(),
        })
    }

    /// Runs made and not yet ended (each foreground command, job, terminal and
    /// language server has one).
    pub fn live_runs(&self) -> usize {
        self.inner.live.load(Ordering::Relaxed)
    }

    /// Whether a keeper kills what is left when this process dies (the `dsh` binary): then
    /// runs need no parent-death signal, which would fire when the thread that spawned
    /// them ends, and at an upgrade's `exec`.
    pub(crate) fn has_keeper(&self) -> bool {
        self.inner._keeper.is_some()
    }

    /// What the executable replacing this one in the process adopts (the keeper's
    /// lifeline named by number).
    pub fn hand_over(&self) -> ContainmentHandover {
        let keeper = self
            .inner
            ._keeper
            .as_ref()
            .map(|keeper| (keeper.lifeline(), keeper.pid()));
        let mode = match &self.inner.mode {
            Mode::Cgroup(tree) => HandedMode::Cgroup {
                node: tree.node().to_path_buf(),
                v1_nodes: tree.v1_nodes(),
                next_run: tree.next_run(),
            },
            Mode::Marks(marks) => HandedMode::Marks {
                prefix: marks.prefix().to_string(),
            },
        };
        ContainmentHandover {
            mode,
            next_number: NUMBERS.load(Ordering::Relaxed),
            keeper,
        }
    }

    /// Makes the keeper's lifeline close on `exec` again (an upgrade that did not
    /// happen).
    pub fn take_back(&self) {
        if let Some(keeper) = &self.inner._keeper {
            close_on_exec(&keeper.lifeline());
        }
    }

    /// A run handed over by the executable this process ran before.
    pub fn adopt_run(&self, handover: &RunHandover) -> Result<Run, ContainmentError> {
        let kind = match (&handover.cgroup, &handover.mark) {
            (Some((dir, v1_dirs)), _) => RunKind::Cgroup(Some(cgroup::CgroupRun::adopt(
                dir.clone(),
                v1_dirs.clone(),
            )?)),
            (None, Some(mark)) => RunKind::Marked(mark.clone().into_bytes()),
            (None, None) => RunKind::Cgroup(None),
        };
        self.inner.live.fetch_add(1, Ordering::Relaxed);
        Ok(Run {
            kind,
            leader: AtomicI32::new(handover.leader),
            retired: self.inner.retired.lock().unwrap().clone(),
            live: self.inner.live.clone(),
        })
    }

    /// Kills every run (host shutdown).
    pub fn kill_all(&self) {
        match &self.inner.mode {
            Mode::Cgroup(tree) => tree.kill_all(),
            Mode::Marks(marks) => marks::sweep(marks.prefix().as_bytes(), marks::Scope::adopted()),
        }
    }
}

impl Run {
    /// The run as the executable replacing this one adopts it.
    pub fn hand_over(&self) -> RunHandover {
        let (cgroup, mark) = match &self.kind {
            RunKind::Cgroup(Some(run)) => (Some(run.dirs()), None),
            RunKind::Cgroup(None) => (None, None),
            RunKind::Marked(mark) => (None, Some(String::from_utf8_lossy(mark).into_owned())),
        };
        RunHandover {
            cgroup,
            mark,
            leader: self.leader.load(Ordering::Relaxed),
        }
    }

    /// Where the run's process goes (a run has one: once it has started, there is no
    /// placement left to give).
    pub(crate) fn placement(&self) -> Result<SpawnPlacement, ContainmentError> {
        Ok(match &self.kind {
            RunKind::Cgroup(Some(run)) => {
                let placement = run.placement().ok_or_else(|| {
                    ContainmentError::Cgroup("the run's process has started already".into())
                })?;
                SpawnPlacement {
                    cgroup: Some((placement.cgroup_dir, placement.v2_procs)),
                    join: placement.v1_procs,
                    mark: None,
                }
            }
            RunKind::Cgroup(None) => SpawnPlacement::default(),
            RunKind::Marked(mark) => {
                let text = String::from_utf8_lossy(mark);
                let (key, value) = text.split_once('=').unwrap_or(("DSH_RUN", ""));
                SpawnPlacement {
                    mark: Some((key.to_string(), value.to_string())),
                    ..SpawnPlacement::default()
                }
            }
        })
    }

    /// The run's process `pid` has started (it leads the run's process group): what
    /// only its spawn needed is closed.
    pub fn started(&mut self, pid: i32) {
        self.set_leader(pid);
        if let RunKind::Cgroup(Some(run)) = &mut self.kind {
            run.started();
        }
    }

    /// Records the run's leader (its process group).
    pub fn set_leader(&self, pid: i32) {
        self.leader.store(pid, Ordering::Relaxed);
    }

    /// SIGKILL to every process of the run, those that left its group included.
    pub fn kill(&self) {
        super::signal_group(self.leader.load(Ordering::Relaxed), libc::SIGKILL);
        match &self.kind {
            RunKind::Cgroup(Some(run)) => run.kill(),
            RunKind::Cgroup(None) => {}
            RunKind::Marked(mark) => {
                let _ = self.retired.send(Retired::Marked(mark.clone()));
            }
        }
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        self.live.fetch_sub(1, Ordering::Relaxed);
        super::signal_group(self.leader.load(Ordering::Relaxed), libc::SIGKILL);
        let retired = match &mut self.kind {
            RunKind::Cgroup(run) => run.take().map(|run| {
                run.kill();
                Retired::Cgroup(run)
            }),
            RunKind::Marked(mark) => Some(Retired::Marked(std::mem::take(mark))),
        };
        if let Some(retired) = retired {
            let _ = self.retired.send(retired);
        }
    }
}

/// The housekeeping thread: prepares cgroups ahead of calls, removes those of ended
/// runs, sweeps the marked processes of ended runs. Ends with the host.
///
/// Preparing comes first, so calls find a prepared cgroup; an ended run whose processes
/// are still dying (a KILL is not instant) is left for a later pass instead of being
/// waited for.
fn housekeeping(tree: Option<Arc<cgroup::CgroupTree>>, retired: mpsc::Receiver<Retired>) {
    let mut dying: Vec<cgroup::CgroupRun> = Vec::new();
    loop {
        if let Some(tree) = &tree {
            tree.refill();
        }
        dying = dying
            .into_iter()
            .filter_map(|run| run.try_remove())
            .collect();
        let work = if dying.is_empty() {
            retired
                .recv()
                .map_err(|_| mpsc::RecvTimeoutError::Disconnected)
        } else {
            retired.recv_timeout(std::time::Duration::from_millis(10))
        };
        match work {
            Ok(Retired::Cgroup(run)) => dying.push(run),
            Ok(Retired::Marked(mark)) => marks::sweep(&mark, marks::Scope::adopted()),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    for run in dying {
        run.remove();
    }
}

/// The process-wide sequence of run marks and names (continued across an upgrade).
static NUMBERS: AtomicU64 = AtomicU64::new(1);

/// The next number of the sequence.
fn next_number() -> u64 {
    NUMBERS.fetch_add(1, Ordering::Relaxed)
}

/// Clears `FD_CLOEXEC` on `fd`: it stays open, with its number, across an `exec`.
pub fn keep_across_exec(fd: i32) -> std::io::Result<()> {
    // SAFETY: fcntl on a descriptor number; a closed one fails with EBADF.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// A descriptor the binary this process ran before kept open across the `exec` for it,
/// by number: `None` when that number is not open. It closes on `exec` from now on.
pub fn inherited_fd(fd: i32) -> Option<OwnedFd> {
    // SAFETY: fcntl on a descriptor number only reads its flags.
    if fd < 3 || unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return None;
    }
    // SAFETY: the number is open and was handed to this process for this one use; the
    // caller takes it once.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    close_on_exec(&owned);
    Some(owned)
}

/// Sets `FD_CLOEXEC` on `fd` again (an upgrade that was refused).
pub fn close_on_exec(fd: &impl AsRawFd) {
    // SAFETY: fcntl on a descriptor we hold.
    unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) };
}
