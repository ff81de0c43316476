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
}

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
    parent: libc::pid_t,
    /// 0, or the errno of the step that failed.
    error: libc::c_int,
}

const CHILD_STACK_BYTES: usize = 64 * 1024;

/// A spawned child, reaped by [`Child::wait`] (or on drop, after a KILL).
pub struct Child {
    pid: libc::pid_t,
    exit: Option<ExitStatus>,
    pidfd: Option<AsyncFd<OwnedFd>>,
}

/// Spawns a child that leads a new process group (or session), dies with the host (SIGKILL as the
/// parent-death signal), has `input` as stdin and `output` as stdout and stderr.
pub fn spawn(spec: &SpawnSpec<'_>) -> io::Result<Child> {
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
    let mut args = ChildArgs {
        program: spec.program.as_ptr(),
        argv: argv.as_ptr(),
        envp: envp.as_ptr(),
        cwd: spec.cwd.as_ptr(),
        output: spec.output,
        input: spec.input,
        terminal: spec.terminal,
        // SAFETY: getpid has no preconditions.
        parent: unsafe { libc::getpid() },
        error: 0,
    };
    let mut stack = vec![0u8; CHILD_STACK_BYTES];
    // The stack grows down from the end, 16-byte aligned.
    let top = (stack.as_mut_ptr() as usize + CHILD_STACK_BYTES) & !15;

    // SAFETY: the signal sets are plain data; the child only reads `args` (and writes
    // its `error`) while the parent is suspended by CLONE_VFORK, and `argv`, `envp`,
    // `stack` and the C strings outlive the call because clone returns only after the
    // child has exec'd or exited.
    let pid = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
        let pid = libc::clone(
            child_main,
            top as *mut libc::c_void,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            &mut args as *mut ChildArgs as *mut libc::c_void,
        );
        let clone_error = io::Error::last_os_error();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        if pid < 0 {
            return Err(clone_error);
        }
        pid
    };
    drop(stack);
    if args.error != 0 {
        let mut status = 0;
        // SAFETY: reaping our own child, which has exited.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        return Err(io::Error::from_raw_os_error(args.error));
    }
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
        let fail = |args: &mut ChildArgs| -> libc::c_int {
            args.error = *libc::__errno_location();
            libc::_exit(127)
        };
        let leader = if args.terminal {
            libc::setsid()
        } else {
            libc::setpgid(0, 0)
        };
        if leader < 0 || libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
            return fail(args);
        }
        // The host died before the parent-death signal was armed.
        if libc::getppid() != args.parent {
            libc::_exit(137);
        }
        if libc::dup2(args.input, 0) < 0
            || libc::dup2(args.output, 1) < 0
            || libc::dup2(args.output, 2) < 0
            || libc::chdir(args.cwd) != 0
            || (args.terminal && libc::ioctl(0, libc::TIOCSCTTY, 0) != 0)
        {
            return fail(args);
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        libc::execve(args.program, args.argv, args.envp);
        fail(args)
    }
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
            });
    }
}
