//! dsh's launch platform: the one way dsh starts a process, and everything below it
//! that needs `unsafe` or `libc`. A command goes in ([`launcher::Command`]), a contained
//! child comes out ([`launcher::Contained`]), through [`Launch::start`].
//!
//! It owns: the spawn (`spawn.rs`, private: a `vfork`-style clone, the child's steps
//! before `exec`, pidfds and the orphan reaper), containment ([`containment`]: a cgroup
//! per run, or the subreaper fallback with its marks, and the keeper), the executors
//! ([`executor`]: `local`, `sandbox` with Landlock, seccomp ([`seccomp`]) and a mount
//! namespace, `container` with its own namespaces), the PTY ([`pty`]), peer credentials
//! of a Unix socket ([`peer`]), the upgrade's check and `exec` ([`launcher`]), dsh's own
//! files as confinement sees them ([`own_files`]), the few numbers of the system the
//! host names ([`os`]), and the loading of compiled components the compile cache vouches
//! for ([`compiled`]). The configuration it reads is [`config`]; the host parses
//! `dsh.toml` and hands it a [`config::LaunchConfig`].
//!
//! It is the only crate of dsh with `unsafe` code or `libc`: every other crate forbids
//! `unsafe`, and this one knows nothing of them (it depends on no dsh crate). Its errors
//! are its own ([`LaunchError`], and below it each executor's, such as
//! [`executor::SandboxError`] and [`executor::container::ContainerError`], and
//! [`containment::ContainmentError`]); the host maps them to its error codes.

pub mod compiled;
pub mod config;
pub mod containment;
pub mod executor;
pub mod launcher;
pub mod network;
pub mod os;
pub mod own_files;
pub mod peer;
pub mod pty;
pub mod seccomp;
mod spawn;

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

pub use config::{ContainmentMode, ExecutorKind, LaunchConfig, SandboxFeature};
pub use spawn::Child;

