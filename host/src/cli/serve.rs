//! `dsh serve`: MCP on stdio or streamable HTTP, with the plugin directory and the
//! configuration file watched, and the control socket `dsh plugins` and `dsh stats`
//! ask through. Ends on SIGINT, SIGTERM or SIGHUP (or, on stdio, when stdin closes).

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use dsh::config_watch::{ConfigStatus, LiveConfig};
use dsh::console::CONSOLE_PATH;
use dsh::control::{Answer, ControlSocket};
use dsh::host::Host;
use dsh::mcp::http::{generate_token, serve_http, HttpResume, ServedScope, MCP_PATH, METRICS_PATH};
use dsh::mcp::{serve_stdio, McpServer};
use dsh::registry::DEFAULT_SCOPE;
use dsh::upgrade::Snapshot;

use super::{shutdown_signal, Globals};

#[derive(clap::Args)]
pub struct Args {
    /// Serve streamable HTTP at http://ADDR/mcp instead of stdio (loopback by default)
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "127.0.0.1:8765")]
    http: Option<SocketAddr>,
    /// The scope connections see tools in (over HTTP: the scope of `$DSH_HTTP_TOKEN`;
    /// `[serve] http_scope_tokens` serves more scopes, each to its own token)
    #[arg(long, default_value = DEFAULT_SCOPE)]
    scope: String,
    /// Do not watch the plugin directory and the configuration file (by default a
    /// changed `.wasm` is reloaded and MCP clients are told the tool list changed, and
    /// a changed dsh.toml applies to the next call)
    #[arg(long)]
    no_watch: bool,
}

pub async fn run(globals: &Globals, args: Args) -> anyhow::Result<ExitCode> {
    // After an upgrade: the state the binary before handed over (see dsh::upgrade).
    let inherited = Snapshot::inherited().context("cannot take over from the binary before")?;
    if let Some(mode) = dsh::upgrade::checking() {
        return check_takeover(globals, mode, inherited.as_ref()).await;
    }
    // Its shells are tracked before anything could reap them, then its containment is
    // adopted by the host's.
    let adopted = inherited.as_ref().map(Snapshot::adopt);
    // Plugins load in the background: `initialize` is answered at once, and what needs
    // the catalog (tools/list, tools/call) waits for it (see the MCP front end).
    let host = globals
        .start_loading_resuming(inherited.as_ref().map(|s| s.session.clone()))
        .await?;
    if let (Some(snapshot), Some(adopted)) = (&inherited, adopted) {
        snapshot.restore(&host, adopted);
        tracing::info!(
            generation = snapshot.generation,
            from = %snapshot.written_by,
            handed = ?snapshot.entries.keys().collect::<Vec<_>>(),
            "took over from the binary before"
        );
    }
    host.registry
        .scope(&args.scope)
        .map_err(|e| anyhow::anyhow!(e.message))?;
    let watching = !args.no_watch;
    let debounce = Duration::from_millis(host.config.serve.reload_debounce_ms);
    let _watcher = match (globals.plugins_dir(), watching) {
        (Some(dir), true) => Some(
            dsh::reload::watch(host.pipeline.clone(), dir, debounce)
                .with_context(|| format!("cannot watch {}", dir.display()))?,
        ),
        _ => None,
    };
    let live = globals.config_path().map(|path| {
        Arc::new(LiveConfig::new(
            &path,
            globals.plugins_dir().map(ToOwned::to_owned),
            host.pipeline.clone(),
            host.config.clone(),
            watching,
        ))
    });
    let _config_watcher = match (&live, watching) {
        (Some(live), true) => Some(
            dsh::config_watch::watch(live.clone(), debounce)
                .with_context(|| format!("cannot watch {}", live.path().display()))?,
        ),
        _ => None,
    };
    let host = Arc::new(host);
    let (upgrade_asks, upgrades) = tokio::sync::mpsc::channel(1);
    let _control = ControlSocket::listen(
        &globals.state_dir(),
        control_answer(&host, live),
        Some(upgrade_asks.clone()),
        host.services.for_people().cloned(),
    )
    .inspect_err(|error| tracing::warn!(%error, "`dsh plugins` will not see this server"))
    .ok();
    upgrade_on_sigusr2(upgrade_asks)?;
    let server = Arc::new(McpServer::new(host.clone(), args.scope.as_str()));
    let (stdio, http) = match inherited {
        Some(snapshot) => {
            let handed = dsh::mcp::handed_transports(&snapshot)
                .map_err(|why| anyhow::anyhow!("cannot take over from the binary before: {why}"))?;
            server.adopt_round_trips(handed.round_trips);
            (handed.stdio, handed.http)
        }
        None => (None, None),
    };
    let outcome = match args.http {
        None => tokio::select! {
            served = serve_stdio(server, Some(upgrades), stdio) => served.map_err(anyhow::Error::from),
            signal = shutdown_signal() => {
                tracing::info!(signal, "shutting down");
                Ok(())
            }
        },
        Some(addr) => serve_http_until_signal(server, addr, upgrades, http).await,
    };
    host.close_observers().await;
    host.shutdown();
    outcome?;
    Ok(ExitCode::SUCCESS)
}

