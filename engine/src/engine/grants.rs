//! What a plugin may reach, resolved from its `dsh.toml` entry when it loads: the host
//! interfaces it may import (checked against what the component imports, so an import
//! without its grant refuses the load), and the WASI context every call of it gets: the
//! granted directories, environment variables and network addresses. Everything else is
//! denied. No granted directory may overlap dsh's state directory (event logs, spill
//! files, the compile cache and its key, control sockets). The `files` grant also maps
//! the session workspace and every extra root (`[files] extra_roots`) into the plugin,
//! read-only, under the same rule; when one of those cannot be mapped, none is, and the
//! plugin's grants say why (`Grants::withheld`): a tool plugin then stays listed and each
//! of its calls answers `DENIED` with that reason and its fix (`engine::plugin`).
//!
//! The network is granted three ways: `network` (alias `connect`) lists the addresses a
//! plugin may connect or send datagrams to, `bind` the ones it may bind and listen on,
//! and name lookups (`wasi:sockets/ip-name-lookup`) are allowed only for the host names
//! those grants name, or any name with `dns = true`. The lookup interface is linked here
//! ([`add_name_lookup_to_linker`]) over wasmtime-wasi's own so that a name not granted is
//! refused (`access-denied`) before any resolver is asked. Host names in grants are
//! resolved when a call checks an address against them, and the answer is kept for
//! [`NAME_TTL`].

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wasmtime::component::{HasData, Linker, Resource};
use wasmtime_wasi::p2::bindings::sockets::ip_name_lookup::{
    self, Host as NameLookupHost, HostResolveAddressStream, ResolveAddressStream,
};
use wasmtime_wasi::p2::bindings::sockets::network::{
    self, ErrorCode as SocketErrorCode, IpAddress, Network,
};
use wasmtime_wasi::p2::SocketError;
use wasmtime_wasi::sockets::{SocketAddrUse, WasiSocketsCtxView};
use wasmtime_wasi::{FsPerms, WasiCtx};

/// How long a grant's host name resolution is reused before it is looked up again.
pub const NAME_TTL: Duration = Duration::from_secs(5);

use super::plugin::PluginSource;
use crate::config::plugin::{AddressPattern, FsMode, ParsedPattern, PluginConfig};
use crate::services::MappedRoot;

/// The WIT package whose interfaces need grants (`types` holds only types and needs none).
const HOST_PACKAGE: &str = "dsh:plugin/";

/// Why a plugin's grants could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum GrantError {
    #[error("granted directory {path}: {source}")]
    Dir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "granted directory {path} ({granted}) {overlap} dsh's state directory {state_dir}: \
         a plugin may not reach the event logs, spill files, compile cache or control sockets"
    )]
    StateDir {
        path: PathBuf,
        granted: PathBuf,
        overlap: &'static str,
        state_dir: PathBuf,
    },
    #[error(
        "the `files` grant maps the session workspace {workspace} into the plugin \
         (read-only), and the workspace {overlap} dsh's state directory {state_dir}: a \
         plugin may not reach the event logs, spill files, compile cache or control \
         sockets. Move the state directory out of the workspace (`--state-dir DIR` or \
         `DSH_STATE_DIR`; by default it is `$XDG_STATE_HOME/dsh`, so setting \
         XDG_STATE_HOME elsewhere also does), or serve another workspace"
    )]
    WorkspaceStateDir {
        workspace: PathBuf,
        overlap: &'static str,
        state_dir: PathBuf,
    },
    #[error("the session workspace {path}: {source}")]
    Workspace {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "the extra root {path} ([files] extra_roots in dsh.toml): {source}; the `files` \
         grant maps every extra root into the plugin, so each must be an existing \
         directory, named by its absolute path"
    )]
    ExtraRoot {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "the `files` grant maps the extra root {root} ([files] extra_roots in dsh.toml) \
         into the plugin (read-only), and that root {overlap} dsh's state directory \
         {state_dir}: a plugin may not reach the event logs, spill files, compile cache or \
         control sockets. Take it out of [files] extra_roots (or name a directory that \
         does not hold the state directory), or move the state directory (`--state-dir \
         DIR` or `DSH_STATE_DIR`; by default it is `$XDG_STATE_HOME/dsh`)"
    )]
    ExtraRootStateDir {
        root: PathBuf,
        overlap: &'static str,
        state_dir: PathBuf,
    },
    #[error("network grant {pattern:?}: {message}")]
    Network { pattern: String, message: String },
}

/// The interfaces an embedded plugin is granted when `dsh.toml` says nothing.
fn embedded_interfaces(name: &str) -> &'static [&'static str] {
    crate::engine::embedded::set::find(name).map_or(&[], |plugin| plugin.interfaces)
}

/// A directory mapped into the plugin.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct GrantedDir {
    /// The host directory, symlinks resolved.
    pub path: PathBuf,
    /// Where the plugin sees it.
    pub guest: String,
    pub mode: FsMode,
}

