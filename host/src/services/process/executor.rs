//! The `sandbox` executor: what a sandboxed run is confined by, prepared in the host
//! before the spawn and applied by the child just before `exec`.
//!
//! Built once per host ([`Sandbox::new`]): the Landlock ABI the kernel offers, the
//! read rules (every path but the state directory, found by listing the directories on
//! the way down to it and granting each sibling), the devices, the configured writable
//! paths, and the seccomp program. Per run ([`Sandbox::prepare`]): a private temporary
//! directory (0700, removed with everything in it when the run ends) and a Landlock
//! ruleset (a descriptor) granting read on the read rules, write on the workspace, the
//! temporary directory, the devices and the configured paths, TCP connect to the
//! allowlisted ports, and scoping signals and abstract Unix sockets to the run's own
//! domain. The child ([`super::spawn`]) then makes raw system calls only:
//! `prctl(PR_SET_NO_NEW_PRIVS)`, drops every capability (bounding, ambient, effective,
//! permitted, inheritable: a root host's runs keep none, and with no_new_privs regain
//! none at exec), `landlock_restrict_self(fd)`, `seccomp(SET_MODE_FILTER)`.
//!
//! Building a ruleset costs a system call per rule (hundreds where the state directory
//! has many siblings), so rulesets are kept: each run takes a *slot* (a directory
//! `STATE/sandbox-tmp/slot-PID-N`, held by one run at a time) whose ruleset grants that
//! slot and the workspace; the run's temporary directory is made inside its slot and
//! removed when it ends, the slot is emptied, and it goes back to the pool with its
//! ruleset (reused while the workspace is the same directory, same inode). A run can
//! reach no other slot.
//!
//! The seccomp filter returns `EACCES` for `socket()` of UDP, raw and packet sockets
//! (so DNS too), of any address family but IPv4, IPv6 and netlink (and Unix with
//! `unix_sockets = true`), and of stream sockets with a protocol other than TCP; for io_uring (which creates sockets past
//! the filter); and for privileged calls a root host could otherwise make (modules,
//! kexec, reboot, swap, BPF, perf events, clocks, keyrings), and on x86-64 for every
//! x32-ABI call (their numbers would miss the rules).
//!
//! Fails closed: where the kernel's Landlock ABI lacks a feature `require` names, every
//! sandboxed run is refused with [`SandboxError::Unavailable`].

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use landlock::{
    Access, AccessFs, AccessNet, CompatLevel, Compatible, NetPort, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreatedAttr, Scope, ABI,
};
use seccompiler::{
    SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
};

use super::config::{SandboxConfig, SandboxFeature};
use crate::error::{ErrorCode, ToolError};

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
}

impl From<SandboxError> for ToolError {
    fn from(error: SandboxError) -> Self {
        ToolError::new(ErrorCode::Internal, format!("sandbox unavailable: {error}"))
    }
}

/// The confinement every sandboxed run of this host gets; see the module doc.
#[derive(Debug)]
pub struct Sandbox {
    /// The Landlock ABI used (the kernel's, or less with `assume_abi`); 0: none.
    abi: i32,
    /// Required features this ABI lacks (the first refuses every run).
    missing: Option<SandboxFeature>,
    state_dir: Option<PathBuf>,
    /// Read, beneath each (everything but the state directory); true for directories.
    read: Vec<(PathFd, bool)>,
    /// Read-directory only (the directories on the way to the state directory).
    list: Vec<(PathFd, bool)>,
    /// Read and write: devices and configured paths.
    write: Vec<(PathFd, bool)>,
    tcp_ports: Vec<u16>,
    filter: Vec<libc::sock_filter>,
    tmp_root: PathBuf,
    /// Free slots (see the module doc).
    slots: std::sync::Arc<std::sync::Mutex<Vec<Slot>>>,
}