/// Why a command could not be run at all (the host maps each to its error code).
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("working directory {0} does not exist or is not a directory")]
    BadWorkdir(PathBuf),
    #[error("cannot start bash: {0}")]
    Spawn(std::io::Error),
    #[error("the command, working directory or environment contains a NUL byte")]
    NulByte,
    #[error("cannot hand the command to bash in a memfd: {0}")]
    Script(std::io::Error),
    #[error(transparent)]
    Containment(#[from] containment::ContainmentError),
    /// The sandbox refuses the run or cannot confine it (a container's sandbox too).
    #[error(transparent)]
    Sandbox(#[from] executor::SandboxError),
    /// An executor cannot confine the run for a reason of the host's, not the call's: it
    /// cannot be built here (its reason, kept from the first try), or an error of its
    /// own preparing the run (see each executor's `From` into this).
    #[error("{0}")]
    Executor(Box<dyn std::error::Error + Send + Sync>),
    /// The run's network by policy could not be made or served.
    #[error("cannot give the run its network: {0}")]
    Network(std::io::Error),
}

/// `name` looked up on `PATH` (a name with a `/` is taken as a path).
pub fn find_program(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        return Some(PathBuf::from(name)).filter(|p| p.is_file());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// What every spawn reuses: the shell's path, the commands' environment, `/dev/null`,
/// the containment runs are made in, and the sandbox. Shared by the process and
/// terminal services.
#[derive(Debug)]
pub struct Launch {
    bash: PathBuf,
    environment: Vec<(Vec<u8>, CString)>,
    dev_null: std::io::Result<OwnedFd>,
    containment: containment::Containment,
    sandbox_config: config::SandboxConfig,
    places: HostPlaces,
    /// The executors, one entry per [`ExecutorKind`] (by its index), each built at start
    /// when the configuration names it, else at first use; a failure refuses every run
    /// under it, with its reason.
    executors: Box<[std::sync::OnceLock<executor::Built>]>,
    /// The host's egress proxy, once installed: which confined runs get a network.
    egress: std::sync::OnceLock<std::sync::Arc<dyn network::Egress>>,
}

/// Where a host's runs are: the session workspace (a sandboxed run's writable root and
/// where it may start) and dsh's own files (out of a sandboxed run's reach).
#[derive(Debug, Clone, Default)]
pub struct HostPlaces {
    /// None: no sandboxed run can start (a launch for tests and tools).
    pub workspace: Option<PathBuf>,
    pub own: crate::own_files::OwnFiles,
}

impl Launch {
    /// A launch with no workspace (sandboxed runs are refused) and no state directory.
    pub fn new(config: impl Into<LaunchConfig>) -> Result<Self, containment::ContainmentError> {
        Self::for_host(config, HostPlaces::default())
    }

    /// A launch for a host whose workspace and own files are `places`.
    pub fn for_host(
        config: impl Into<LaunchConfig>,
        places: HostPlaces,
    ) -> Result<Self, containment::ContainmentError> {
        let config: LaunchConfig = config.into();
        let bash = find_program("bash").unwrap_or_else(|| PathBuf::from("/bin/bash"));
        let launch = Launch {
            bash,
            environment: config.environment.clone(),
            dev_null: std::fs::File::open("/dev/null").map(OwnedFd::from),
            containment: containment::Containment::start(&config)?,
            sandbox_config: config.sandbox.clone(),
            places,
            executors: ExecutorKind::ALL
                .iter()
                .map(|_| std::sync::OnceLock::new())
                .collect(),
            egress: std::sync::OnceLock::new(),
        };
        let named = &config.named;
        for kind in named {
            launch.report(*kind);
        }
        if named.iter().any(|kind| *kind != ExecutorKind::Local) {
            launch.report_places();
        }
        Ok(launch)
    }

    /// Installs the host's egress proxy (once; a second is ignored and says so).
    pub fn install_egress(&self, egress: std::sync::Arc<dyn network::Egress>) {
        if self.egress.set(egress).is_err() {
            tracing::warn!("an egress proxy was installed twice; the first stays");
        }
    }

    /// The network a run of `tool` in `scope`, started by the call `call` of `owner`,
    /// gets under `executor` (none: no network, and none for `local`, which is not
    /// confined and has the host's).
    pub fn network_for(
        &self,
        executor: ExecutorKind,
        scope: &std::sync::Arc<str>,
        tool: &std::sync::Arc<str>,
        owner: &std::sync::Arc<str>,
        call: &str,
    ) -> Option<network::Network> {
        if executor == ExecutorKind::Local {
            return None;
        }
        let policy = self.egress.get()?.policy_for(scope, tool)?;
        Some(network::Network {
            policy,
            label: network::RunLabel {
                owner: owner.clone(),
                call: call.into(),
                tool: tool.clone(),
                scope: scope.clone(),
            },
        })
    }

    /// The shell every command runs in (`bash` on `PATH`, else `/bin/bash`).
    pub fn bash(&self) -> &Path {
        &self.bash
    }

    /// The containment every run is made in.
    pub fn containment(&self) -> &containment::Containment {
        &self.containment
    }

    /// The session workspace and dsh's own files this launch was made for (the files
    /// capability confines its reads and writes by them too).
    pub fn places(&self) -> &HostPlaces {
        &self.places
    }

    /// The executor of `kind`, built on first use (a failure refuses every run under
    /// it, with its reason).
    pub(crate) fn executor(
        &self,
        kind: ExecutorKind,
    ) -> Result<&dyn executor::AnyExecutor, LaunchError> {
        let host = executor::HostSetup {
            config: &self.sandbox_config,
            places: &self.places,
        };
        self.executors[kind.index()]
            .get_or_init(|| kind.build(&host))
            .as_deref()
            .map_err(|reason| LaunchError::Executor(reason.as_str().into()))
    }

    /// Builds the executor of `kind` (named by the configuration) at start and logs what
    /// it lacks here, so an operator learns it before the first call.
    fn report(&self, kind: ExecutorKind) {
        let executor = match self.executor(kind) {
            Ok(executor) => executor,
            Err(error) => {
                tracing::warn!(executor = ?kind, %error, "an executor the configuration names cannot be prepared; its calls will be refused");
                return;
            }
        };
        for lack in executor.lacks() {
            if lack.refuses {
                tracing::warn!(executor = ?kind, lack = %lack.what, "an executor lacks a required feature on this host; its calls will be refused");
            } else {
                tracing::info!(executor = ?kind, lack = %lack.what, "an executor runs with less confinement on this host");
            }
        }
    }

    /// Logs at start where confined runs write and whether dsh's own files lie in the
    /// workspace (then carved out of every confined run's view).
    fn report_places(&self) {
        let Some(workspace) = self.places.workspace.as_deref() else {
            return;
        };
        let workspace =
            std::fs::canonicalize(workspace).unwrap_or_else(|_| workspace.to_path_buf());
        let own = &self.places.own;
        let inside: Vec<&PathBuf> = own
            .state_dir
            .iter()
            .chain(&own.read_only)
            .filter(|path| path.starts_with(&workspace))
            .collect();
        if inside.is_empty() {
            tracing::info!(
                workspace = %workspace.display(),
                "confined runs write only the workspace, their TMPDIR and [process.sandbox] write; \
                 the state directory is covered in their mount namespace"
            );
        } else {
            tracing::warn!(
                workspace = %workspace.display(),
                ?inside,
                "dsh's own files lie in the workspace: in confined runs the state directory is covered by an empty \
                 read-only tmpfs and the configuration and plugins are bound read-only, with the directories on their way pinned"
            );
        }
    }

    /// The confinement of one run under the executor `kind` (none for `local`) that
    /// starts in `cwd` (a confined run must start inside the workspace); `terminal`: a
    /// terminal session's own PTY.
    pub(crate) fn prepare(
        &self,
        kind: ExecutorKind,
        cwd: &std::path::Path,
        terminal: Option<&std::path::Path>,
        network: Option<OwnedFd>,
    ) -> Result<Option<executor::Prepared>, LaunchError> {
        self.executor(kind)?.prepare(cwd, terminal, network)
    }

    /// What the child of a run confined by `prepared` applies before `exec` (data only,
    /// naming descriptors `prepared` holds open).
    pub(crate) fn child_sandbox(
        prepared: Option<&executor::Prepared>,
    ) -> Option<&spawn::ChildSandbox> {
        prepared.map(executor::Prepared::child)
    }

    /// The commands' environment with `extra` added (replacing variables of the same
    /// name), and the run's mark when it has one.
    pub(crate) fn envp(
        &self,
        extra: &[(String, String)],
        placement: &containment::SpawnPlacement,
    ) -> Result<Vec<CString>, LaunchError> {
        let extra: Vec<&(String, String)> = extra.iter().chain(placement.mark.as_ref()).collect();
        let mut envp: Vec<CString> = self
            .environment
            .iter()
            .filter(|(key, _)| !extra.iter().any(|(k, _)| k.as_bytes() == key.as_slice()))
            .map(|(_, entry)| entry.clone())
            .collect();
        for (key, value) in extra {
            envp.push(CString::new(format!("{key}={value}")).map_err(|_| LaunchError::NulByte)?);
        }
        Ok(envp)
    }
}

/// A sealed memfd (no write, grow, shrink or further seals) holding `text`, at offset 0
/// and close-on-exec, above descriptor 2.
pub fn sealed_script(text: &[u8]) -> std::io::Result<OwnedFd> {
    use std::io::{Seek, Write};
    use std::os::fd::FromRawFd;
    // SAFETY: memfd_create takes a valid C string and flags; it returns a new descriptor.
    let fd = unsafe {
        libc::memfd_create(
            c"dsh-command".as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    let mut file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    if fd < 3 {
        // The child replaces descriptors 0 to 2 before it takes 3 (dsh started with one
        // of them closed): move it above them.
        // SAFETY: fcntl on a descriptor this function owns; it returns a new one.
        let moved = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
        if moved < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `moved` is a fresh descriptor nobody else owns.
        file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(moved) });
    }
    file.write_all(text)?;
    file.rewind()?;
    let seals = libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;
    // SAFETY: fcntl on a descriptor this function owns.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(OwnedFd::from(file))
}

/// Sends `signal` to process group `pgid` (nothing for a pgid of 0).
pub fn signal_group(pgid: i32, signal: i32) {
    if pgid > 0 {
        // SAFETY: killpg has no memory-safety preconditions.
        unsafe {
            libc::killpg(pgid, signal);
        }
    }
}

/// Sends `signal` to process `pid` (nothing for a pid of 0 or less).
pub fn kill(pid: i32, signal: i32) {
    if pid > 0 {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe {
            libc::kill(pid, signal);
        }
    }
}

/// This process's effective uid.
pub fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}
