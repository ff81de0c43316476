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
use dsh::control::{Answer, ControlSocket};
use dsh::host::Host;
use dsh::mcp::http::{generate_token, serve_http, MCP_PATH};
use dsh::mcp::{serve_stdio, McpServer};
use dsh::registry::DEFAULT_SCOPE;

use super::{shutdown_signal, Globals};

#[derive(clap::Args)]
pub struct Args {
    /// Serve streamable HTTP at http://ADDR/mcp instead of stdio (loopback by default)
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "127.0.0.1:8765")]
    http: Option<SocketAddr>,
    /// The scope connections see tools in
    #[arg(long, default_value = DEFAULT_SCOPE)]
    scope: String,
    /// Do not watch the plugin directory and the configuration file (by default a
    /// changed `.wasm` is reloaded and MCP clients are told the tool list changed, and
    /// a changed dsh.toml applies to the next call)
    #[arg(long)]
    no_watch: bool,
}

pub async fn run(globals: &Globals, args: Args) -> anyhow::Result<ExitCode> {
    let host = globals.start().await?;
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
    let _control = ControlSocket::listen(&globals.state_dir(), control_answer(&host, live))
        .inspect_err(|error| tracing::warn!(%error, "`dsh plugins` will not see this server"))
        .ok();
    let server = Arc::new(McpServer {
        host: host.clone(),
        scope: Arc::from(args.scope.as_str()),
    });
    let outcome = match args.http {
        None => tokio::select! {
            served = serve_stdio(server) => served.map_err(anyhow::Error::from),
            signal = shutdown_signal() => {
                tracing::info!(signal, "shutting down");
                Ok(())
            }
        },
        Some(addr) => serve_http_until_signal(server, addr).await,
    };
    host.shutdown();
    outcome?;
    Ok(ExitCode::SUCCESS)
}

/// What the control socket answers: `plugins` (the plugins as they are now and the
/// configuration file's status) and `stats` (the metrics of the calls so far).
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
        other => Err(format!("unknown request {other:?} (known: plugins, stats)")),
    })
}

/// Serves streamable HTTP on `addr` until a signal, then gives connections 5 s to end.
async fn serve_http_until_signal(server: Arc<McpServer>, addr: SocketAddr) -> anyhow::Result<()> {
    let token = match std::env::var("DSH_HTTP_TOKEN") {
        Ok(token) if !token.is_empty() => token,
        _ => {
            let token = generate_token().context("cannot generate a bearer token")?;
            eprintln!("dsh: bearer token: {token}");
            token
        }
    };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    let local = listener.local_addr()?;
    if !local.ip().is_loopback() {
        tracing::warn!(%local, "serving MCP beyond loopback; anyone with the token can run tools here");
    }
    eprintln!("dsh: listening on http://{local}{MCP_PATH}");
    let shutdown = CancellationToken::new();
    let serving = tokio::spawn(serve_http(server, listener, token, shutdown.clone()));
    let signal = shutdown_signal().await;
    tracing::info!(signal, "shutting down");
    shutdown.cancel();
    match tokio::time::timeout(Duration::from_secs(5), serving).await {
        Ok(Ok(served)) => Ok(served?),
        Ok(Err(join)) => Err(anyhow::anyhow!("the HTTP server task failed: {join}")),
        Err(_) => Ok(()),
    }
}
