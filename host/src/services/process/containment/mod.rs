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
//! Native only: nothing here knows wasmtime.

pub mod cgroup;
pub mod keeper;
pub mod marks;

use std::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};

use crate::services::process::{ContainmentMode, ProcessConfig};

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
pub struct SpawnPlacement {
    /// The v2 cgroup directory and its `cgroup.procs`.
    pub cgroup: Option<(i32, i32)>,
    /// v1 `cgroup.procs` files to join.
    pub join: Vec<i32>,
    /// `DSH_RUN=VALUE`, added to the environment.
    pub mark: Option<(String, String)>,
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
    /// Chooses the mode by `config`, prepares it, and starts the keeper.
    pub fn start(config: &ProcessConfig) -> Result<Containment, ContainmentError> {
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
    pub fn new_run(&self) -> Result<Run, ContainmentError> {
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

    /// Kills every run (host shutdown).
    pub fn kill_all(&self) {
        match &self.inner.mode {
            Mode::Cgroup(tree) => tree.kill_all(),
            Mode::Marks(marks) => marks::sweep(marks.prefix().as_bytes(), marks::Scope::adopted()),
        }
    }
}

impl Run {
    /// Where the run's first process goes.
    pub fn placement(&self) -> SpawnPlacement {
        match &self.kind {
            RunKind::Cgroup(Some(run)) => {
                let placement = run.placement();
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

/// A process-wide sequence for run marks and names.
fn next_number() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
