//! The `sandbox` executor: what a sandboxed run is confined by, prepared in the host
//! before the spawn and applied by the child just before `exec`. It owns [`Sandbox`]
//! (per host), its prepared run [`SandboxRun`], its error [`SandboxError`], and the mount
//! steps ([`MountStep`]) every confined run's child takes.
//!
//! A sandboxed run gets, in this order (the child does it, [`crate::spawn`]):
//!
//! 1. **Its own mount and IPC namespaces** (and a user namespace when dsh is not root,
//!    mapping only dsh's own uid and gid). In the mount namespace every mount is
//!    read-only, then the writable set is bound back writable: the session workspace
//!    (canonicalized once, when the host starts — never a call's `workdir`), the
//!    `[process.sandbox] write` paths, and the run's slot (below). dsh's own files
//!    ([`crate::own_files`]) are then carved out: the state directory is covered by an
//!    empty read-only tmpfs (only the run's own slot is bound back inside it), and the
//!    configuration file and plugin directory, when they lie in the writable set, are
//!    bound read-only onto themselves, with every directory between them and the
//!    writable root they lie in made a mount point (so none can be renamed away and
//!    replaced). So metadata changes (chmod, chown, utimes, xattrs) outside the writable
//!    set fail with `EROFS`, and the IPC namespace keeps SysV IPC and POSIX message
//!    queues to the run. Propagation is one way (slave): nothing mounted here reaches
//!    the host.
//! 2. **No new privileges and no capabilities** (bounding, ambient, effective,
//!    permitted, inheritable: a root host's runs keep none and regain none at exec).
//! 3. **A Landlock domain**: read beneath every top-level directory but `/dev` (where only
//!    the `/dev/null`-like devices and `/dev/tty` are granted, and a terminal run's own
//!    PTY: not the raw disks, not other terminals), write on the workspace, the `write`
//!    paths and the slot, TCP connect to `tcp_ports` only, and signals and abstract Unix
//!    sockets scoped to the run's own domain.
//! 4. **The seccomp filter** ([`crate::seccomp`]).
//!
//! Slots: building a ruleset costs a system call per rule, so rulesets are kept. Each
//! run takes a *slot* (a directory `STATE/sandbox-tmp/slot-PID-N`, held by one run at a
//! time, with its ruleset and its mount steps); the run's `TMPDIR` is made inside it and
//! removed when the run ends, the slot is emptied and goes back to the pool. A run sees
//! no other slot (the state directory is covered).
//!
//! Fails closed: where the kernel's Landlock ABI lacks a feature `require` names, every
//! sandboxed run is refused with [`SandboxError::Unavailable`]; where the namespaces
//! cannot be made, the spawn fails and the call is refused.
//!
//! The `container` executor ([`super::container`]) is this confinement built a second
//! time, for containers: no `write` paths, the workspace attached as an idmapped mount, a
//! fresh `/proc`, a ruleset per run.

use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use landlock::{
    Access, AccessFs, AccessNet, CompatLevel, Compatible, NetPort, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreatedAttr, Scope, ABI,
};

use super::{Executor, HostSetup, Lack, Prepared};
use crate::config::{ContainerNetwork, SandboxConfig, SandboxFeature};
use crate::spawn::ChildSandbox;

use crate::own_files::OwnFiles;

/// Why a run cannot be sandboxed.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error(
        "the sandbox needs {} (Landlock ABI {}) and this kernel offers Landlock ABI {abi}; \
         the call was not run (an operator may leave {} out of [process.sandbox] require)",
        feature.name(), feature.abi(), feature.name()
    )]
    Unavailable { feature: SandboxFeature, abi: i32 },
    #[error("cannot build the sandbox's Landlock ruleset: {0}")]
    Ruleset(#[from] landlock::RulesetError),
    #[error("cannot build the sandbox's seccomp filter: {0}")]
    Seccomp(#[from] seccompiler::BackendError),
    #[error("{0}")]
    Setup(String),
    #[error("Landlock made no ruleset (it is not enabled in this kernel)")]
    NoRuleset,
    #[error("cannot make the run's private temporary directory {path}: {source}")]
    Tmp {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A call's working directory the sandbox does not run in (the model's mistake).
    #[error(
        "{path} is outside the workspace {workspace}: a sandboxed command runs and writes only \
         in the session workspace (give a workdir inside it, or none)"
    )]
    OutsideWorkspace { path: PathBuf, workspace: PathBuf },
    #[error(
        "a network by policy needs dsh to run as root (it makes the run's network namespace \
         and joins the run to it); this dsh is not root, so the call was not run: run dsh as \
         root, or give this scope and tool no [egress] allow entries"
    )]
    NetworkNeedsRoot,
}

/// One step of a run's mount namespace set-up, done by the child before anything else
/// of the sandbox (see the module doc and [`crate::spawn`]).
#[derive(Debug, Clone)]
pub struct MountStep {
    pub op: MountOp,
    pub path: CString,
    /// A step on a place found in the host's mount table (a cover): a path gone by the
    /// time the run applies it (unmounted and removed meanwhile) has nothing left to
    /// cover, so `ENOENT` is not a failure.
    pub if_present: bool,
}

/// What a [`MountStep`] does to its path.
#[derive(Debug, Clone)]
pub enum MountOp {
    /// Every mount becomes private: nothing mounted in the run's namespace reaches the
    /// host's, and nothing the host mounts later (a disk, a bind of dsh's state) appears
    /// in the run's view without the flags below (the path is `/`).
    PrivateAll,
    /// The mount at the path (and, `recursive`, every mount beneath) becomes read-only,
    /// `nodev` and `nosuid`.
    ReadOnly { recursive: bool },
    /// Every mount beneath the path (`/`) becomes `nodev` and `nosuid`, whatever made it:
    /// the last step before the run's `/dev` is built.
    Seal,
    /// The mount at the path becomes writable again (a bind of a writable root).
    Writable,
    /// Binds `source` (every mount beneath it too) onto the path.
    Bind { source: CString },
    /// Mounts an empty tmpfs on the path (the state directory's cover).
    Cover,
    /// Takes a detached copy of the mount at the path (`recursive`: with every mount
    /// beneath it), to attach it again once a cover hides the path.
    Detach { recursive: bool },
    /// Attaches the copy the last `Detach` not attached yet took, at the path.
    Attach,
    /// Makes a directory (inside a cover).
    Mkdir,
    /// A container's: an empty tmpfs on the path that its unprivileged root may pass
    /// through (mode 0711) but not list.
    CoverPassable,
    /// A container's: a directory its root may pass through (0711), inside a cover.
    MkdirPassable,
    /// A container's: attaches the run's idmapped copy of the workspace at the path.
    AttachWorkspace,
    /// A container's: a fresh `proc` (of the run's PID namespace) on the path.
    Proc,
    /// An empty tmpfs (0755, `nodev`, `nosuid`, `noexec`) on `/dev`: the run's `/dev`,
    /// holding only what the steps after it put there.
    CoverDev,
    /// Makes an empty file (a device's mount point).
    MkFile,
    /// `Attach` for a device node's copy, which then drops `nodev`: the only mounts of a
    /// run without it are these, one device node each.
    AttachDevice,
    /// Makes a symbolic link at the path pointing to `target` (`/dev/fd`, `/dev/stdin`…).
    Symlink { target: CString },
}

