//! The launcher: the one way dsh starts a process. Every command, terminal shell and
//! language server goes through [`Launch::start`], which alone prepares the run's
//! executor, builds its environment by the `[process.env]` policy (with the run's
//! private `TMPDIR` and containment mark), opens and places its containment run, turns
//! the command into what the child reads, spawns it ([`super::spawn`]) and makes it the
//! run's leader. The keeper, which must outlive dsh and is never killed with a run, is
//! started through the explicit [`start_uncontained`]; the short-lived holder of a new
//! user namespace, through [`user_namespace`]. Nothing else in dsh spawns (the tidy test
//! checks it).
//!
//! What it hands back, a [`Contained`] child, is killed whole when dropped: its
//! containment run kills the process group and everything the run holds.

use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::{containment, executor, spawn, ExecutorKind, Launch, LaunchError};

/// Where a launched process's standard descriptors go.
#[derive(Debug, Clone, Copy)]
pub enum Stdio<'a> {
    /// stdin from `/dev/null`; stdout and stderr on `output`.
    Output(BorrowedFd<'a>),
    /// stdin from `input`; stdout and stderr on `output`.
    Pipes {
        input: BorrowedFd<'a>,
        output: BorrowedFd<'a>,
    },
    /// A terminal: its slave (at `path`, which a sandboxed run is granted) is stdin,
    /// stdout, stderr and the controlling terminal of the process's new session.
    Pty {
        slave: BorrowedFd<'a>,
        path: &'a Path,
    },
}

/// A process to start.
#[derive(Debug)]
pub struct Command<'a> {
    /// Absolute path of the program.
    pub program: &'a Path,
    /// The arguments, `argv[0]` first.
    pub args: &'a [&'a [u8]],
    /// Set on top of the `[process.env]` policy (replacing variables of the same name).
    pub env: &'a [(String, String)],
    /// Absolute working directory (a sandboxed run's must lie in the workspace).
    pub cwd: &'a Path,
    pub stdio: Stdio<'a>,
    /// What confines it (chosen by `[process.executor]` for the call's scope and tool).
    pub executor: ExecutorKind,
    /// A descriptor that becomes the process's descriptor 3 (a long command's script).
    pub fd3: Option<BorrowedFd<'a>>,
    /// Its network by policy ([`Launch::network_for`]): it runs in a namespace of its
    /// own whose one way out is the policy's proxy. None: the executor's own network.
    pub network: Option<&'a crate::network::Network>,
}

/// A started process in its containment run. Dropping it kills the run: the process
/// group, and everything in the run's cgroup (or carrying its mark).
pub struct Contained {
    pub child: spawn::Child,
    pub run: containment::Run,
    /// The run's confinement (`None` under `local`); its `TMPDIR` goes when this is
    /// dropped.
    pub sandbox: Option<executor::Prepared>,
    /// Its proxy while it lives (a run with a network by policy): dropping it ends the
    /// run's connections.
    pub egress: Option<Box<dyn crate::network::RunEgress>>,
}

fn c_string(bytes: &[u8]) -> Result<CString, LaunchError> {
    CString::new(bytes).map_err(|_| LaunchError::NulByte)
}

impl Launch {
    /// Starts `command` in a new containment run, as the leader of a new process group
    /// (a new session with its terminal for [`Stdio::Pty`]), under its executor.
    ///
    /// Starting a run can block its thread for milliseconds: the vforked child's writes
    /// into cgroup v1 `cgroup.procs` files wait for an RCU grace period (6 ms median, 18
    /// ms seen here between spaced writes) while the parent waits for its `exec`. Under
    /// the dsh binary it therefore runs with the async worker's other tasks handed to
    /// another thread (`block_in_place`), so a `bash` call no longer stalls the calls
    /// queued behind it. Without a keeper a run's child dies with the thread that spawned
    /// it (its parent-death signal), and a thread that gave its tasks away may end: then
    /// it starts where it is.
    pub fn start(&self, command: &Command<'_>) -> Result<Contained, LaunchError> {
        let multi_thread = tokio::runtime::Handle::try_current().is_ok_and(|runtime| {
            runtime.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread
        });
        if multi_thread && self.containment.has_keeper() {
            tokio::task::block_in_place(|| self.start_here(command))
        } else {
            self.start_here(command)
        }
    }