/// A plugin's effective grants, as `dsh plugins --grants` shows them.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct GrantsView {
    pub interfaces: Vec<String>,
    /// Keys granted; only those set in the host are visible.
    pub env: Vec<String>,
    /// `HOST:PORT` patterns it may connect (and send datagrams) to.
    pub network: Vec<String>,
    /// `HOST:PORT` patterns it may bind and listen on.
    #[serde(default)]
    pub bind: Vec<String>,
    /// Host names it may look up: those its patterns name, or `*` for any (`dns = true`).
    #[serde(default)]
    pub dns: Vec<String>,
    pub fs: Vec<GrantedDir>,
}

/// A plugin's effective grants.
#[derive(Debug, Clone)]
pub struct Grants {
    pub view: GrantsView,
    /// Why the directories a granted capability maps in (`files`: the workspace, the
    /// extra roots) could not be given, and how to fix it: a tool plugin then loads
    /// without them and answers every call with this (`DENIED`), so the model is told
    /// why; a guard or a filter is refused.
    pub withheld: Option<String>,
    /// Whether a granted capability maps directories in: the plugin's file operations
    /// then run on the calling thread (see [`Grants::wasi_ctx`]).
    maps_roots: bool,
    env: Vec<(String, String)>,
    network: Arc<NetworkGrants>,
}

/// The network a plugin may reach, checked on every socket address it uses.
#[derive(Debug, Default)]
struct NetworkGrants {
    connect: Vec<GrantPattern>,
    bind: Vec<GrantPattern>,
    names: Arc<NamePolicy>,
}

/// A network grant as configured: an address pattern, or a host name resolved when used.
#[derive(Debug)]
enum GrantPattern {
    Address(AddressPattern),
    Name {
        host: String,
        port: Option<u16>,
        /// The last resolution and when it was made.
        cache: Mutex<Option<(Instant, Vec<IpAddr>)>>,
    },
}

impl GrantPattern {
    fn new(text: &str) -> Result<GrantPattern, GrantError> {
        match AddressPattern::parse(text).map_err(|message| GrantError::Network {
            pattern: text.to_string(),
            message,
        })? {
            ParsedPattern::Resolved(pattern) => Ok(GrantPattern::Address(pattern)),
            ParsedPattern::Name { host, port } => Ok(GrantPattern::Name {
                host: normalize_name(&host),
                port,
                cache: Mutex::new(None),
            }),
        }
    }

    /// True when `addr` is inside this grant; a host name is resolved (or its resolution
    /// of the last [`NAME_TTL`] reused) first. A name that does not resolve matches nothing.
    async fn matches(&self, addr: SocketAddr) -> bool {
        let (host, port, cache) = match self {
            GrantPattern::Address(pattern) => return pattern.matches(addr),
            GrantPattern::Name { host, port, cache } => (host, *port, cache),
        };
        if port.is_some_and(|port| port != addr.port()) {
            return false;
        }
        let fresh = cache.lock().ok().and_then(|cached| match &*cached {
            Some((at, ips)) if at.elapsed() < NAME_TTL => Some(ips.clone()),
            _ => None,
        });
        let ips = match fresh {
            Some(ips) => ips,
            None => {
                let ips: Vec<IpAddr> = match tokio::net::lookup_host((host.as_str(), 0)).await {
                    Ok(addrs) => addrs.map(|a| a.ip().to_canonical()).collect(),
                    Err(error) => {
                        tracing::debug!(%host, %error, "a granted host name does not resolve");
                        Vec::new()
                    }
                };
                if let Ok(mut cached) = cache.lock() {
                    *cached = Some((Instant::now(), ips.clone()));
                }
                ips
            }
        };
        let ip = addr.ip().to_canonical();
        ips.contains(&ip)
    }
}

impl NetworkGrants {
    /// Whether `addr` may be used for `used_for`. Connect grants cover connecting,
    /// sending and receiving datagrams to and from the address, and the wildcard bind
    /// the OS does before a connect; bind grants cover binding and listening there, and
    /// accepting or receiving from any peer.
    async fn allows(&self, addr: SocketAddr, used_for: SocketAddrUse) -> bool {
        match used_for {
            SocketAddrUse::TcpBind | SocketAddrUse::UdpBind => {
                (implicit_bind(addr, used_for) && !self.connect.is_empty())
                    || any_matches(&self.bind, addr).await
            }
            SocketAddrUse::TcpListen => any_matches(&self.bind, addr).await,
            SocketAddrUse::TcpAccept => !self.bind.is_empty(),
            SocketAddrUse::TcpConnect | SocketAddrUse::UdpSend => {
                any_matches(&self.connect, addr).await
            }
            SocketAddrUse::UdpReceive => {
                !self.bind.is_empty() || any_matches(&self.connect, addr).await
            }
        }
    }
}

/// True when one of `patterns` matches `addr`.
async fn any_matches(patterns: &[GrantPattern], addr: SocketAddr) -> bool {
    for pattern in patterns {
        if pattern.matches(addr).await {
            return true;
        }
    }
    false
}

/// The host names a plugin may look up.
#[derive(Debug, Default)]
pub struct NamePolicy {
    /// `dns = true`: any name.
    any: bool,
    names: BTreeSet<String>,
}