/// A directory one run at a time makes its temporary directory in, with the ruleset
/// last built for it (and the workspace it was built for).
#[derive(Debug)]
struct Slot {
    dir: PathBuf,
    ruleset: Option<(WorkspaceId, std::sync::Arc<OwnedFd>)>,
}

/// A workspace as a ruleset knows it: its path and inode (rules hold the inode).
type WorkspaceId = (PathBuf, u64, u64);

fn workspace_id(workspace: &Path) -> Option<WorkspaceId> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(workspace).ok()?;
    Some((workspace.to_path_buf(), meta.dev(), meta.ino()))
}

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

/// One run's confinement: its ruleset descriptor and private temporary directory
/// (removed when this is dropped).
#[derive(Debug)]
pub struct Prepared {
    ruleset: std::sync::Arc<OwnedFd>,
    /// Removed first, then the slot goes back to `pool`.
    tmp: Option<PrivateTmp>,
    slot: Option<Slot>,
    pool: std::sync::Weak<std::sync::Mutex<Vec<Slot>>>,
    marker: String,
}

impl Drop for Prepared {
    fn drop(&mut self) {
        drop(self.tmp.take());
        let Some(slot) = self.slot.take() else { return };
        // Whatever the run left in its slot goes too, so the next run finds it empty;
        // a slot that cannot be emptied is not used again.
        let emptied = std::fs::read_dir(&slot.dir).is_ok_and(|entries| {
            entries.flatten().all(|entry| {
                let path = entry.path();
                match entry.file_type() {
                    Ok(kind) if kind.is_dir() => std::fs::remove_dir_all(&path).is_ok(),
                    _ => std::fs::remove_file(&path).is_ok(),
                }
            })
        });
        match self.pool.upgrade() {
            Some(pool) if emptied => pool.lock().unwrap_or_else(|e| e.into_inner()).push(slot),
            _ => {
                let _ = std::fs::remove_dir_all(&slot.dir);
            }
        }
    }
}

