//! The `container` executor: the parent-side preparation of a run that gets namespaces
//! of its own on top of the sandbox's confinement ([`super::sandbox`]); the child's steps
//! are in [`crate::spawn`]. It owns [`Container`] (per host), its prepared run
//! [`ContainerRun`] (the sandbox's run and the container's [`RunParts`]) and its error
//! [`ContainerError`] (the sandbox's errors among it).
//!
//! A contained run is started by `clone` with `CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET
//! | CLONE_NEWIPC | CLONE_NEWUTS` (the spawn's own `clone3`/`clone`, so it still starts
//! in its cgroup and its pid, pidfd and process group are the host's view of the run's
//! leader, waited for and killed as any run's). The child is pid 1 of its PID namespace:
//! when it exits, the kernel kills everything else in the namespace (and containment
//! kills the run's cgroup as for every run). As pid 1 it gets only the signals it has a
//! handler for (SIGKILL always): a `bash -c` shell ignores the host's SIGTERM, so a
//! timed-out container ends by the KILL that follows `kill_grace_ms` later.
//!
//! Then, in the child, as the host's root and in that order:
//!
//! 1. **Mounts**: every mount slave and read-only, the workspace attached from the
//!    run's **idmapped** copy (below), dsh's files in it pinned and bound read-only, the
//!    state directory covered (as the sandbox does) by a tmpfs its root may pass through
//!    (0711) to its own slot, and a fresh `proc` on `/proc`: made in the new PID
//!    namespace, it lists only the run's processes (`ps`, `/proc/1` is the run's own
//!    leader). The mount namespace belongs to the host's user namespace, so the run can
//!    change none of it.
//! 2. **Network**: a new, empty network namespace: no interface but `lo`, left down, so
//!    nothing is reachable, not even the host's loopback (`connect` fails with
//!    `ENETUNREACH`; the sandbox's Landlock rules and seccomp filter refuse binding and
//!    TCP anyway). `[process.sandbox] tcp_ports` does not apply. Named Unix sockets are
//!    files, not part of a network namespace: they stay refused unless `unix_sockets`.
//!    Granting a network (a veth pair or a `pasta`/`slirp4netns` user-mode stack attached
//!    to the namespace by the parent) is not done.
//! 3. **The Landlock rule for its `/proc`** (the ruleset is the run's own, built by the
//!    parent; a rule names an inode, and the new `proc` has none before it is mounted).
//! 4. **Its stdio** pipes and terminal are given to the container's uid and gid
//!    (`fchown`; `/dev/null` is left alone), so `> /dev/stderr` (a reopen through
//!    `/proc/self/fd`) works as elsewhere.
//! 5. **Its user namespace**, joined with `setns` (made once per host, held by a
//!    descriptor): inside uid 0 and gid 0 are `[process.container] uid`/`gid` on the host
//!    (65534 by default), nothing else is mapped, `setgroups` is denied, the
//!    supplementary groups are dropped before, and the child becomes that uid and gid
//!    (`setresuid`/`setresgid`: its root inside). So a file only the host's root may
//!    read by owner or group permission (`/etc/shadow`, 0640 root:shadow) is not
//!    readable: the run is not uid 0 on the host, and its capabilities are in its own user
//!    namespace only, which owns no file and none of its other namespaces.
//! 6. **The sandbox's steps**: no_new_privs, every capability dropped, Landlock, seccomp
//!    — last, because Landlock refuses mounts once applied and the filter refuses
//!    `setns` and `mount`.
//!
//! **The workspace** is writable to the container's root through an idmapped mount:
//! for each run the parent (root) takes a detached copy of the workspace's mount tree
//! (`open_tree(OPEN_TREE_CLONE | AT_RECURSIVE)`) and sets `MOUNT_ATTR_IDMAP` on it with
//! a second user namespace, which maps the workspace owner's uid and gid to the
//! container's: the container sees the workspace as its own (uid 0), and what it writes
//! there lands on disk owned by the workspace's owner. Files of other owners in the
//! workspace show as `nobody` and are writable only if their mode lets others write.
//! The run's `TMPDIR` is the sandbox's (in the run's slot of the state directory),
//! owned by the container's uid.
//!
//! **dsh not root**: a non-root dsh can make neither the PID namespace by `clone` nor
//! the idmapped mount, and cannot write its child's maps (dsh is not dumpable): the
//! container is refused ([`ContainerError::NotRoot`]), fails closed like every step
//! here: a namespace the kernel will not make fails the spawn and refuses the call.
//!
//! **Cost**: making a network namespace is the slow part (about 0.5 ms here: every
//! per-namespace subsystem is set up), so they are made ahead, as cgroups are: a thread
//! keeps [`NET_POOL`] empty network namespaces ready, held by descriptor, and a run's
//! child joins one with `setns` (where none is ready, its `clone` makes one). Each is
//! used by one run only, and torn down by the kernel after it (in a kernel worker, off
//! the call's path). The idmapped tree is a few system calls per run; the ruleset is
//! built per run (the child adds its `/proc` rule to it, about 0.1 ms); the other
//! namespaces are cheap to make. All runs share the one user namespace (same host uid):
//! they are kept apart by their PID and mount namespaces and Landlock's scoping.

