//! The cgroup containment: one cgroup v2 per run, under a node dsh creates for itself
//! beside the cgroup it was started in (`dsh-PID`), killed whole with `cgroup.kill`.
//!
//! Finding a place: the cgroup2 mount comes from `/proc/self/mountinfo` and dsh's own
//! cgroup from `/proc/self/cgroup`; the node is made there, and if that fails (no
//! cgroup2, a tree that is not writable or not delegated), there is no cgroup mode.
//! Limits per run (`pids.max`, `memory.max`) use the v2 controllers the node can enable;
//! on a hybrid layout, where `pids` and `memory` are v1 hierarchies, a run also gets a
//! group of its own in each v1 hierarchy it needs.
//!
//! Making cgroups stays off the call path: a housekeeping thread keeps a few runs
//! prepared (directories made, limits written, descriptors open) and removes the
//! directories of ended runs once they are empty. A run's process starts directly in
//! its cgroup (`clone3` with `CLONE_INTO_CGROUP`, see `spawn.rs`); moving a process by
//! writing `cgroup.procs` costs about a millisecond on the v2 tree and is only the
//! fallback where `clone3` is missing.

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::ContainmentError;

/// Runs kept prepared ahead of calls.
const POOL_SIZE: usize = 4;

/// Where a controller for the run limits lives.
#[derive(Debug)]
struct V1Hierarchy {
    /// `pids` or `memory`.
    controller: &'static str,
    /// dsh's node in this hierarchy.
    node: PathBuf,
}

/// The limits a run gets, and where each is written.
#[derive(Debug)]
struct Limits {
    pids_max: u64,
    memory_max_bytes: u64,
    /// Controllers enabled on the v2 node.
    v2_pids: bool,
    v2_memory: bool,
    /// v1 hierarchies runs also join (a hybrid layout).
    v1: Vec<V1Hierarchy>,
}

/// dsh's cgroup node and its prepared runs.
#[derive(Debug)]
pub struct CgroupTree {
    /// `MOUNT/OWN/dsh-PID[-N]`.
    node: PathBuf,
    /// `node/cgroup.kill`, open for a kill of everything at once.
    node_kill: File,
    limits: Limits,
    next_run: AtomicU64,
    pool: Mutex<Vec<CgroupRun>>,
    /// What the start log says about limits.
    pub summary: String,
}

/// One run's cgroups, prepared: its v2 directory and the descriptors a spawn and a kill
/// need. Those only the spawn needs are closed once its process has started, so a live
/// run holds one descriptor (its `cgroup.kill`, open ahead so a kill never needs a
/// descriptor it may not get).
#[derive(Debug)]
pub struct CgroupRun {
    dir: PathBuf,
    /// `None` once the run's process has started (or for a run adopted at an upgrade).
    spawn: Option<SpawnFiles>,
    v1_dirs: Vec<PathBuf>,
    kill: File,
}

/// What starting a run's process needs.
#[derive(Debug)]
struct SpawnFiles {
    /// The v2 directory, for `CLONE_INTO_CGROUP`.
    dir_fd: File,
    /// `cgroup.procs` files the process writes itself into: the v2 one is used only
    /// where `clone3` is missing; the v1 ones always.
    v2_procs: File,
    v1_procs: Vec<File>,
}

/// Which cgroups a spawn puts the process in.
pub struct Placement {
    /// The v2 directory (`CLONE_INTO_CGROUP`).
    pub cgroup_dir: RawFd,
    /// The v2 `cgroup.procs`, for a spawn without `clone3`.
    pub v2_procs: RawFd,
    /// v1 `cgroup.procs` files to write `0` into before exec.
    pub v1_procs: Vec<RawFd>,
}

impl CgroupRun {
    /// A live run's cgroups, handed over at an upgrade by their paths.
    pub fn adopt(dir: PathBuf, v1_dirs: Vec<PathBuf>) -> Result<CgroupRun, ContainmentError> {
        let failed = |what: &Path, e: std::io::Error| {
            ContainmentError::Cgroup(format!("cannot adopt {}: {e}", what.display()))
        };
        // Its process started before the upgrade: only a kill is left to make.
        Ok(CgroupRun {
            spawn: None,
            kill: open_for_write(&dir.join("cgroup.kill")).map_err(|e| failed(&dir, e))?,
            v1_dirs,
            dir,
        })
    }

