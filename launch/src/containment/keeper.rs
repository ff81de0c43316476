//! The keeper: a small process that outlives dsh just long enough to kill what dsh
//! started, however dsh ended (SIGKILL and the OOM killer included, which no handler
//! sees, and which a parent-death signal covers only for dsh's direct children).
//!
//! dsh starts it once, from its own executable (`/proc/self/exe`) under the name
//! `dsh-keeper`, in a process group of its own, with the read end of a pipe as stdin.
//! dsh holds the write end (close-on-exec, so no run inherits it). When dsh ends, for
//! whatever reason, the kernel closes that end; the keeper reads end-of-file, kills
//! the cgroup node (or, in the subreaper mode, every process carrying dsh's run mark),
//! removes the node, and exits. It ignores the signals a terminal or a session sends.

use std::ffi::{CString, OsString};
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::launcher;

/// The name the keeper runs under (its `argv[0]`), by which `main` recognises it.
pub const KEEPER_NAME: &str = "dsh-keeper";

/// The running keeper, seen from dsh.
#[derive(Debug)]
pub(crate) struct Keeper {
    /// Closing it (dsh's end) tells the keeper to clean up.
    _lifeline: OwnedFd,
    pid: i32,
}

impl Keeper {
    /// A keeper that kills and removes the cgroup `node` (and the v1 `v1_nodes`).
    pub(crate) fn start_cgroup(node: &Path, v1_nodes: &[PathBuf]) -> std::io::Result<Keeper> {
        let mut args = vec![b"cgroup".to_vec(), node.as_os_str().as_bytes().to_vec()];
        args.extend(v1_nodes.iter().map(|p| p.as_os_str().as_bytes().to_vec()));
        Keeper::start(args)
    }

    /// A keeper that kills every process whose environment holds `prefix`.
    pub(crate) fn start_marks(prefix: &str) -> std::io::Result<Keeper> {
        Keeper::start(vec![b"marks".to_vec(), prefix.as_bytes().to_vec()])
    }

    fn start(args: Vec<Vec<u8>>) -> std::io::Result<Keeper> {
        let to_c = |bytes: Vec<u8>| {
            CString::new(bytes)
                .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "NUL in a path"))
        };
        let mut argv = vec![to_c(KEEPER_NAME.as_bytes().to_vec())?];
        for arg in args {
            argv.push(to_c(arg)?);
        }
        let mut fds = [0; 2];
        // SAFETY: pipe2 fills two descriptors we then own.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fresh descriptors from pipe2.
        let (read_end, write_end) = unsafe {
            use std::os::fd::FromRawFd;
            (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]))
        };
        let dev_null = std::fs::OpenOptions::new().write(true).open("/dev/null")?;
        let child = launcher::start_uncontained(
            c"/proc/self/exe",
            &argv,
            read_end.as_fd(),
            dev_null.as_fd(),
        )?;
        let pid = child.pid();
        // The keeper must outlive us: never kill it; reap it if it ends first.
        child.reap_in_background();
        Ok(Keeper {
            _lifeline: write_end,
            pid,
        })
    }

    /// The keeper the binary this process ran before started, by its lifeline kept open
    /// across the upgrade's `exec` and its pid (still this process's child, reaped by
    /// the orphan reaper should it end).
    pub fn adopt(lifeline: OwnedFd, pid: i32) -> Keeper {
        super::close_on_exec(&lifeline);
        Keeper {
            _lifeline: lifeline,
            pid,
        }
    }

    /// The lifeline's descriptor number (handed over at an upgrade).
    pub fn lifeline(&self) -> i32 {
        use std::os::fd::AsRawFd;
        self._lifeline.as_raw_fd()
    }

    /// The keeper's pid.
    pub fn pid(&self) -> i32 {
        self.pid
    }
}

/// The keeper process: `dsh-keeper cgroup NODE [V1_NODE...]` or `dsh-keeper marks
/// PREFIX`. Waits for end-of-file on stdin, then cleans up. Returns the exit status.
pub fn main(args: &[OsString]) -> u8 {
    // SAFETY: setting dispositions and the thread name with constant arguments.
    unsafe {
        for signal in [
            libc::SIGINT,
            libc::SIGHUP,
            libc::SIGTERM,
            libc::SIGQUIT,
            libc::SIGPIPE,
        ] {
            libc::signal(signal, libc::SIG_IGN);
        }
        libc::prctl(libc::PR_SET_NAME, c"dsh-keeper".as_ptr(), 0, 0, 0);
        // Last to be chosen by the OOM killer (allowed for root; harmless otherwise).
        let _ = std::fs::write("/proc/self/oom_score_adj", "-1000");
    }
    let mut stdin = std::io::stdin().lock();
    let mut buf = [0u8; 64];
    loop {
        match stdin.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    match args {
        [mode, node, v1 @ ..] if mode == "cgroup" => {
            let v1: Vec<PathBuf> = v1.iter().map(PathBuf::from).collect();
            super::cgroup::reap_tree(Path::new(node), &v1);
            0
        }
        [mode, prefix] if mode == "marks" => {
            super::marks::sweep(prefix.as_bytes(), super::marks::Scope::All);
            0
        }
        _ => 2,
    }
}