use std::ffi::CString;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::sandbox::{Sandbox, SandboxError, SandboxRun};
use super::{Executor, HostSetup, Lack, Prepared};
use crate::config::{ContainerNetwork, SandboxConfig};
use crate::own_files::OwnFiles;
use crate::LaunchError;

/// Why the container executor cannot run a command.
#[derive(Debug, thiserror::Error)]
pub enum ContainerError {
    /// What its sandbox refuses or cannot do (a working directory outside the
    /// workspace, a missing Landlock feature, a slot or `TMPDIR` not made).
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    #[error(
        "the container executor needs dsh to run as root (it maps the container's root to an \
         unprivileged host id and idmaps the workspace); this dsh runs as uid {0}: use the \
         sandbox executor"
    )]
    NotRoot(u32),
    #[error(
        "[process.container] uid and gid must not be 0: a container's root would be the host's"
    )]
    RootIds,
    #[error("cannot read the workspace {path}: {source}")]
    Workspace {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot make the container's idmapped workspace ({what}): {source}")]
    Idmap {
        what: &'static str,
        source: std::io::Error,
    },
}

/// The container of a host: the sandbox built for containers, and the namespaces every
/// run shares.
#[derive(Debug)]
pub struct Container {
    sandbox: Sandbox,
    /// The runs' user namespace (inside 0 = the configured uid and gid).
    user_ns: Arc<OwnedFd>,
    /// Maps the workspace owner's ids to the container's: the idmap of its workspace.
    idmap_ns: OwnedFd,
    workspace: CString,
    uid: u32,
    gid: u32,
    /// Network namespaces made ahead.
    nets: Arc<NetPool>,
}

/// How many empty network namespaces are kept ready.
pub const NET_POOL: usize = 4;

/// Network namespaces made ahead by a thread of their own (see the module doc).
#[derive(Debug, Default)]
struct NetPool {
    ready: std::sync::Mutex<Vec<OwnedFd>>,
    wanted: std::sync::Condvar,
    /// Whether each namespace gets its loopback up (`network = "loopback"`).
    loopback: bool,
}

impl NetPool {
    /// A ready namespace, if there is one (the thread makes the next).
    fn take(&self) -> Option<OwnedFd> {
        let taken = self.ready.lock().unwrap_or_else(|e| e.into_inner()).pop();
        self.wanted.notify_one();
        taken
    }