    /// The run's v2 directory and v1 directories.
    pub fn dirs(&self) -> (PathBuf, Vec<PathBuf>) {
        (self.dir.clone(), self.v1_dirs.clone())
    }

    /// Where the run's process goes; `None` once it has started (a run has one).
    pub fn placement(&self) -> Option<Placement> {
        self.spawn.as_ref().map(|spawn| Placement {
            cgroup_dir: spawn.dir_fd.as_raw_fd(),
            v2_procs: spawn.v2_procs.as_raw_fd(),
            v1_procs: spawn.v1_procs.iter().map(|f| f.as_raw_fd()).collect(),
        })
    }

    /// The run's process has started: closes what only its spawn needed.
    pub fn started(&mut self) {
        self.spawn = None;
    }

    /// SIGKILL to every process of the run, whatever session or group it moved to.
    pub fn kill(&self) {
        let _ = (&self.kill).write_all(b"1");
    }

    /// Waits (a little) for the run to be empty, then removes its directories.
    pub fn remove(self) {
        wait_unpopulated(&self.dir, Duration::from_secs(2));
        self.remove_dirs();
    }

    /// Removes the run's directories when it is empty already; else gives it back.
    pub fn try_remove(self) -> Option<CgroupRun> {
        if !is_unpopulated(&self.dir) {
            return Some(self);
        }
        self.remove_dirs();
        None
    }

    fn remove_dirs(&self) {
        for dir in std::iter::once(&self.dir).chain(&self.v1_dirs) {
            if let Err(error) = std::fs::remove_dir(dir) {
                tracing::debug!(%error, dir = %dir.display(), "cannot remove a run's cgroup");
            }
        }
    }
}

/// Parses `/proc/self/mountinfo` for mounts of `fstype` (and, for v1, the controller
/// in its super options): their mount points.
fn mounts(fstype: &str, controller: Option<&str>) -> Vec<PathBuf> {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let mut right = right.split_whitespace();
            let found_type = right.next()?;
            let _source = right.next()?;
            let options = right.next().unwrap_or_default();
            if found_type != fstype {
                return None;
            }
            if let Some(controller) = controller {
                if !options.split(',').any(|o| o == controller) {
                    return None;
                }
            }
            let mount_point = left.split_whitespace().nth(4)?;
            Some(PathBuf::from(mount_point))
        })
        .collect()
}

/// dsh's own cgroup path in the v2 tree (`0::PATH`) or in the v1 hierarchy of
/// `controller`.
fn own_path(controller: Option<&str>) -> Option<String> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    text.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (id, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        match controller {
            None if id == "0" && controllers.is_empty() => Some(path.to_string()),
            Some(wanted) if controllers.split(',').any(|c| c == wanted) => Some(path.to_string()),
            _ => None,
        }
    })
}

fn join(mount: &Path, path: &str) -> PathBuf {
    mount.join(path.trim_start_matches('/'))
}

/// A unique node name for this process (several hosts in one process get `-N`).
fn node_name() -> String {
    static HOSTS: AtomicU64 = AtomicU64::new(0);
    let n = HOSTS.fetch_add(1, Ordering::Relaxed);
    let pid = std::process::id();
    if n == 0 {
        format!("dsh-{pid}")
    } else {
        format!("dsh-{pid}-{n}")
    }
}

/// The pid in a node name `dsh-PID` or `dsh-PID-N`.
fn node_pid(name: &str) -> Option<i32> {
    name.strip_prefix("dsh-")?.split('-').next()?.parse().ok()
}

fn pid_alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    let exists = unsafe { libc::kill(pid, 0) } == 0;
    exists || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

