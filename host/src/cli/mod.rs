//! The `dsh` commands, one file each, and what they share: the global options (the
//! configuration file, the plugin directory, the state directory, the workspace), a
//! host started from them, the running server a command asks, the signals that end a
//! command. Part of the binary: errors here are `anyhow`, output goes to stdout.

pub mod attach;
pub mod call;
pub mod plugin;
pub mod plugin_new;
pub mod plugins;
pub mod print;
pub mod serve;
pub mod stats;
pub mod tools;
pub mod undo;
pub mod upgrade;

use std::path::{Path, PathBuf};

use anyhow::Context;

use dsh::config::Config;
use dsh::control::{running_servers, RunningServer};
use dsh::host::{Host, HostOptions};

/// The options every command takes.
#[derive(clap::Args)]
pub struct Globals {
    /// Configuration file [default: ./dsh.toml when it exists]
    #[arg(long, global = true, env = "DSH_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// Directory of plugin `.wasm` files; `NAME.wasm` overrides the embedded plugin NAME
    #[arg(long, global = true, env = "DSH_PLUGINS", value_name = "DIR")]
    plugins: Option<PathBuf>,
    /// Where sessions keep their event logs and spill files, the compile cache and the
    /// control sockets; private (0700), refused when another user owns it or others can
    /// write to it [default: $XDG_STATE_HOME/dsh, else ~/.local/state/dsh, else
    /// $XDG_RUNTIME_DIR/dsh, else $TMPDIR/dsh-UID (/tmp/dsh-UID when TMPDIR is unset)]
    #[arg(long, global = true, env = "DSH_STATE_DIR", value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// The session workspace: commands run here and relative paths resolve against it
    /// [default: the current directory]
    #[arg(long, global = true, env = "DSH_WORKDIR", value_name = "DIR")]
    workdir: Option<PathBuf>,
}

impl Globals {
    /// The configuration file in use: `--config`, else `./dsh.toml` when it exists.
    pub fn config_path(&self) -> Option<PathBuf> {
        match &self.config {
            Some(path) => Some(path.clone()),
            None if Path::new("dsh.toml").exists() => Some(PathBuf::from("dsh.toml")),
            None => None,
        }
    }

    /// The workspace named (`--workdir`, DSH_WORKDIR), when one is.
    pub fn workdir(&self) -> Option<std::path::PathBuf> {
        self.workdir.clone()
    }

    /// The plugin directory, when one is given.
    pub fn plugins_dir(&self) -> Option<&Path> {
        self.plugins.as_deref()
    }

    pub fn state_dir(&self) -> PathBuf {
        self.state_dir
            .clone()
            .unwrap_or_else(dsh::session::default_state_dir)
    }

    /// A host as these options describe it: its configuration loaded, its plugins
    /// loaded, its session begun.
    pub async fn start(&self) -> anyhow::Result<Host> {
        let host = self.start_loading().await?;
        host.loaded().await;
        Ok(host)
    }

    /// A host as [`Globals::start`] makes it, returned while its plugins still load
    /// ([`Host::ready`] and [`Host::loaded`] wait for them): a server answers a client at
    /// once.
    pub async fn start_loading(&self) -> anyhow::Result<Host> {
        self.start_loading_resuming(None).await
    }

    /// [`Globals::start_loading`], going on with the session `resume` (an upgrade)
    /// instead of a new one.
    pub async fn start_loading_resuming(
        &self,
        resume: Option<dsh::session::SessionHandover>,
    ) -> anyhow::Result<Host> {
        let config_file = self.config_path();
        let config = match &config_file {
            Some(path) => Config::load(path)?,
            None => Config::default(),
        };
        let workdir = match &self.workdir {
            Some(dir) => dir.clone(),
            None => std::env::current_dir().context("cannot read the current directory")?,
        };
        let workdir = std::fs::canonicalize(&workdir)
            .with_context(|| format!("workspace {} does not exist", workdir.display()))?;
        let options = HostOptions {
            config,
            plugins_dir: self.plugins.clone(),
            state_dir: self.state_dir(),
            workdir,
            config_file,
            resume,
        };
        Ok(Host::start(options).await?)
    }

    /// The running server a command should ask: the one named by pid, or the only one
    /// (an error when several run and none is named).
    pub fn chosen_server(&self, wanted: Option<u32>) -> anyhow::Result<Option<RunningServer>> {
        let state_dir = self.state_dir();
        let servers = running_servers(&state_dir);
        match wanted {
            Some(pid) => servers
                .into_iter()
                .find(|server| server.pid == pid)
                .map(Some)
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "no dsh serve with pid {pid} is running on {}",
                        state_dir.display()
                    )
                }),
            None if servers.len() > 1 => {
                let pids: Vec<String> = servers.iter().map(|s| s.pid.to_string()).collect();
                anyhow::bail!(
                    "{} dsh servers are running on {} (pids {}); choose one with --server PID",
                    servers.len(),
                    state_dir.display(),
                    pids.join(", ")
                )
            }
            None => Ok(servers.into_iter().next()),
        }
    }
}

/// Asks a running server `request` (off the async threads: the client blocks).
pub async fn ask(
    server: RunningServer,
    request: &'static str,
) -> anyhow::Result<serde_json::Value> {
    Ok(tokio::task::spawn_blocking(move || dsh::control::ask(&server, request)).await??)
}

/// The first of SIGINT, SIGTERM and SIGHUP, by name (a closed terminal ends dsh as
/// gracefully as a TERM does).
pub async fn shutdown_signal() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut interrupt), Ok(mut terminate), Ok(mut hangup)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
        signal(SignalKind::hangup()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = interrupt.recv() => "SIGINT",
        _ = terminate.recv() => "SIGTERM",
        _ = hangup.recv() => "SIGHUP",
    }
}