impl NamePolicy {
    /// No lookups at all.
    pub fn none() -> Arc<NamePolicy> {
        Arc::new(NamePolicy::default())
    }

    /// True when `name` may be handed to a resolver: a granted name (case and a final dot
    /// ignored), any name under `dns = true`, or an IP address literal (no resolver sees it).
    pub fn allows(&self, name: &str) -> bool {
        let literal = name.trim_start_matches('[').trim_end_matches(']');
        self.any || literal.parse::<IpAddr>().is_ok() || self.names.contains(&normalize_name(name))
    }
}

/// A host name as compared: lower case, without a final dot.
fn normalize_name(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// The `wasi:sockets/ip-name-lookup` host of one call: wasmtime-wasi's, behind the call's
/// [`NamePolicy`].
pub struct GuardedNameLookup<'a> {
    pub sockets: WasiSocketsCtxView<'a>,
    pub names: &'a NamePolicy,
}

/// [`HasData`] for [`GuardedNameLookup`].
pub struct GuardedNameLookupData;

impl HasData for GuardedNameLookupData {
    type Data<'a> = GuardedNameLookup<'a>;
}

impl network::Host for GuardedNameLookup<'_> {
    fn convert_error_code(&mut self, error: SocketError) -> wasmtime::Result<SocketErrorCode> {
        network::Host::convert_error_code(&mut self.sockets, error)
    }

    fn network_error_code(
        &mut self,
        error: Resource<network::Error>,
    ) -> wasmtime::Result<Option<SocketErrorCode>> {
        network::Host::network_error_code(&mut self.sockets, error)
    }
}

impl network::HostNetwork for GuardedNameLookup<'_> {
    fn drop(&mut self, this: Resource<Network>) -> wasmtime::Result<()> {
        network::HostNetwork::drop(&mut self.sockets, this)
    }
}

impl NameLookupHost for GuardedNameLookup<'_> {
    fn resolve_addresses(
        &mut self,
        network: Resource<Network>,
        name: String,
    ) -> Result<Resource<ResolveAddressStream>, SocketError> {
        if !self.names.allows(&name) {
            tracing::debug!(%name, "refused a lookup of a name not granted");
            return Err(SocketErrorCode::AccessDenied.into());
        }
        NameLookupHost::resolve_addresses(&mut self.sockets, network, name)
    }
}

impl HostResolveAddressStream for GuardedNameLookup<'_> {
    fn resolve_next_address(
        &mut self,
        stream: Resource<ResolveAddressStream>,
    ) -> Result<Option<IpAddress>, SocketError> {
        HostResolveAddressStream::resolve_next_address(&mut self.sockets, stream)
    }

    fn subscribe(
        &mut self,
        stream: Resource<ResolveAddressStream>,
    ) -> wasmtime::Result<Resource<wasmtime_wasi::p2::DynPollable>> {
        HostResolveAddressStream::subscribe(&mut self.sockets, stream)
    }

    fn drop(&mut self, stream: Resource<ResolveAddressStream>) -> wasmtime::Result<()> {
        HostResolveAddressStream::drop(&mut self.sockets, stream)
    }
}

/// Links `wasi:sockets/ip-name-lookup` over the one `wasmtime_wasi::p2::add_to_linker_async`
/// put in `linker`, so every lookup goes through the call's [`NamePolicy`] (`get` gives it).
pub fn add_name_lookup_to_linker<T: Send + 'static>(
    linker: &mut Linker<T>,
    get: fn(&mut T) -> GuardedNameLookup<'_>,
) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let linked = ip_name_lookup::add_to_linker::<T, GuardedNameLookupData>(linker, get);
    linker.allow_shadowing(false);
    linked
}