impl CgroupTree {
    /// Makes dsh's node, or says why there can be none.
    pub fn create(pids_max: u64, memory_max_mb: u64) -> Result<CgroupTree, ContainmentError> {
        let unavailable = |why: String| ContainmentError::CgroupUnavailable(why);
        let mount = mounts("cgroup2", None)
            .into_iter()
            .next()
            .ok_or_else(|| unavailable("no cgroup2 file system is mounted".into()))?;
        let own = own_path(None)
            .ok_or_else(|| unavailable("/proc/self/cgroup has no cgroup2 entry".into()))?;
        let parent = join(&mount, &own);
        remove_stale_nodes(&parent);
        let node = parent.join(node_name());
        std::fs::create_dir(&node).map_err(|e| {
            unavailable(format!(
                "cannot create {}: {e} (the cgroup tree is not writable here)",
                node.display()
            ))
        })?;
        let opened = open_for_write(&node.join("cgroup.kill"));
        let node_kill = match opened {
            Ok(file) => file,
            Err(e) => {
                let _ = std::fs::remove_dir(&node);
                return Err(unavailable(format!(
                    "{} has no cgroup.kill ({e}): the kernel is older than 5.14",
                    node.display()
                )));
            }
        };
        let limits = Limits::enable(&node, pids_max, memory_max_mb);
        let summary = limits.summary();
        let tree = CgroupTree {
            node,
            node_kill,
            limits,
            next_run: AtomicU64::new(1),
            pool: Mutex::new(Vec::new()),
            summary,
        };
        Ok(tree)
    }

    /// Adopts the node `node` handed over at an upgrade (this process made it, under the
    /// binary it ran before): its limits are found again, the runs it holds are adopted
    /// one by one, and the directories of the runs prepared and never used are removed.
    pub fn adopt(
        node: PathBuf,
        v1_nodes: &[PathBuf],
        next_run: u64,
        pids_max: u64,
        memory_max_mb: u64,
    ) -> Result<CgroupTree, ContainmentError> {
        let node_kill = open_for_write(&node.join("cgroup.kill")).map_err(|e| {
            ContainmentError::Cgroup(format!("cannot adopt {}: {e}", node.display()))
        })?;
        let limits = Limits::adopt(&node, v1_nodes, pids_max, memory_max_mb);
        // Prepared runs of the binary before hold no process: remove them.
        if let Ok(entries) = std::fs::read_dir(&node) {
            for entry in entries.flatten() {
                let name = entry.file_name();
                if name.to_str().is_some_and(|n| n.starts_with("run-"))
                    && is_unpopulated(&entry.path())
                {
                    let _ = std::fs::remove_dir(entry.path());
                    for v1 in &limits.v1 {
                        let _ = std::fs::remove_dir(v1.node.join(&name));
                    }
                }
            }
        }
        let summary = limits.summary();
        Ok(CgroupTree {
            node,
            node_kill,
            limits,
            next_run: AtomicU64::new(next_run),
            pool: Mutex::new(Vec::new()),
            summary,
        })
    }

    /// The number the next run's directory gets.
    pub fn next_run(&self) -> u64 {
        self.next_run.load(Ordering::Relaxed)
    }

    /// The node's path (for the keeper and the logs).
    pub fn node(&self) -> &Path {
        &self.node
    }

    /// The v1 nodes (for the keeper, which removes them).
    pub fn v1_nodes(&self) -> Vec<PathBuf> {
        self.limits.v1.iter().map(|h| h.node.clone()).collect()
    }

    /// A prepared run: from the pool, or made now when the pool is empty.
    pub fn take(&self) -> Result<CgroupRun, ContainmentError> {
        if let Some(run) = self.pool.lock().unwrap().pop() {
            return Ok(run);
        }
        tracing::debug!("no prepared cgroup: making one on the call path");
        self.prepare()
    }

    /// Tops the pool up (the housekeeping thread).
    pub fn refill(&self) {
        while self.pool.lock().unwrap().len() < POOL_SIZE {
            match self.prepare() {
                Ok(run) => self.pool.lock().unwrap().push(run),
                Err(error) => {
                    tracing::warn!(%error, "cannot prepare a cgroup for the next run");
                    return;
                }
            }
        }
    }

