//! The PTY and the shell on it: the pair opened with `openpty`
//! ([`dsh_launch::pty::open`]), the shell started on it by the launcher (clone with
//! CLONE_VFORK, a parent-death signal, the PTY as controlling terminal) in its own
//! container, the read loop that feeds the session everything the shell side writes, the
//! watcher that reaps the shell through its pidfd, and the terminal-level questions asked
//! of the master (foreground group, echo mode), writes to it and kills of the terminal's
//! session. The system calls themselves are the launch platform's ([`dsh_launch::pty`]).
//!
//! `openpty` and our spawner rather than `portable-pty`, whose fork-based spawn costs
//! milliseconds in a host this size, sets no parent-death signal, and reads with a
//! blocking thread per session.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::io::unix::AsyncFd;

use crate::error::{ErrorCode, ToolError};
use dsh_launch::pty;
use dsh_launch::{containment, launcher, Launch, LaunchError};

use super::sessions::Session;
use super::{OpenSpec, DRAIN_TIMEOUT};

/// A shell started on a new PTY: the master side (registered with the event loop), the
/// shell's process and its container.
pub(super) struct Shell {
    pub master: AsyncFd<OwnedFd>,
    pub child: dsh_launch::Child,
    pub run: containment::Run,
    /// A sandboxed session's confinement; its TMPDIR goes when this is dropped (when the
    /// shell exits).
    pub sandbox: Option<dsh_launch::executor::Prepared>,
    /// Its egress proxy (a session with a network by policy), for the shell's life.
    pub egress: Option<Box<dyn dsh_launch::network::RunEgress>>,
}

/// Starts `program` (named `shell_name`; bash gets `--noprofile --norc -i` and a `$ `
/// prompt) on a new PTY sized and placed as `spec` says, in a new container.
pub(super) fn start_shell(
    launch: &Launch,
    spec: &OpenSpec,
    shell_name: &str,
    program: &Path,
    is_bash: bool,
) -> Result<Shell, ToolError> {
    let internal = |what: &str, error: std::io::Error| {
        ToolError::new(ErrorCode::Internal, format!("{what}: {error}"))
    };
    let (master, slave) =
        pty::open(spec.cols, spec.rows).map_err(|e| internal("cannot open a PTY", e))?;
    let mut args: Vec<&[u8]> = vec![shell_name.as_bytes()];
    if is_bash {
        args.extend([&b"--noprofile"[..], b"--norc", b"-i"]);
    }
    let mut env = vec![("TERM".to_string(), "xterm-256color".to_string())];
    if is_bash {
        env.push(("PS1".to_string(), "$ ".to_string()));
    }
    env.extend(spec.env.iter().cloned());
    let slave_path = pty_path(&slave);
    let launcher::Contained {
        child,
        run,
        sandbox,
        egress,
    } = launch
        .start(&launcher::Command {
            program,
            args: &args,
            env: &env,
            cwd: &spec.cwd,
            stdio: launcher::Stdio::Pty {
                slave: slave.as_fd(),
                path: &slave_path,
            },
            executor: spec.executor,
            fd3: None,
            network: spec.network.as_ref(),
        })
        .map_err(|error| match error {
            LaunchError::Spawn(e) => internal("cannot start the shell", e),
            LaunchError::Containment(e) => {
                internal("cannot contain the session", std::io::Error::other(e))
            }
            other => other.into(),
        })?;
    drop(slave);
    // Reading only: see `Session::write_all`.
    let master = pty::watch(master, tokio::io::Interest::READABLE)
        .map_err(|e| internal("cannot watch the PTY", e))?;
    Ok(Shell {
        master,
        child,
        run,
        sandbox,
        egress,
    })
}

impl Session {
    /// The terminal's foreground process group.
    pub(super) fn foreground_group(&self) -> Option<i32> {
        self.leader()?;
        pty::foreground_group(self.master.get_ref().as_fd())
    }