/// The confinement every sandboxed run of this host gets; see the module doc.
#[derive(Debug)]
pub struct Sandbox {
    /// The Landlock ABI used (the kernel's, or less with `assume_abi`); 0: none.
    abi: i32,
    /// Required features this ABI lacks (the first refuses every run).
    missing: Option<SandboxFeature>,
    /// The features `[process.sandbox] require` names.
    require: Vec<SandboxFeature>,
    /// The session workspace, canonical.
    workspace: PathBuf,
    state_dir: Option<PathBuf>,
    /// Read, beneath each (every top-level entry but `/dev`); true for directories.
    read: Vec<(PathFd, bool)>,
    /// Read-directory only: `/` and `/dev`.
    list: Vec<(PathFd, bool)>,
    /// Read and write: devices, configured paths, the workspace.
    write: Vec<(PathFd, bool)>,
    tcp_ports: Vec<u16>,
    unix_sockets: bool,
    /// A container's with `network = "loopback"`: its runs have a network namespace of
    /// their own with only its loopback up, so TCP is not governed by Landlock and
    /// `listen` is allowed (nothing outside the run is reachable).
    own_loopback: bool,
    filter: Arc<Vec<libc::sock_filter>>,
    /// The namespaces a run unshares (`CLONE_NEW*`).
    namespaces: libc::c_int,
    /// A non-root host's runs join this user namespace (made once, mapping only dsh's own
    /// uid and gid) before they make their mount and IPC namespaces.
    user_ns: Option<Arc<OwnedFd>>,
    /// Built for containers: a ruleset per run (the child adds its `/proc`), the
    /// container's marker.
    for_container: bool,
    /// What its results say: `[sandbox: …]`.
    marker: String,
    /// What the results of its runs with a network by policy say (`net=proxy`).
    proxied_marker: String,
    /// The mount steps every run shares that do not depend on the mount table: all
    /// read-only, the writable roots, dsh's files in them pinned.
    base: Vec<MountStep>,
    /// The writable roots and dsh's own files, which the covers are computed for.
    writable_roots: Vec<PathBuf>,
    own: OwnFiles,
    /// The shared steps as the mount table now calls for them (see [`View`]).
    view: Mutex<View>,
    tmp_root: PathBuf,
    /// Free slots (see the module doc).
    slots: Arc<Mutex<Vec<Slot>>>,
}

/// The mount steps every run shares: [`Sandbox::base`] and the covers dsh's mount table
/// calls for (every other place its state is reachable, every procfs but `/proc`, a
/// container's `/proc`), built again when the table changes: `/proc/self/mountinfo` is kept
/// open, and the kernel marks it (`POLLPRI`) at every mount or unmount, which each run's
/// preparation asks with a `poll` that does not wait. So a bind of the state directory made
/// after dsh started is covered for every run prepared after it.
#[derive(Debug)]
struct View {
    steps: Arc<Vec<MountStep>>,
    /// Bumped each time `steps` are built again (a slot built before is rebuilt).
    generation: u64,
    table: Option<std::fs::File>,
}

/// A directory one run at a time makes its temporary directory in, with its ruleset and
/// its mount steps (the shared ones and its own).
#[derive(Debug)]
struct Slot {
    /// The [`View`] generation its steps were built from.
    generation: u64,
    dir: PathBuf,
    /// None: the kernel offers none of the Landlock features (and none is required).
    ruleset: Option<Arc<OwnedFd>>,
    /// Every step but the run's `/dev` (a terminal run adds its own, with its PTY).
    base_steps: Arc<Vec<MountStep>>,
    /// `base_steps` and the `/dev` of a run without a terminal.
    steps: Arc<Vec<MountStep>>,
}

impl Slot {
    /// The directory bound on the run's `/dev/shm` (kept with the slot: its ruleset
    /// names it; emptied after each run).
    fn shm(&self) -> PathBuf {
        self.dir.join(SHM)
    }
}

/// The name of a slot's `/dev/shm` directory.
const SHM: &str = "shm";

impl Drop for Sandbox {
    fn drop(&mut self) {
        for slot in self
            .slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            let _ = std::fs::remove_dir_all(&slot.dir);
        }
    }
}

/// One run's confinement: its ruleset, mount steps and private temporary directory
/// (removed when this is dropped).
#[derive(Debug)]
pub struct SandboxRun {
    /// None: the kernel offers none of the Landlock features (and none is required).
    ruleset: Option<Arc<OwnedFd>>,
    steps: Arc<Vec<MountStep>>,
    filter: Arc<Vec<libc::sock_filter>>,
    namespaces: libc::c_int,
    user_ns: Option<Arc<OwnedFd>>,
    /// Removed first, then the slot goes back to `pool`.
    tmp: Option<PrivateTmp>,
    slot: Option<Slot>,
    pool: Weak<Mutex<Vec<Slot>>>,
    marker: String,
    /// The network namespace it joins, with only its loopback and dsh's proxy
    /// ([`crate::network`]); none: the host's (`tcp_ports` governs it), or a container's own.
    network: Option<OwnedFd>,
}

impl Drop for SandboxRun {
    fn drop(&mut self) {
        drop(self.tmp.take());
        let Some(slot) = self.slot.take() else { return };
        // Whatever the run left in its slot goes too, so the next run finds it empty
        // (its `/dev/shm` directory stays, emptied); a slot that cannot be emptied is not
        // used again.
        let emptied = empty_dir(&slot.dir, Some(SHM)) && empty_dir(&slot.shm(), None);
        match self.pool.upgrade() {
            Some(pool) if emptied => pool.lock().unwrap_or_else(|e| e.into_inner()).push(slot),
            _ => {
                let _ = std::fs::remove_dir_all(&slot.dir);
            }
        }
    }
}

impl SandboxRun {
    /// The ruleset descriptor the child restricts itself with (none where the kernel
    /// has no Landlock and nothing requires it).
    pub fn ruleset(&self) -> Option<&OwnedFd> {
        self.ruleset.as_deref()
    }

    /// The mount steps the child takes in its new namespace.
    pub fn steps(&self) -> &[MountStep] {
        &self.steps
    }

    /// The directory the run sees as `/dev/shm`.
    pub fn shm(&self) -> Option<PathBuf> {
        self.slot.as_ref().map(Slot::shm)
    }

    /// The run's `TMPDIR`.
    pub fn tmp(&self) -> &Path {
        self.tmp
            .as_ref()
            .map_or(Path::new("/nonexistent"), |t| &t.0)
    }

    /// The line a result gets: `[sandbox: fs=workspace net=off]`.
    pub fn marker(&self) -> &str {
        &self.marker
    }

    /// What the child applies before `exec`, as data naming this run's descriptors (a
    /// container adds its own parts).
    pub(super) fn child(&self) -> ChildSandbox {
        use std::os::fd::AsRawFd;
        ChildSandbox {
            ruleset: self.ruleset.as_ref().map_or(-1, |fd| fd.as_raw_fd()),
            filter: self.filter.clone(),
            namespaces: self.namespaces,
            user_ns: self.user_ns.as_ref().map_or(-1, |fd| fd.as_raw_fd()),
            steps: self.steps.clone(),
            clone_flags: 0,
            workspace_tree: -1,
            container_ns: -1,
            net_ns: self.network.as_ref().map_or(-1, |fd| fd.as_raw_fd()),
            ids: (0, 0),
            proc_access: 0,
        }
    }
}

/// What the launcher keeps of a sandboxed run: the data its child applies, and the run
/// itself (its ruleset, slot and `TMPDIR`) for the run's life.
impl From<SandboxRun> for Option<Prepared> {
    fn from(run: SandboxRun) -> Self {
        let (child, marker, tmp) = (run.child(), run.marker.clone(), run.tmp().to_path_buf());
        Some(Prepared::new(child, marker, tmp, run))
    }
}

impl Executor for Sandbox {
    /// Stronger than `local`: Landlock, seccomp, its own mount and IPC namespaces.
    const STRENGTH: u8 = 10;
    type Prepared = SandboxRun;
    type Error = SandboxError;

    fn for_host(host: &HostSetup<'_>) -> Result<Self, SandboxError> {
        Sandbox::new(host.config, host.workspace()?, &host.places.own)
    }

    fn prepare(
        &self,
        cwd: &Path,
        terminal: Option<&Path>,
        network: Option<OwnedFd>,
    ) -> Result<SandboxRun, SandboxError> {
        self.check_cwd(cwd)?;
        self.prepare_run(terminal, network)
    }

