//! The subreaper containment (where no cgroup can be made) and the reaping of adopted
//! orphans (in both modes).
//!
//! dsh is a child subreaper: a process that leaves its run's process group and loses
//! its parent (`setsid`, a double fork, `disown`) is reparented to dsh instead of PID 1.
//! Each run's processes carry `DSH_RUN=PID.N` in their environment; when a run ends or
//! is killed, dsh's adopted children with that mark are killed, and their children in
//! turn as they are adopted. The keeper does the same over all of `/proc` when dsh is
//! gone. A process that clears its environment before it escapes is not found: that is
//! the limit of this mode, stated in the book's Containment page.

use std::os::fd::{FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// The environment variable that marks a run's processes.
pub const MARK_VARIABLE: &str = "DSH_RUN";

/// The subreaper mode's state.
#[derive(Debug)]
pub struct Marks {
    /// `DSH_RUN=PID.`: every mark of this process starts so.
    prefix: String,
    /// Why this mode is in use.
    pub reason: String,
}

/// Where a sweep looks for marked processes.
#[derive(Debug, Clone, Copy)]
pub enum Scope {
    /// This process's descendants (dsh adopts what escapes).
    Children,
    /// Every process (the keeper, after dsh is gone).
    All,
}

impl Scope {
    /// Where escaped processes of a run are: this process's children when it is a
    /// subreaper (the dsh binary), else anywhere.
    pub fn adopted() -> Scope {
        if super::supervising() {
            Scope::Children
        } else {
            Scope::All
        }
    }
}

impl Marks {
    pub fn new(reason: &str) -> Marks {
        Marks {
            prefix: format!("{MARK_VARIABLE}={}.", std::process::id()),
            reason: reason.to_string(),
        }
    }

    /// The marks handed over at an upgrade (the same process, so the same prefix).
    pub fn adopt(prefix: String) -> Marks {
        Marks {
            prefix,
            reason: "handed over at an upgrade".to_string(),
        }
    }

    /// `DSH_RUN=PID.`
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// A fresh `DSH_RUN=PID.N`.
    pub fn next_mark(&self) -> Vec<u8> {
        format!("{}{}", self.prefix, super::next_number()).into_bytes()
    }
}

/// Makes this process a child subreaper (once; harmless to repeat).
pub fn become_subreaper() {
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        tracing::warn!(error = %std::io::Error::last_os_error(), "cannot become a child subreaper: escaped processes go to PID 1");
    }
}

/// Reaps adopted orphans whenever a child exits (a task on the current tokio runtime;
/// none outside one).
pub fn start_orphan_reaper() {
    static STARTED: std::sync::Once = std::sync::Once::new();
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    STARTED.call_once(|| {
        runtime.spawn(async {
            use tokio::signal::unix::{signal, SignalKind};
            let Ok(mut children) = signal(SignalKind::child()) else {
                tracing::warn!("cannot watch SIGCHLD: adopted orphans are not reaped");
                return;
            };
            loop {
                // A tracked child that has exited but is not reaped yet hides the
                // others from `waitid`: look again shortly.
                let wake = tokio::time::sleep(Duration::from_millis(100));
                tokio::select! {
                    _ = children.recv() => {}
                    _ = wake => {}
                }
                crate::spawn::reap_orphans();
            }
        });
    });
}

/// Kills every process in `scope` whose environment holds `mark` (a whole
/// `DSH_RUN=PID.N`, or a prefix `DSH_RUN=PID.`), again and again as their children are
/// adopted, until two passes in a row find none (at most about a second).
pub fn sweep(mark: &[u8], scope: Scope) {
    let deadline = Instant::now() + Duration::from_secs(1);
    let mut quiet_passes = 0;
    while quiet_passes < 2 && Instant::now() < deadline {
        let candidates = match scope {
            Scope::Children => children(),
            Scope::All => all_processes(),
        };
        let mut killed = 0;
        for pid in candidates {
            if kill_if_marked(pid, mark) {
                killed += 1;
            }
        }
        if killed == 0 {
            quiet_passes += 1;
        } else {
            quiet_passes = 0;
            tracing::debug!(killed, mark = %String::from_utf8_lossy(mark), "killed escaped processes of a run");
        }
        std::thread::sleep(Duration::from_millis(if killed == 0 { 20 } else { 5 }));
    }
}

/// SIGKILL to `pid` when its environment holds `mark`. The pidfd is opened first, so a
/// pid reused after the read is never signalled.
fn kill_if_marked(pid: i32, mark: &[u8]) -> bool {
    // SAFETY: pidfd_open returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return false;
    }
    // SAFETY: a fresh descriptor we own.
    let pidfd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
        return false;
    };
    let marked = environ.split(|b| *b == 0).any(|entry| {
        entry.starts_with(mark) && (mark.ends_with(b".") || entry.len() == mark.len())
    });
    if marked {
        use std::os::fd::AsRawFd;
        // SAFETY: pidfd_send_signal on our own pidfd.
        unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                pidfd.as_raw_fd(),
                libc::SIGKILL,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
    }
    marked
}

/// This process's children (every thread's).
/// This process's descendants: its children, theirs, and so on. Not only the children:
/// an escapee whose parent is still exiting (a double-forking daemon's middle process)
/// has not been adopted yet, and must not be missed by the pass that kills its parent.
fn children() -> Vec<i32> {
    let children_of = |tasks: &str, into: &mut Vec<i32>| {
        let Ok(tasks) = std::fs::read_dir(tasks) else {
            return;
        };
        for task in tasks.flatten() {
            if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
                into.extend(
                    text.split_whitespace()
                        .filter_map(|p| p.parse::<i32>().ok()),
                );
            }
        }
    };
    let mut found = Vec::new();
    children_of("/proc/self/task", &mut found);
    let mut seen = std::collections::HashSet::new();
    let mut next = 0;
    while next < found.len() {
        let pid = found[next];
        next += 1;
        if seen.insert(pid) {
            children_of(&format!("/proc/{pid}/task"), &mut found);
        }
    }
    found.retain({
        let mut kept = std::collections::HashSet::new();
        move |pid| kept.insert(*pid)
    });
    found
}

/// Every process on the machine (this one excepted).
fn all_processes() -> Vec<i32> {
    let own = std::process::id() as i32;
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| *pid != own)
        .collect()
}