    /// Writes `bytes` to the terminal. The master is registered for reading only: were
    /// it registered for writing too, every byte the shell reads from its side (readline
    /// reads one at a time) would wake the event loop with an edge of writability. So
    /// writes go straight to the descriptor, and only a write the terminal's input queue
    /// cannot take (a long paste) waits, on a duplicate registered for writing just then.
    pub(super) async fn write_all(&self, mut bytes: &[u8]) -> Result<(), ToolError> {
        let fd = self.master.get_ref();
        let mut writable: Option<AsyncFd<OwnedFd>> = None;
        while !bytes.is_empty() {
            let error = match pty::write(fd.as_fd(), bytes) {
                Ok(n) => {
                    bytes = &bytes[n..];
                    continue;
                }
                Err(error) => error,
            };
            match error.kind() {
                std::io::ErrorKind::Interrupted => continue,
                std::io::ErrorKind::WouldBlock => {}
                _ => return Err(write_error(error)),
            }
            if writable.is_none() {
                let dup = fd.try_clone().map_err(write_error)?;
                let registered = pty::watch(dup, tokio::io::Interest::WRITABLE);
                writable = Some(registered.map_err(write_error)?);
            }
            if let Some(writable) = &writable {
                writable
                    .writable()
                    .await
                    .map_err(write_error)?
                    .clear_ready();
            }
        }
        Ok(())
    }

    /// Whether input typed now is echoed by the terminal, as far as the terminal's
    /// modes tell: not in canonical mode with echo off (a password prompt). A program
    /// in non-canonical mode (readline, a REPL, a full-screen program) echoes by itself,
    /// or not: [`Echo`](super::waiting::Echo) copes with both.
    pub(super) fn echoes(&self) -> bool {
        pty::echoes(self.master.get_ref().as_fd())
    }

    /// Kills every process of the session: its container, which holds those that
    /// left the terminal's session too. Returns how many were in the terminal session.
    pub(super) fn kill_all(&self) -> usize {
        let members = self.leader().map(session_members).unwrap_or_default();
        self.run.kill();
        for pid in &members {
            dsh_launch::kill(*pid, dsh_launch::os::SIGKILL);
        }
        members.len()
    }
}

fn write_error(error: std::io::Error) -> ToolError {
    ToolError::new(
        ErrorCode::Internal,
        format!("cannot write to the terminal: {error}"),
    )
}

/// Pids whose session id is `sid`.
pub(super) fn session_members(sid: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
                    fields.get(3)?.parse::<i32>().ok()
                })
                .is_some_and(|session| session == sid)
        })
        .collect()
}

/// Waits for the session's shell (its pidfd) and reaps it the moment it exits; then
/// kills what is left of its session, lets the reader drain the output the shell left,
/// and marks the session exited with the shell's code.
pub(super) async fn watch_shell(session: Arc<Session>, mut child: dsh_launch::Child) {
    let status = child.wait().await;
    let code = status.ok().and_then(|status| {
        use std::os::unix::process::ExitStatusExt;
        status.code().or_else(|| status.signal().map(|n| 128 + n))
    });
    // The pid is still the session's id (and group id) for whatever is left in it, so
    // it cannot have been reused yet: kill them, then forget the pid.
    let members = session_members(session.leader);
    session.run.kill();
    for pid in &members {
        dsh_launch::kill(*pid, dsh_launch::os::SIGKILL);
    }
    session.run.set_leader(0);
    session.reaped.store(true, Ordering::Release);
    session.output.lock().unwrap().exit_code = code;
    tracing::debug!(id = %session.id, ?code, left = members.len(), "terminal shell exited");
    let reader = session.reader.lock().unwrap().take();
    if let Some(mut reader) = reader {
        if tokio::time::timeout(DRAIN_TIMEOUT, &mut reader)
            .await
            .is_err()
        {
            reader.abort();
        }
    }
    session.mark_exited();
}

/// Reads the PTY until the shell side is gone (every process holding the terminal has
/// closed it).
pub(super) async fn read_loop(session: Arc<Session>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let mut ready = match session.master.readable().await {
            Ok(ready) => ready,
            Err(_) => break,
        };
        let read = ready.try_io(|fd| pty::read(fd.get_ref().as_fd(), &mut buf));
        match read {
            Ok(Ok(0)) => break,
            Ok(Ok(n)) => session.push(&buf[..n]),
            // EIO: every process holding the terminal is gone.
            Ok(Err(_)) => break,
            Err(_would_block) => continue,
        }
    }
}

/// The PTY master a session handed over at an upgrade kept open across the `exec`, by
/// its number: closed on `exec` again and registered with the event loop.
pub(super) fn adopt_master(fd: i32) -> std::io::Result<AsyncFd<OwnedFd>> {
    pty::watch(pty::adopt(fd), tokio::io::Interest::READABLE)
}

/// The path of a PTY's slave (`/dev/pts/N`), which a sandboxed session may open again.
fn pty_path(slave: &OwnedFd) -> PathBuf {
    std::fs::read_link(format!("/proc/self/fd/{}", slave.as_raw_fd()))
        .unwrap_or_else(|_| PathBuf::from("/dev/null"))
}