    fn marker(&self) -> Option<&str> {
        Some(self.marker_line())
    }

    fn lacks(&self) -> Vec<Lack> {
        self.landlock_lacks()
    }
}

/// Removes everything in `dir` but the directory `keep`; false when something stayed.
fn empty_dir(dir: &Path, keep: Option<&str>) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries.flatten().all(|entry| {
            let path = entry.path();
            match entry.file_type() {
                Ok(kind) if kind.is_dir() && keep.is_some_and(|k| entry.file_name() == k) => true,
                Ok(kind) if kind.is_dir() => std::fs::remove_dir_all(&path).is_ok(),
                _ => std::fs::remove_file(&path).is_ok(),
            }
        })
    })
}

/// A directory removed, with everything in it, when dropped.
#[derive(Debug)]
pub struct PrivateTmp(PathBuf);

impl PrivateTmp {
    /// Makes `path` (mode 0700; it must not exist).
    pub fn create(path: PathBuf) -> Result<Self, SandboxError> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .map_err(|source| SandboxError::Tmp {
                path: path.clone(),
                source,
            })?;
        Ok(PrivateTmp(path))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for PrivateTmp {
    fn drop(&mut self) {
        match std::fs::remove_dir_all(&self.0) {
            Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
                tracing::warn!(path = %self.0.display(), %error, "cannot remove a sandboxed run's temporary directory");
            }
            _ => {}
        }
    }
}

/// Numbers the slot and temporary directories of this process (unique across its
/// sandboxes, which may share a state directory).
static NEXT_DIR: AtomicU64 = AtomicU64::new(1);

/// The devices a sandboxed run may open (read and write): `/dev/null`-like ones and its
/// controlling terminal. Nothing else of `/dev` (no disks, no other terminals).
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
];

/// The kernel's Landlock ABI version (0 where Landlock is off or missing).
pub fn kernel_abi() -> i32 {
    // SAFETY: the version query reads no memory (null attributes, size 0).
    let version = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            1u32, // LANDLOCK_CREATE_RULESET_VERSION
        )
    };
    version.max(0) as i32
}

pub(super) fn abi_of(version: i32) -> ABI {
    match version {
        ..=0 => ABI::Unsupported,
        1 => ABI::V1,
        2 => ABI::V2,
        3 => ABI::V3,
        4 => ABI::V4,
        5 => ABI::V5,
        _ => ABI::V6,
    }
}

fn c_path(path: &Path) -> Result<CString, SandboxError> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| SandboxError::Setup(format!("{} has a NUL byte", path.display())))
}

/// Whether the filesystem at `path` is mounted read-only on the host.
fn mounted_read_only(path: &Path) -> bool {
    let Ok(path) = c_path(path) else { return false };
    // SAFETY: statvfs fills a plain struct.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    unsafe { libc::statvfs(path.as_ptr(), &mut stat) == 0 && stat.f_flag & libc::ST_RDONLY != 0 }
}

/// The directories strictly between `root` and `path` (`root/a/b/c` gives `root/a`,
/// `root/a/b`).
fn between(root: &Path, path: &Path) -> Vec<PathBuf> {
    let Ok(rest) = path.strip_prefix(root) else {
        return Vec::new();
    };
    let mut here = root.to_path_buf();
    let mut dirs = Vec::new();
    let components: Vec<_> = rest.components().collect();
    for step in components.iter().take(components.len().saturating_sub(1)) {
        here.push(step);
        dirs.push(here.clone());
    }
    dirs
}

impl Sandbox {
    /// Prepares the confinement of `config` for runs in `workspace` (the session's, fixed
    /// for the host's life) of a host whose own files are `own` (the state directory holds
    /// the runs' temporary directories).
    pub fn new(
        config: &SandboxConfig,
        workspace: &Path,
        own: &OwnFiles,
    ) -> Result<Self, SandboxError> {
        Self::build(config, workspace, own, false)
    }