/// The new binary's checks before an upgrade executes it: first, while the old one
/// still serves, that the configuration parses and every plugin serving now loads
/// (`plugins`); then that it reads the snapshot (`snapshot`, read by now). It says so
/// and exits.
async fn check_takeover(
    globals: &Globals,
    mode: dsh::upgrade::CheckMode,
    snapshot: Option<&Snapshot>,
) -> anyhow::Result<ExitCode> {
    use dsh::upgrade::CheckMode;
    match mode {
        CheckMode::Snapshot => {
            let snapshot = snapshot.context("no snapshot to check (DSH_UPGRADE_FD is unset)")?;
            dsh::mcp::handed_transports(snapshot)
                .map_err(|why| anyhow::anyhow!("cannot read the snapshot: {why}"))?;
            println!(
                "dsh {} reads the snapshot: version {} from dsh {}, handing over {}",
                env!("CARGO_PKG_VERSION"),
                snapshot.version,
                snapshot.written_by,
                snapshot
                    .entries
                    .keys()
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        CheckMode::Plugins => {
            let wanted: Vec<String> = std::env::var(dsh::upgrade::PLUGINS_VARIABLE)
                .unwrap_or_default()
                .split(',')
                .filter(|name| !name.is_empty())
                .map(str::to_string)
                .collect();
            let host = globals.start().await?;
            let lost = dsh::upgrade::not_serving(&host, &wanted);
            host.shutdown();
            if !lost.is_empty() {
                anyhow::bail!("plugins serving now would not load: {}", lost.join("; "));
            }
            println!(
                "dsh {} loads the configuration and the {} plugin(s) serving now",
                env!("CARGO_PKG_VERSION"),
                wanted.len()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// SIGUSR2 asks for an upgrade to the binary installed at this executable's path, when
/// its sender may ask (the control socket's rule: this user, not a process dsh started);
/// the outcome goes to the log.
fn upgrade_on_sigusr2(
    asks: tokio::sync::mpsc::Sender<dsh::upgrade::UpgradeAsk>,
) -> anyhow::Result<()> {
    use signal_hook::iterator::exfiltrator::WithOrigin;
    use signal_hook::iterator::SignalsInfo;
    let mut signals = SignalsInfo::<WithOrigin>::new([signal_hook::consts::SIGUSR2])
        .context("cannot watch SIGUSR2")?;
    std::thread::Builder::new()
        .name("dsh-sigusr2".into())
        .spawn(move || {
            for origin in signals.forever() {
                let (pid, uid) = match &origin.process {
                    Some(process) => (Some(process.pid), process.uid),
                    None => (None, u32::MAX),
                };
                if let Err(why) = dsh::upgrade::peer_may_upgrade(pid, uid) {
                    tracing::error!(%why, "SIGUSR2: no upgrade");
                    continue;
                }
                let (reply, answered) = tokio::sync::oneshot::channel();
                let (_delivered, delivery) = tokio::sync::oneshot::channel();
                let ask = dsh::upgrade::UpgradeAsk {
                    binary: None,
                    reply,
                    delivered: delivery,
                };
                if asks.blocking_send(ask).is_err() {
                    return;
                }
                match answered.blocking_recv() {
                    Ok(Ok(said)) => tracing::warn!(%said, "SIGUSR2: upgrading"),
                    Ok(Err(why)) => tracing::error!(%why, "SIGUSR2: no upgrade"),
                    Err(_) => {}
                }
            }
        })
        .context("cannot watch SIGUSR2")?;
    Ok(())
}

/// What the control socket answers: `plugins` (the plugins as they are now and the
/// configuration file's status), `stats` (the metrics of the calls so far) and `version`
/// (this binary, and how many upgrades the process has been through).
fn control_answer(host: &Host, live: Option<Arc<LiveConfig>>) -> Answer {
    let (registry, pipeline) = (host.registry.clone(), host.pipeline.clone());
    let session = host.pipeline.session.id.clone();
    let config_status = move || match &live {
        Some(live) => live.status(),
        None => ConfigStatus::loaded(None, "", false),
    };
    Arc::new(move |request| match request {
        "plugins" => Ok(json!({
            "session": &*session,
            "plugins": registry.plugins(),
            "config": config_status(),
        })),
        "stats" => Ok(json!({ "session": &*session, "tools": pipeline.metrics() })),
        "version" => Ok(json!({
            "version": env!("CARGO_PKG_VERSION"),
            "pid": std::process::id(),
            "exe": std::fs::read_link("/proc/self/exe").ok(),
            "generation": dsh::upgrade::generation(),
            "last_upgrade": dsh::upgrade::last_upgrade(),
        })),
        other => Err(format!(
            "unknown request {other:?} (known: plugins, stats, version, upgrade, terminals, \
             attach)"
        )),
    })
}

/// The token in the environment variable `variable`, or a generated one, printed
/// (saying what it opens, `for`, when it is not the only MCP token).
fn token_from(variable: &str, what: Option<&str>) -> anyhow::Result<String> {
    match std::env::var(variable) {
        Ok(token) if !token.is_empty() => Ok(token),
        _ => {
            let token = generate_token().context("cannot generate a bearer token")?;
            match what {
                None => eprintln!("dsh: bearer token: {token}"),
                Some(what) => {
                    eprintln!("dsh: bearer token for {what} (${variable} unset): {token}")
                }
            }
            Ok(token)
        }
    }
}

/// The token of `/metrics`: `$DSH_METRICS_TOKEN`, or a generated one, printed; never
/// one of the MCP tokens.
fn metrics_token(scopes: &[ServedScope]) -> anyhow::Result<String> {
    let token = token_from("DSH_METRICS_TOKEN", Some(METRICS_PATH))?;
    if let Some(same) = scopes.iter().find(|s| s.token == token) {
        anyhow::bail!(
            "$DSH_METRICS_TOKEN is the token of scope {}: the metrics need a token of \
             their own",
            same.server.scope
        );
    }
    Ok(token)
}

/// The console, when `$DSH_CONSOLE_TOKEN` is set: its token must be its own.
fn console(
    scopes: &[ServedScope],
    metrics_token: &str,
) -> anyhow::Result<Option<Arc<dsh::console::Console>>> {
    let token = match std::env::var("DSH_CONSOLE_TOKEN") {
        Ok(token) if !token.is_empty() => token,
        _ => return Ok(None),
    };
    let Some(first) = scopes.first() else {
        return Ok(None);
    };
    let mut others: Vec<(String, String)> = scopes
        .iter()
        .map(|s| (format!("scope {}", s.principal), s.token.clone()))
        .collect();
    others.push(("the metrics".into(), metrics_token.to_string()));
    Ok(Some(dsh::console::Console::open(
        first.server.host.clone(),
        token,
        &others,
    )?))
}

/// The scopes served over HTTP: `--scope` to `$DSH_HTTP_TOKEN`, then each of
/// `[serve] http_scope_tokens` to its own; every scope known, every token different.
fn served_scopes(server: Arc<McpServer>) -> anyhow::Result<Vec<ServedScope>> {
    let extra = &server.host.config.serve.http.scope_tokens;
    let main_scope = (!extra.is_empty()).then(|| format!("scope {}", server.scope));
    let mut scopes = vec![ServedScope {
        token: token_from("DSH_HTTP_TOKEN", main_scope.as_deref())?,
        principal: server.scope.to_string(),
        server: server.clone(),
    }];
    for (scope, variable) in extra {
        if **scope == *server.scope {
            anyhow::bail!(
                "[serve] http_scope_tokens names {scope:?}, the scope of `--scope` \
                 (reached with $DSH_HTTP_TOKEN); remove it or serve another scope"
            );
        }
        server
            .host
            .registry
            .scope(scope)
            .map_err(|e| anyhow::anyhow!("[serve] http_scope_tokens: {}", e.message))?;
        let token = token_from(variable, Some(&format!("scope {scope}")))?;
        if let Some(same) = scopes.iter().find(|s| s.token == token) {
            anyhow::bail!(
                "scopes {} and {scope} have the same token: each scope needs its own \
                 (${variable})",
                same.server.scope
            );
        }
        scopes.push(ServedScope {
            server: Arc::new(server.for_scope(scope.as_str())),
            token,
            principal: scope.clone(),
        });
    }
    add_named_principals(&server, &mut scopes)?;
    Ok(scopes)
}

/// Adds `[serve] http_principals` to the tokens served: each its scope (known), its own
/// token (set, and unlike every other) and a name no scope's own principal has.
fn add_named_principals(
    server: &Arc<McpServer>,
    scopes: &mut Vec<ServedScope>,
) -> anyhow::Result<()> {
    for (name, principal) in &server.host.config.serve.http.principals {
        if scopes.iter().any(|s| s.principal == *name) {
            anyhow::bail!(
                "[serve] http_principals.{name}: {name:?} is the principal of scope {name}'s \
                 own token; name it otherwise"
            );
        }
        server
            .host
            .registry
            .scope(&principal.scope)
            .map_err(|e| anyhow::anyhow!("[serve] http_principals.{name}.scope: {}", e.message))?;
        let variable = &principal.token_env;
        let token = match std::env::var(variable) {
            Ok(token) if !token.is_empty() => token,
            _ => anyhow::bail!(
                "[serve] http_principals.{name}: ${variable} is unset or empty (a principal's \
                 token is never generated: set it)"
            ),
        };
        if let Some(same) = scopes.iter().find(|s| s.token == token) {
            anyhow::bail!(
                "principals {} and {name} have the same token: each needs its own (${variable})",
                same.principal
            );
        }
        let scope_server = match scopes.iter().find(|s| *s.server.scope == *principal.scope) {
            Some(served) => served.server.clone(),
            None => Arc::new(server.for_scope(&principal.scope)),
        };
        scopes.push(ServedScope {
            server: scope_server,
            token,
            principal: name.clone(),
        });
    }
    Ok(())
}

/// Serves streamable HTTP on `addr` until a signal, then gives connections 5 s to end.
/// After an upgrade, the listener and the tokens are the ones handed over (`resume`).
async fn serve_http_until_signal(
    server: Arc<McpServer>,
    addr: SocketAddr,
    upgrades: tokio::sync::mpsc::Receiver<dsh::upgrade::UpgradeAsk>,
    resume: Option<dsh::mcp::http::HttpHandover>,
) -> anyhow::Result<()> {
    let (scopes, metrics_token, listener, resumed) = match resume {
        Some(handed) => {
            let (scopes, listener) = taken_over(server, &handed)?;
            let resumed = HttpResume {
                sessions: handed.sessions,
                next_owner: handed.next_owner,
            };
            (scopes, handed.metrics_token, listener, resumed)
        }
        None => {
            let scopes = served_scopes(server)?;
            let metrics_token = metrics_token(&scopes)?;
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr}"))?;
            (scopes, metrics_token, listener, HttpResume::default())
        }
    };
    let local = listener.local_addr()?;
    if !local.ip().is_loopback() {
        tracing::warn!(%local, "serving MCP beyond loopback; anyone with the token can run tools here");
    }
    eprintln!("dsh: listening on http://{local}{MCP_PATH}");
    eprintln!("dsh: metrics on http://{local}{METRICS_PATH}");
    let (own, named): (Vec<&ServedScope>, Vec<&ServedScope>) =
        scopes.iter().partition(|s| s.principal == *s.server.scope);
    if own.len() > 1 {
        let names: Vec<&str> = own.iter().map(|s| &*s.server.scope).collect();
        eprintln!(
            "dsh: serving scopes {} (each to its own token)",
            names.join(", ")
        );
    }
    if !named.is_empty() {
        let names: Vec<String> = named
            .iter()
            .map(|s| format!("{} (scope {})", s.principal, s.server.scope))
            .collect();
        eprintln!("dsh: principals {}", names.join(", "));
    }
    let console = console(&scopes, &metrics_token)?;
    if console.is_some() {
        eprintln!("dsh: console on http://{local}{CONSOLE_PATH} (log in with $DSH_CONSOLE_TOKEN)");
    }
    let shutdown = CancellationToken::new();
    let serving = tokio::spawn(serve_http(
        scopes,
        metrics_token,
        console,
        listener,
        shutdown.clone(),
        Some(upgrades),
        resumed,
    ));
    let signal = shutdown_signal().await;
    tracing::info!(signal, "shutting down");
    shutdown.cancel();
    match tokio::time::timeout(Duration::from_secs(5), serving).await {
        Ok(Ok(served)) => Ok(served?),
        Ok(Err(join)) => Err(anyhow::anyhow!("the HTTP server task failed: {join}")),
        Err(_) => Ok(()),
    }
}

/// The scopes and the listener handed over by the binary before: every token as it was
/// (generated ones too: clients keep theirs), each scope known to this binary's
/// configuration.
fn taken_over(
    server: Arc<McpServer>,
    handed: &dsh::mcp::http::HttpHandover,
) -> anyhow::Result<(Vec<ServedScope>, tokio::net::TcpListener)> {
    let mut scopes = Vec::new();
    for (scope, token) in &handed.tokens {
        server
            .host
            .registry
            .scope(scope)
            .map_err(|e| anyhow::anyhow!("a scope handed over: {}", e.message))?;
        scopes.push(ServedScope {
            server: Arc::new(server.for_scope(scope.as_str())),
            token: token.clone(),
            principal: scope.clone(),
        });
    }
    add_named_principals(&server, &mut scopes)?;
    let fd = dsh_launch::containment::inherited_fd(handed.listener)
        .context("the listener handed over is not open")?;
    let listener = std::net::TcpListener::from(fd);
    listener.set_nonblocking(true)?;
    Ok((scopes, tokio::net::TcpListener::from_std(listener)?))
}