    fn start_here(&self, command: &Command<'_>) -> Result<Contained, LaunchError> {
        if !command.cwd.is_dir() {
            return Err(LaunchError::BadWorkdir(command.cwd.to_path_buf()));
        }
        let terminal = match command.stdio {
            Stdio::Pty { path, .. } => Some(path),
            _ => None,
        };
        let (namespace, served) = match command.network {
            Some(network) if command.executor != ExecutorKind::Local => {
                if crate::euid() != 0 {
                    return Err(executor::SandboxError::NetworkNeedsRoot.into());
                }
                let made = crate::network::RunNetwork::open().map_err(LaunchError::Network)?;
                let egress = network
                    .policy
                    .serve(made.listener, &network.label)
                    .map_err(|why| LaunchError::Network(std::io::Error::other(why)))?;
                (Some(made.namespace), Some((network, egress)))
            }
            _ => (None, None),
        };
        let sandbox = self.prepare(command.executor, command.cwd, terminal, namespace)?;
        let mut env = command.env.to_vec();
        if let Some(prepared) = &sandbox {
            env.push(("TMPDIR".into(), prepared.tmp().display().to_string()));
            if let Some((network, _)) = &served {
                let variables = network
                    .policy
                    .environment(prepared.tmp())
                    .map_err(|why| LaunchError::Network(std::io::Error::other(why)))?;
                env.extend(variables);
            }
        }
        let argv = command
            .args
            .iter()
            .map(|arg| c_string(arg))
            .collect::<Result<Vec<_>, _>>()?;
        let program = c_string(command.program.as_os_str().as_bytes())?;
        let cwd = c_string(command.cwd.as_os_str().as_bytes())?;
        let dev_null = self
            .dev_null
            .as_ref()
            .map_err(|e| LaunchError::Spawn(std::io::Error::new(e.kind(), e.to_string())))?;
        let (input, output, is_terminal) = match command.stdio {
            Stdio::Output(output) => (dev_null.as_raw_fd(), output.as_raw_fd(), false),
            Stdio::Pipes { input, output } => (input.as_raw_fd(), output.as_raw_fd(), false),
            Stdio::Pty { slave, .. } => (slave.as_raw_fd(), slave.as_raw_fd(), true),
        };
        let mut run = self.containment.new_run()?;
        let placement = run.placement()?;
        let envp = self.envp(&env, &placement)?;
        let spec = spawn::SpawnSpec {
            program: &program,
            argv: &argv,
            envp: &envp,
            cwd: &cwd,
            output,
            input,
            terminal: is_terminal,
            cgroup: placement.cgroup,
            join: &placement.join,
            // With a keeper, it alone kills what is left when dsh dies: a parent-death
            // signal fires when the spawning thread ends, and at an upgrade's `exec`.
            die_with_parent: !self.containment.has_keeper(),
            sandbox: Launch::child_sandbox(sandbox.as_ref()),
        };
        let child = match command.fd3 {
            Some(fd3) => spawn::spawn_with_fd3(&spec, fd3.as_raw_fd()),
            None => spawn::spawn(&spec),
        }
        .map_err(LaunchError::Spawn)?;
        run.started(child.pid());
        if let Some((_, egress)) = &served {
            egress.started(child.pid());
        }
        Ok(Contained {
            child,
            run,
            sandbox,
            egress: served.map(|(_, egress)| egress),
        })
    }
}

/// Starts `program` outside any containment run, with no environment, in `/`, stdin
/// from `input` and stdout and stderr on `output`, and no parent-death signal: the
/// keeper, which must outlive dsh, is the one process started so. Nothing kills it
/// when the returned child is dropped.
pub fn start_uncontained(
    program: &CStr,
    argv: &[CString],
    input: BorrowedFd<'_>,
    output: BorrowedFd<'_>,
) -> std::io::Result<spawn::Child> {
    spawn::spawn(&spawn::SpawnSpec {
        program,
        argv,
        envp: &[],
        cwd: c"/",
        output: output.as_raw_fd(),
        input: input.as_raw_fd(),
        terminal: false,
        cgroup: None,
        join: &[],
        die_with_parent: false,
        sandbox: None,
    })
}