    /// [`Sandbox::new`], or (`for_container`) the confinement a container applies inside
    /// its namespaces: no `write` paths, the workspace attached from the run's idmapped
    /// tree, slots its root may reach, a fresh `/proc`, and no namespaces of its own to
    /// unshare (the container's are made by `clone`).
    pub(super) fn build(
        config: &SandboxConfig,
        workspace: &Path,
        own: &OwnFiles,
        for_container: bool,
    ) -> Result<Self, SandboxError> {
        let stripped;
        let config = if for_container {
            stripped = SandboxConfig {
                write: Vec::new(),
                tcp_ports: Vec::new(),
                ..config.clone()
            };
            &stripped
        } else {
            config
        };
        let kernel = kernel_abi();
        let abi = config.assume_abi.map_or(kernel, |a| a.min(kernel));
        let missing = config.require.iter().copied().find(|f| f.abi() > abi);
        let workspace = std::fs::canonicalize(workspace).map_err(|e| {
            SandboxError::Setup(format!("the workspace {}: {e}", workspace.display()))
        })?;
        let state_dir = own.state_dir.clone();
        if let Some(state) = &state_dir {
            if workspace.starts_with(state) {
                return Err(SandboxError::Setup(format!(
                    "the workspace {} lies inside dsh's state directory {}, which sandboxed runs \
                     cannot reach: choose a workspace outside it (--workdir) or another state \
                     directory (--state-dir)",
                    workspace.display(),
                    state.display()
                )));
            }
        }
        let (read, list) = top_level_except_dev();
        let write_paths: Vec<PathBuf> = config
            .write
            .iter()
            .filter_map(|p| std::fs::canonicalize(p).ok())
            .collect();
        let write: Vec<PathBuf> = DEVICES
            .iter()
            .map(PathBuf::from)
            .chain(write_paths.iter().cloned())
            .chain(std::iter::once(workspace.clone()))
            .collect();
        let tmp_root = match &state_dir {
            Some(state) => state.join("sandbox-tmp"),
            None => std::env::temp_dir().join(format!("dsh-sandbox-{}", crate::euid())),
        };
        {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&tmp_root)
                .map_err(|source| SandboxError::Tmp {
                    path: tmp_root.clone(),
                    source,
                })?;
        }
        let mut writable_roots: Vec<PathBuf> = std::iter::once(workspace.clone())
            .chain(write_paths)
            .collect();
        writable_roots.sort_by_key(|p| p.components().count());
        writable_roots.dedup();
        // A `write` path named through a link a run could re-point would open another
        // directory at the next start; dsh's own files likewise.
        let named_writes: Vec<PathBuf> = config
            .write
            .iter()
            .map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone()))
            .collect();
        let mut links = own.links_in(&writable_roots);
        links.extend(crate::own_files::links_among(
            &named_writes,
            &writable_roots,
        ));
        if let Some((link, target)) = links.first() {
            return Err(SandboxError::Setup(format!(
                "{} is a symbolic link (to {}) in a directory sandboxed runs may write: a run \
                 could point it elsewhere, and the next dsh started with the same options would \
                 read that run's configuration, plugins or compile cache, or open another \
                 directory to writes; name dsh's state directory, configuration, plugin \
                 directory and [process.sandbox] write paths without such links (the \
                 link's target, or a place outside the workspace)",
                link.display(),
                target.display()
            )));
        }
        let base = shared_steps(&writable_roots, own, for_container)?;
        let mut table = std::fs::File::open("/proc/self/mountinfo").ok();
        let mountinfo = read_table(table.as_mut());
        let steps = view_steps_over(&base, &mountinfo, &writable_roots, own, for_container)?;
        let user_ns = match crate::euid() {
            _ if for_container => None,
            0 => None,
            euid => {
                // SAFETY: getegid has no preconditions.
                let egid = unsafe { libc::getegid() };
                Some(Arc::new(user_namespace(
                    &format!("{euid} {euid} 1\n"),
                    &format!("{egid} {egid} 1\n"),
                )?))
            }
        };
        let own_loopback = for_container && config.container.network == ContainerNetwork::Loopback;
        let namespaces = if for_container {
            0
        } else {
            libc::CLONE_NEWNS | libc::CLONE_NEWIPC
        };
        let mut sandbox = Sandbox {
            abi,
            missing,
            require: config.require.clone(),
            workspace,
            state_dir,
            read: open_all(&read),
            list: open_all(&list),
            write: open_all(&write),
            tcp_ports: config.tcp_ports.clone(),
            unix_sockets: config.unix_sockets,
            own_loopback,
            filter: Arc::new(crate::seccomp::program(config.unix_sockets, own_loopback)?),
            namespaces,
            user_ns,
            for_container,
            marker: String::new(),
            proxied_marker: String::new(),
            base,
            writable_roots,
            own: own.clone(),
            view: Mutex::new(View {
                steps: Arc::new(steps),
                generation: 0,
                table,
            }),
            tmp_root,
            slots: Default::default(),
        };
        sandbox.marker = sandbox.describe(false);
        sandbox.proxied_marker = sandbox.describe(true);
        Ok(sandbox)
    }

    /// The Landlock ABI its runs use (0: none).
    pub fn abi(&self) -> i32 {
        self.abi
    }

    /// Whether `[process.sandbox] require` names `feature`.
    pub fn requires(&self, feature: SandboxFeature) -> bool {
        self.require.contains(&feature)
    }

    /// The line its runs' results carry.
    pub fn marker_line(&self) -> &str {
        &self.marker
    }

    /// The session workspace runs write in (canonical).
    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// How many Landlock rules every run's ruleset starts with (read, listing, write).
    pub fn base_rules(&self) -> usize {
        self.read.len() + self.list.len() + self.write.len()
    }

    /// The seccomp program every sandboxed child loads.
    pub fn filter(&self) -> &[libc::sock_filter] {
        &self.filter
    }

    /// The namespaces every sandboxed child unshares.
    pub fn namespaces(&self) -> libc::c_int {
        self.namespaces
    }

    /// The user namespace a non-root host's runs join first.
    pub fn user_ns(&self) -> Option<&OwnedFd> {
        self.user_ns.as_deref()
    }

    /// Whether this ABI has `feature`.
    fn has(&self, feature: SandboxFeature) -> bool {
        self.abi >= feature.abi()
    }

    /// The Landlock features this ABI lacks: a required one refuses every run, any other
    /// leaves that part unconfined.
    pub(super) fn landlock_lacks(&self) -> Vec<Lack> {
        SandboxFeature::ALL
            .into_iter()
            .filter(|feature| !self.has(*feature))
            .map(|feature| {
                let refuses = self.requires(feature);
                Lack {
                    what: format!(
                        "Landlock {} (ABI {}; this kernel's is {}): {}",
                        feature.name(),
                        feature.abi(),
                        self.abi,
                        if refuses {
                            "required by [process.sandbox] require, so every run is refused"
                        } else {
                            "not required, so runs go on without it and their marker says so"
                        }
                    ),
                    refuses,
                }
            })
            .collect()
    }

    /// `cwd` as a sandboxed run may start in: canonical and inside the workspace.
    pub fn check_cwd(&self, cwd: &Path) -> Result<PathBuf, SandboxError> {
        let canonical = std::fs::canonicalize(cwd).unwrap_or_else(|_| cwd.to_path_buf());
        let inside = canonical.starts_with(&self.workspace)
            && !self
                .state_dir
                .as_deref()
                .is_some_and(|state| canonical.starts_with(state));
        if inside {
            Ok(canonical)
        } else {
            Err(SandboxError::OutsideWorkspace {
                path: cwd.to_path_buf(),
                workspace: self.workspace.clone(),
            })
        }
    }

    /// One run's confinement. `terminal`: the run's own PTY (its slave's path), which it
    /// may open again (`/dev/stderr` is that terminal in a terminal session). `network`:
    /// the namespace of a run with a network by policy ([`crate::network`]), which it
    /// joins; TCP is then not governed by Landlock's port rules (nothing but dsh's proxy
    /// answers in that namespace). The run's working directory is checked by the caller
    /// ([`Sandbox::check_cwd`]).
    pub fn prepare_run(
        &self,
        terminal: Option<&Path>,
        network: Option<OwnedFd>,
    ) -> Result<SandboxRun, SandboxError> {
        if let Some(feature) = self.missing {
            return Err(SandboxError::Unavailable {
                feature,
                abi: self.abi,
            });
        }
        if network.is_some() && self.user_ns.is_some() {
            return Err(SandboxError::NetworkNeedsRoot);
        }
        let slot = self.take_slot()?;
        let proxied = network.is_some();
        let ruleset = match terminal {
            // A terminal's ruleset is its own (terminals open rarely); so is a
            // container run's (its child adds a rule for its own `/proc`) and a run's
            // with a network (no TCP port rules).
            Some(pty) => self
                .ruleset_for(&slot.dir, Some(pty), proxied)?
                .map(Arc::new),
            None if self.for_container || proxied => {
                self.ruleset_for(&slot.dir, None, proxied)?.map(Arc::new)
            }
            None => slot.ruleset.clone(),
        };
        let steps = match terminal {
            Some(pty) => {
                let mut steps = Vec::clone(&slot.base_steps);
                steps.extend(dev_steps(&slot.shm(), Some(pty))?);
                Arc::new(steps)
            }
            None => slot.steps.clone(),
        };
        let n = NEXT_DIR.fetch_add(1, Ordering::Relaxed);
        let tmp = PrivateTmp::create(slot.dir.join(format!("run-{n}")))?;
        Ok(SandboxRun {
            ruleset,
            steps,
            filter: self.filter.clone(),
            namespaces: self.namespaces,
            user_ns: self.user_ns.clone(),
            tmp: Some(tmp),
            slot: Some(slot),
            pool: Arc::downgrade(&self.slots),
            marker: match proxied {
                true => self.proxied_marker.clone(),
                false => self.marker.clone(),
            },
            network,
        })
    }

    /// The shared steps as the mount table calls for them now, and their generation.
    fn current_view(&self) -> Result<(Arc<Vec<MountStep>>, u64), SandboxError> {
        let mut view = self.view.lock().unwrap_or_else(|e| e.into_inner());
        let changed = view.table.as_ref().is_some_and(|table| {
            use std::os::fd::AsRawFd;
            let mut ready = libc::pollfd {
                fd: table.as_raw_fd(),
                events: libc::POLLPRI,
                revents: 0,
            };
            // SAFETY: one pollfd on this stack; a timeout of 0 never waits.
            unsafe { libc::poll(&mut ready, 1, 0) > 0 && ready.revents & libc::POLLPRI != 0 }
        });
        if changed {
            let mountinfo = read_table(view.table.as_mut());
            let steps = view_steps_over(
                &self.base,
                &mountinfo,
                &self.writable_roots,
                &self.own,
                self.for_container,
            )?;
            tracing::debug!("the mount table changed: the sandbox's covers were built again");
            view.steps = Arc::new(steps);
            view.generation += 1;
        }
        Ok((view.steps.clone(), view.generation))
    }

    /// A free slot, or a new one; its steps built from the mount table as it is now.
    fn take_slot(&self) -> Result<Slot, SandboxError> {
        let (shared, generation) = self.current_view()?;
        let free = self.slots.lock().unwrap_or_else(|e| e.into_inner()).pop();
        if let Some(mut slot) = free {
            if slot.generation != generation {
                let (base_steps, steps) = self.slot_steps(&shared, &slot.dir)?;
                slot.base_steps = base_steps;
                slot.steps = steps;
                slot.generation = generation;
            }
            return Ok(slot);
        }
        let n = NEXT_DIR.fetch_add(1, Ordering::Relaxed);
        let dir = PrivateTmp::create(
            self.tmp_root
                .join(format!("slot-{}-{n}", std::process::id())),
        )?;
        // Kept for the host's life (removed when the sandbox is dropped).
        let dir = std::mem::ManuallyDrop::new(dir);
        let dir = dir.0.clone();
        if self.for_container {
            // A container's root (not dsh's uid) passes through to its TMPDIR.
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o711)).map_err(
                |source| SandboxError::Tmp {
                    path: dir.clone(),
                    source,
                },
            )?;
        }
        let shm = dir.join(SHM);
        {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(&shm)
                .map_err(|source| SandboxError::Tmp {
                    path: shm.clone(),
                    source,
                })?;
        }
        let ruleset = self.ruleset(&dir, None)?.map(Arc::new);
        let (base_steps, steps) = self.slot_steps(&shared, &dir)?;
        Ok(Slot {
            generation,
            dir,
            ruleset,
            base_steps,
            steps,
        })
    }

    /// A slot's steps over the `shared` ones: every step but the run's `/dev` (the state
    /// directory covered but for the slot, the seal), and those with the `/dev` of a run
    /// without a terminal.
    #[allow(clippy::type_complexity)]
    fn slot_steps(
        &self,
        shared: &[MountStep],
        dir: &Path,
    ) -> Result<(Arc<Vec<MountStep>>, Arc<Vec<MountStep>>), SandboxError> {
        let mut steps = shared.to_vec();
        if let Some(state) = &self.state_dir {
            steps.extend(cover_steps(state, dir, self.for_container)?);
        }
        steps.push(MountStep {
            op: MountOp::Seal,
            path: c"/".to_owned(),
            if_present: false,
        });
        let base_steps = Arc::new(steps.clone());
        steps.extend(dev_steps(&dir.join(SHM), None)?);
        Ok((base_steps, Arc::new(steps)))
    }

    /// A new private temporary directory (outside any slot; for measuring).
    pub fn private_tmp(&self) -> Result<PrivateTmp, SandboxError> {
        let n = NEXT_DIR.fetch_add(1, Ordering::Relaxed);
        PrivateTmp::create(
            self.tmp_root
                .join(format!("run-{}-{n}", std::process::id())),
        )
    }

    /// What the result line says was confined; `proxied`: for a run with a network by
    /// policy (`net=proxy`, and `+unix` where Unix sockets are allowed).
    fn describe(&self, proxied: bool) -> String {
        if self.for_container {
            let net = match (proxied, self.own_loopback, self.unix_sockets) {
                (true, _, true) => "proxy+unix",
                (true, _, false) => "proxy",
                (false, true, true) => "loopback+unix",
                (false, true, false) => "loopback",
                (false, false, true) => "unix",
                (false, false, false) => "off",
            };
            let fs = if self.has(SandboxFeature::Fs) {
                "workspace"
            } else {
                "unconfined"
            };
            let signals = if self.has(SandboxFeature::Signals) {
                ""
            } else {
                " signals=unscoped"
            };
            return format!("[sandbox: container fs={fs} net={net}{signals}]");
        }
        let fs = if self.has(SandboxFeature::Fs) {
            "workspace"
        } else {
            "unconfined"
        };
        let net = if proxied {
            match self.unix_sockets {
                true => "proxy+unix".to_string(),
                false => "proxy".to_string(),
            }
        } else if !self.has(SandboxFeature::Net) {
            "unconfined".to_string()
        } else {
            let mut reach = Vec::new();
            if !self.tcp_ports.is_empty() {
                let ports: Vec<String> = self.tcp_ports.iter().map(u16::to_string).collect();
                reach.push(format!("tcp:{}", ports.join(",")));
            }
            if self.unix_sockets {
                reach.push("unix".to_string());
            }
            if reach.is_empty() {
                "off".to_string()
            } else {
                reach.join("+")
            }
        };
        let signals = if self.has(SandboxFeature::Signals) {
            ""
        } else {
            " signals=unscoped"
        };
        format!("[sandbox: fs={fs} net={net}{signals}]")
    }

    /// The Landlock ruleset of one run whose temporary directories are in `tmp` (and
    /// whose own PTY is `terminal`), as a descriptor; none where the kernel offers none of
    /// the features (none was required, or the sandbox would have refused): the run is
    /// still confined by its namespaces, no capabilities, no new privileges and seccomp.
    pub fn ruleset(
        &self,
        tmp: &Path,
        terminal: Option<&Path>,
    ) -> Result<Option<OwnedFd>, SandboxError> {
        self.ruleset_for(tmp, terminal, false)
    }

    /// [`Sandbox::ruleset`]; `proxied`: for a run in a network namespace of its own whose
    /// only way out is dsh's proxy (TCP is not governed: there is nothing else to reach).
    fn ruleset_for(
        &self,
        tmp: &Path,
        terminal: Option<&Path>,
        proxied: bool,
    ) -> Result<Option<OwnedFd>, SandboxError> {
        if ![
            SandboxFeature::Fs,
            SandboxFeature::Net,
            SandboxFeature::Signals,
        ]
        .into_iter()
        .any(|feature| self.has(feature))
        {
            return Ok(None);
        }
        let abi = abi_of(self.abi);
        let mut ruleset = Ruleset::default().set_compatibility(CompatLevel::HardRequirement);
        if self.has(SandboxFeature::Fs) {
            ruleset = ruleset.handle_access(AccessFs::from_all(abi))?;
        }
        let governs_tcp = self.has(SandboxFeature::Net) && !self.own_loopback && !proxied;
        if governs_tcp {
            ruleset = ruleset.handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)?;
        }
        if self.has(SandboxFeature::Signals) {
            ruleset = ruleset.scope(Scope::Signal | Scope::AbstractUnixSocket)?;
        }
        let mut created = ruleset.create()?;
        if self.has(SandboxFeature::Fs) {
            let read = AccessFs::from_read(abi);
            let all = AccessFs::from_all(abi);
            let file = AccessFs::from_file(abi);
            // A file takes only the rights that apply to files.
            let on = |is_dir: bool, access: landlock::BitFlags<AccessFs>| {
                if is_dir {
                    access
                } else {
                    access & file
                }
            };
            for (fd, is_dir) in &self.read {
                created = created.add_rule(PathBeneath::new(fd, on(*is_dir, read)))?;
            }
            for (fd, _) in &self.list {
                created = created.add_rule(PathBeneath::new(fd, AccessFs::ReadDir))?;
            }
            for (fd, is_dir) in &self.write {
                created = created.add_rule(PathBeneath::new(fd, on(*is_dir, all)))?;
            }
            let open = |path: &Path| {
                PathFd::new(path)
                    .map_err(|e| SandboxError::Setup(format!("{}: {e}", path.display())))
            };
            created = created.add_rule(PathBeneath::new(open(tmp)?, all))?;
            // The slot's `/dev/shm`, seen there as a mount of its own (a rule on the slot
            // does not reach beneath another mount's root).
            let shm = tmp.join(SHM);
            if shm.is_dir() {
                created = created.add_rule(PathBeneath::new(open(&shm)?, all))?;
            }
            if let Some(pty) = terminal {
                created = created.add_rule(PathBeneath::new(open(pty)?, file))?;
            }
        }
        if governs_tcp {
            for port in &self.tcp_ports {
                created = created.add_rule(NetPort::new(*port, AccessNet::ConnectTcp))?;
            }
        }
        let fd: Option<OwnedFd> = created.into();
        fd.ok_or(SandboxError::NoRuleset).map(Some)
    }
}

