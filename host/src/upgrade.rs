//! Upgrading the host in place (`dsh upgrade`, or SIGUSR2 to `dsh serve`): the running
//! process writes what it holds to a [`Snapshot`], checks that the new binary can read
//! it, and executes that binary in the same process, which rebuilds its state from the
//! snapshot and the descriptors kept open across the `exec`. The pid stays, so the
//! keeper, the containment and the client see no change.
//!
//! The snapshot is JSON in a sealed memfd (it holds the connection's state and, for the
//! sessions, their scrollback), passed by descriptor number in `DSH_UPGRADE_FD`; its
//! `version` says how to read it, and a binary that reads another version refuses it
//! before anything is lost (the check below runs it first).
//!
//! What is handed over: the stdio connection (the client's `initialize` as it was sent,
//! its log level, the input not yet read) or the HTTP server (its listener, tokens and
//! sessions, taken back as their clients return), the terminal sessions (PTY masters, shells,
//! scrollback, screens, containers), the containment (node or marks, keeper), the
//! session's event log, every job (a running background command's pipe, shell and
//! container with it), the language servers (pipes, open documents, container).
//! Subagents and background terminal sends are not handed over yet: while one runs the
//! upgrade is refused, saying which ([`blockers`]).
//!
//! Who may ask: the control socket's peer must be this user and must not be a process
//! dsh started ([`peer_may_upgrade`]): dsh is a child subreaper, so whatever a run
//! starts, however it detaches, stays its descendant.

use std::io::{Read, Seek, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::host::Host;
use crate::services::handover::{Handed, HandoverError};
use crate::services::Services;
pub use crate::session::SessionHandover;
use dsh_launch::containment::{self, ContainmentHandover};
use dsh_launch::Child;

/// The version of the snapshot this binary writes, and the only one it reads.
pub const SNAPSHOT_VERSION: u32 = 1;

/// The variable naming the snapshot's descriptor in the new binary's environment.
pub const SNAPSHOT_FD_VARIABLE: &str = "DSH_UPGRADE_FD";

/// Set (to `1`) when the new binary is only asked to check that it can take over: it
/// reads the snapshot and the configuration, prints one line and exits.
pub const CHECK_VARIABLE: &str = "DSH_UPGRADE_CHECK";

/// Everything handed to the next binary.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Snapshot {
    pub version: u32,
    /// The dsh version that wrote it.
    pub written_by: String,
    pub pid: u32,
    /// How many upgrades this process has been through, this one included.
    pub generation: u32,
    /// When the binary before stopped reading requests (nanoseconds since the epoch), and
    /// how long of that its drain took: the next binary measures the pause from them.
    pub paused_at_ns: u64,
    pub drain_ns: u64,
    /// The session (its event log goes on) and its next call number.
    pub session: SessionHandover,
    pub containment: ContainmentHandover,
    /// What the capabilities and the transports hand over, each under keys of its own
    /// (`terminals`, `jobs`, `job_processes`, `language_servers`: see
    /// `services::handover`; `stdio` or `http`, and `round_trips`: see
    /// [`TransportHandover`]).
    #[serde(flatten)]
    pub entries: Handed,
    /// Owners gone before the upgrade, and the milliseconds left of their grace period.
    #[serde(default)]
    pub pending_releases: Vec<(String, u64)>,
    /// The descriptors the transports' entries name (the writer's own: never written).
    #[serde(skip)]
    transport_descriptors: Vec<i32>,
}

/// What a transport of the MCP front end hands over at an upgrade (the stdio
/// connection, the HTTP server, the calls parked between two requests of MCP
/// 2026-07-28): its entry of the snapshot, under a key of its own, and the descriptors
/// the entry names. The transports' types are their own (in `mcp`): this module names
/// none, as it names no capability.
pub trait TransportHandover: Serialize + serde::de::DeserializeOwned {
    /// Its key in the snapshot.
    const KEY: &'static str;

    /// The descriptors it names, kept open across the `exec`.
    fn descriptors(&self) -> Vec<i32> {
        Vec::new()
    }
}

