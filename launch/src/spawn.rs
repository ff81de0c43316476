//! Starting a process group leader without `fork`.
//!
//! `fork` of a large, many-threaded host is slow (its page tables are copied and every
//! page the host then writes takes a copy-on-write fault until the child execs), and
//! Rust's `Command::pre_exec` forces it. This spawns the way `posix_spawn` does —
//! `clone(CLONE_VM | CLONE_VFORK)` on a small stack, the parent suspended until the
//! child has exec'd — and still runs the three steps the child needs before `exec`:
//! its own process group, the parent-death signal, and its stdio.
//!
//! In the child, between `clone` and `exec`, only raw system calls on data prepared by
//! the parent run: no allocation, no locks, no Rust drop glue. Signal handlers
//! inherited from the host are reset there (with all signals blocked across the
//! `clone`), so no host handler can run on the shared memory.
//!
//! A contained run starts inside its cgroup: `clone3` with `CLONE_INTO_CGROUP` (on
//! x86-64, through a few instructions of assembly, since the child runs on its own
//! stack and libc has no `clone3` wrapper), so no migration is paid for; elsewhere, or
//! on a kernel without `clone3`, the child writes itself into the cgroup's
//! `cgroup.procs`. Every child spawned here is tracked until it is reaped, so the
//! reaper of adopted orphans (dsh is a child subreaper) never takes a status that
//! belongs to a [`Child`].
//!
//! Every run starts clean: its own session (`setsid`: no controlling terminal but its
//! own PTY for a terminal session), and every descriptor above 2 closed (`close_range`),
//! whatever dsh itself inherited or holds without close-on-exec. The one exception is
//! [`spawn_with_fd3`]: a descriptor the parent names (a long command's script) becomes
//! descriptor 3, and only those above 3 are closed.
//!
//! A sandboxed run confines itself with what the parent prepared
//! ([`super::executor`]): first its namespaces and mount steps (before `chdir`, so its
//! working directory is on the mounts it may write), then `prctl(PR_SET_NO_NEW_PRIVS)`,
//! dropping every capability, `landlock_restrict_self`, and last
//! `seccomp(SECCOMP_SET_MODE_FILTER)`, then `exec`.
//!
//! A contained run ([`super::executor::container`]) is cloned into its namespaces (the
//! `clone` flags add them, so it is pid 1 of its PID namespace); it takes its mount
//! steps (its idmapped workspace attached, a fresh `/proc`) as the host's root, adds the
//! Landlock rule for that `/proc`, drops its supplementary groups, joins its user
//! namespace and becomes uid and gid 0 there (an unprivileged id on the host), re-arms
//! the parent-death signal (a uid change clears it), and only then confines itself as
//! a sandboxed run does.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use tokio::io::unix::AsyncFd;

/// What the child gets.
pub struct SpawnSpec<'a> {
    /// Absolute path of the program.
    pub program: &'a CStr,
    pub argv: &'a [CString],
    pub envp: &'a [CString],
    pub cwd: &'a CStr,
    /// Becomes the child's stdout and stderr.
    pub output: RawFd,
    /// Becomes the child's stdin.
    pub input: RawFd,
    /// When set, `input` and `output` are a terminal: the child starts a new session
    /// (instead of only a new process group) with that terminal as its controlling
    /// terminal.
    pub terminal: bool,
    /// The cgroup v2 directory the child starts in, and that cgroup's `cgroup.procs`
    /// (written only where `clone3` cannot place the child).
    pub cgroup: Option<(RawFd, RawFd)>,
    /// Further `cgroup.procs` files (v1 hierarchies) the child writes itself into.
    pub join: &'a [RawFd],
    /// The child gets SIGKILL when the host dies (every run; not the keeper).
    pub die_with_parent: bool,
    /// A confined run: what the child confines itself with before `exec`.
    pub sandbox: Option<&'a ChildSandbox>,
}

/// What a confined child applies before `exec`: plain data only (descriptors by number,
/// flags, ids, the seccomp program and the mount steps), made in the parent by an
/// executor ([`super::executor`]) and kept, with the descriptors it names, by the run's
/// [`super::executor::Prepared`]. Nothing here is code: a new kind of step is a change
/// to this file.
#[derive(Debug, Clone)]
pub struct ChildSandbox {
    /// The Landlock ruleset descriptor, or -1.
    pub ruleset: RawFd,
    /// The seccomp program, loaded last.
    pub filter: std::sync::Arc<Vec<libc::sock_filter>>,
    /// The namespaces it unshares (`CLONE_NEW*`).
    pub namespaces: libc::c_int,
    /// The user namespace it joins first (a non-root host's runs), or -1.
    pub user_ns: RawFd,
    /// Taken in order in its mount namespace.
    pub steps: std::sync::Arc<Vec<super::executor::MountStep>>,
    /// A contained run's namespaces, made by `clone` itself (`CLONE_NEW*`), or 0.
    pub clone_flags: libc::c_int,
    /// A contained run's idmapped workspace tree (attached by its mount steps), or -1.
    pub workspace_tree: RawFd,
    /// A contained run's user namespace, joined after its mounts, or -1.
    pub container_ns: RawFd,
    /// A contained run's network namespace made ahead, joined first, or -1.
    pub net_ns: RawFd,
    /// A contained run's host uid and gid, which its stdio pipes and PTY get.
    pub ids: (u32, u32),
    /// A contained run's Landlock rights on its fresh `/proc` (0: no rule to add).
    pub proc_access: u64,
}