    /// Makes one run's cgroups and writes its limits.
    fn prepare(&self) -> Result<CgroupRun, ContainmentError> {
        let n = self.next_run.fetch_add(1, Ordering::Relaxed);
        let name = format!("run-{n}");
        let failed = |what: &Path, e: std::io::Error| {
            ContainmentError::Cgroup(format!("{}: {e}", what.display()))
        };
        let dir = self.node.join(&name);
        std::fs::create_dir(&dir).map_err(|e| failed(&dir, e))?;
        let mut spawn = SpawnFiles {
            dir_fd: File::open(&dir).map_err(|e| failed(&dir, e))?,
            v2_procs: open_for_write(&dir.join("cgroup.procs")).map_err(|e| failed(&dir, e))?,
            v1_procs: Vec::new(),
        };
        let mut run = CgroupRun {
            spawn: None,
            kill: open_for_write(&dir.join("cgroup.kill")).map_err(|e| failed(&dir, e))?,
            v1_dirs: Vec::new(),
            dir: dir.clone(),
        };
        let limits = &self.limits;
        if limits.v2_pids {
            write_value(&dir.join("pids.max"), limits.pids_max).map_err(|e| failed(&dir, e))?;
        }
        if limits.v2_memory {
            write_value(&dir.join("memory.max"), limits.memory_max_bytes)
                .map_err(|e| failed(&dir, e))?;
            let _ = write_value(&dir.join("memory.swap.max"), 0);
        }
        for hierarchy in &limits.v1 {
            let v1_dir = hierarchy.node.join(&name);
            std::fs::create_dir(&v1_dir).map_err(|e| failed(&v1_dir, e))?;
            run.v1_dirs.push(v1_dir.clone());
            match hierarchy.controller {
                "pids" => write_value(&v1_dir.join("pids.max"), limits.pids_max),
                _ => write_value(
                    &v1_dir.join("memory.limit_in_bytes"),
                    limits.memory_max_bytes,
                ),
            }
            .map_err(|e| failed(&v1_dir, e))?;
            spawn.v1_procs.push(
                open_for_write(&v1_dir.join("cgroup.procs")).map_err(|e| failed(&v1_dir, e))?,
            );
        }
        run.spawn = Some(spawn);
        Ok(run)
    }

    /// SIGKILL to every process of every run.
    pub fn kill_all(&self) {
        let _ = (&self.node_kill).write_all(b"1");
    }
}

impl Drop for CgroupTree {
    /// Removes the node (a host inside a longer-lived process: tests, benches). The
    /// keeper does the same when the process ends.
    fn drop(&mut self) {
        self.kill_all();
        for run in self.pool.get_mut().unwrap().drain(..) {
            run.remove();
        }
        remove_tree(&self.node);
        for node in self.v1_nodes() {
            remove_tree(&node);
        }
    }
}

impl Limits {
    /// The limits of an adopted node: the v2 controllers it has on, its v1 nodes.
    fn adopt(node: &Path, v1_nodes: &[PathBuf], pids_max: u64, memory_max_mb: u64) -> Limits {
        let enabled =
            std::fs::read_to_string(node.join("cgroup.subtree_control")).unwrap_or_default();
        let on = |c: &str| enabled.split_whitespace().any(|e| e == c);
        let v1 = v1_nodes
            .iter()
            .filter_map(|path| {
                let controller = ["pids", "memory"].into_iter().find(|c| {
                    mounts("cgroup", Some(c))
                        .iter()
                        .any(|m| path.starts_with(m))
                })?;
                Some(V1Hierarchy {
                    controller,
                    node: path.clone(),
                })
            })
            .collect();
        Limits {
            pids_max,
            memory_max_bytes: memory_max_mb.saturating_mul(1 << 20),
            v2_pids: pids_max > 0 && on("pids"),
            v2_memory: memory_max_mb > 0 && on("memory"),
            v1,
        }
    }

    /// Turns on what the node can give runs; what it cannot, a v1 hierarchy may.
    fn enable(node: &Path, pids_max: u64, memory_max_mb: u64) -> Limits {
        let mut limits = Limits {
            pids_max,
            memory_max_bytes: memory_max_mb.saturating_mul(1 << 20),
            v2_pids: false,
            v2_memory: false,
            v1: Vec::new(),
        };
        let available =
            std::fs::read_to_string(node.join("cgroup.controllers")).unwrap_or_default();
        let wanted: Vec<&'static str> = [("pids", pids_max > 0), ("memory", memory_max_mb > 0)]
            .into_iter()
            .filter(|(_, on)| *on)
            .map(|(c, _)| c)
            .collect();
        for controller in wanted {
            let in_v2 = available.split_whitespace().any(|c| c == controller)
                && std::fs::write(
                    node.join("cgroup.subtree_control"),
                    format!("+{controller}"),
                )
                .is_ok();
            if in_v2 {
                match controller {
                    "pids" => limits.v2_pids = true,
                    _ => limits.v2_memory = true,
                }
                continue;
            }
            match v1_node(controller, node) {
                Ok(v1_node) => limits.v1.push(V1Hierarchy {
                    controller,
                    node: v1_node,
                }),
                Err(why) => {
                    tracing::warn!(controller, %why, "the per-run limit of this controller is not enforced")
                }
            }
        }
        limits
    }