/// One transport's part of a snapshot, as [`Snapshot::take`] takes it.
pub struct TransportEntry {
    key: &'static str,
    value: serde_json::Value,
    descriptors: Vec<i32>,
}

impl TransportEntry {
    /// `handed` as its transport's entry.
    pub fn of<T: TransportHandover>(handed: &T) -> Result<TransportEntry, UpgradeError> {
        Ok(TransportEntry {
            key: T::KEY,
            value: serde_json::to_value(handed)
                .map_err(|e| UpgradeError::Write(std::io::Error::other(e)))?,
            descriptors: handed.descriptors(),
        })
    }

    /// Puts the entry in `entries` under its key; gives the descriptors it names.
    pub fn insert_into(self, entries: &mut Handed) -> Vec<i32> {
        entries.insert(self.key.to_string(), self.value);
        self.descriptors
    }
}

/// Why an upgrade did not happen.
#[derive(Debug, thiserror::Error)]
pub enum UpgradeError {
    #[error("no upgrade: {0}")]
    Blocked(String),
    #[error("cannot write the snapshot: {0}")]
    Write(std::io::Error),
    #[error("the snapshot in descriptor {fd} cannot be read: {why}")]
    Read { fd: String, why: String },
    #[error("{binary} refused to take over: {why}")]
    Refused { binary: PathBuf, why: String },
    #[error("cannot execute {binary}: {source}")]
    Exec {
        binary: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Capability(#[from] HandoverError),
}

/// What keeps this host from being upgraded now: the live state that is not handed over
/// yet (empty when nothing does).
pub fn blockers(host: &Host) -> Vec<String> {
    host.services.upgrade_blockers()
}

impl Snapshot {
    /// The host's state, its capabilities paused (see
    /// [`crate::services::Capability::pause`]), and the transports' entries. The
    /// descriptors it names are made to stay open across `exec`. On `Err`, call
    /// [`Snapshot::take_back`].
    pub async fn take(
        host: &Host,
        transports: Vec<TransportEntry>,
        paused_at: std::time::SystemTime,
        drain: std::time::Duration,
    ) -> Result<Snapshot, UpgradeError> {
        host.services.pause().await?;
        let mut entries = host.services.hand_over().await?;
        let mut transport_descriptors = Vec::new();
        for transport in transports {
            transport_descriptors.extend(transport.insert_into(&mut entries));
        }
        let containment = host.services.launch().containment().hand_over();
        let session = &host.pipeline.session;
        Ok(Snapshot {
            version: SNAPSHOT_VERSION,
            written_by: env!("CARGO_PKG_VERSION").to_string(),
            pid: std::process::id(),
            generation: generation() + 1,
            paused_at_ns: paused_at
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64),
            drain_ns: drain.as_nanos() as u64,
            session: SessionHandover {
                id: session.id.to_string(),
                next_call: session.next_call(),
            },
            containment,
            entries,
            pending_releases: host.services.pending_releases(),
            transport_descriptors,
        })
    }

    /// Undoes what [`Snapshot::take`] did to the host (an upgrade that did not happen):
    /// the descriptors close on `exec` again and the terminals are read again.
    pub async fn take_back(host: &Host) {
        host.services.take_back().await;
        host.services.launch().containment().take_back();
    }

    /// Writes the snapshot to a sealed memfd (only this user's processes that may read
    /// dsh's memory may read it) that stays open across `exec`.
    pub fn write(&self) -> Result<OwnedFd, UpgradeError> {
        use rustix::fs::{MemfdFlags, SealFlags};
        let fd = rustix::fs::memfd_create(
            "dsh-upgrade-snapshot",
            MemfdFlags::ALLOW_SEALING | MemfdFlags::CLOEXEC,
        )
        .map_err(|e| UpgradeError::Write(e.into()))?;
        let mut file = std::fs::File::from(fd);
        serde_json::to_writer(&mut file, self).map_err(|e| UpgradeError::Write(e.into()))?;
        file.flush().map_err(UpgradeError::Write)?;
        file.rewind().map_err(UpgradeError::Write)?;
        let fd = OwnedFd::from(file);
        rustix::fs::fcntl_add_seals(
            &fd,
            SealFlags::WRITE | SealFlags::GROW | SealFlags::SHRINK | SealFlags::SEAL,
        )
        .map_err(|e| UpgradeError::Write(e.into()))?;
        containment::keep_across_exec(fd.as_raw_fd()).map_err(UpgradeError::Write)?;
        Ok(fd)
    }

    /// Reads a snapshot, refusing one of another version.
    pub fn read(mut from: impl Read, fd: &str) -> Result<Snapshot, UpgradeError> {
        let failed = |why: String| UpgradeError::Read {
            fd: fd.to_string(),
            why,
        };
        let mut text = Vec::new();
        from.read_to_end(&mut text)
            .map_err(|e| failed(e.to_string()))?;
        let value: serde_json::Value =
            serde_json::from_slice(&text).map_err(|e| failed(format!("not JSON: {e}")))?;
        match value.get("version").and_then(serde_json::Value::as_u64) {
            Some(version) if version == u64::from(SNAPSHOT_VERSION) => {}
            Some(version) => {
                return Err(failed(format!(
                    "it is version {version}, written by dsh {}; this dsh ({}) reads version {SNAPSHOT_VERSION}",
                    value["written_by"].as_str().unwrap_or("?"),
                    env!("CARGO_PKG_VERSION")
                )))
            }
            None => return Err(failed("it has no version".into())),
        }
        let snapshot: Snapshot =
            serde_json::from_value(value).map_err(|e| failed(e.to_string()))?;
        Services::check_handed(&snapshot.entries).map_err(failed)?;
        Ok(snapshot)
    }

    /// The snapshot handed to this process by the binary it ran before, if any (the
    /// variable is removed, so nothing this process starts sees it).
    pub fn inherited() -> Result<Option<Snapshot>, UpgradeError> {
        let Some(value) = std::env::var_os(SNAPSHOT_FD_VARIABLE) else {
            return Ok(None);
        };
        std::env::remove_var(SNAPSHOT_FD_VARIABLE);
        let text = value.to_string_lossy().into_owned();
        let fd = text
            .parse::<i32>()
            .ok()
            .and_then(containment::inherited_fd)
            .ok_or_else(|| UpgradeError::Read {
                fd: text.clone(),
                why: "not an open descriptor".into(),
            })?;
        let mut file = std::fs::File::from(fd);
        // The check before the exec read the same open file: from the start again.
        file.rewind().map_err(|e| UpgradeError::Read {
            fd: text.clone(),
            why: e.to_string(),
        })?;
        let bytes = file.metadata().map_or(0, |m| m.len());
        let snapshot = Snapshot::read(file, &text)?;
        GENERATION.store(snapshot.generation, std::sync::atomic::Ordering::Relaxed);
        *LAST_UPGRADE.lock().unwrap() = Some(UpgradeFigures {
            snapshot_bytes: bytes,
            paused_at_ns: snapshot.paused_at_ns,
            drain_ns: snapshot.drain_ns,
            resumed_after_ms: None,
        });
        Ok(Some(snapshot))
    }

    /// Adopts what must be adopted before the host starts: the shells (tracked before
    /// the orphan reaper could reap them) and the containment (for the host's to take).
    pub fn adopt(&self) -> AdoptedChildren {
        containment::inherit(self.containment.clone());
        AdoptedChildren(
            self.children()
                .into_iter()
                .map(|pid| (pid, Child::adopt(pid)))
                .collect(),
        )
    }

    /// Rebuilds the capabilities (jobs, terminal sessions, language servers) in `host`
    /// (from a tokio context).
    pub fn restore(&self, host: &Host, mut children: AdoptedChildren) {
        host.services.restore(&self.entries, &mut children.0);
        for (owner, left_ms) in &self.pending_releases {
            host.services.release_owner_after(
                Arc::from(owner.as_str()),
                std::time::Duration::from_millis(*left_ms),
            );
        }
    }

    /// Every descriptor the snapshot names, which the `exec` keeps open: the keeper's
    /// pipe, the PTY masters, the jobs' output pipes, the language servers' pipes, the
    /// transports' (the HTTP listener).
    pub fn descriptors(&self) -> Vec<i32> {
        let mut fds: Vec<i32> = self.containment.keeper.iter().map(|(fd, _)| *fd).collect();
        fds.extend(Services::handed_descriptors(&self.entries));
        fds.extend(&self.transport_descriptors);
        fds
    }

    /// The entry transport `T` handed over (`None`: it had none, as when another
    /// transport served), or why it cannot be read.
    pub fn transport<T: TransportHandover>(&self) -> Result<Option<T>, String> {
        match self.entries.get(T::KEY) {
            None => Ok(None),
            Some(value) => {
                Option::<T>::deserialize(value).map_err(|e| format!("its `{}`: {e}", T::KEY))
            }
        }
    }

    /// The pids of the shells to adopt (before the orphan reaper starts).
    pub fn children(&self) -> Vec<i32> {
        Services::handed_children(&self.entries)
    }
}

/// The shells of a snapshot, adopted as this process's children (see [`Snapshot::adopt`]);
/// those no session takes back are killed when this is dropped.
pub struct AdoptedChildren(std::collections::HashMap<i32, Child>);

/// How many upgrades this process has been through.
static GENERATION: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// What the last upgrade of this process measured.
#[derive(Debug, Clone, Serialize)]
pub struct UpgradeFigures {
    /// The snapshot's size.
    pub snapshot_bytes: u64,
    #[serde(skip)]
    paused_at_ns: u64,
    #[serde(skip)]
    drain_ns: u64,
    /// From the moment the binary before stopped reading requests to the moment this
    /// one read them again, the drain taken out: how long requests waited for the
    /// upgrade itself (`None` until this binary reads again).
    pub resumed_after_ms: Option<f64>,
}

static LAST_UPGRADE: std::sync::Mutex<Option<UpgradeFigures>> = std::sync::Mutex::new(None);

/// The figures of the last upgrade, if this process went through one.
pub fn last_upgrade() -> Option<UpgradeFigures> {
    LAST_UPGRADE.lock().unwrap().clone()
}

/// Marks the moment this binary reads requests again after an upgrade.
pub fn reading_again() {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    if let Some(figures) = LAST_UPGRADE.lock().unwrap().as_mut() {
        if figures.resumed_after_ms.is_none() {
            let waited = now
                .saturating_sub(figures.paused_at_ns)
                .saturating_sub(figures.drain_ns);
            figures.resumed_after_ms = Some(waited as f64 / 1e6);
        }
    }
}

/// How many upgrades this process has been through (0: none).
pub fn generation() -> u32 {
    GENERATION.load(std::sync::atomic::Ordering::Relaxed)
}

/// A request to upgrade the host (from the control socket or SIGUSR2), answered with what
/// happened: `Ok` once the new binary has checked the snapshot and is about to be
/// executed, else why not.
#[derive(Debug)]
pub struct UpgradeAsk {
    /// `--binary`, else the path this process's executable was installed at.
    pub binary: Option<PathBuf>,
    pub reply: tokio::sync::oneshot::Sender<Result<String, String>>,
    /// Closed once the answer has reached the asker (the exec waits for it, a little).
    pub delivered: tokio::sync::oneshot::Receiver<()>,
}

/// What the new binary is asked to check (the value of [`CHECK_VARIABLE`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckMode {
    /// Before the server stops serving: the configuration parses and every plugin named
    /// in [`PLUGINS_VARIABLE`] (those serving now) loads. The slow part, out of the pause.
    Plugins,
    /// After the snapshot is written: it reads it (its version, its whole content).
    Snapshot,
}