    /// A ready namespace, or one made now on a thread of its own (the calling thread's
    /// namespace is left alone): for runs whose namespace must be set up, which a
    /// `clone` would make bare.
    fn take_or_make(&self) -> std::io::Result<OwnedFd> {
        if let Some(net) = self.take() {
            return Ok(net);
        }
        let loopback = self.loopback;
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    let home = std::fs::File::open("/proc/thread-self/ns/net")?;
                    make_net_namespace(&home, loopback)
                })
                .join()
                .unwrap_or_else(|_| Err(std::io::Error::other("the thread making it panicked")))
        })
    }

    /// Starts the thread that fills `pool`; it ends when the pool is dropped.
    fn start(pool: &Arc<NetPool>) {
        let weak = Arc::downgrade(pool);
        let spawned = std::thread::Builder::new()
            .name("dsh-netns".into())
            .spawn(move || {
                // This thread's own namespace, to come back to after each one made.
                let Ok(home) = std::fs::File::open("/proc/thread-self/ns/net") else {
                    return;
                };
                loop {
                    let Some(pool) = weak.upgrade() else { return };
                    {
                        let ready = pool.ready.lock().unwrap_or_else(|e| e.into_inner());
                        if ready.len() >= NET_POOL {
                            // Woken by a take, or now and then to see the pool is gone.
                            let _ = pool
                                .wanted
                                .wait_timeout(ready, std::time::Duration::from_secs(1));
                            continue;
                        }
                    }
                    match make_net_namespace(&home, pool.loopback) {
                        Ok(net) => pool
                            .ready
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push(net),
                        Err(error) => {
                            tracing::warn!(%error, "cannot make a network namespace ahead; contained runs make their own");
                            return;
                        }
                    }
                }
            });
        if let Err(error) = spawned {
            tracing::warn!(%error, "cannot start the thread that makes network namespaces ahead");
        }
    }
}

/// A new, empty network namespace, made by this thread which then goes back `home`;
/// `loopback`: with its `lo` up.
fn make_net_namespace(home: &std::fs::File, loopback: bool) -> std::io::Result<OwnedFd> {
    crate::network::in_new_namespace(home, loopback, || Ok(()))
}

/// A contained run's own parts, which its child uses.
#[derive(Debug)]
pub struct RunParts {
    /// The `clone` flags that make its namespaces.
    pub clone_flags: libc::c_int,
    /// Its detached, idmapped copy of the workspace.
    pub workspace_tree: OwnedFd,
    /// The user namespace it joins last.
    pub user_ns: Arc<OwnedFd>,
    /// The network namespace made ahead that it joins first (else `clone` makes one).
    pub net_ns: Option<OwnedFd>,
    /// The host uid and gid of its root, which its stdio pipes and terminal get (so
    /// `/dev/stdout`, `/dev/stderr` and its PTY can be opened again).
    pub ids: (u32, u32),
    /// The Landlock access its `/proc` gets (read).
    pub proc_access: u64,
}

/// The namespaces a container's `clone` makes.
pub const CLONE_FLAGS: libc::c_int = libc::CLONE_NEWNS
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUTS;

use crate::spawn::{MountAttr, OPEN_TREE_CLONE};

const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;
const AT_RECURSIVE: libc::c_uint = crate::spawn::AT_RECURSIVE as libc::c_uint;

impl Container {
    /// Prepares the container of a host whose sandbox is configured by `config` (its
    /// `container` ids among it), for runs in `workspace` (canonical).
    pub fn new(
        config: &SandboxConfig,
        workspace: &Path,
        own: &OwnFiles,
    ) -> Result<Self, ContainerError> {
        let euid = crate::euid();
        if euid != 0 {
            return Err(ContainerError::NotRoot(euid));
        }
        let (uid, gid) = (config.container.uid, config.container.gid);
        if uid == 0 || gid == 0 {
            return Err(ContainerError::RootIds);
        }
        let sandbox = Sandbox::build(config, workspace, own, true)?;
        let meta =
            std::fs::metadata(sandbox.workspace()).map_err(|source| ContainerError::Workspace {
                path: sandbox.workspace().to_path_buf(),
                source,
            })?;
        let user_ns = Arc::new(super::sandbox::user_namespace(
            &format!("0 {uid} 1\n"),
            &format!("0 {gid} 1\n"),
        )?);
        let idmap_ns = super::sandbox::user_namespace(
            &format!("{} {uid} 1\n", meta.uid()),
            &format!("{} {gid} 1\n", meta.gid()),
        )?;
        let workspace = CString::new(sandbox.workspace().as_os_str().as_bytes())
            .map_err(|_| SandboxError::Setup("the workspace has a NUL byte".into()))?;
        let nets = Arc::new(NetPool {
            loopback: config.container.network == ContainerNetwork::Loopback,
            ..NetPool::default()
        });
        NetPool::start(&nets);
        let container = Container {
            sandbox,
            user_ns,
            idmap_ns,
            workspace,
            uid,
            gid,
            nets,
        };
        // Fails here, at first use, rather than in a child.
        drop(container.workspace_tree()?);
        tracing::info!(
            uid,
            gid,
            workspace = %container.sandbox.workspace().display(),
            "container executor prepared: contained runs get their own PID, network, IPC, UTS, \
             mount and user namespaces, their root the host uid above, the workspace idmapped"
        );
        Ok(container)
    }

