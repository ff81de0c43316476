//! The `dsh` command line: the binary's edge, where errors become `anyhow` and exit
//! codes.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use dsh::call::CallRequest;
use dsh::config::Config;
use dsh::host::{Host, HostOptions};
use dsh::mcp::http::{generate_token, serve_http, MCP_PATH};
use dsh::mcp::{serve_stdio, McpServer};
use dsh::registry::DEFAULT_SCOPE;

/// dsh: a host runtime for AI agent tools. Tools and guards are WebAssembly components;
/// the host owns processes, validates every call and runs it through a pipeline of
/// gates and guards.
#[derive(Parser)]
#[command(name = "dsh", version, about, long_about = None)]
struct Cli {
    /// Configuration file [default: ./dsh.toml when it exists]
    #[arg(long, global = true, env = "DSH_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// Directory of plugin `.wasm` files; `NAME.wasm` overrides the embedded plugin NAME
    #[arg(long, global = true, env = "DSH_PLUGINS", value_name = "DIR")]
    plugins: Option<PathBuf>,
    /// Where sessions keep their event logs and spill files
    /// [default: $XDG_STATE_HOME/dsh or ~/.local/state/dsh]
    #[arg(long, global = true, env = "DSH_STATE_DIR", value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// The session workspace: commands run here and relative paths resolve against it
    /// [default: the current directory]
    #[arg(long, global = true, env = "DSH_WORKDIR", value_name = "DIR")]
    workdir: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the tool manuals a scope sees
    Tools {
        /// The scope to list (scopes are defined in dsh.toml)
        #[arg(long, default_value = DEFAULT_SCOPE)]
        scope: String,
        /// Print JSON: [{name, description, inputSchema, idempotent}]
        #[arg(long)]
        json: bool,
    },
    /// Run one call through the whole pipeline and print its result
    /// (exit status 1 when the result is an error)
    Call {
        /// Tool name
        tool: String,
        /// Arguments as a JSON object, e.g. '{"command":"ls","description":"list"}'
        args: String,
        /// The caller's scope
        #[arg(long, default_value = DEFAULT_SCOPE)]
        scope: String,
        /// Print the result as JSON: {content, is_error, error: {code, message}, full_output_path}
        #[arg(long)]
        json: bool,
    },
    /// Serve MCP: on stdio (the default), or streamable HTTP with --http
    ///
    /// Over stdio the server ends when the client closes stdin. Over HTTP every request
    /// needs `Authorization: Bearer TOKEN`, the token taken from DSH_HTTP_TOKEN or
    /// generated and printed at start. Each connection (HTTP session) is its own owner;
    /// what it started is killed a grace period after it goes away ([serve] in dsh.toml).
    Serve {
        /// Serve streamable HTTP at http://ADDR/mcp instead of stdio (loopback by default)
        #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "127.0.0.1:8765")]
        http: Option<std::net::SocketAddr>,
        /// The scope connections see tools in
        #[arg(long, default_value = DEFAULT_SCOPE)]
        scope: String,
        /// Do not watch the plugin directory (by default a changed `.wasm` is reloaded
        /// and MCP clients are told the tool list changed)
        #[arg(long)]
        no_watch: bool,
    },
    /// List the plugins with their source, digest and status
    Plugins {
        /// Print JSON
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "dsh=warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("dsh: cannot start the async runtime: {error}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("dsh: {error:#}");
            ExitCode::from(2)
        }
    }
}