    fn summary(&self) -> String {
        let mut parts = Vec::new();
        let v1 = |c: &str| self.v1.iter().any(|h| h.controller == c);
        if self.v2_pids || v1("pids") {
            parts.push(format!(
                "pids.max {} ({})",
                self.pids_max,
                if self.v2_pids {
                    "v2"
                } else {
                    "v1 pids hierarchy"
                }
            ));
        } else {
            parts.push("no pids limit".to_string());
        }
        if self.v2_memory || v1("memory") {
            parts.push(format!(
                "memory {} MiB ({})",
                self.memory_max_bytes >> 20,
                if self.v2_memory {
                    "v2"
                } else {
                    "v1 memory hierarchy"
                }
            ));
        } else {
            parts.push("no memory limit".to_string());
        }
        parts.join(", ")
    }
}

/// dsh's node in the v1 hierarchy of `controller`, named like the v2 node.
fn v1_node(controller: &str, v2_node: &Path) -> Result<PathBuf, String> {
    let mount = mounts("cgroup", Some(controller))
        .into_iter()
        .next()
        .ok_or_else(|| {
            format!("neither the cgroup2 node nor a v1 hierarchy offers {controller}")
        })?;
    let own = own_path(Some(controller))
        .ok_or_else(|| format!("/proc/self/cgroup has no {controller} entry"))?;
    let parent = join(&mount, &own);
    remove_stale_nodes(&parent);
    let node = parent.join(v2_node.file_name().unwrap_or_default());
    std::fs::create_dir(&node).map_err(|e| format!("cannot create {}: {e}", node.display()))?;
    Ok(node)
}

/// Removes the nodes of dsh processes that are gone (their keeper could not).
fn remove_stale_nodes(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(node_pid) else {
            continue;
        };
        if !pid_alive(pid) {
            let path = entry.path();
            let _ = std::fs::write(path.join("cgroup.kill"), "1");
            wait_unpopulated(&path, Duration::from_millis(500));
            remove_tree(&path);
            tracing::info!(node = %path.display(), "removed the cgroup of a dsh that is gone");
        }
    }
}

/// Removes `dir` and the cgroups under it, deepest first.
pub fn remove_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                remove_tree(&entry.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// Polls `cgroup.events` until `populated 0` (v2), or `cgroup.procs` until empty (v1),
/// for at most `limit`.
pub fn wait_unpopulated(dir: &Path, limit: Duration) {
    let deadline = Instant::now() + limit;
    while !is_unpopulated(dir) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Whether no process is left in the cgroup `dir` (and those below it).
fn is_unpopulated(dir: &Path) -> bool {
    match std::fs::read_to_string(dir.join("cgroup.events")) {
        Ok(text) => text.lines().any(|l| l == "populated 0"),
        Err(_) => std::fs::read_to_string(dir.join("cgroup.procs"))
            .map(|t| t.trim().is_empty())
            .unwrap_or(true),
    }
}

fn write_value(path: &Path, value: u64) -> std::io::Result<()> {
    std::fs::write(path, value.to_string())
}

/// A cgroup control file opened for writing (close-on-exec, as std opens everything).
fn open_for_write(path: &Path) -> std::io::Result<File> {
    std::fs::OpenOptions::new().write(true).open(path)
}

/// The keeper's work for a cgroup host that died: kill the node, wait, remove it.
pub fn reap_tree(node: &Path, v1_nodes: &[PathBuf]) {
    let _ = std::fs::write(node.join("cgroup.kill"), "1");
    wait_unpopulated(node, Duration::from_secs(2));
    remove_tree(node);
    for v1 in v1_nodes {
        wait_unpopulated(v1, Duration::from_millis(500));
        remove_tree(v1);
    }
}