/// The mount steps every run takes: all read-only, the writable roots (ascending depth)
/// bound back writable, then dsh's read-only files inside them bound read-only, each
/// directory on their way from the root pinned as a mount point first.
fn shared_steps(
    writable_roots: &[PathBuf],
    own: &OwnFiles,
    for_container: bool,
) -> Result<Vec<MountStep>, SandboxError> {
    let step = |op, path: &Path| -> Result<MountStep, SandboxError> {
        Ok(MountStep {
            op,
            path: c_path(path)?,
            if_present: false,
        })
    };
    let mut steps = vec![
        step(MountOp::PrivateAll, Path::new("/"))?,
        step(MountOp::ReadOnly { recursive: true }, Path::new("/"))?,
    ];
    for root in writable_roots {
        if for_container {
            // Its only writable root: the workspace, idmapped (writable as it was).
            steps.push(step(MountOp::AttachWorkspace, root)?);
            continue;
        }
        steps.push(step(
            MountOp::Bind {
                source: c_path(root)?,
            },
            root,
        )?);
        if !mounted_read_only(root) {
            steps.push(step(MountOp::Writable, root)?);
        }
    }
    // dsh's files inside a writable root: the state directory (covered later, per slot)
    // and the read-only ones; the directories on their way are pinned so that none can
    // be renamed away and replaced.
    let protected: Vec<&PathBuf> = own.state_dir.iter().chain(&own.read_only).collect();
    let mut pins: Vec<PathBuf> = Vec::new();
    for path in &protected {
        for root in writable_roots.iter().filter(|root| path.starts_with(root)) {
            pins.extend(between(root, path));
        }
    }
    pins.sort_by_key(|p| p.components().count());
    pins.dedup();
    for pin in &pins {
        steps.push(step(
            MountOp::Bind {
                source: c_path(pin)?,
            },
            pin,
        )?);
    }
    for path in &own.read_only {
        if writable_roots.iter().any(|root| path.starts_with(root)) {
            steps.push(step(
                MountOp::Bind {
                    source: c_path(path)?,
                },
                path,
            )?);
            steps.push(step(MountOp::ReadOnly { recursive: true }, path)?);
        }
    }
    Ok(steps)
}