impl Grants {
    /// Resolves `config`'s grants for the plugin `name`: directories must exist (their
    /// symlinks are resolved now) and stay clear of `state_dir`; network patterns are
    /// parsed (host names are looked up when a call uses them, see [`NAME_TTL`]). A
    /// plugin granted an interface whose capability maps directories in
    /// (`mapped_roots`: `files` maps the session workspace and the extra roots) also
    /// gets those, read-only at their own paths, under the same state directory rule;
    /// when they cannot be given (the workspace holds the state directory, a root is
    /// missing, ...) the plugin gets none of them and `withheld` says why.
    pub async fn resolve(
        name: &str,
        source: &PluginSource,
        config: &PluginConfig,
        state_dir: Option<&Path>,
        mapped_roots: impl Fn(&str) -> Vec<MappedRoot>,
    ) -> Result<Grants, GrantError> {
        let interfaces: BTreeSet<String> = match (&config.interfaces, source) {
            (Some(granted), _) => granted.iter().cloned().collect(),
            (None, PluginSource::Embedded) => embedded_interfaces(name)
                .iter()
                .map(|s| s.to_string())
                .collect(),
            (None, PluginSource::Path(_)) => BTreeSet::new(),
        };
        let env = config
            .env
            .iter()
            .filter_map(|key| std::env::var(key).ok().map(|value| (key.clone(), value)))
            .collect();
        let mut fs = Vec::with_capacity(config.fs.len());
        for grant in &config.fs {
            let path = std::fs::canonicalize(&grant.path)
                .and_then(|path| match path.is_dir() {
                    true => Ok(path),
                    false => Err(std::io::Error::other("not a directory")),
                })
                .map_err(|source| GrantError::Dir {
                    path: grant.path.clone(),
                    source,
                })?;
            if let Some(state_dir) = state_dir {
                check_state_dir_overlap(&grant.path, &path, state_dir)?;
            }
            let guest = grant
                .guest
                .clone()
                .unwrap_or_else(|| grant.path.display().to_string());
            fs.push(GrantedDir {
                path,
                guest,
                mode: grant.mode,
            });
        }
        let mut withheld = None;
        let roots: Vec<MappedRoot> = interfaces
            .iter()
            .flat_map(|interface| mapped_roots(interface))
            .collect();
        if !roots.is_empty() {
            let reach = || -> Result<Vec<GrantedDir>, GrantError> {
                let mut reach = Vec::new();
                for root in &roots {
                    match root {
                        MappedRoot::Workspace(workspace) => {
                            reach.extend(workspace_dir(workspace, state_dir)?)
                        }
                        MappedRoot::ExtraRoot { configured, shown } => {
                            extra_root_dirs(configured, shown, state_dir, &mut reach)?
                        }
                    }
                }
                Ok(reach)
            };
            match reach() {
                Ok(reach) => {
                    for dir in reach {
                        // A directory granted at the same guest path is the operator's word.
                        if !fs.iter().any(|granted| granted.guest == dir.guest) {
                            fs.push(dir);
                        }
                    }
                }
                Err(error) => withheld = Some(error.to_string()),
            }
        }
        let network = NetworkGrants::new(config)?;
        let dns = match network.names.any {
            true => vec!["*".to_string()],
            false => network.names.names.iter().cloned().collect(),
        };
        Ok(Grants {
            view: GrantsView {
                interfaces: interfaces.into_iter().collect(),
                env: config.env.clone(),
                network: config.network.clone(),
                bind: config.bind.clone(),
                dns,
                fs,
            },
            withheld,
            maps_roots: !roots.is_empty(),
            env,
            network: Arc::new(network),
        })
    }

    /// Checks a component's imports against the granted interfaces. The error names
    /// every missing grant and the `dsh.toml` lines that would grant them.
    pub fn check_imports(&self, plugin: &str, imports: &[String]) -> Result<(), String> {
        let needed: BTreeSet<&str> = imports
            .iter()
            .filter_map(|import| import.strip_prefix(HOST_PACKAGE))
            .map(|rest| rest.split('@').next().unwrap_or(rest))
            .filter(|interface| {
                // `next` is the middleware world's own (the rest of its call), no grant.
                !matches!(*interface, "types" | "next")
                    && crate::services::capabilities::needs_grant(interface)
            })
            .collect();
        let missing: Vec<&str> = needed
            .iter()
            .copied()
            .filter(|interface| !self.view.interfaces.iter().any(|g| g == interface))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let mut all = needed.clone();
        all.extend(self.view.interfaces.iter().map(String::as_str));
        let all: Vec<String> = all
            .iter()
            .map(|interface| format!("{interface:?}"))
            .collect();
        Err(format!(
            "it imports the host interface{} {} without a grant; to grant {}, put this in dsh.toml:\n  [plugins.{plugin}]\n  interfaces = [{}]",
            if missing.len() == 1 { "" } else { "s" },
            missing
                .iter()
                .map(|m| format!("`{HOST_PACKAGE}{m}`"))
                .collect::<Vec<_>>()
                .join(", "),
            if missing.len() == 1 { "it" } else { "them" },
            all.join(", ")
        ))
    }

    /// The WASI context of one call: the granted directories, environment variables and
    /// addresses, and nothing else (no arguments, no stdio, no inherited environment).
    pub fn wasi_ctx(&self) -> WasiCtx {
        let mut builder = WasiCtx::builder();
        // The file tools' file operations run on the calling thread, not each on tokio's
        // blocking pool: the guest already holds this thread while it runs, and a search
        // over thousands of files is several times faster (this must come before the
        // preopens, which read it). Only for a plugin granted a capability that maps
        // directories in (`files`): one that opened a FIFO would hold the thread until a
        // writer came (the shipped tools never open anything but regular files, and the
        // patched WASI open refuses one), so other granted directories keep the pool.
        builder.allow_blocking_current_thread(self.maps_roots);
        for (key, value) in &self.env {
            builder.env(key, value);
        }
        for dir in &self.view.fs {
            let perms = match dir.mode {
                FsMode::ReadOnly => FsPerms::ReadOnly,
                FsMode::ReadWrite => FsPerms::ReadWrite,
            };
            if let Err(error) = builder.preopened_dir(&dir.path, &dir.guest, perms) {
                tracing::warn!(dir = %dir.path.display(), %error, "cannot open a granted directory for this call");
            }
        }
        let network = &self.network;
        if !network.connect.is_empty() || !network.bind.is_empty() {
            let network = self.network.clone();
            builder
                .allow_tcp(true)
                .allow_udp(true)
                .socket_addr_check(move |addr, used_for| {
                    let network = network.clone();
                    Box::pin(async move { network.allows(addr, used_for).await })
                });
        }
        // Every lookup passes [`GuardedNameLookup`] first, which refuses names not granted.
        builder.allow_ip_name_lookup(true);
        builder.build()
    }