/// Runs `binary` with `args` (after `argv[0]`) and this process's environment plus
/// `env`, stdin from `/dev/null`, and waits at most `limit`: the check a new binary
/// passes before an upgrade executes it (the host's `upgrade.rs`). Returns whether it
/// exited 0, and what it printed (stdout, then stderr).
pub fn run_upgrade_check(
    binary: &Path,
    args: &[std::ffi::OsString],
    env: &[(&str, String)],
    limit: std::time::Duration,
) -> std::io::Result<(bool, String)> {
    use std::io::Read;
    let mut command = std::process::Command::new(binary);
    command
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = spawn::spawn_tracked(&mut command)?;
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    spawn::untrack_pid(child.id() as i32);
    let mut said = String::new();
    if let Some(mut out) = child.stdout.take() {
        let _ = out.read_to_string(&mut said);
    }
    if let Some(mut err) = child.stderr.take() {
        let _ = err.read_to_string(&mut said);
    }
    match status {
        Some(status) => Ok((status.success(), said)),
        None => Ok((
            false,
            format!("it did not finish within {} ms", limit.as_millis()),
        )),
    }
}

/// Replaces this process's program with `binary` (`execve`), with `args` (`argv[0]`
/// first) and this process's environment plus `env`: the upgrade's last step. Every
/// descriptor not marked to stay open across `exec` is closed by the kernel. Returns
/// only when the `exec` failed.
pub fn exec_upgrade(
    binary: &Path,
    args: &[std::ffi::OsString],
    env: &[(&str, String)],
) -> std::io::Error {
    use std::os::unix::process::CommandExt;
    let mut command = std::process::Command::new(binary);
    if let Some((first, rest)) = args.split_first() {
        command.arg0(first).args(rest);
    }
    command.envs(env.iter().map(|(k, v)| (*k, v.as_str())));
    command.exec()
}

/// A new user namespace with `uid_map` and `gid_map` (setgroups denied), held by its
/// descriptor. Made by a short-lived child (a multithreaded process cannot unshare its
/// user namespace) whose maps this process writes (the child is dumpable after its
/// exec; dsh itself is not, so its runs could not write their own). On failure: the
/// step that failed, and why.
pub(crate) fn user_namespace(
    uid_map: &str,
    gid_map: &str,
) -> Result<std::os::fd::OwnedFd, (&'static str, std::io::Error)> {
    use std::io::Write;
    use std::os::unix::process::CommandExt;
    let bash = crate::find_program("bash").unwrap_or_else(|| std::path::PathBuf::from("/bin/bash"));
    let mut command = std::process::Command::new(bash);
    command
        .args(["-c", "read -r _"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .env_clear();
    // SAFETY: one raw system call between fork and exec.
    unsafe {
        command.pre_exec(|| {
            if libc::unshare(libc::CLONE_NEWUSER) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    // Tracked, so the orphan reaper never takes its status: neither std's own wait when
    // the `unshare` fails (std's spawn panics when that wait finds no child) nor ours.
    let mut child = spawn::spawn_tracked(&mut command).map_err(|e| ("unshare", e))?;
    let pid = child.id();
    let made = (|| {
        std::fs::write(format!("/proc/{pid}/setgroups"), "deny").map_err(|e| ("setgroups", e))?;
        std::fs::write(format!("/proc/{pid}/uid_map"), uid_map).map_err(|e| ("uid_map", e))?;
        std::fs::write(format!("/proc/{pid}/gid_map"), gid_map).map_err(|e| ("gid_map", e))?;
        std::fs::File::open(format!("/proc/{pid}/ns/user"))
            .map(std::os::fd::OwnedFd::from)
            .map_err(|e| ("ns/user", e))
    })();
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(b"\n");
    }
    let _ = child.wait();
    spawn::untrack_pid(pid as libc::pid_t);
    made
}