/// A mount step as the child reads it.
#[repr(C)]
struct RawStep {
    op: u32,
    recursive: bool,
    /// `ENOENT` is no failure: the place is gone (see `MountStep::if_present`).
    if_present: bool,
    path: *const libc::c_char,
    source: *const libc::c_char,
}

const OP_PRIVATE_ALL: u32 = 0;
const OP_READ_ONLY: u32 = 1;
const OP_WRITABLE: u32 = 2;
const OP_BIND: u32 = 3;
const OP_COVER: u32 = 4;
const OP_MKDIR: u32 = 5;
const OP_DETACH: u32 = 6;
const OP_ATTACH: u32 = 7;
const OP_COVER_PASSABLE: u32 = 8;
const OP_MKDIR_PASSABLE: u32 = 9;
const OP_ATTACH_WORKSPACE: u32 = 10;
const OP_PROC: u32 = 11;
const OP_COVER_DEV: u32 = 12;
const OP_MKFILE: u32 = 13;
const OP_ATTACH_DEVICE: u32 = 14;
const OP_SYMLINK: u32 = 15;
const OP_SEAL: u32 = 16;

/// What the child was doing when it failed (an index into [`STAGES`]).
const STAGES: &[&str] = &[
    "setting up the child",
    "making the sandbox's namespaces",
    "joining the sandbox's user namespace",
    "setting up the sandbox's mounts",
    "entering the working directory",
    "confining the run (no_new_privs, capabilities, Landlock)",
    "loading the sandbox's seccomp filter",
    "executing the program",
    "adding the container's /proc to its Landlock ruleset",
    "entering the container's user namespace",
];
const STAGE_NAMESPACES: libc::c_int = 1;
const STAGE_USER_NS: libc::c_int = 2;
const STAGE_MOUNTS: libc::c_int = 3;
const STAGE_CHDIR: libc::c_int = 4;
const STAGE_CONFINE: libc::c_int = 5;
const STAGE_SECCOMP: libc::c_int = 6;
const STAGE_EXEC: libc::c_int = 7;
const STAGE_PROC_RULE: libc::c_int = 8;
const STAGE_CONTAINER_USER: libc::c_int = 9;

/// Everything the child reads, laid out before `clone`; the child writes `error`.
#[repr(C)]
struct ChildArgs {
    program: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    cwd: *const libc::c_char,
    output: libc::c_int,
    input: libc::c_int,
    terminal: bool,
    die_with_parent: bool,
    /// `cgroup.procs` descriptors to write `0` into.
    join: *const RawFd,
    join_len: usize,
    parent: libc::pid_t,
    /// The Landlock ruleset to restrict to, or -1.
    ruleset: libc::c_int,
    /// The seccomp program to load (with a ruleset).
    filter: *const libc::sock_fprog,
    /// The namespaces to unshare (0: none).
    namespaces: libc::c_int,
    /// The user namespace to join first, or -1.
    user_ns: libc::c_int,
    /// Mount steps.
    steps: *const RawStep,
    steps_len: usize,
    /// Becomes descriptor 3 (kept across `exec`), or -1.
    fd3: libc::c_int,
    /// The namespaces `clone` made (0: none).
    clone_flags: libc::c_int,
    /// A container's idmapped workspace tree, or -1.
    workspace_tree: libc::c_int,
    /// A container's user namespace, or -1.
    container_ns: libc::c_int,
    /// A container's network namespace made ahead, or -1.
    net_ns: libc::c_int,
    /// A container's host uid and gid.
    ids: (u32, u32),
    /// A container's Landlock rights on its `/proc` (0: none).
    proc_access: u64,
    /// 0, or the errno of the step that failed.
    error: libc::c_int,
    /// Where it failed (see [`STAGES`]); with a mount step, which one.
    stage: libc::c_int,
    failed_step: usize,
}

const CHILD_STACK_BYTES: usize = 64 * 1024;

/// A spawned child, reaped by [`Child::wait`] (or on drop, after a KILL).
pub struct Child {
    pid: libc::pid_t,
    exit: Option<ExitStatus>,
    pidfd: Option<AsyncFd<OwnedFd>>,
}

/// Pids of the children spawned here and not reaped yet.
static TRACKED: std::sync::Mutex<std::collections::BTreeSet<libc::pid_t>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// Held for reading by a spawn from `clone` until its pid is in [`TRACKED`], and for
/// writing by the orphan reaper, so the reaper never sees a child before it is tracked.
static SPAWNING: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn untrack(pid: libc::pid_t) {
    TRACKED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&pid);
}