    /// The names this plugin's calls may look up (see [`add_name_lookup_to_linker`]).
    pub fn name_policy(&self) -> Arc<NamePolicy> {
        self.network.names.clone()
    }
}

impl NetworkGrants {
    /// Parses `config`'s `network`, `bind` and `dns` grants.
    fn new(config: &PluginConfig) -> Result<NetworkGrants, GrantError> {
        let parse = |texts: &[String]| -> Result<Vec<GrantPattern>, GrantError> {
            texts.iter().map(|text| GrantPattern::new(text)).collect()
        };
        let (connect, bind) = (parse(&config.network)?, parse(&config.bind)?);
        let names = connect
            .iter()
            .chain(&bind)
            .filter_map(|pattern| match pattern {
                GrantPattern::Name { host, .. } => Some(host.clone()),
                GrantPattern::Address(_) => None,
            })
            .collect();
        Ok(NetworkGrants {
            connect,
            bind,
            names: Arc::new(NamePolicy {
                any: config.dns,
                names,
            }),
        })
    }
}

/// The session workspace as a `files` plugin sees it: read-only, at the path the calls'
/// context names (symlinks resolved on the host side). Refused when it overlaps the
/// state directory. `None`: the workspace does not exist (nothing to map).
fn workspace_dir(
    workspace: &Path,
    state_dir: Option<&Path>,
) -> Result<Option<GrantedDir>, GrantError> {
    let path = match std::fs::canonicalize(workspace) {
        Ok(path) => path,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(GrantError::Workspace {
                path: workspace.to_path_buf(),
                source,
            })
        }
    };
    if let Some(state_dir) = state_dir {
        check_state_dir_overlap(workspace, &path, state_dir).map_err(|error| match error {
            GrantError::StateDir {
                overlap, state_dir, ..
            } => GrantError::WorkspaceStateDir {
                workspace: path.clone(),
                overlap,
                state_dir,
            },
            other => other,
        })?;
    }
    Ok(Some(GrantedDir {
        path,
        guest: workspace.display().to_string(),
        mode: FsMode::ReadOnly,
    }))
}

/// An extra root as a plugin granted `files` sees it (into `dirs`): read-only, at its
/// canonical path (and at `shown`, its path as configured, when a link leads there), so
/// that the plugin's reads and walks find every path the host's files service takes
/// (writes go through the host only). It must be an absolute path to an existing
/// directory clear of the state directory.
fn extra_root_dirs(
    configured: &Path,
    shown: &Path,
    state_dir: Option<&Path>,
    dirs: &mut Vec<GrantedDir>,
) -> Result<(), GrantError> {
    let refused = |source| GrantError::ExtraRoot {
        path: configured.to_path_buf(),
        source,
    };
    if !configured.is_absolute() {
        return Err(refused(std::io::Error::other("not an absolute path")));
    }
    let path = std::fs::canonicalize(configured).map_err(refused)?;
    if !path.is_dir() {
        return Err(refused(std::io::Error::other("not a directory")));
    }
    if let Some(state_dir) = state_dir {
        check_state_dir_overlap(configured, &path, state_dir).map_err(|error| match error {
            GrantError::StateDir {
                overlap, state_dir, ..
            } => GrantError::ExtraRootStateDir {
                root: configured.to_path_buf(),
                overlap,
                state_dir,
            },
            other => other,
        })?;
    }
    for guest in [path.clone(), shown.to_path_buf()] {
        let guest = guest.display().to_string();
        if !dirs.iter().any(|dir: &GrantedDir| dir.guest == guest) {
            dirs.push(GrantedDir {
                path: path.clone(),
                guest,
                mode: FsMode::ReadOnly,
            });
        }
    }
    Ok(())
}

/// Refuses a granted directory (`granted`, canonical; `path` as configured) that is,
/// is inside, or contains the state directory (canonicalized here; one that does not
/// exist is compared as given).
fn check_state_dir_overlap(
    path: &Path,
    granted: &Path,
    state_dir: &Path,
) -> Result<(), GrantError> {
    let state_dir = std::fs::canonicalize(state_dir).unwrap_or_else(|_| state_dir.to_path_buf());
    let overlap = if granted == state_dir {
        "is"
    } else if granted.starts_with(&state_dir) {
        "is inside"
    } else if state_dir.starts_with(granted) {
        "contains"
    } else {
        return Ok(());
    };
    Err(GrantError::StateDir {
        path: path.to_path_buf(),
        granted: granted.to_path_buf(),
        overlap,
        state_dir,
    })
}

