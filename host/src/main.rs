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
use dsh::control::{ask, running_servers, Answer, ControlSocket, RunningServer};
use dsh::host::{Host, HostOptions};
use dsh::mcp::http::{generate_token, serve_http, MCP_PATH};
use dsh::mcp::{serve_stdio, McpServer};
use dsh::registry::{PluginStatus, DEFAULT_SCOPE};

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
    /// List the plugins with their source, digest, load time and status
    ///
    /// With a `dsh serve` running on the same state directory, shows that server's
    /// plugins as they are now, with the calls in flight on each (and on the versions
    /// a reload replaced). With none, shows the plugin set as `dsh serve` would load it.
    Plugins {
        /// Print JSON: [{name, source, digest, loaded_at, status, reason, tools,
        /// calls_in_flight, calls_in_flight_on_old_versions}]
        #[arg(long)]
        json: bool,
        /// Which running server to ask, by pid (needed when several are running)
        #[arg(long, value_name = "PID")]
        server: Option<u32>,
        /// Also show each plugin's effective grants (host interfaces, environment
        /// variables, network patterns, directories) and what it imports
        #[arg(long)]
        grants: bool,
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
        state_dir: state_dir(cli),
        workdir,
    };
    Ok(Host::start(options).await?)
}

fn state_dir(cli: &Cli) -> PathBuf {
    cli.state_dir
        .clone()
        .unwrap_or_else(dsh::session::default_state_dir)
}

/// The running server `dsh plugins` should ask: the one named, or the only one.
fn chosen_server(cli: &Cli, wanted: Option<u32>) -> anyhow::Result<Option<RunningServer>> {
    let servers = running_servers(&state_dir(cli));
    match wanted {
        Some(pid) => servers
            .into_iter()
            .find(|server| server.pid == pid)
            .map(Some)
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "no dsh serve with pid {pid} is running on {}",
                    state_dir(cli).display()
                )
            }),
        None if servers.len() > 1 => {
            let pids: Vec<String> = servers.iter().map(|s| s.pid.to_string()).collect();
            anyhow::bail!(
                "{} dsh servers are running on {} (pids {}); choose one with --server PID",
                servers.len(),
                state_dir(cli).display(),
                pids.join(", ")
            )
        }
        None => Ok(servers.into_iter().next()),
    }
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    if let Command::Plugins {
        json,
        server,
        grants,
    } = &cli.command
    {
        if let Some(server) = chosen_server(&cli, *server)? {
            let answer = tokio::task::spawn_blocking(move || {
                let answer = ask(&server, "plugins");
                (server, answer)
            })
            .await?;
            let (server, answer) = answer;
            let answer = answer?;
            let plugins: Vec<PluginStatus> = serde_json::from_value(answer["plugins"].clone())
                .context("the server's plugin list is not what this dsh understands")?;
            let heading = format!(
                "dsh serve, pid {}, session {}",
                server.pid,
                answer["session"].as_str().unwrap_or("?")
            );
            print_plugins(&plugins, *json, *grants, &heading)?;
            return Ok(ExitCode::SUCCESS);
        }
    }
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
            let _control = {
                let (registry, session) = (host.registry.clone(), host.pipeline.session.id.clone());
                let answer: Answer = Arc::new(move |request| match request {
                    "plugins" => Ok(json!({ "session": &*session, "plugins": registry.plugins() })),
                    other => Err(format!("unknown request {other:?} (known: plugins)")),
                });
                ControlSocket::listen(&state_dir(&cli), answer)
                    .inspect_err(
                        |error| tracing::warn!(%error, "`dsh plugins` will not see this server"),
                    )
                    .ok()
            };
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
        Command::Plugins { json, grants, .. } => {
            print_plugins(
                &host.registry.plugins(),
                *json,
                *grants,
                "no dsh serve running here: the plugin set as it would load",
            )?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn print_plugins(
    plugins: &[PluginStatus],
    json: bool,
    grants: bool,
    heading: &str,
) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(plugins)?);
        return Ok(());
    }
    println!("{heading}\n");
    println!(
        "{:<16} {:<8} {:<14} {:<20} {:>9} {:<40} TOOLS / REASON",
        "NAME", "STATUS", "DIGEST", "LOADED (UTC)", "IN FLIGHT", "SOURCE"
    );
    for p in plugins {
        let detail = p.reason.clone().unwrap_or_else(|| p.tools.join(", "));
        let digest = p.digest.get(..12).unwrap_or(&p.digest);
        let in_flight = match p.calls_in_flight_on_old_versions {
            0 => p.calls_in_flight.to_string(),
            old => format!("{}+{old} old", p.calls_in_flight),
        };
        println!(
            "{:<16} {:<8} {:<14} {:<20} {:>9} {:<40} {}",
            p.name,
            p.status,
            digest,
            utc_time(p.loaded_at),
            in_flight,
            p.source,
            detail
        );
        if let (true, Some(granted)) = (grants, &p.grants) {
            let list = |items: &[String]| match items.len() {
                0 => "none".to_string(),
                _ => items.join(", "),
            };
            let dirs: Vec<String> = granted
                .fs
                .iter()
                .map(|dir| {
                    let mode = match dir.mode {
                        dsh::config::FsMode::ReadOnly => "ro",
                        dsh::config::FsMode::ReadWrite => "rw",
                    };
                    format!("{} as {} ({mode})", dir.path.display(), dir.guest)
                })
                .collect();
            println!("    interfaces: {}", list(&granted.interfaces));
            println!("    env:        {}", list(&granted.env));
            println!("    network:    {}", list(&granted.network));
            println!("    fs:         {}", list(&dirs));
            println!("    imports:    {}", list(&p.imports));
        }
    }
    Ok(())
}

/// `YYYY-MM-DD HH:MM:SS` for seconds since the Unix epoch (UTC).
fn utc_time(unix_seconds: u64) -> String {
    let (days, seconds) = (unix_seconds / 86_400, unix_seconds % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60
    )
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