/// Spawns `command` (std's spawn) tracked from the moment it exists, so the orphan
/// reaper leaves its status to the caller's wait; [`untrack_pid`] once it is reaped.
pub fn spawn_tracked(command: &mut std::process::Command) -> io::Result<std::process::Child> {
    let _no_reaping = SPAWNING.read().unwrap_or_else(|e| e.into_inner());
    let child = command.spawn()?;
    TRACKED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(child.id() as libc::pid_t);
    Ok(child)
}

/// Stops tracking a child reaped by its own wait ([`spawn_tracked`]).
pub fn untrack_pid(pid: libc::pid_t) {
    untrack(pid);
}

/// Whether `clone3` with `CLONE_INTO_CGROUP` failed once (an old kernel, a seccomp
/// filter): then the child joins its cgroup by writing `cgroup.procs`.
static NO_CLONE3: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Reaps the exited children of this process that no [`Child`] tracks: orphans of
/// runs, adopted because dsh is a child subreaper. Stops at the first exited child a
/// [`Child`] will reap itself; true when that happened (look again soon).
pub fn reap_orphans() -> bool {
    let _no_spawn_in_between = SPAWNING.write().unwrap_or_else(|e| e.into_inner());
    loop {
        // SAFETY: siginfo is plain data; WNOWAIT leaves the child as it is.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let found = unsafe {
            libc::waitid(
                libc::P_ALL,
                0,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        // SAFETY: si_pid is valid for a SIGCHLD siginfo filled by waitid.
        let pid = unsafe { info.si_pid() };
        if found != 0 || pid == 0 {
            return false;
        }
        if TRACKED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&pid)
        {
            return true;
        }
        let mut status = 0;
        // SAFETY: reaping an exited child nobody else waits for.
        unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    }
}

/// Spawns a child that leads a new process group (or session), dies with the host (SIGKILL as the
/// parent-death signal), has `input` as stdin and `output` as stdout and stderr.
pub fn spawn(spec: &SpawnSpec<'_>) -> io::Result<Child> {
    spawn_inner(spec, -1)
}

/// [`spawn`], with `fd3` as the child's descriptor 3 (kept across `exec`, unlike every
/// other descriptor above 2): how a command too long for an argument reaches bash.
pub fn spawn_with_fd3(spec: &SpawnSpec<'_>, fd3: RawFd) -> io::Result<Child> {
    spawn_inner(spec, fd3)
}