/// The bind the OS does before a connect: the wildcard address, any port. It reaches
/// nothing by itself.
fn implicit_bind(addr: SocketAddr, used_for: SocketAddrUse) -> bool {
    matches!(used_for, SocketAddrUse::TcpBind | SocketAddrUse::UdpBind)
        && addr.ip().is_unspecified()
        && addr.port() == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(text: &str) -> SocketAddr {
        text.parse().unwrap()
    }

    #[test]
    fn an_import_without_its_grant_names_the_lines_that_grant_it() {
        let grants = Grants {
            view: GrantsView {
                interfaces: vec!["log".into()],
                ..GrantsView::default()
            },
            withheld: None,
            maps_roots: false,
            env: Vec::new(),
            network: Arc::default(),
        };
        let imports = [
            "dsh:plugin/types@0.1.0".to_string(),
            "dsh:plugin/log@0.1.0".to_string(),
            "dsh:plugin/process@0.1.0".to_string(),
            "wasi:io/streams@0.2.6".to_string(),
        ];
        let error = grants.check_imports("mine", &imports).unwrap_err();
        assert!(error.contains("`dsh:plugin/process`"), "{error}");
        assert!(
            error.contains("[plugins.mine]\n  interfaces = [\"log\", \"process\"]"),
            "{error}"
        );
        assert!(grants.check_imports("mine", &imports[..2]).is_ok());
    }

    #[test]
    fn progress_needs_no_grant_and_log_does_in_every_contract_version() {
        let granted = |interfaces: &[&str]| Grants {
            view: GrantsView {
                interfaces: interfaces.iter().map(|i| i.to_string()).collect(),
                ..GrantsView::default()
            },
            withheld: None,
            maps_roots: false,
            env: Vec::new(),
            network: Arc::default(),
        };
        let imports = [
            "dsh:plugin/types@0.2.0".to_string(),
            "dsh:plugin/log@0.2.0".to_string(),
            "dsh:plugin/progress@0.2.0".to_string(),
        ];
        // Progress reaches only the call's own caller: importing it needs no grant.
        assert!(granted(&["log"]).check_imports("slow", &imports).is_ok());
        let error = granted(&[]).check_imports("slow", &imports).unwrap_err();
        assert!(error.contains("`dsh:plugin/log`"), "{error}");
        assert!(!error.contains("`dsh:plugin/progress`"), "{error}");
        assert!(error.contains("interfaces = [\"log\"]"), "{error}");
        // The same grant covers a 0.1.0 plugin's `log` import.
        assert!(granted(&["log"])
            .check_imports("old", &["dsh:plugin/log@0.1.0".to_string()])
            .is_ok());
    }

    #[test]
    fn a_grant_overlapping_the_state_dir_is_refused_either_way() {
        let root = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(root.path()).unwrap();
        let state = root.join("state");
        let inside = state.join("sessions");
        let beside = root.join("work");
        for dir in [&inside, &beside] {
            std::fs::create_dir_all(dir).unwrap();
        }
        // Through a symlink, so only canonical paths show the overlap.
        let link = root.join("link");
        std::os::unix::fs::symlink(&state, &link).unwrap();
        for (granted, overlap) in [(&inside, "is inside"), (&root, "contains"), (&state, "is")] {
            let error = check_state_dir_overlap(granted, granted, &link).unwrap_err();
            let text = error.to_string();
            assert!(text.contains(overlap), "{text}");
            assert!(text.contains(&state.display().to_string()), "{text}");
        }
        assert!(check_state_dir_overlap(&beside, &beside, &link).is_ok());
        // A sibling whose name merely starts the same is no overlap.
        let sibling = root.join("state2");
        std::fs::create_dir(&sibling).unwrap();
        assert!(check_state_dir_overlap(&sibling, &sibling, &state).is_ok());
    }

    #[tokio::test]
    async fn an_embedded_plugin_gets_its_interfaces_and_a_directory_version_of_it_none() {
        let default = PluginConfig::default();
        let interfaces = |name: &'static str, source: PluginSource| {
            let default = default.clone();
            async move {
                Grants::resolve(name, &source, &default, None, |_| Vec::new())
                    .await
                    .unwrap()
                    .view
                    .interfaces
            }
        };
        for (name, only) in [
            ("bash", &["process"][..]),
            ("jobs", &["jobs"]),
            ("terminal", &["terminal"]),
            ("lsp", &["lsp"]),
            ("files", &["files", "undo"]),
            ("subagent", &["subagent"]),
        ] {
            assert_eq!(
                interfaces(name, PluginSource::Embedded).await,
                only,
                "{name}"
            );
            let file = PluginSource::Path(format!("{name}.wasm").into());
            assert!(
                interfaces(name, file).await.is_empty(),
                "{name} from a file"
            );
        }
        for guard in ["deny_destructive", "workspace_only", "redact_secrets"] {
            assert!(
                interfaces(guard, PluginSource::Embedded).await.is_empty(),
                "{guard}"
            );
        }
        // Granted in dsh.toml, a directory version gets what it is granted.
        let granted = PluginConfig {
            interfaces: Some(vec!["process".to_string()]),
            ..PluginConfig::default()
        };
        let file = PluginSource::Path("bash.wasm".into());
        let grants = Grants::resolve("bash", &file, &granted, None, |_| Vec::new())
            .await
            .unwrap();
        assert_eq!(grants.view.interfaces, ["process"]);
    }

    /// What the `files` capability maps into a plugin granted it (see its
    /// `mapped_roots`): the workspace, then the extra roots as configured.
    fn files_roots(interface: &str, workspace: &Path, extra: &[PathBuf]) -> Vec<MappedRoot> {
        if interface != "files" {
            return Vec::new();
        }
        let extra = extra.iter().map(|root| MappedRoot::ExtraRoot {
            configured: root.clone(),
            shown: root.components().collect(),
        });
        std::iter::once(MappedRoot::Workspace(workspace.to_path_buf()))
            .chain(extra)
            .collect()
    }

    #[tokio::test]
    async fn a_files_grant_maps_the_workspace_read_only_unless_it_holds_the_state_dir() {
        let root = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(root.path()).unwrap();
        let (ws, state) = (root.join("ws"), root.join("state"));
        for dir in [&ws, &state, &ws.join(".state")] {
            std::fs::create_dir_all(dir).unwrap();
        }
        let config = |interfaces: &[&str]| PluginConfig {
            interfaces: Some(interfaces.iter().map(|i| i.to_string()).collect()),
            ..PluginConfig::default()
        };
        let source = PluginSource::Path("x.wasm".into());
        let resolve = |interfaces: &'static [&'static str], state: PathBuf| {
            let (source, ws) = (source.clone(), ws.clone());
            async move {
                Grants::resolve(
                    "x",
                    &source,
                    &config(interfaces),
                    Some(&state),
                    |interface| files_roots(interface, &ws, &[]),
                )
                .await
            }
        };
        let grants = resolve(&["files"], state.clone()).await.unwrap();
        let [dir] = grants.view.fs.as_slice() else {
            panic!("{:?}", grants.view.fs);
        };
        assert_eq!(dir.path, ws);
        assert_eq!(dir.guest, ws.display().to_string());
        assert_eq!(dir.mode, FsMode::ReadOnly);
        // Without the grant, no workspace.
        let grants = resolve(&["log"], state.clone()).await.unwrap();
        assert!(grants.view.fs.is_empty());
        // A workspace holding the state directory is withheld from the plugin (which
        // answers every call saying so), saying how to fix it.
        let grants = resolve(&["files"], ws.join(".state")).await.unwrap();
        assert!(grants.view.fs.is_empty(), "{:?}", grants.view.fs);
        let text = grants.withheld.unwrap();
        assert!(
            text.contains("the workspace contains dsh's state directory"),
            "{text}"
        );
        assert!(text.contains("--state-dir"), "{text}");
        assert!(text.contains("XDG_STATE_HOME"), "{text}");
        assert!(resolve(&["log"], ws.join(".state")).await.is_ok());
    }

    #[tokio::test]
    async fn a_files_grant_maps_the_extra_roots_read_only_unless_one_is_not_a_directory_or_holds_the_state_dir(
    ) {
        let root = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(root.path()).unwrap();
        let (ws, state) = (root.join("ws"), root.join("state"));
        let (docs, scratch) = (root.join("srv/docs"), root.join("srv/scratch"));
        for dir in [&ws, &state, &docs, &scratch] {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(root.join("file"), "x").unwrap();
        std::os::unix::fs::symlink(&scratch, root.join("scratch-link")).unwrap();
        let config = |interfaces: &[&str]| PluginConfig {
            interfaces: Some(interfaces.iter().map(|i| i.to_string()).collect()),
            ..PluginConfig::default()
        };
        let source = PluginSource::Path("x.wasm".into());
        let resolve = |interfaces: &'static [&'static str], roots: Vec<PathBuf>| {
            let (source, ws, state) = (source.clone(), ws.clone(), state.clone());
            async move {
                Grants::resolve(
                    "x",
                    &source,
                    &config(interfaces),
                    Some(&state),
                    |interface| files_roots(interface, &ws, &roots),
                )
                .await
            }
        };
        let roots = vec![docs.clone(), root.join("scratch-link")];
        let grants = resolve(&["files"], roots.clone()).await.unwrap();
        let seen: Vec<(PathBuf, String, FsMode)> = grants
            .view
            .fs
            .iter()
            .map(|d| (d.path.clone(), d.guest.clone(), d.mode))
            .collect();
        let show = |p: &Path| p.display().to_string();
        assert_eq!(
            seen,
            [
                (ws.clone(), show(&ws), FsMode::ReadOnly),
                (docs.clone(), show(&docs), FsMode::ReadOnly),
                // Every root is mapped read-only (writes go through the host), a writable
                // one too,
                // at its canonical path and at the link it was named by.
                (scratch.clone(), show(&scratch), FsMode::ReadOnly),
                (
                    scratch.clone(),
                    show(&root.join("scratch-link")),
                    FsMode::ReadOnly
                ),
            ]
        );
        assert!(resolve(&["log"], roots).await.unwrap().view.fs.is_empty());
        // Missing, not a directory, relative: refused, naming the root.
        for (path, says) in [
            (root.join("missing"), "No such file"),
            (root.join("file"), "not a directory"),
            (PathBuf::from("srv/docs"), "not an absolute path"),
        ] {
            let grants = resolve(&["files"], vec![path.clone()]).await.unwrap();
            assert!(grants.view.fs.is_empty(), "{:?}", grants.view.fs);
            let text = grants.withheld.unwrap();
            assert!(
                text.contains(&format!("the extra root {}", path.display())) && text.contains(says),
                "{text}"
            );
        }
        // Holding the state directory, or inside it: refused as the workspace is.
        for (path, overlap) in [
            (root.clone(), "contains"),
            (state.join("sessions"), "is inside"),
        ] {
            std::fs::create_dir_all(&path).unwrap();
            let grants = resolve(&["files"], vec![path.clone()]).await.unwrap();
            assert!(grants.view.fs.is_empty(), "{:?}", grants.view.fs);
            let text = grants.withheld.unwrap();
            assert!(
                text.contains(&format!("the extra root {}", path.display()))
                    && text.contains(&format!("that root {overlap} dsh's state directory"))
                    && text.contains("--state-dir"),
                "{text}"
            );
        }
        // Without `files`, no root is mapped, nor refused.
        assert!(resolve(&["log"], vec![root.clone()]).await.is_ok());
    }

    fn network(connect: &[&str], bind: &[&str], dns: bool) -> NetworkGrants {
        let config = PluginConfig {
            network: connect.iter().map(|s| s.to_string()).collect(),
            bind: bind.iter().map(|s| s.to_string()).collect(),
            dns,
            ..PluginConfig::default()
        };
        NetworkGrants::new(&config).unwrap()
    }

    #[tokio::test]
    async fn connect_grants_connect_and_bind_grants_bind_and_listen() {
        use SocketAddrUse::*;
        let connect = network(&["127.0.0.1:80"], &[], false);
        assert!(connect.allows(addr("127.0.0.1:80"), TcpConnect).await);
        assert!(connect.allows(addr("127.0.0.1:80"), UdpSend).await);
        assert!(connect.allows(addr("0.0.0.0:0"), TcpBind).await);
        assert!(connect.allows(addr("[::]:0"), UdpBind).await);
        for used_for in [TcpBind, TcpListen, UdpBind] {
            assert!(!connect.allows(addr("127.0.0.1:80"), used_for).await);
        }
        // The implicit bind passes, the listen on it does not.
        assert!(!connect.allows(addr("0.0.0.0:0"), TcpListen).await);
        assert!(!connect.allows(addr("10.1.1.1:5"), TcpAccept).await);

        let bind = network(&[], &["127.0.0.1:8080"], false);
        for used_for in [TcpBind, TcpListen, UdpBind] {
            assert!(bind.allows(addr("127.0.0.1:8080"), used_for).await);
        }
        assert!(bind.allows(addr("10.1.1.1:5"), TcpAccept).await);
        assert!(!bind.allows(addr("127.0.0.1:8080"), TcpConnect).await);
        assert!(!bind.allows(addr("0.0.0.0:0"), TcpBind).await);
        assert!(!bind.allows(addr("127.0.0.1:8081"), TcpBind).await);
    }

    #[tokio::test]
    async fn a_granted_name_is_resolved_when_used_and_cached() {
        let grants = network(&["LocalHost.:7"], &[], false);
        assert!(
            grants
                .allows(addr("127.0.0.1:7"), SocketAddrUse::TcpConnect)
                .await
        );
        assert!(
            !grants
                .allows(addr("127.0.0.1:8"), SocketAddrUse::TcpConnect)
                .await
        );
        assert!(
            !grants
                .allows(addr("127.0.0.2:7"), SocketAddrUse::TcpConnect)
                .await
        );
        let GrantPattern::Name { cache, .. } = &grants.connect[0] else {
            panic!("localhost parsed as an address");
        };
        let cached = cache.lock().unwrap().clone();
        let (at, ips) = cached.expect("resolved on first use");
        assert!(at.elapsed() < NAME_TTL);
        assert!(ips.contains(&"127.0.0.1".parse().unwrap()), "{ips:?}");
    }

    #[test]
    fn only_granted_names_may_be_looked_up() {
        let grants = network(
            &["Example.com:443", "10.0.0.0/8:*"],
            &["db.internal:*"],
            false,
        );
        let names = &grants.names;
        assert!(names.allows("example.com"));
        assert!(names.allows("EXAMPLE.COM."));
        assert!(names.allows("db.internal"));
        assert!(names.allows("127.0.0.1"));
        assert!(names.allows("[::1]"));
        assert!(!names.allows("data-to-exfiltrate.attacker.invalid"));
        assert!(!names.allows("www.example.com"));
        assert!(!NamePolicy::none().allows("example.com"));
        assert!(network(&[], &[], true).names.allows("anything.at.all"));
    }

    #[test]
    fn implicit_binds_are_allowed_explicit_ones_are_not() {
        assert!(implicit_bind(addr("0.0.0.0:0"), SocketAddrUse::TcpBind));
        assert!(!implicit_bind(addr("0.0.0.0:80"), SocketAddrUse::TcpBind));
        assert!(!implicit_bind(addr("0.0.0.0:0"), SocketAddrUse::TcpConnect));
    }
}