/// The plugins the [`CheckMode::Plugins`] check must load, comma-separated.
pub const PLUGINS_VARIABLE: &str = "DSH_UPGRADE_PLUGINS";

/// Runs `binary` with this process's arguments and environment plus `env`, for at most
/// `limit`: it must exit 0; what it printed is the answer, or the reason it refused.
async fn run_check(
    binary: &Path,
    env: Vec<(&'static str, String)>,
    limit: std::time::Duration,
) -> Result<String, UpgradeError> {
    let binary_owned = binary.to_path_buf();
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let ran = tokio::task::spawn_blocking(move || {
        dsh_launch::launcher::run_upgrade_check(&binary_owned, &args, &env, limit)
    })
    .await
    .map_err(|e| UpgradeError::Write(std::io::Error::other(e)))?;
    let refused = |why: String| UpgradeError::Refused {
        binary: binary.to_path_buf(),
        why,
    };
    match ran {
        Ok((true, said)) => Ok(said.trim().to_string()),
        Ok((false, said)) => Err(refused(if said.trim().is_empty() {
            "it exited with an error and said nothing".into()
        } else {
            said.trim().to_string()
        })),
        Err(error) => Err(refused(format!("it did not run: {error}"))),
    }
}

/// The check made while the server still serves: `binary` parses the configuration and
/// loads the plugin set, each of `serving` among what it loads.
pub async fn check_plugins(
    binary: &Path,
    serving: &[String],
    limit: std::time::Duration,
) -> Result<String, UpgradeError> {
    let env = vec![
        (CHECK_VARIABLE, "plugins".to_string()),
        (PLUGINS_VARIABLE, serving.join(",")),
    ];
    run_check(binary, env, limit).await
}

/// The check made once the snapshot is written: `binary` reads it from `snapshot`.
pub async fn check(
    binary: &Path,
    snapshot: &OwnedFd,
    limit: std::time::Duration,
) -> Result<String, UpgradeError> {
    let env = vec![
        (SNAPSHOT_FD_VARIABLE, snapshot.as_raw_fd().to_string()),
        (CHECK_VARIABLE, "snapshot".to_string()),
    ];
    run_check(binary, env, limit).await
}

/// The plugins serving in `host` now, by name.
pub fn serving_plugins(host: &Host) -> Vec<String> {
    host.registry
        .plugins()
        .into_iter()
        .filter(|p| p.status == crate::registry::PluginState::Serving)
        .map(|p| p.name)
        .collect()
}

/// Of `wanted`, the plugins `host` does not serve, each with why (`NAME (REASON)`).
pub fn not_serving(host: &Host, wanted: &[String]) -> Vec<String> {
    let serving = serving_plugins(host);
    let plugins = host.registry.plugins();
    wanted
        .iter()
        .filter(|name| !serving.contains(name))
        .map(|name| {
            let why = plugins
                .iter()
                .find(|p| &p.name == name)
                .and_then(|p| p.reason.clone())
                .unwrap_or_else(|| "not found".into());
            format!("{name} ({why})")
        })
        .collect()
}

/// The next request to upgrade, if requests come at all (`None` waits for ever).
pub async fn next_ask(
    upgrades: Option<&mut tokio::sync::mpsc::Receiver<UpgradeAsk>>,
) -> Option<UpgradeAsk> {
    match upgrades {
        Some(upgrades) => upgrades.recv().await,
        None => std::future::pending().await,
    }
}

/// `Err` naming what keeps this host from being upgraded now, if anything does.
pub fn unblocked(host: &Host) -> Result<(), String> {
    let blockers = blockers(host);
    if blockers.is_empty() {
        Ok(())
    } else {
        Err(format!("no upgrade now: {}", blockers.join("; ")))
    }
}

/// An upgrade ready to execute: the snapshot written and read by the new binary.
#[derive(Debug)]
pub struct Prepared {
    pub binary: PathBuf,
    snapshot: OwnedFd,
    /// The descriptors the snapshot names (kept open only for the `exec`).
    descriptors: Vec<i32>,
}

impl Prepared {
    /// Tells `ask`'s asker the binary is about to be executed, and waits (a little) for
    /// the answer to reach it.
    pub async fn announce(&self, ask: UpgradeAsk) {
        let _ = ask
            .reply
            .send(Ok(format!("executing {}", self.binary.display())));
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), ask.delivered).await;
    }

    /// Executes the binary: returns only if the `exec` failed, the host taken back.
    pub async fn exec(self, host: &Host) {
        // The observers see what they were given: the `exec` ends their tasks.
        host.close_observers().await;
        // The spans ended so far go now: the `exec` ends the thread that batches them.
        crate::traces::flush();
        let error = exec(&self.binary, &self.snapshot, &self.descriptors);
        tracing::error!(%error, "the upgrade's exec failed; this binary serves on");
        host.pipeline.open_observers();
        Snapshot::take_back(host).await;
    }
}