fn spawn_inner(spec: &SpawnSpec<'_>, fd3: RawFd) -> io::Result<Child> {
    let argv: Vec<*const libc::c_char> = spec
        .argv
        .iter()
        .map(|a| a.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    let envp: Vec<*const libc::c_char> = spec
        .envp
        .iter()
        .map(|e| e.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    let fprog = spec.sandbox.as_ref().map(|sandbox| libc::sock_fprog {
        len: sandbox.filter.len() as u16,
        filter: sandbox.filter.as_ptr() as *mut libc::sock_filter,
    });
    let steps: Vec<RawStep> = spec
        .sandbox
        .as_ref()
        .map_or(&[][..], |sandbox| sandbox.steps.as_slice())
        .iter()
        .map(|step| {
            use super::executor::MountOp;
            let (op, recursive, source) = match &step.op {
                MountOp::PrivateAll => (OP_PRIVATE_ALL, true, std::ptr::null()),
                MountOp::ReadOnly { recursive } => (OP_READ_ONLY, *recursive, std::ptr::null()),
                MountOp::Writable => (OP_WRITABLE, false, std::ptr::null()),
                MountOp::Bind { source } => (OP_BIND, true, source.as_ptr()),
                MountOp::Cover => (OP_COVER, false, std::ptr::null()),
                MountOp::Mkdir => (OP_MKDIR, false, std::ptr::null()),
                MountOp::Detach { recursive } => (OP_DETACH, *recursive, std::ptr::null()),
                MountOp::Attach => (OP_ATTACH, false, std::ptr::null()),
                MountOp::CoverPassable => (OP_COVER_PASSABLE, false, std::ptr::null()),
                MountOp::MkdirPassable => (OP_MKDIR_PASSABLE, false, std::ptr::null()),
                MountOp::AttachWorkspace => (OP_ATTACH_WORKSPACE, false, std::ptr::null()),
                MountOp::Proc => (OP_PROC, false, std::ptr::null()),
                MountOp::CoverDev => (OP_COVER_DEV, false, std::ptr::null()),
                MountOp::MkFile => (OP_MKFILE, false, std::ptr::null()),
                MountOp::AttachDevice => (OP_ATTACH_DEVICE, false, std::ptr::null()),
                MountOp::Symlink { target } => (OP_SYMLINK, false, target.as_ptr()),
                MountOp::Seal => (OP_SEAL, true, std::ptr::null()),
            };
            RawStep {
                op,
                recursive,
                if_present: step.if_present,
                path: step.path.as_ptr(),
                source,
            }
        })
        .collect();

    let mut args = ChildArgs {
        program: spec.program.as_ptr(),
        argv: argv.as_ptr(),
        envp: envp.as_ptr(),
        cwd: spec.cwd.as_ptr(),
        output: spec.output,
        input: spec.input,
        terminal: spec.terminal,
        die_with_parent: spec.die_with_parent,
        join: std::ptr::null(),
        join_len: 0,
        // SAFETY: getpid has no preconditions.
        parent: unsafe { libc::getpid() },
        ruleset: spec.sandbox.as_ref().map_or(-1, |sandbox| sandbox.ruleset),
        filter: fprog
            .as_ref()
            .map_or(std::ptr::null(), |f| f as *const libc::sock_fprog),
        namespaces: spec
            .sandbox
            .as_ref()
            .map_or(0, |sandbox| sandbox.namespaces),
        user_ns: spec.sandbox.as_ref().map_or(-1, |sandbox| sandbox.user_ns),
        steps: steps.as_ptr(),
        steps_len: steps.len(),
        fd3,
        clone_flags: spec.sandbox.as_ref().map_or(0, |s| s.clone_flags),
        workspace_tree: spec.sandbox.as_ref().map_or(-1, |s| s.workspace_tree),
        container_ns: spec.sandbox.as_ref().map_or(-1, |s| s.container_ns),
        net_ns: spec.sandbox.as_ref().map_or(-1, |s| s.net_ns),
        ids: spec.sandbox.as_ref().map_or((0, 0), |s| s.ids),
        proc_access: spec.sandbox.as_ref().map_or(0, |s| s.proc_access),
        error: 0,
        stage: 0,
        failed_step: 0,
    };
    let into_cgroup = spec
        .cgroup
        .filter(|_| !NO_CLONE3.load(std::sync::atomic::Ordering::Relaxed));
    // Where clone3 cannot place the child, it joins the v2 cgroup itself.
    let join: Vec<RawFd> = match (spec.cgroup, into_cgroup) {
        (Some((_, procs)), None) => std::iter::once(procs)
            .chain(spec.join.iter().copied())
            .collect(),
        _ => spec.join.to_vec(),
    };
    args.join = join.as_ptr();
    args.join_len = join.len();
    let mut stack = vec![0u8; CHILD_STACK_BYTES];
    // The stack grows down from the end, 16-byte aligned.
    let top = (stack.as_mut_ptr() as usize + CHILD_STACK_BYTES) & !15;

    let spawning = SPAWNING.read().unwrap_or_else(|e| e.into_inner());
    // SAFETY: the signal sets are plain data; the child only reads `args` (and writes
    // its `error`) while the parent is suspended by CLONE_VFORK, and `argv`, `envp`,
    // `join`, `stack` and the C strings outlive the call because clone returns only
    // after the child has exec'd or exited.
    let pid = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
        let namespaces = args.clone_flags;
        let arg = &mut args as *mut ChildArgs as *mut libc::c_void;
        let plain_clone = |arg| {
            libc::clone(
                child_main,
                top as *mut libc::c_void,
                libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD | namespaces,
                arg,
            ) as i64
        };
        let mut pid = match into_cgroup {
            Some((cgroup_dir, _)) => {
                clone_into_cgroup(cgroup_dir, &mut stack, arg, namespaces as u64)
            }
            None => plain_clone(arg),
        };
        let mut clone_error = io::Error::last_os_error();
        if into_cgroup.is_some() && pid < 0 {
            // No clone3 here: join by writing cgroup.procs from now on (unless the
            // namespaces may be what failed: then only this run tries again).
            if namespaces == 0 {
                NO_CLONE3.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            tracing::info!(error = %clone_error, "clone3 cannot start a process in its cgroup; runs join it through cgroup.procs");
            let procs = spec.cgroup.map(|(_, procs)| procs).unwrap_or(-1);
            let join: Vec<RawFd> = std::iter::once(procs)
                .chain(spec.join.iter().copied())
                .collect();
            args.join = join.as_ptr();
            args.join_len = join.len();
            pid = plain_clone(arg);
            clone_error = io::Error::last_os_error();
        }
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        if pid < 0 {
            return Err(clone_error);
        }
        pid as libc::pid_t
    };
    drop(stack);
    drop(join);
    if args.error != 0 {
        let mut status = 0;
        // SAFETY: reaping our own child, which has exited.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        let error = io::Error::from_raw_os_error(args.error);
        let stage = STAGES
            .get(args.stage as usize)
            .copied()
            .unwrap_or(STAGES[0]);
        let what = match spec
            .sandbox
            .as_ref()
            .and_then(|s| s.steps.get(args.failed_step))
        {
            Some(step) if args.stage == STAGE_MOUNTS => {
                format!("{stage} ({:?} on {})", step.op, step.path.to_string_lossy())
            }
            _ => stage.to_string(),
        };
        return Err(io::Error::new(error.kind(), format!("{what}: {error}")));
    }
    drop(steps);
    TRACKED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(pid);
    drop(spawning);
    Ok(Child {
        pid,
        exit: None,
        pidfd: open_pidfd(pid),
    })
}

/// The child, between clone and exec. Raw system calls only.
extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` points at the parent's ChildArgs, alive while the parent waits.
    unsafe {
        let args = &mut *(arg as *mut ChildArgs);
        // Host handlers must not run here; SIGPIPE goes back to its default like any
        // shell expects (the host ignores it).
        for signal in 1..libc::SIGRTMAX() {
            if signal == libc::SIGKILL || signal == libc::SIGSTOP {
                continue;
            }
            let mut current: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(signal, std::ptr::null(), &mut current) != 0 {
                continue;
            }
            if current.sa_sigaction != libc::SIG_DFL
                && (current.sa_sigaction != libc::SIG_IGN || signal == libc::SIGPIPE)
            {
                let mut default: libc::sigaction = std::mem::zeroed();
                default.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(signal, &default, std::ptr::null_mut());
            }
        }
        let fail = |args: &mut ChildArgs, stage: libc::c_int| -> libc::c_int {
            args.error = *libc::__errno_location();
            args.stage = stage;
            libc::_exit(127)
        };
        // A session of its own: no controlling terminal (a terminal session takes its
        // PTY below), so nothing reaches dsh's terminal.
        if libc::setsid() < 0 {
            return fail(args, 0);
        }
        if args.die_with_parent {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return fail(args, 0);
            }
            // The host died before the parent-death signal was armed (in a new PID
            // namespace the parent is outside it: getppid says 0).
            let parent = if args.clone_flags & libc::CLONE_NEWPID != 0 {
                0
            } else {
                args.parent
            };
            if libc::getppid() != parent {
                libc::_exit(137);
            }
        }
        for index in 0..args.join_len {
            let fd = *args.join.add(index);
            if libc::write(fd, c"0".as_ptr().cast(), 1) != 1 {
                return fail(args, 0);
            }
        }
        if libc::dup2(args.input, 0) < 0
            || libc::dup2(args.output, 1) < 0
            || libc::dup2(args.output, 2) < 0
        {
            return fail(args, 0);
        }
        if args.namespaces != 0 || args.clone_flags != 0 {
            if args.user_ns >= 0 && libc::setns(args.user_ns, libc::CLONE_NEWUSER) != 0 {
                return fail(args, STAGE_USER_NS);
            }
            if args.namespaces != 0 && libc::unshare(args.namespaces) != 0 {
                return fail(args, STAGE_NAMESPACES);
            }
            if args.net_ns >= 0 && libc::setns(args.net_ns, libc::CLONE_NEWNET) != 0 {
                return fail(args, STAGE_NAMESPACES);
            }
            let mut detached = Detached::default();
            for index in 0..args.steps_len {
                let step = &*args.steps.add(index);
                if !mount_step(step, &mut detached, args.workspace_tree) {
                    if step.if_present && *libc::__errno_location() == libc::ENOENT {
                        continue;
                    }
                    args.failed_step = index;
                    return fail(args, STAGE_MOUNTS);
                }
            }
        }
        if libc::chdir(args.cwd) != 0 {
            return fail(args, STAGE_CHDIR);
        }
        if args.terminal && libc::ioctl(0, libc::TIOCSCTTY, 0) != 0 {
            return fail(args, 0);
        }
        if args.container_ns >= 0 {
            // Its fresh /proc: readable under its Landlock domain (the ruleset is the
            // run's own).
            if args.proc_access != 0 && args.ruleset >= 0 {
                let proc = libc::open(
                    c"/proc".as_ptr(),
                    libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
                );
                if proc < 0 {
                    return fail(args, STAGE_PROC_RULE);
                }
                let rule = PathBeneathAttr {
                    allowed_access: args.proc_access,
                    parent_fd: proc,
                };
                let added = libc::syscall(
                    libc::SYS_landlock_add_rule,
                    args.ruleset,
                    1, // LANDLOCK_RULE_PATH_BENEATH
                    &rule as *const PathBeneathAttr,
                    0,
                );
                libc::close(proc);
                if added != 0 {
                    return fail(args, STAGE_PROC_RULE);
                }
            }
            // Its stdio pipes and terminal are its root's (reopened by path through
            // /proc/self/fd they check their owner); not a device such as /dev/null.
            for fd in 0..3 {
                let mut st: libc::stat = std::mem::zeroed();
                if libc::fstat(fd, &mut st) != 0 {
                    continue;
                }
                let kind = st.st_mode & libc::S_IFMT;
                let pts = kind == libc::S_IFCHR && (136..=143).contains(&libc::major(st.st_rdev));
                if (kind == libc::S_IFIFO || pts) && libc::fchown(fd, args.ids.0, args.ids.1) != 0 {
                    return fail(args, STAGE_CONTAINER_USER);
                }
            }
            // Its root: no supplementary groups (none can be set in its namespace), its
            // user namespace, uid and gid 0 there (an unprivileged id on the host).
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setns(args.container_ns, libc::CLONE_NEWUSER) != 0
                || libc::setresgid(0, 0, 0) != 0
                || libc::setresuid(0, 0, 0) != 0
            {
                return fail(args, STAGE_CONTAINER_USER);
            }
            // A change of uid clears the parent-death signal.
            if args.die_with_parent && libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return fail(args, STAGE_CONTAINER_USER);
            }
        }
        // The sandbox (every sandboxed run has a seccomp filter): no new privileges, no
        // capabilities (a root host's runs keep none, and regain none at exec), the
        // Landlock domain (where the kernel has Landlock).
        if !args.filter.is_null()
            && (libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || !drop_capabilities()
                || (args.ruleset >= 0
                    && libc::syscall(libc::SYS_landlock_restrict_self, args.ruleset, 0) != 0))
        {
            return fail(args, STAGE_CONFINE);
        }
        // Nothing above stdio reaches the program: not dsh's descriptors, not the
        // ruleset, not what dsh inherited; only the descriptor the parent passes as 3
        // (dup2 clears its close-on-exec flag; on 3 already, fcntl does).
        if args.fd3 >= 0 {
            let kept = if args.fd3 == 3 {
                libc::fcntl(3, libc::F_SETFD, 0)
            } else {
                libc::dup2(args.fd3, 3)
            };
            if kept < 0 {
                return fail(args, 0);
            }
            close_from(4);
        } else {
            close_from(3);
        }
        if !args.filter.is_null()
            && libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                0,
                args.filter,
            ) != 0
        {
            return fail(args, STAGE_SECCOMP);
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        libc::execve(args.program, args.argv, args.envp);
        fail(args, STAGE_EXEC)
    }
}

/// Closes every descriptor from `first` up (`close_range`; a loop over the first 4096
/// on a kernel without it). Raw system calls only.
///
/// # Safety
/// Closes descriptors this process may still use: for a child before `exec`.
unsafe fn close_from(first: libc::c_uint) {
    // SAFETY: close_range and close take plain integers.
    unsafe {
        if libc::syscall(libc::SYS_close_range, first, libc::c_uint::MAX, 0) != 0 {
            for fd in first..4096 {
                libc::close(fd as libc::c_int);
            }
        }
    }
}

/// `struct mount_attr` of `linux/mount.h` (the container's idmapped tree uses it too).
#[repr(C)]
pub(crate) struct MountAttr {
    pub attr_set: u64,
    pub attr_clr: u64,
    pub propagation: u64,
    pub userns_fd: u64,
}

const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;
pub(crate) const AT_RECURSIVE: libc::c_int = 0x8000;
pub(crate) const OPEN_TREE_CLONE: libc::c_uint = 1;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;

/// `struct landlock_path_beneath_attr` of `linux/landlock.h` (packed).
#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// The mount trees detach steps took and attach steps have not placed yet, last taken
/// first placed (on the child's stack: nothing between clone and exec may allocate).
struct Detached {
    trees: [libc::c_int; 16],
    len: usize,
}

impl Default for Detached {
    fn default() -> Self {
        Detached {
            trees: [-1; 16],
            len: 0,
        }
    }
}

impl Detached {
    fn push(&mut self, tree: libc::c_int) -> bool {
        if tree < 0 || self.len == self.trees.len() {
            return false;
        }
        self.trees[self.len] = tree;
        self.len += 1;
        true
    }

    fn pop(&mut self) -> libc::c_int {
        if self.len == 0 {
            return -1;
        }
        self.len -= 1;
        self.trees[self.len]
    }
}

/// One mount step (see [`super::executor::MountOp`]); `detached` holds the trees detach
/// steps took, `workspace_tree` a container's idmapped workspace. Raw system calls only.
///
/// # Safety
/// The step's strings are valid.
unsafe fn mount_step(step: &RawStep, detached: &mut Detached, workspace_tree: RawFd) -> bool {
    let set_attr = |set: u64, clear: u64, recursive: bool| {
        let attr = MountAttr {
            attr_set: set,
            attr_clr: clear,
            propagation: 0,
            userns_fd: 0,
        };
        // SAFETY: mount_setattr on a valid path and a plain struct.
        unsafe {
            libc::syscall(
                libc::SYS_mount_setattr,
                libc::AT_FDCWD,
                step.path,
                if recursive { AT_RECURSIVE } else { 0 },
                &attr as *const MountAttr,
                std::mem::size_of::<MountAttr>(),
            ) == 0
        }
    };
    // SAFETY: mount and mkdir on the step's valid strings.
    unsafe {
        match step.op {
            OP_PRIVATE_ALL => {
                libc::mount(
                    std::ptr::null(),
                    step.path,
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ) == 0
            }
            OP_READ_ONLY => set_attr(
                MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                0,
                step.recursive,
            ),
            OP_SEAL => set_attr(MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, 0, step.recursive),
            OP_COVER_DEV => {
                libc::mount(
                    c"tmpfs".as_ptr(),
                    step.path,
                    c"tmpfs".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                    c"size=64k,nr_inodes=64,mode=0755".as_ptr().cast(),
                ) == 0
            }
            OP_MKFILE => {
                let fd = libc::open(
                    step.path,
                    libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_CLOEXEC,
                    0o600,
                );
                fd >= 0 && libc::close(fd) == 0
            }
            OP_SYMLINK => libc::symlink(step.source, step.path) == 0,

            OP_WRITABLE => set_attr(0, MOUNT_ATTR_RDONLY, false),
            OP_BIND => {
                libc::mount(
                    step.source,
                    step.path,
                    std::ptr::null(),
                    libc::MS_BIND | libc::MS_REC,
                    std::ptr::null(),
                ) == 0
            }
            OP_COVER => {
                libc::mount(
                    c"tmpfs".as_ptr(),
                    step.path,
                    c"tmpfs".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                    c"size=64k,nr_inodes=64,mode=0700".as_ptr().cast(),
                ) == 0
            }
            OP_MKDIR => libc::mkdir(step.path, 0o700) == 0,
            OP_COVER_PASSABLE => {
                libc::mount(
                    c"tmpfs".as_ptr(),
                    step.path,
                    c"tmpfs".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                    c"size=64k,nr_inodes=64,mode=0711".as_ptr().cast(),
                ) == 0
            }
            OP_MKDIR_PASSABLE => {
                libc::mkdir(step.path, 0o711) == 0 && libc::chmod(step.path, 0o711) == 0
            }
            OP_ATTACH_WORKSPACE => {
                // The idmapped tree is a copy of the host's mounts, with their flags.
                libc::syscall(
                    libc::SYS_move_mount,
                    workspace_tree,
                    c"".as_ptr(),
                    libc::AT_FDCWD,
                    step.path,
                    MOVE_MOUNT_F_EMPTY_PATH,
                ) == 0
                    && set_attr(MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, 0, true)
            }
            OP_PROC => {
                libc::mount(
                    c"proc".as_ptr(),
                    step.path,
                    c"proc".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                    std::ptr::null(),
                ) == 0
            }
            OP_DETACH => {
                let recursive = if step.recursive {
                    AT_RECURSIVE as libc::c_uint
                } else {
                    0
                };
                let tree = libc::syscall(
                    libc::SYS_open_tree,
                    libc::AT_FDCWD,
                    step.path,
                    OPEN_TREE_CLONE | recursive | libc::O_CLOEXEC as libc::c_uint,
                ) as libc::c_int;
                detached.push(tree)
            }
            OP_ATTACH | OP_ATTACH_DEVICE => {
                let tree = detached.pop();
                let attached = tree >= 0
                    && libc::syscall(
                        libc::SYS_move_mount,
                        tree,
                        c"".as_ptr(),
                        libc::AT_FDCWD,
                        step.path,
                        MOVE_MOUNT_F_EMPTY_PATH,
                    ) == 0;
                if tree >= 0 {
                    libc::close(tree);
                }
                // A device node's mount: the one kind without `nodev`.
                attached
                    && (step.op == OP_ATTACH
                        || set_attr(MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV, false))
            }
            _ => false,
        }
    }
}

/// Empties the bounding set (where this process may: it takes CAP_SETPCAP), the
/// ambient set, and the effective, permitted and inheritable sets. Raw system calls on
/// the stack only (it runs in the child before exec); false when `capset` failed.
///
/// # Safety
/// Changes this thread's credentials.
unsafe fn drop_capabilities() -> bool {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    // SAFETY: prctl and capset on plain data on this stack.
    unsafe {
        for cap in 0..64 {
            // EINVAL past the kernel's last capability; EPERM without CAP_SETPCAP.
            libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0);
        }
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        );
        let header = Header {
            version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
            pid: 0,
        };
        let none = [
            Data {
                effective: 0,
                permitted: 0,
                inheritable: 0,
            },
            Data {
                effective: 0,
                permitted: 0,
                inheritable: 0,
            },
        ];
        libc::syscall(libc::SYS_capset, &header, none.as_ptr()) == 0
    }
}

/// `clone3(CLONE_VM | CLONE_VFORK | CLONE_INTO_CGROUP)`: `child_main(arg)` runs on
/// `stack` inside the cgroup `cgroup_dir`; returns the child's pid, or -1 with errno.
///
/// # Safety
/// As for `clone(CLONE_VM | CLONE_VFORK)`: `arg` and everything it points to, and
/// `stack`, must stay valid until this returns (the parent is suspended until the child
/// has exec'd or exited), and all signals should be blocked.
#[cfg(target_arch = "x86_64")]
unsafe fn clone_into_cgroup(
    cgroup_dir: RawFd,
    stack: &mut [u8],
    arg: *mut libc::c_void,
    namespaces: u64,
) -> i64 {
    /// `struct clone_args` of `linux/sched.h`, up to `cgroup` (CLONE_ARGS_SIZE_VER2).
    #[repr(C)]
    struct CloneArgs {
        flags: u64,
        pidfd: u64,
        child_tid: u64,
        parent_tid: u64,
        exit_signal: u64,
        stack: u64,
        stack_size: u64,
        tls: u64,
        set_tid: u64,
        set_tid_size: u64,
        cgroup: u64,
    }
    const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;
    // The kernel starts the child with its stack pointer at stack + stack_size: keep
    // that 16-byte aligned, as the ABI wants before a call.
    let base = stack.as_mut_ptr() as u64;
    let size = ((base + stack.len() as u64) & !15) - base;
    let mut clone_args = CloneArgs {
        flags: (libc::CLONE_VM | libc::CLONE_VFORK) as u64 | CLONE_INTO_CGROUP | namespaces,
        pidfd: 0,
        child_tid: 0,
        parent_tid: 0,
        exit_signal: libc::SIGCHLD as u64,
        stack: base,
        stack_size: size,
        tls: 0,
        set_tid: 0,
        set_tid_size: 0,
        cgroup: cgroup_dir as u64,
    };
    let entry: extern "C" fn(*mut libc::c_void) -> libc::c_int = child_main;
    let result: i64;
    // SAFETY: clone3 returns twice. The parent (rax != 0) jumps over the child's part
    // with every register but rax, rcx and r11 as it was. The child (rax == 0) is on
    // its own stack: it calls `child_main(arg)` (kept in r12/r13, which the kernel
    // preserves) and exits with its value; it never returns into Rust code.
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "xor ebp, ebp",
            "mov rdi, r13",
            "call r12",
            "mov edi, eax",
            "mov eax, 60", // SYS_exit
            "syscall",
            "ud2",
            "2:",
            inlateout("rax") libc::SYS_clone3 => result,
            in("rdi") &mut clone_args as *mut CloneArgs,
            in("rsi") std::mem::size_of::<CloneArgs>(),
            in("r12") entry,
            in("r13") arg,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    if result < 0 {
        // SAFETY: setting this thread's errno.
        unsafe { *libc::__errno_location() = (-result) as libc::c_int };
        return -1;
    }
    result
}

/// Without the assembly for this architecture, runs join their cgroup by writing
/// `cgroup.procs`.
#[cfg(not(target_arch = "x86_64"))]
unsafe fn clone_into_cgroup(
    _cgroup_dir: RawFd,
    _stack: &mut [u8],
    _arg: *mut libc::c_void,
    _namespaces: u64,
) -> i64 {
    // SAFETY: setting this thread's errno.
    unsafe { *libc::__errno_location() = libc::ENOSYS };
    -1
}

fn open_pidfd(pid: libc::pid_t) -> Option<AsyncFd<OwnedFd>> {
    // SAFETY: pidfd_open returns a new descriptor we own, or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
    // SAFETY: the AsyncFd owns `fd`, so it stays open while registered.
    unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }.ok()
}

impl Child {
    /// A child this process spawned under the binary it ran before an upgrade's `exec`
    /// (still its child: the pid is the same process's), tracked from now on so the
    /// orphan reaper leaves its status to [`Child::wait`]. Adopt before the orphan
    /// reaper starts. A child that ended in between is reaped here, its status kept.
    pub fn adopt(pid: libc::pid_t) -> Child {
        TRACKED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(pid);
        Child {
            pid,
            exit: None,
            pidfd: None,
        }
    }

    /// Registers the pidfd of an adopted child with the event loop (from a tokio
    /// context; [`Child::adopt`] may run before there is one).
    pub fn watch(&mut self) {
        if self.pidfd.is_none() && self.exit.is_none() {
            self.pidfd = open_pidfd(self.pid);
        }
    }

    /// The child's pid, which is also its process group id.
    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }

    fn try_reap(&mut self) -> io::Result<Option<ExitStatus>> {
        if let Some(status) = self.exit {
            return Ok(Some(status));
        }
        let mut status = 0;
        // SAFETY: our own child; WNOHANG never blocks.
        match unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) } {
            0 => Ok(None),
            pid if pid == self.pid => {
                untrack(pid);
                let status = ExitStatus::from_raw(status);
                self.exit = Some(status);
                Ok(Some(status))
            }
            _ => Err(io::Error::last_os_error()),
        }
    }

    /// Waits for the child to exit and reaps it. Cancel-safe.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        loop {
            if let Some(status) = self.try_reap()? {
                return Ok(status);
            }
            match &self.pidfd {
                Some(pidfd) => {
                    let mut ready = pidfd.readable().await?;
                    ready.clear_ready();
                }
                // No pidfd (a kernel before 5.3): poll.
                None => tokio::time::sleep(std::time::Duration::from_millis(5)).await,
            }
        }
    }
}

impl Child {
    /// Leaves the child running and reaps it on a thread when it ends (the keeper,
    /// which must never be killed by dsh).
    pub fn reap_in_background(mut self) {
        let pid = self.pid;
        drop(self.pidfd.take());
        // Marks it as done, so dropping it neither kills nor waits.
        self.exit = Some(ExitStatus::from_raw(0));
        let _ = std::thread::Builder::new()
            .name("dsh-reap".into())
            .spawn(move || {
                let mut status = 0;
                // SAFETY: waiting for our own child.
                unsafe { libc::waitpid(pid, &mut status, 0) };
                untrack(pid);
            });
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if self.exit.is_some() || matches!(self.try_reap(), Ok(Some(_))) {
            return;
        }
        let pid = self.pid;
        // SAFETY: our own, unreaped child: the pid cannot have been reused.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        // Reap it off this thread; KILL makes that quick but not instant.
        let _ = std::thread::Builder::new()
            .name("dsh-reap".into())
            .spawn(move || {
                let mut status = 0;
                // SAFETY: waiting for our own child.
                unsafe { libc::waitpid(pid, &mut status, 0) };
                untrack(pid);
            });
    }
}