impl Prepared {
    /// The ruleset descriptor the child restricts itself with.
    pub fn ruleset(&self) -> &OwnedFd {
        &self.ruleset
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

/// Devices a shell needs to write: `/dev/null`-like ones and terminals.
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/ptmx",
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

fn abi_of(version: i32) -> ABI {
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

impl Sandbox {
    /// Prepares the confinement of `config` for a host whose state directory is
    /// `state_dir` (unreadable to sandboxed runs; their temporary directories go under
    /// it).
    pub fn new(config: &SandboxConfig, state_dir: Option<&Path>) -> Result<Self, SandboxError> {
        let kernel = kernel_abi();
        let abi = config.assume_abi.map_or(kernel, |a| a.min(kernel));
        let missing = config.require.iter().copied().find(|f| f.abi() > abi);
        let state_dir = state_dir.map(|d| std::fs::canonicalize(d).unwrap_or_else(|_| d.into()));
        let (read, list) = match &state_dir {
            Some(state) => {
                let (read, list) = paths_except(Path::new("/"), state);
                (open_all(&read), open_all(&list))
            }
            None => (open_all(&[PathBuf::from("/")]), Vec::new()),
        };
        let write: Vec<PathBuf> = config
            .write
            .iter()
            .cloned()
            .chain(DEVICES.iter().map(PathBuf::from))
            .chain(std::iter::once(PathBuf::from("/dev/pts")))
            .collect();
        let tmp_root = match &state_dir {
            Some(state) => state.join("sandbox-tmp"),
            None => std::env::temp_dir().join(format!("dsh-sandbox-{}", crate::private::euid())),
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
        Ok(Sandbox {
            abi,
            missing,
            state_dir,
            read,
            list,
            write: open_all(&write),
            tcp_ports: config.tcp_ports.clone(),
            filter: seccomp_program(config.unix_sockets)?,
            tmp_root,
            slots: Default::default(),
        })
    }

    /// How many Landlock rules every run's ruleset starts with (read, listing, write).
    pub fn base_rules(&self) -> usize {
        self.read.len() + self.list.len() + self.write.len()
    }

    /// The seccomp program every sandboxed child loads.
    pub fn filter(&self) -> &[libc::sock_filter] {
        &self.filter
    }

    /// Whether this ABI has `feature`.
    fn has(&self, feature: SandboxFeature) -> bool {
        self.abi >= feature.abi()
    }

    /// One run's confinement, for a run whose workspace is `workspace`.
    pub fn prepare(&self, workspace: &Path) -> Result<Prepared, SandboxError> {
        if let Some(feature) = self.missing {
            return Err(SandboxError::Unavailable {
                feature,
                abi: self.abi,
            });
        }
        let mut slot = self.take_slot()?;
        let id = workspace_id(workspace);
        let ruleset = match &slot.ruleset {
            Some((built_for, ruleset)) if id.as_ref() == Some(built_for) => ruleset.clone(),
            _ => {
                let ruleset = std::sync::Arc::new(self.ruleset(workspace, &slot.dir)?);
                slot.ruleset = id.map(|id| (id, ruleset.clone()));
                ruleset
            }
        };
        let n = NEXT_DIR.fetch_add(1, Ordering::Relaxed);
        let tmp = PrivateTmp::create(slot.dir.join(format!("run-{n}")))?;
        Ok(Prepared {
            ruleset,
            tmp: Some(tmp),
            slot: Some(slot),
            pool: std::sync::Arc::downgrade(&self.slots),
            marker: self.marker(),
        })
    }

    /// A free slot, or a new one.
    fn take_slot(&self) -> Result<Slot, SandboxError> {
        if let Some(slot) = self.slots.lock().unwrap_or_else(|e| e.into_inner()).pop() {
            return Ok(slot);
        }
        let n = NEXT_DIR.fetch_add(1, Ordering::Relaxed);
        let dir = PrivateTmp::create(
            self.tmp_root
                .join(format!("slot-{}-{n}", std::process::id())),
        )?;
        // Kept for the host's life (removed when the sandbox is dropped).
        let dir = std::mem::ManuallyDrop::new(dir);
        Ok(Slot {
            dir: dir.0.clone(),
            ruleset: None,
        })
    }

    /// A new private temporary directory (outside any slot; for measuring).
    pub fn private_tmp(&self) -> Result<PrivateTmp, SandboxError> {
        let n = NEXT_DIR.fetch_add(1, Ordering::Relaxed);
        PrivateTmp::create(
            self.tmp_root
                .join(format!("run-{}-{n}", std::process::id())),
        )
    }

    /// What the result line says was confined.
    fn marker(&self) -> String {
        let fs = if self.has(SandboxFeature::Fs) {
            "workspace"
        } else {
            "unconfined"
        };
        let net = if !self.has(SandboxFeature::Net) {
            "unconfined".to_string()
        } else if self.tcp_ports.is_empty() {
            "off".to_string()
        } else {
            let ports: Vec<String> = self.tcp_ports.iter().map(u16::to_string).collect();
            format!("tcp:{}", ports.join(","))
        };
        let signals = if self.has(SandboxFeature::Signals) {
            ""
        } else {
            " signals=unscoped"
        };
        format!("[sandbox: fs={fs} net={net}{signals}]")
    }

    /// The Landlock ruleset of one run (its descriptor).
    /// (What a run gets comes through its slot; this builds one afresh.)
    pub fn ruleset(&self, workspace: &Path, tmp: &Path) -> Result<OwnedFd, SandboxError> {
        let abi = abi_of(self.abi);
        let mut ruleset = Ruleset::default().set_compatibility(CompatLevel::HardRequirement);
        if self.has(SandboxFeature::Fs) {
            ruleset = ruleset.handle_access(AccessFs::from_all(abi))?;
        }
        if self.has(SandboxFeature::Net) {
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
            // The workspace, less the state directory when it lies inside it.
            let (write, list) = match &self.state_dir {
                Some(state) if state.starts_with(workspace) => paths_except(workspace, state),
                _ => (vec![workspace.to_path_buf()], Vec::new()),
            };
            for path in write.iter().chain(std::iter::once(&tmp.to_path_buf())) {
                if let Ok(fd) = PathFd::new(path) {
                    let access = if path.is_dir() { all } else { file };
                    created = created.add_rule(PathBeneath::new(fd, access))?;
                }
            }
            for path in &list {
                if let Ok(fd) = PathFd::new(path) {
                    created = created.add_rule(PathBeneath::new(fd, AccessFs::ReadDir))?;
                }
            }
        }
        if self.has(SandboxFeature::Net) {
            for port in &self.tcp_ports {
                created = created.add_rule(NetPort::new(*port, AccessNet::ConnectTcp))?;
            }
        }
        let fd: Option<OwnedFd> = created.into();
        fd.ok_or(SandboxError::NoRuleset)
    }
}

/// Below `root`, every path but `excluded`: the entries to grant beneath (siblings of
/// the directories on the way down, and their siblings) and the directories on the
/// way (to grant listing only). `[root]` and nothing when `excluded` is not below it.
fn paths_except(root: &Path, excluded: &Path) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let Ok(rest) = excluded.strip_prefix(root) else {
        return (vec![root.to_path_buf()], Vec::new());
    };
    let mut grant = Vec::new();
    let mut list = Vec::new();
    let mut here = root.to_path_buf();
    for step in rest.components() {
        list.push(here.clone());
        if let Ok(entries) = std::fs::read_dir(&here) {
            for entry in entries.flatten() {
                if entry.file_name() != step.as_os_str() {
                    grant.push(entry.path());
                }
            }
        }
        here.push(step);
    }
    (grant, list)
}

/// The paths that can be opened, with whether each is a directory.
fn open_all(paths: &[PathBuf]) -> Vec<(PathFd, bool)> {
    paths
        .iter()
        .filter_map(|p| Some((PathFd::new(p).ok()?, p.is_dir())))
        .collect()
}

/// The seccomp program of sandboxed runs (x86-64 and aarch64; see the module doc);
/// `unix_sockets`: whether `socket(AF_UNIX)` is allowed.
pub fn seccomp_program(unix_sockets: bool) -> Result<Vec<libc::sock_filter>, SandboxError> {
    let cond = |arg, op, value| SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value);
    let type_mask = SeccompCmpOp::MaskedEq(0xf);
    let mut socket_rules = Vec::new();
    for family in [libc::AF_INET, libc::AF_INET6] {
        for kind in [libc::SOCK_DGRAM, libc::SOCK_RAW, libc::SOCK_SEQPACKET] {
            socket_rules.push(SeccompRule::new(vec![
                cond(0, SeccompCmpOp::Eq, family as u64)?,
                cond(1, type_mask.clone(), kind as u64)?,
            ])?);
        }
        // Stream sockets of another protocol than TCP (SCTP, MPTCP).
        socket_rules.push(SeccompRule::new(vec![
            cond(0, SeccompCmpOp::Eq, family as u64)?,
            cond(2, SeccompCmpOp::Ne, 0)?,
            cond(2, SeccompCmpOp::Ne, libc::IPPROTO_TCP as u64)?,
        ])?);
    }
    // Every other family but netlink (and Unix where allowed).
    let mut others = vec![
        cond(0, SeccompCmpOp::Ne, libc::AF_INET as u64)?,
        cond(0, SeccompCmpOp::Ne, libc::AF_INET6 as u64)?,
        cond(0, SeccompCmpOp::Ne, libc::AF_NETLINK as u64)?,
    ];
    if unix_sockets {
        others.push(cond(0, SeccompCmpOp::Ne, libc::AF_UNIX as u64)?);
    }
    socket_rules.push(SeccompRule::new(others)?);
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    rules.insert(libc::SYS_socket, socket_rules);
    for denied in [
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_kexec_load,
        libc::SYS_kexec_file_load,
        libc::SYS_reboot,
        libc::SYS_swapon,
        libc::SYS_swapoff,
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_acct,
        libc::SYS_settimeofday,
        libc::SYS_clock_settime,
        libc::SYS_clock_adjtime,
        libc::SYS_adjtimex,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_keyctl,
        libc::SYS_userfaultfd,
    ] {
        rules.insert(denied, Vec::new());
    }
    let arch = if cfg!(target_arch = "aarch64") {
        seccompiler::TargetArch::aarch64
    } else {
        seccompiler::TargetArch::x86_64
    };
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EACCES as u32),
        arch,
    )?;
    let program: seccompiler::BpfProgram = filter.try_into()?;
    // First, on x86-64: the x32 ABI's numbers (bit 30 set) would miss every rule
    // above, so they are refused whole (where the kernel has x32 at all).
    let x32: &[libc::sock_filter] = if cfg!(target_arch = "x86_64") {
        const X32_BIT: u32 = 0x4000_0000;
        &[
            // A = seccomp_data.nr
            libc::sock_filter {
                code: (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16,
                jt: 0,
                jf: 0,
                k: 0,
            },
            // nr >= X32_BIT: the next instruction, else skip it
            libc::sock_filter {
                code: (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16,
                jt: 0,
                jf: 1,
                k: X32_BIT,
            },
            libc::sock_filter {
                code: (libc::BPF_RET | libc::BPF_K) as u16,
                jt: 0,
                jf: 0,
                k: libc::SECCOMP_RET_ERRNO | libc::EACCES as u32,
            },
        ]
    } else {
        &[]
    };
    Ok(x32
        .iter()
        .copied()
        .chain(program.into_iter().map(|i| libc::sock_filter {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        }))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_directory_is_left_out_of_the_read_rules_and_its_way_only_listed() {
        let root = tempfile::tempdir().unwrap();
        for dir in ["a/state/x", "a/b", "c"] {
            std::fs::create_dir_all(root.path().join(dir)).unwrap();
        }
        let (grant, list) = paths_except(root.path(), &root.path().join("a/state"));
        let mut grant: Vec<_> = grant
            .iter()
            .map(|p| p.strip_prefix(root.path()).unwrap().display().to_string())
            .collect();
        grant.sort();
        assert_eq!(grant, ["a/b", "c"]);
        assert_eq!(list, [root.path().to_path_buf(), root.path().join("a")]);
        let (grant, list) = paths_except(&root.path().join("c"), &root.path().join("a"));
        assert_eq!(grant, [root.path().join("c")]);
        assert!(list.is_empty());
    }

    #[test]
    fn a_missing_required_feature_refuses_and_names_it() {
        let config = SandboxConfig {
            assume_abi: Some(3),
            ..SandboxConfig::default()
        };
        let state = tempfile::tempdir().unwrap();
        let sandbox = Sandbox::new(&config, Some(state.path())).unwrap();
        let error = sandbox.prepare(state.path()).unwrap_err();
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
        let sandbox = Sandbox::new(&config, Some(state.path())).unwrap();
        let prepared = sandbox.prepare(state.path()).unwrap();
        assert_eq!(
            prepared.marker(),
            "[sandbox: fs=workspace net=unconfined signals=unscoped]"
        );
        let tmp = prepared.tmp().to_path_buf();
        assert!(tmp.is_dir());
        std::fs::write(tmp.join("f"), "x").unwrap();
        std::fs::write(tmp.parent().unwrap().join("left-in-the-slot"), "x").unwrap();
        drop(prepared);
        assert!(!tmp.exists());
        assert_eq!(std::fs::read_dir(tmp.parent().unwrap()).unwrap().count(), 0);
        // The next run takes the same slot, its ruleset, and a new directory.
        let again = sandbox.prepare(state.path()).unwrap();
        assert_ne!(again.tmp(), tmp);
        assert_eq!(again.tmp().parent(), tmp.parent());
    }
}