/// One mount of `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mount {
    /// The filesystem's device (`major:minor`).
    device: String,
    /// The path of the mount's root inside its filesystem.
    root: PathBuf,
    /// Where it is mounted.
    point: PathBuf,
    /// The filesystem type (`ext4`, `proc`, `tmpfs`…).
    fstype: String,
}

/// The mounts of a `/proc/self/mountinfo` text (octal escapes decoded).
fn mounts(mountinfo: &str) -> Vec<Mount> {
    let unescape = |field: &str| -> PathBuf {
        let mut bytes = Vec::new();
        let raw = field.as_bytes();
        let mut i = 0;
        while i < raw.len() {
            let octal = raw.get(i + 1..i + 4).and_then(|d| {
                std::str::from_utf8(d)
                    .ok()
                    .and_then(|d| u8::from_str_radix(d, 8).ok())
            });
            match (raw[i], octal) {
                (b'\\', Some(byte)) => {
                    bytes.push(byte);
                    i += 4;
                }
                (byte, _) => {
                    bytes.push(byte);
                    i += 1;
                }
            }
        }
        PathBuf::from(std::ffi::OsString::from_vec(bytes))
    };
    use std::os::unix::ffi::OsStringExt;
    mountinfo
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let separator = fields.iter().position(|f| *f == "-")?;
            Some(Mount {
                device: fields.get(2)?.to_string(),
                root: unescape(fields.get(3)?),
                point: unescape(fields.get(4)?),
                fstype: fields.get(separator + 1)?.to_string(),
            })
        })
        .collect()
}

/// Every other place than `path` (canonical) where any part of what is at `path` is
/// reachable: for the part of its filesystem `path` shows, and for each mount placed
/// beneath `path`, every other mount of the same filesystem whose root lies above it (a
/// bind of a directory above, a second mount of the disk: the same place further down) or
/// inside it (a bind of a subdirectory elsewhere: that whole mount), so the source of a
/// volume mounted inside `path` is found too. Places inside `path` are left out (covering
/// `path` hides them), and so are places inside another place found.
fn exposures(mountinfo: &str, path: &Path) -> Vec<PathBuf> {
    let mounts = mounts(mountinfo);
    // The mount `path` is on: the last (topmost) with the longest mount point above it.
    let Some(on) = mounts
        .iter()
        .filter(|m| path.starts_with(&m.point))
        .max_by_key(|m| m.point.components().count())
    else {
        return Vec::new();
    };
    let Ok(inside) = path.strip_prefix(&on.point) else {
        return Vec::new();
    };
    // What `path` shows, as (device, path inside the filesystem).
    let mut regions = vec![(on.device.as_str(), on.root.join(inside))];
    regions.extend(
        mounts
            .iter()
            .filter(|m| m.point != path && m.point.starts_with(path))
            .map(|m| (m.device.as_str(), m.root.clone())),
    );
    let mut found: Vec<PathBuf> = Vec::new();
    for (device, region) in &regions {
        for other in mounts.iter().filter(|m| m.device == *device) {
            if other.root.starts_with(region) {
                found.push(other.point.clone());
            } else if let Ok(rest) = region.strip_prefix(&other.root) {
                found.push(other.point.join(rest));
            }
        }
    }
    found.retain(|place| !place.starts_with(path));
    found.sort();
    found.dedup();
    let all = found.clone();
    found.retain(|place| {
        !all.iter()
            .any(|outer| outer != place && place.starts_with(outer))
    });
    found
}

/// The steps that close what the run's view would otherwise show through other mounts:
/// every other place dsh's state directory is reachable (covered: an empty read-only
/// tmpfs on a directory, a `nodev` device node on a file), dsh's read-only files wherever
/// a writable root reaches them through another mount (bound read-only onto themselves),
/// and every `proc` mounted anywhere but `/proc` (covered: one procfs, the run's own).
fn view_steps(
    mountinfo: &str,
    writable_roots: &[PathBuf],
    own: &OwnFiles,
) -> Result<Vec<MountStep>, SandboxError> {
    let step = |op, path: &Path| -> Result<MountStep, SandboxError> {
        Ok(MountStep {
            op,
            path: c_path(path)?,
            if_present: false,
        })
    };
    let mut steps = Vec::new();
    let cover = |place: &Path, steps: &mut Vec<MountStep>| -> Result<(), SandboxError> {
        let if_present = |op| -> Result<MountStep, SandboxError> {
            Ok(MountStep {
                if_present: true,
                ..step(op, place)?
            })
        };
        match std::fs::symlink_metadata(place) {
            Ok(meta) if meta.is_dir() => {
                steps.push(if_present(MountOp::Cover)?);
                steps.push(if_present(MountOp::ReadOnly { recursive: false })?);
            }
            Ok(_) => steps.push(if_present(MountOp::Bind {
                source: c"/dev/null".to_owned(),
            })?),
            Err(_) => {}
        }
        Ok(())
    };
    if let Some(state) = &own.state_dir {
        for place in exposures(mountinfo, state) {
            cover(&place, &mut steps)?;
        }
    }
    for path in &own.read_only {
        for place in exposures(mountinfo, path) {
            let Some(root) = writable_roots.iter().find(|root| place.starts_with(root)) else {
                continue;
            };
            for pin in between(root, &place) {
                steps.push(step(
                    MountOp::Bind {
                        source: c_path(&pin)?,
                    },
                    &pin,
                )?);
            }
            steps.push(step(
                MountOp::Bind {
                    source: c_path(&place)?,
                },
                &place,
            )?);
            steps.push(step(MountOp::ReadOnly { recursive: true }, &place)?);
        }
    }
    for mount in mounts(mountinfo) {
        if mount.fstype == "proc" && mount.point != Path::new("/proc") {
            cover(&mount.point, &mut steps)?;
        }
    }
    Ok(steps)
}

/// The whole of the open mount table (read again from its start; reading it whole also
/// clears the kernel's change mark); empty when it cannot be read.
fn read_table(table: Option<&mut std::fs::File>) -> String {
    use std::io::{Read, Seek};
    let mut text = String::new();
    if let Some(table) = table {
        if table.rewind().is_ok() {
            let _ = table.read_to_string(&mut text);
        }
    }
    text
}