/// Writes `snapshot`, has `binary` read it within `limit`, and gives the upgrade ready
/// to execute; on `Err` the host is taken back.
pub async fn prepare(
    host: &Host,
    snapshot: Result<Snapshot, UpgradeError>,
    binary: PathBuf,
    limit: std::time::Duration,
) -> Result<Prepared, String> {
    let written = snapshot.and_then(|snapshot| Ok((snapshot.write()?, snapshot.descriptors())));
    let checked = match written {
        Ok((snapshot, descriptors)) => check(&binary, &snapshot, limit)
            .await
            .map(|said| (snapshot, descriptors, said)),
        Err(error) => Err(error),
    };
    match checked {
        Ok((snapshot, descriptors, said)) => {
            tracing::info!(binary = %binary.display(), %said, "the new binary takes over");
            Ok(Prepared {
                binary,
                snapshot,
                descriptors,
            })
        }
        Err(error) => {
            Snapshot::take_back(host).await;
            Err(error.to_string())
        }
    }
}

/// Executes `binary` in this process with the snapshot's descriptor, `descriptors`
/// (those the snapshot names) kept open across the `exec`: returns only if the `exec`
/// failed, the descriptors closing on `exec` again. They are kept open only now, after
/// the check: the check's process, which inherits what is open, holds none of them (one
/// holding the keeper's pipe would keep the keeper from seeing dsh die).
fn exec(binary: &Path, snapshot: &OwnedFd, descriptors: &[i32]) -> UpgradeError {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let env = [(SNAPSHOT_FD_VARIABLE, snapshot.as_raw_fd().to_string())];
    let kept = descriptors
        .iter()
        .try_for_each(|fd| containment::keep_across_exec(*fd));
    let source = match kept {
        Ok(()) => dsh_launch::launcher::exec_upgrade(binary, &args, &env),
        Err(error) => error,
    };
    for fd in descriptors {
        containment::close_on_exec(fd);
    }
    UpgradeError::Exec {
        binary: binary.to_path_buf(),
        source,
    }
}