async fn start(cli: &Cli) -> anyhow::Result<Host> {
    let config = match &cli.config {
        Some(path) => Config::load(path)?,
        None if std::path::Path::new("dsh.toml").exists() => Config::load("dsh.toml".as_ref())?,
        None => Config::default(),
    };
    let workdir = match &cli.workdir {
        Some(dir) => dir.clone(),
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    let workdir = std::fs::canonicalize(&workdir)
        .with_context(|| format!("workspace {} does not exist", workdir.display()))?;
    let options = HostOptions {
        config,
        plugins_dir: cli.plugins.clone(),
        state_dir: cli
            .state_dir
            .clone()
            .unwrap_or_else(dsh::session::default_state_dir),
        workdir,
    };
    Ok(Host::start(options).await?)
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let host = start(&cli).await?;
    match &cli.command {
        Command::Tools { scope, json } => {
            let scope = host
                .registry
                .scope(scope)
                .map_err(|e| anyhow::anyhow!(e.message))?;
            let specs = host.registry.schemas(&scope);
            if *json {
                let manuals: Vec<_> = specs
                    .iter()
                    .map(|s| {
                        json!({
                            "name": s.name,
                            "description": s.description,
                            "inputSchema": s.input_schema,
                            "idempotent": s.idempotent,
                        })
                    })
                    .collect();
                println!("{}", serde_json::to_string_pretty(&manuals)?);
            } else {
                for spec in specs {
                    println!(
                        "{}\n  {}\n  arguments: {}\n",
                        spec.name, spec.description, spec.input_schema
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Call {
            tool,
            args,
            scope,
            json,
        } => {
            let args: serde_json::Value = serde_json::from_str(args)
                .with_context(|| format!("arguments are not JSON: {args}"))?;
            let request = CallRequest {
                tool: tool.clone(),
                args,
                owner: Arc::from("cli"),
                scope: Arc::from(scope.as_str()),
            };
            let cancel = CancellationToken::new();
            let call = host.pipeline.call(request, &cancel);
            tokio::pin!(call);
            let result = tokio::select! {
                result = &mut call => result,
                signal = shutdown_signal() => {
                    tracing::info!(signal, "cancelling the call");
                    cancel.cancel();
                    call.await
                }
            };
            if *json {
                let value = json!({
                    "content": result.content,
                    "is_error": result.is_error(),
                    "error": result.error,
                    "full_output_path": result.full_output_path,
                });
                println!("{}", serde_json::to_string_pretty(&value)?);
            } else {
                let text = result.text();
                if text.ends_with('\n') {
                    print!("{text}");
                } else {
                    println!("{text}");
                }
            }
            host.shutdown();
            Ok(if result.is_error() {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            })
        }
        Command::Serve {
            http,
            scope,
            no_watch,
        } => {
            host.registry
                .scope(scope)
                .map_err(|e| anyhow::anyhow!(e.message))?;
            let _watcher = match (&cli.plugins, no_watch) {
                (Some(dir), false) => Some(
                    dsh::reload::watch(
                        host.pipeline.runtime.clone(),
                        host.registry.clone(),
                        host.config.clone(),
                        dir,
                        std::time::Duration::from_millis(host.config.serve.reload_debounce_ms),
                    )
                    .with_context(|| format!("cannot watch {}", dir.display()))?,
                ),
                _ => None,
            };
            let host = Arc::new(host);
            let server = Arc::new(McpServer {
                host: host.clone(),
                scope: Arc::from(scope.as_str()),
            });
            let outcome = match http {
                None => tokio::select! {
                    served = serve_stdio(server) => served.map_err(anyhow::Error::from),
                    signal = shutdown_signal() => {
                        tracing::info!(signal, "shutting down");
                        Ok(())
                    }
                },
                Some(addr) => serve_http_until_signal(server, *addr).await,
            };
            host.shutdown();
            outcome?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Plugins { json } => {
            let plugins = host.registry.plugins();
            if *json {
                println!("{}", serde_json::to_string_pretty(&plugins)?);
            } else {
                println!(
                    "{:<16} {:<8} {:<14} {:<40} TOOLS / REASON",
                    "NAME", "STATUS", "DIGEST", "SOURCE"
                );
                for p in plugins {
                    let detail = p.reason.clone().unwrap_or_else(|| p.tools.join(", "));
                    let digest = p.digest.get(..12).unwrap_or(&p.digest);
                    println!(
                        "{:<16} {:<8} {:<14} {:<40} {}",
                        p.name, p.status, digest, p.source, detail
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

async fn serve_http_until_signal(
    server: Arc<McpServer>,
    addr: std::net::SocketAddr,
) -> anyhow::Result<()> {
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
    match tokio::time::timeout(std::time::Duration::from_secs(5), serving).await {
        Ok(Ok(served)) => Ok(served?),
        Ok(Err(join)) => Err(anyhow::anyhow!("the HTTP server task failed: {join}")),
        Err(_) => Ok(()),
    }
}

/// Resolves on SIGINT or SIGTERM with the signal's name.
async fn shutdown_signal() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut interrupt), Ok(mut terminate)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = interrupt.recv() => "SIGINT",
        _ = terminate.recv() => "SIGTERM",
    }
}