/// The shared steps of runs: `base`, the covers `mountinfo` calls for ([`view_steps`]),
/// and a container's `/proc`.
fn view_steps_over(
    base: &[MountStep],
    mountinfo: &str,
    writable_roots: &[PathBuf],
    own: &OwnFiles,
    for_container: bool,
) -> Result<Vec<MountStep>, SandboxError> {
    let mut steps = base.to_vec();
    steps.extend(view_steps(mountinfo, writable_roots, own)?);
    if for_container {
        steps.push(MountStep {
            op: MountOp::Proc,
            path: c"/proc".to_owned(),
            if_present: false,
        });
    }
    Ok(steps)
}

/// The run's `/dev`, built from what a run may use and nothing else: a copy of each
/// device of [`DEVICES`] and of the run's own terminal (`terminal`: its PTY's path under
/// `/dev`) taken first, one mount of one node each; then an empty tmpfs on `/dev`, and in
/// it those copies put back (the only mounts of a run without `nodev`), `/dev/shm` (the
/// slot's `shm`, emptied after each run), the `fd`, `stdin`, `stdout` and `stderr` links
/// into `/proc/self/fd`; then read-only. A disk, another terminal, `kvm`, the next device a
/// kernel adds: not there.
fn dev_steps(shm: &Path, terminal: Option<&Path>) -> Result<Vec<MountStep>, SandboxError> {
    let step = |op, path: &Path| -> Result<MountStep, SandboxError> {
        Ok(MountStep {
            op,
            path: c_path(path)?,
            if_present: false,
        })
    };
    let dev = Path::new("/dev");
    let devices: Vec<&Path> = DEVICES
        .iter()
        .map(Path::new)
        .chain(terminal)
        .filter(|device| device.starts_with(dev))
        .collect();
    let mut steps = Vec::new();
    for device in &devices {
        steps.push(step(MountOp::Detach { recursive: false }, device)?);
    }
    steps.push(step(MountOp::CoverDev, dev)?);
    // Put back last taken first.
    for device in devices.iter().rev() {
        for dir in between(dev, device) {
            steps.push(step(MountOp::MkdirPassable, &dir)?);
        }
        steps.push(step(MountOp::MkFile, device)?);
        steps.push(step(MountOp::AttachDevice, device)?);
    }
    steps.push(step(MountOp::MkdirPassable, Path::new("/dev/shm"))?);
    steps.push(step(
        MountOp::Bind {
            source: c_path(shm)?,
        },
        Path::new("/dev/shm"),
    )?);
    for (link, target) in [
        ("/dev/fd", c"/proc/self/fd"),
        ("/dev/stdin", c"/proc/self/fd/0"),
        ("/dev/stdout", c"/proc/self/fd/1"),
        ("/dev/stderr", c"/proc/self/fd/2"),
    ] {
        steps.push(step(
            MountOp::Symlink {
                target: target.to_owned(),
            },
            Path::new(link),
        )?);
    }
    steps.push(step(MountOp::ReadOnly { recursive: false }, dev)?);
    Ok(steps)
}

/// A slot's own steps: a copy of the slot's mount tree taken, the state directory
/// covered by an empty tmpfs, the way to the slot made in it, the slot attached back
/// writable, the cover made read-only.
fn cover_steps(state: &Path, slot: &Path, passable: bool) -> Result<Vec<MountStep>, SandboxError> {
    let step = |op, path: &Path| -> Result<MountStep, SandboxError> {
        Ok(MountStep {
            op,
            path: c_path(path)?,
            if_present: false,
        })
    };
    let (cover, mkdir) = if passable {
        (MountOp::CoverPassable, MountOp::MkdirPassable)
    } else {
        (MountOp::Cover, MountOp::Mkdir)
    };
    let mut steps = vec![
        step(MountOp::Detach { recursive: true }, slot)?,
        step(cover, state)?,
    ];
    for dir in between(state, slot)
        .iter()
        .chain(std::iter::once(&slot.to_path_buf()))
    {
        steps.push(step(mkdir.clone(), dir)?);
    }
    steps.push(step(MountOp::Attach, slot)?);
    steps.push(step(MountOp::Writable, slot)?);
    steps.push(step(MountOp::ReadOnly { recursive: false }, state)?);
    Ok(steps)
}

/// A user namespace with these uid and gid maps (`inside outside count` lines) and
/// `setgroups` denied. With dsh's own uid and gid mapped to themselves, dsh holds every
/// capability in it (it owns it): a non-root host's runs join it to make their mount and
/// IPC namespaces; a container's maps are in [`container`]. Made by a short-lived child
/// (a multithreaded process cannot unshare its user namespace), whose maps this process
/// writes (the child is dumpable after its exec; dsh itself is not, so its runs could
/// not write their own).
pub(super) fn user_namespace(uid_map: &str, gid_map: &str) -> Result<OwnedFd, SandboxError> {
    crate::launcher::user_namespace(uid_map, gid_map).map_err(|(what, e)| {
        SandboxError::Setup(format!(
            "cannot make the sandbox's user namespace ({what}: {e}); a non-root dsh needs \
             unprivileged user namespaces"
        ))
    })
}

/// The read rules: every entry of `/` but `/dev`; and the listing rules: `/` and `/dev`.
fn top_level_except_dev() -> (Vec<PathBuf>, Vec<PathBuf>) {
    let read = std::fs::read_dir("/")
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p != Path::new("/dev"))
                .collect()
        })
        .unwrap_or_default();
    (read, vec![PathBuf::from("/"), PathBuf::from("/dev")])
}