/// What this process was started to check, if it was started only to check it can take
/// over.
pub fn checking() -> Option<CheckMode> {
    match std::env::var_os(CHECK_VARIABLE)?.to_str()? {
        "plugins" => Some(CheckMode::Plugins),
        "snapshot" => Some(CheckMode::Snapshot),
        _ => None,
    }
}

/// Whether the control socket's peer (`pid`, `uid`) may ask for an upgrade: this user,
/// and no process dsh started (a descendant of this process, or one in its cgroup
/// node), so no command a model ran can make dsh execute a binary of its choosing.
pub fn peer_may_upgrade(pid: Option<i32>, uid: u32) -> Result<(), String> {
    let own_uid = crate::session::euid();
    if uid != own_uid {
        return Err(format!(
            "the asking process runs as uid {uid}, not dsh's ({own_uid})"
        ));
    }
    let Some(pid) = pid.filter(|p| *p > 0) else {
        return Err("the asking process cannot be identified".into());
    };
    let own = std::process::id() as i32;
    let mut at = pid;
    for _ in 0..4096 {
        if at == own {
            return Err(format!(
                "the asking process ({pid}) was started by this dsh: a command in one of its runs may not upgrade it"
            ));
        }
        if at <= 1 {
            break;
        }
        match parent_of(at) {
            Some(parent) => at = parent,
            None => {
                return Err(format!(
                    "the asking process ({pid}) is gone or cannot be followed to its ancestors"
                ))
            }
        }
    }
    let node = format!("/dsh-{own}");
    let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    if cgroup
        .lines()
        .any(|line| line.contains(&format!("{node}/")) || line.ends_with(&node))
    {
        return Err(format!(
            "the asking process ({pid}) is in this dsh's cgroup: a command in one of its runs may not upgrade it"
        ));
    }
    Ok(())
}