    /// `cwd` as a contained run may start in (as in the sandbox: inside the workspace).
    pub fn check_cwd(&self, cwd: &Path) -> Result<PathBuf, ContainerError> {
        Ok(self.sandbox.check_cwd(cwd)?)
    }

    /// The sandbox containers are confined by (for measuring).
    pub fn sandbox(&self) -> &Sandbox {
        &self.sandbox
    }

    /// One run's confinement: the sandbox's (its slot, a ruleset of its own, its
    /// `TMPDIR` and `/dev/shm` owned by the container's root) and its idmapped workspace.
    pub fn prepare_run(
        &self,
        terminal: Option<&Path>,
        network: Option<OwnedFd>,
    ) -> Result<ContainerRun, ContainerError> {
        let proxied = network.is_some();
        let prepared = self.sandbox.prepare_run(terminal, network)?;
        let own = std::iter::once(prepared.tmp().to_path_buf()).chain(prepared.shm());
        for dir in own {
            std::os::unix::fs::chown(&dir, Some(self.uid), Some(self.gid))
                .map_err(|source| SandboxError::Tmp { path: dir, source })?;
        }
        let net_ns = if proxied {
            // It joins the namespace its network by policy is in (the sandbox's run
            // carries it).
            None
        } else if self.nets.loopback {
            // Its loopback must be up: a namespace `clone` made would have it down.
            Some(self.nets.take_or_make().map_err(|source| {
                SandboxError::Setup(format!(
                    "cannot make the container's network namespace: {source}"
                ))
            })?)
        } else {
            self.nets.take()
        };
        let clone_flags = match net_ns.is_some() || proxied {
            true => CLONE_FLAGS & !libc::CLONE_NEWNET,
            false => CLONE_FLAGS,
        };
        let parts = RunParts {
            clone_flags,
            workspace_tree: self.workspace_tree()?,
            user_ns: self.user_ns.clone(),
            net_ns,
            ids: (self.uid, self.gid),
            proc_access: proc_access(self.sandbox.abi()),
        };
        Ok(ContainerRun {
            sandbox: prepared,
            parts,
        })
    }

    /// A detached copy of the workspace's mount tree, idmapped to the container's ids.
    fn workspace_tree(&self) -> Result<OwnedFd, ContainerError> {
        let failed = |what| move |source| ContainerError::Idmap { what, source };
        // SAFETY: open_tree on a valid path; the result is a new descriptor we own.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_open_tree,
                libc::AT_FDCWD,
                self.workspace.as_ptr(),
                OPEN_TREE_CLONE | AT_RECURSIVE | libc::O_CLOEXEC as libc::c_uint,
            )
        };
        if fd < 0 {
            return Err(failed("open_tree")(std::io::Error::last_os_error()));
        }
        // SAFETY: `fd` is fresh and ours.
        let tree = unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) };
        use std::os::fd::AsRawFd;
        let attr = MountAttr {
            attr_set: MOUNT_ATTR_IDMAP,
            attr_clr: 0,
            propagation: 0,
            userns_fd: self.idmap_ns.as_raw_fd() as u64,
        };
        // SAFETY: mount_setattr on our detached tree with a plain struct.
        let set = unsafe {
            libc::syscall(
                libc::SYS_mount_setattr,
                tree.as_raw_fd(),
                c"".as_ptr(),
                libc::AT_EMPTY_PATH as libc::c_uint | AT_RECURSIVE,
                &attr as *const MountAttr,
                std::mem::size_of::<MountAttr>(),
            )
        };
        if set != 0 {
            return Err(failed("mount_setattr MOUNT_ATTR_IDMAP")(
                std::io::Error::last_os_error(),
            ));
        }
        Ok(tree)
    }
}