/// The paths that can be opened, with whether each is a directory.
fn open_all(paths: &[PathBuf]) -> Vec<(PathFd, bool)> {
    paths
        .iter()
        .filter_map(|p| Some((PathFd::new(p).ok()?, p.is_dir())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_directories_between_a_root_and_a_path_are_listed_outermost_first() {
        let root = Path::new("/w");
        assert_eq!(
            between(root, Path::new("/w/a/b/dsh.toml")),
            [PathBuf::from("/w/a"), PathBuf::from("/w/a/b")]
        );
        assert!(between(root, Path::new("/w/dsh.toml")).is_empty());
        assert!(between(root, Path::new("/elsewhere/x")).is_empty());
    }

    fn own(state: &Path) -> OwnFiles {
        OwnFiles::new(state, None, None)
    }

    #[test]
    fn the_state_directory_is_found_again_through_every_other_mount_of_its_filesystem() {
        let mountinfo = "\
22 1 254:0 / / rw,relatime - ext4 /dev/vda rw
30 22 254:0 /home /mnt/home\\040copy rw,relatime - ext4 /dev/vda rw
31 22 254:0 /home/u/.local /srv/local rw,relatime - ext4 /dev/vda rw
32 22 254:0 /var /srv/var rw,relatime - ext4 /dev/vda rw
33 22 0:40 / /tmp rw - tmpfs tmpfs rw
";
        let state = Path::new("/home/u/.local/state/dsh");
        assert_eq!(
            exposures(mountinfo, state),
            [
                PathBuf::from("/mnt/home copy/u/.local/state/dsh"),
                PathBuf::from("/srv/local/state/dsh"),
            ]
        );
        assert!(exposures(mountinfo, Path::new("/tmp/x/state")).is_empty());
    }

    #[test]
    fn a_bind_of_a_directory_inside_the_state_directory_is_found_and_so_is_a_volumes_source() {
        // STATE/cache bound elsewhere after the fact (its root lies inside the state
        // directory), and STATE/plugins a volume from /vol/p on another disk, which a run
        // would read at the volume's own mount.
        let mountinfo = "\
22 1 254:0 / / rw,relatime - ext4 /dev/vda rw
40 22 254:0 /s/state/cache /elsewhere rw,relatime - ext4 /dev/vda rw
41 22 254:0 /s/state/cache/deeper /elsewhere/deeper rw,relatime - ext4 /dev/vda rw
42 22 8:16 / /vol rw,relatime - xfs /dev/sdb rw
43 22 8:16 /p /s/state/plugins rw,relatime - xfs /dev/sdb rw
44 22 254:0 /s/statement /not-it rw,relatime - ext4 /dev/vda rw
";
        assert_eq!(
            exposures(mountinfo, Path::new("/s/state")),
            [PathBuf::from("/elsewhere"), PathBuf::from("/vol/p")]
        );
    }

    #[test]
    fn every_procfs_but_proc_is_covered_in_the_view() {
        let dir = tempfile::tempdir().unwrap();
        let second = dir.path().join("chroot/proc");
        std::fs::create_dir_all(&second).unwrap();
        let mountinfo = format!(
            "\
22 1 254:0 / / rw,relatime - ext4 /dev/vda rw
23 22 0:21 / /proc rw,relatime - proc proc rw
24 22 0:99 / {} rw,relatime - proc proc rw
",
            second.display()
        );
        let steps = view_steps(&mountinfo, &[], &OwnFiles::default()).unwrap();
        let covered: Vec<&CString> = steps
            .iter()
            .filter(|s| matches!(s.op, MountOp::Cover))
            .map(|s| &s.path)
            .collect();
        assert_eq!(covered, [&c_path(&second).unwrap()]);
    }

    #[test]
    fn a_missing_required_feature_refuses_and_names_it() {
        let config = SandboxConfig {
            assume_abi: Some(3),
            ..SandboxConfig::default()
        };
        let dir = tempfile::tempdir().unwrap();
        let (work, state) = (dir.path().join("work"), dir.path().join("state"));
        std::fs::create_dir_all(&work).unwrap();
        std::fs::create_dir_all(&state).unwrap();
        let sandbox = Sandbox::new(&config, &work, &own(&state)).unwrap();
        let error = sandbox.prepare_run(None, None).unwrap_err();
        assert!(
            matches!(
                error,
                SandboxError::Unavailable {
                    feature: SandboxFeature::Net,
                    abi: 3
                }
            ),
            "{error}"
        );
        // Not required: used where there, said where not.
        let config = SandboxConfig {
            assume_abi: Some(3),
            require: vec![SandboxFeature::Fs],
            ..SandboxConfig::default()
        };
        let sandbox = Sandbox::new(&config, &work, &own(&state)).unwrap();
        let prepared = sandbox.prepare_run(None, None).unwrap();
        assert_eq!(
            prepared.marker(),
            "[sandbox: fs=workspace net=unconfined signals=unscoped]"
        );
        let tmp = prepared.tmp().to_path_buf();
        assert!(tmp.is_dir());
        std::fs::write(tmp.join("f"), "x").unwrap();
        std::fs::write(tmp.parent().unwrap().join("left-in-the-slot"), "x").unwrap();
        std::fs::write(tmp.parent().unwrap().join("shm/left-in-shm"), "x").unwrap();
        drop(prepared);
        assert!(!tmp.exists());
        // Emptied but for its `/dev/shm` directory, itself emptied.
        let left: Vec<_> = std::fs::read_dir(tmp.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, [SHM]);
        assert_eq!(
            std::fs::read_dir(tmp.parent().unwrap().join(SHM))
                .unwrap()
                .count(),
            0
        );
        // The next run takes the same slot, its ruleset, and a new directory.
        let again = sandbox.prepare_run(None, None).unwrap();
        assert_ne!(again.tmp(), tmp);
        assert_eq!(again.tmp().parent(), tmp.parent());
    }

    #[test]
    fn a_working_directory_outside_the_workspace_or_in_the_state_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (work, state) = (dir.path().join("work"), dir.path().join("work/.state"));
        std::fs::create_dir_all(work.join("sub")).unwrap();
        std::fs::create_dir_all(&state).unwrap();
        std::os::unix::fs::symlink("/", work.join("out")).unwrap();
        let sandbox = Sandbox::new(&SandboxConfig::default(), &work, &own(&state)).unwrap();
        assert!(sandbox.check_cwd(&work.join("sub")).is_ok());
        assert!(sandbox.check_cwd(&work).is_ok());
        for outside in [
            PathBuf::from("/"),
            work.join("../.."),
            work.join("out"),
            state.join("cache"),
            state.clone(),
        ] {
            let error = sandbox.check_cwd(&outside).unwrap_err();
            assert!(
                matches!(error, SandboxError::OutsideWorkspace { .. }),
                "{outside:?}: {error}"
            );
        }
    }

    #[test]
    fn a_write_path_named_through_a_link_in_the_workspace_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (work, state) = (dir.path().join("work"), dir.path().join("state"));
        std::fs::create_dir_all(&work).unwrap();
        std::fs::create_dir_all(dir.path().join("cache")).unwrap();
        std::fs::create_dir_all(&state).unwrap();
        std::os::unix::fs::symlink(dir.path().join("cache"), work.join("cache")).unwrap();
        let config = SandboxConfig {
            write: vec![work.join("cache")],
            ..SandboxConfig::default()
        };
        let error = Sandbox::new(&config, &work, &own(&state)).unwrap_err();
        assert!(error.to_string().contains("is a symbolic link"), "{error}");
        // Named by its target, it is a write path like any other.
        let config = SandboxConfig {
            write: vec![dir.path().join("cache")],
            ..SandboxConfig::default()
        };
        assert!(Sandbox::new(&config, &work, &own(&state)).is_ok());
    }

    #[test]
    fn a_workspace_inside_the_state_directory_is_refused_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("state/work");
        std::fs::create_dir_all(&work).unwrap();
        let error = Sandbox::new(
            &SandboxConfig::default(),
            &work,
            &own(&dir.path().join("state")),
        )
        .unwrap_err();
        assert!(
            error.to_string().contains("inside dsh's state directory"),
            "{error}"
        );
    }

    #[test]
    fn dsh_files_in_the_workspace_are_carved_out_with_their_way_pinned() {
        let dir = tempfile::tempdir().unwrap();
        let work = std::fs::canonicalize(dir.path()).unwrap().join("work");
        std::fs::create_dir_all(work.join("conf/deep")).unwrap();
        std::fs::create_dir_all(work.join(".state")).unwrap();
        std::fs::write(work.join("conf/deep/dsh.toml"), "").unwrap();
        let own = OwnFiles::new(
            &work.join(".state"),
            Some(&work.join("conf/deep/dsh.toml")),
            None,
        );
        let steps = shared_steps(std::slice::from_ref(&work), &own, false).unwrap();
        let described: Vec<String> = steps
            .iter()
            .map(|s| {
                let path = s
                    .path
                    .to_str()
                    .unwrap()
                    .replace(work.to_str().unwrap(), "W");
                match &s.op {
                    MountOp::Bind { .. } => format!("bind {path}"),
                    MountOp::ReadOnly { .. } => format!("ro {path}"),
                    MountOp::Writable => format!("rw {path}"),
                    MountOp::PrivateAll => format!("private {path}"),
                    MountOp::Seal => format!("seal {path}"),
                    MountOp::CoverDev
                    | MountOp::MkFile
                    | MountOp::AttachDevice
                    | MountOp::Symlink { .. } => format!("dev {path}"),
                    MountOp::Cover | MountOp::CoverPassable => format!("cover {path}"),
                    MountOp::Mkdir | MountOp::MkdirPassable => format!("mkdir {path}"),
                    MountOp::Detach { .. } | MountOp::Attach | MountOp::AttachWorkspace => {
                        format!("move {path}")
                    }
                    MountOp::Proc => format!("proc {path}"),
                }
            })
            .collect();
        assert_eq!(
            described,
            [
                "private /",
                "ro /",
                "bind W",
                "rw W",
                "bind W/conf",
                "bind W/conf/deep",
                "bind W/conf/deep/dsh.toml",
                "ro W/conf/deep/dsh.toml",
            ]
        );
    }
}