/// The parent pid of `pid` (from `/proc/PID/stat`).
fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    fields.get(1)?.parse().ok()
}

/// The binary an upgrade executes: `--binary`, else this process's executable as the
/// path on disk names it now (the new release installed over the old one).
pub fn binary_to_execute(asked: Option<&Path>) -> Result<PathBuf, UpgradeError> {
    let path = match asked {
        Some(path) => path.to_path_buf(),
        None => {
            // `/proc/self/exe` names the old file (" (deleted)" once replaced): the path
            // it was installed at is what a new release is at.
            let exe = std::fs::read_link("/proc/self/exe").map_err(UpgradeError::Write)?;
            let text = exe.to_string_lossy();
            PathBuf::from(text.strip_suffix(" (deleted)").unwrap_or(&text))
        }
    };
    if !path.is_absolute() {
        return Err(UpgradeError::Blocked(format!(
            "the binary must be an absolute path, not {}",
            path.display()
        )));
    }
    if !path.is_file() {
        return Err(UpgradeError::Blocked(format!(
            "{} is not a file",
            path.display()
        )));
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A snapshot as this release writes it: the next release must read it (or refuse
    /// it by its version, never misread it). Kept as a file so a change of the format
    /// shows up as a change of this file.
    const VERSION_1: &str = include_str!("../../tests/fixtures/upgrade-snapshot-v1.json");

    #[test]
    fn a_snapshot_of_this_version_is_read_and_another_version_is_refused() {
        let snapshot = Snapshot::read(VERSION_1.as_bytes(), "test").unwrap();
        assert_eq!(snapshot.version, 1);
        let sessions = &snapshot.entries["terminals"]["sessions"];
        assert_eq!(sessions.as_array().map(Vec::len), Some(1));
        assert_eq!(sessions[0]["id"], "term-1");
        assert_eq!(snapshot.children(), vec![4242, 4250, 4260]);
        assert_eq!(
            snapshot.entries["jobs"]["jobs"].as_array().map(Vec::len),
            Some(2)
        );
        assert!(snapshot.entries["stdio"].is_object());
        let newer = VERSION_1.replacen("\"version\": 1", "\"version\": 2", 1);
        let error = Snapshot::read(newer.as_bytes(), "test")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("version 2") && error.contains("reads version 1"),
            "{error}"
        );
        let error = Snapshot::read(&b"{\"no\":1}"[..], "test")
            .unwrap_err()
            .to_string();
        assert!(error.contains("no version"), "{error}");
    }

    #[test]
    fn a_snapshot_written_is_read_back_from_its_memfd() {
        let snapshot = Snapshot::read(VERSION_1.as_bytes(), "test").unwrap();
        let fd = snapshot.write().unwrap();
        let again = Snapshot::read(std::fs::File::from(fd), "memfd").unwrap();
        assert_eq!(again.session.id, snapshot.session.id);
        assert_eq!(again.entries, snapshot.entries);
        assert_eq!(
            again.entries["terminals"]["sessions"][0]["scrollback"],
            snapshot.entries["terminals"]["sessions"][0]["scrollback"]
        );
    }

    #[test]
    fn a_descendant_of_this_process_may_not_ask() {
        let uid = crate::session::euid();
        // This process itself is "started by this dsh" as far as the walk goes.
        assert!(peer_may_upgrade(Some(std::process::id() as i32), uid).is_err());
        assert!(peer_may_upgrade(Some(std::process::id() as i32), uid + 1)
            .unwrap_err()
            .contains("uid"));
        assert!(peer_may_upgrade(None, uid).is_err());
        // Our parent is not our descendant.
        let parent = parent_of(std::process::id() as i32).unwrap();
        assert_eq!(peer_may_upgrade(Some(parent), uid), Ok(()));
    }
}