/// One contained run: the sandbox's run (its slot, ruleset, steps and `TMPDIR`, dropped
/// first as before) and the container's own parts.
#[derive(Debug)]
pub struct ContainerRun {
    sandbox: SandboxRun,
    parts: RunParts,
}

impl ContainerRun {
    /// The sandbox's part of the run (its ruleset, steps and `TMPDIR`).
    pub fn sandbox(&self) -> &SandboxRun {
        &self.sandbox
    }

    /// The container's own parts.
    pub fn parts(&self) -> &RunParts {
        &self.parts
    }
}

/// What the launcher keeps of a contained run: the sandbox's data with the container's
/// added (descriptors by number), and the run itself for the run's life.
impl From<ContainerRun> for Option<Prepared> {
    fn from(run: ContainerRun) -> Self {
        use std::os::fd::AsRawFd;
        let parts = &run.parts;
        let child = crate::spawn::ChildSandbox {
            clone_flags: parts.clone_flags,
            workspace_tree: parts.workspace_tree.as_raw_fd(),
            container_ns: parts.user_ns.as_raw_fd(),
            ids: parts.ids,
            proc_access: parts.proc_access,
            ..run.sandbox.child()
        };
        let child = match &parts.net_ns {
            Some(net) => crate::spawn::ChildSandbox {
                net_ns: net.as_raw_fd(),
                ..child
            },
            None => child,
        };
        let marker = run.sandbox.marker().to_string();
        let tmp = run.sandbox.tmp().to_path_buf();
        Some(Prepared::new(child, marker, tmp, run))
    }
}

/// The sandbox's errors reach the host as the sandbox's (a working directory outside
/// the workspace is the caller's mistake); the container's own as an executor's.
impl From<ContainerError> for LaunchError {
    fn from(error: ContainerError) -> Self {
        match error {
            ContainerError::Sandbox(error) => LaunchError::Sandbox(error),
            other => LaunchError::Executor(Box::new(other)),
        }
    }
}

impl Executor for Container {
    /// Stronger than `sandbox`: the sandbox's confinement, in namespaces of its own, as an
    /// unprivileged host id.
    const STRENGTH: u8 = 20;
    type Prepared = ContainerRun;
    type Error = ContainerError;

    fn for_host(host: &HostSetup<'_>) -> Result<Self, ContainerError> {
        Container::new(host.config, host.workspace()?, &host.places.own)
    }

    fn prepare(
        &self,
        cwd: &Path,
        terminal: Option<&Path>,
        network: Option<OwnedFd>,
    ) -> Result<ContainerRun, ContainerError> {
        self.check_cwd(cwd)?;
        self.prepare_run(terminal, network)
    }

    fn marker(&self) -> Option<&str> {
        Some(self.sandbox.marker_line())
    }

    fn lacks(&self) -> Vec<Lack> {
        self.sandbox.landlock_lacks()
    }
}

/// The Landlock rights a container's `/proc` gets: those of every read rule.
fn proc_access(abi: i32) -> u64 {
    if abi < 1 {
        return 0;
    }
    landlock::AccessFs::from_read(super::sandbox::abi_of(abi)).bits()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sandbox's errors keep their variant (a working directory outside the
    /// workspace stays the caller's mistake to the host); the container's own become an
    /// executor's, with the same message they always had.
    #[test]
    fn its_errors_reach_the_launcher_as_they_did() {
        let outside = || SandboxError::OutsideWorkspace {
            path: "/elsewhere".into(),
            workspace: "/work".into(),
        };
        let error = LaunchError::from(ContainerError::from(outside()));
        assert!(
            matches!(
                error,
                LaunchError::Sandbox(SandboxError::OutsideWorkspace { .. })
            ),
            "{error:?}"
        );
        assert_eq!(error.to_string(), outside().to_string());
        for own in [ContainerError::NotRoot(1000), ContainerError::RootIds] {
            let message = own.to_string();
            let error = LaunchError::from(own);
            assert!(matches!(error, LaunchError::Executor(_)), "{error:?}");
            assert_eq!(error.to_string(), message);
        }
        assert!(ContainerError::NotRoot(1000)
            .to_string()
            .contains("needs dsh to run as root"));
    }
}
