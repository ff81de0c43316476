//! The `dsh` command line: the binary's edge, where errors become `anyhow` and exit
//! codes.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use std::io::IsTerminal;

use dsh::call::{Approval, ApprovalFuture, ApprovalRequest, Approver, CallRequest};
use dsh::config::Config;
use dsh::config_watch::{ConfigStatus, LiveConfig};
use dsh::control::{ask, running_servers, Answer, ControlSocket, RunningServer};
use dsh::host::{Host, HostOptions};
use dsh::mcp::http::{generate_token, serve_http, MCP_PATH};
use dsh::mcp::{serve_stdio, McpServer};
use dsh::pipeline::s2_guards::describe_args;
use dsh::pipeline::s6_observe::{Metrics, ToolStats, LATENCY_BUCKETS_MS};
use dsh::registry::{PluginStatus, DEFAULT_SCOPE};
use dsh::services::process::containment::keeper;

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
    /// Where sessions keep their event logs and spill files, the compile cache and the
    /// control sockets; private (0700), refused when another user owns it or others can
    /// write to it [default: $XDG_STATE_HOME/dsh, else ~/.local/state/dsh, else
    /// $XDG_RUNTIME_DIR/dsh, else /tmp/dsh-UID]
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
        /// What to answer when a guard asks for approval: `prompt` asks on the terminal
        /// (and denies when stdin is not one), `yes` pre-approves, `no` pre-denies
        #[arg(long, value_enum, default_value_t = ApprovalMode::Prompt)]
        approval: ApprovalMode,
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
        /// Do not watch the plugin directory and the configuration file (by default a
        /// changed `.wasm` is reloaded and MCP clients are told the tool list changed, and
        /// a changed dsh.toml applies to the next call)
        #[arg(long)]
        no_watch: bool,
    },
    /// Per-tool metrics: calls, errors by code, retries, latency
    ///
    /// From the `dsh serve` running on this state directory (its calls so far), or else
    /// from the event log of a session (the latest, or --session).
    Stats {
        /// Print JSON: {session, tools: {NAME: {calls, errors, retries, latency_buckets,
        /// latency_total_us, latency_max_us}}, latency_bucket_bounds_ms}
        #[arg(long)]
        json: bool,
        /// Which running server to ask, by pid (needed when several are running)
        #[arg(long, value_name = "PID")]
        server: Option<u32>,
        /// Read this session's event log instead (an id under STATE_DIR/sessions)
        #[arg(long, value_name = "ID", conflicts_with = "server")]
        session: Option<String>,
    },
    /// List the plugins with their source, digest, load time and status
    ///
    /// With a `dsh serve` running on the same state directory, shows that server's
    /// plugins as they are now, with the calls in flight on each (and on the versions
    /// a reload replaced), and its configuration file: the version in force, a refused
    /// version and why, settings changed that wait for a restart. With none, shows the
    /// plugin set as `dsh serve` would load it.
    Plugins {
        /// Print JSON: [{name, source, digest, loaded_at, status, reason, tools,
        /// calls_in_flight, calls_in_flight_on_old_versions}]
        #[arg(long)]
        json: bool,
        /// Which running server to ask, by pid (needed when several are running)
        #[arg(long, value_name = "PID")]
        server: Option<u32>,
        /// Also show each plugin's effective grants (host interfaces, environment
        /// variables, connect, bind and dns grants, directories) and what it imports
        #[arg(long)]
        grants: bool,
    },
}

fn main() -> ExitCode {
    // The keeper is this executable started under another name (see containment).
    let mut args = std::env::args_os();
    if args.next().is_some_and(|name| name == keeper::KEEPER_NAME) {
        let args: Vec<std::ffi::OsString> = args.collect();
        return ExitCode::from(keeper::main(&args));
    }
    dsh::services::process::containment::supervise_children();
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

/// The configuration file in use: `--config`, else `./dsh.toml` when it exists.
fn config_path(cli: &Cli) -> Option<PathBuf> {
    match &cli.config {
        Some(path) => Some(path.clone()),
        None if std::path::Path::new("dsh.toml").exists() => Some(PathBuf::from("dsh.toml")),
        None => None,
    }
}

async fn start(cli: &Cli) -> anyhow::Result<Host> {
    let config = match config_path(cli) {
        Some(path) => Config::load(&path)?,
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

/// How `dsh call` answers a guard's `ask`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ApprovalMode {
    Prompt,
    Yes,
    No,
}

/// Answers a guard's `ask` from the `--approval` flag, or by asking on the terminal.
#[derive(Debug)]
struct CliApprover(ApprovalMode);

impl Approver for CliApprover {
    fn channel(&self) -> &'static str {
        match self.0 {
            ApprovalMode::Prompt => "terminal",
            ApprovalMode::Yes | ApprovalMode::No => "flag",
        }
    }

    fn approve<'a>(&'a self, request: ApprovalRequest<'a>) -> ApprovalFuture<'a> {
        let mode = self.0;
        let question = format!(
            "dsh: guard {} asks for approval: {}\n  tool: {}\n  arguments: {}\nRun it? [y/N] ",
            request.guard,
            request.reason,
            request.tool,
            describe_args(request.args)
        );
        Box::pin(async move {
            match mode {
                ApprovalMode::Yes => Approval::Approved,
                ApprovalMode::No => Approval::Denied,
                ApprovalMode::Prompt if !std::io::stdin().is_terminal() => Approval::Unavailable(
                    "stdin is not a terminal to ask on; pass --approval yes to pre-approve".into(),
                ),
                ApprovalMode::Prompt => {
                    let answer = tokio::task::spawn_blocking(move || {
                        eprint!("{question}");
                        let mut line = String::new();
                        std::io::stdin().read_line(&mut line).map(|_| line)
                    })
                    .await;
                    match answer {
                        Ok(Ok(line))
                            if matches!(line.trim(), "y" | "Y" | "yes" | "YES" | "Yes") =>
                        {
                            Approval::Approved
                        }
                        _ => Approval::Denied,
                    }
                }
            }
        })
    }
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
            let config: Option<ConfigStatus> =
                serde_json::from_value(answer["config"].clone()).ok();
            let heading = format!(
                "dsh serve, pid {}, session {}",
                server.pid,
                answer["session"].as_str().unwrap_or("?")
            );
            print_plugins(&plugins, config.as_ref(), *json, *grants, &heading)?;
            return Ok(ExitCode::SUCCESS);
        }
    }
    if let Command::Stats {
        json,
        server,
        session,
    } = &cli.command
    {
        let (origin, tools) = match (session, chosen_server(&cli, *server)?) {
            (None, Some(server)) => {
                let pid = server.pid;
                let answer = tokio::task::spawn_blocking(move || ask(&server, "stats")).await??;
                let tools = serde_json::from_value(answer["tools"].clone())
                    .context("the server's stats are not what this dsh understands")?;
                (
                    format!(
                        "dsh serve, pid {pid}, session {}",
                        answer["session"].as_str().unwrap_or("?")
                    ),
                    tools,
                )
            }
            (session, _) => {
                let (id, events) = session_events(&state_dir(&cli), session.as_deref())?;
                (
                    format!("session {id} (from its event log)"),
                    Metrics::from_events(&events).snapshot(),
                )
            }
        };
        print_stats(&origin, &tools, *json)?;
        return Ok(ExitCode::SUCCESS);
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
            approval,
        } => {
            let args: serde_json::Value = serde_json::from_str(args)
                .with_context(|| format!("arguments are not JSON: {args}"))?;
            let mut request = CallRequest::new(tool.as_str(), args, "cli", scope.as_str());
            request.approver = Some(Arc::new(CliApprover(*approval)));
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
                    "content": result.content_text(),
                    "structured": result.structured,
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
            let debounce = std::time::Duration::from_millis(host.config.serve.reload_debounce_ms);
            let _watcher = match (&cli.plugins, no_watch) {
                (Some(dir), false) => Some(
                    dsh::reload::watch(host.pipeline.clone(), dir, debounce)
                        .with_context(|| format!("cannot watch {}", dir.display()))?,
                ),
                _ => None,
            };
            let live = config_path(&cli).map(|path| {
                Arc::new(LiveConfig::new(
                    &path,
                    cli.plugins.clone(),
                    host.pipeline.clone(),
                    host.config.clone(),
                    !no_watch,
                ))
            });
            let _config_watcher = match (&live, no_watch) {
                (Some(live), false) => Some(
                    dsh::config_watch::watch(live.clone(), debounce)
                        .with_context(|| format!("cannot watch {}", live.path().display()))?,
                ),
                _ => None,
            };
            let host = Arc::new(host);
            let _control = {
                let (registry, session) = (host.registry.clone(), host.pipeline.session.id.clone());
                let pipeline = host.pipeline.clone();
                let config_status = move || match &live {
                    Some(live) => live.status(),
                    None => ConfigStatus::loaded(None, "", false),
                };
                let answer: Answer = Arc::new(move |request| match request {
                    "plugins" => Ok(json!({
                        "session": &*session,
                        "plugins": registry.plugins(),
                        "config": config_status(),
                    })),
                    "stats" => Ok(json!({ "session": &*session, "tools": pipeline.metrics() })),
                    other => Err(format!("unknown request {other:?} (known: plugins, stats)")),
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
        Command::Stats { .. } => unreachable!("answered before the host starts"),
        Command::Plugins { json, grants, .. } => {
            let config = config_path(&cli).map(|path| {
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                ConfigStatus::loaded(Some(&path), &text, false)
            });
            print_plugins(
                &host.registry.plugins(),
                Some(&config.unwrap_or_else(|| ConfigStatus::loaded(None, "", false))),
                *json,
                *grants,
                "no dsh serve running here: the plugin set as it would load",
            )?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The events of session `id` (the latest session when `None`).
fn session_events(
    state_dir: &std::path::Path,
    id: Option<&str>,
) -> anyhow::Result<(String, Vec<serde_json::Value>)> {
    let sessions = state_dir.join("sessions");
    let id = match id {
        Some(id) => id.to_string(),
        None => std::fs::read_dir(&sessions)
            .with_context(|| format!("no sessions under {}", sessions.display()))?
            .flatten()
            .filter(|entry| {
                std::fs::metadata(entry.path().join("events.jsonl")).is_ok_and(|m| m.len() > 0)
            })
            .max_by_key(|entry| entry.metadata().and_then(|m| m.modified()).ok())
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .with_context(|| format!("no sessions under {}", sessions.display()))?,
    };
    let path = sessions.join(&id).join("events.jsonl");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let events = text
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    Ok((id, events))
}

fn print_stats(
    origin: &str,
    tools: &std::collections::BTreeMap<String, ToolStats>,
    json: bool,
) -> anyhow::Result<()> {
    if json {
        let value = json!({
            "origin": origin,
            "tools": tools,
            "latency_bucket_bounds_ms": LATENCY_BUCKETS_MS,
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(());
    }
    println!("{origin}\n");
    println!(
        "{:<20} {:>7} {:>7} {:>8} {:>10} {:>10}  ERRORS BY CODE",
        "TOOL", "CALLS", "ERRORS", "RETRIES", "MEAN ms", "MAX ms"
    );
    for (name, stats) in tools {
        let errors: u64 = stats.errors.values().sum();
        let by_code: Vec<String> = stats
            .errors
            .iter()
            .map(|(code, n)| format!("{code} {n}"))
            .collect();
        println!(
            "{:<20} {:>7} {:>7} {:>8} {:>10.1} {:>10.1}  {}",
            name,
            stats.calls,
            errors,
            stats.retries,
            stats.latency_total_us as f64 / stats.calls.max(1) as f64 / 1000.0,
            stats.latency_max_us as f64 / 1000.0,
            by_code.join(", ")
        );
        let buckets: Vec<String> = stats
            .latency_buckets
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .map(|(i, n)| match LATENCY_BUCKETS_MS.get(i) {
                Some(bound) => format!("<={bound}ms: {n}"),
                None => format!(">{}ms: {n}", LATENCY_BUCKETS_MS.last().unwrap_or(&0)),
            })
            .collect();
        println!("{:<20} latency {}", "", buckets.join("  "));
    }
    Ok(())
}

fn print_plugins(
    plugins: &[PluginStatus],
    config: Option<&ConfigStatus>,
    json: bool,
    grants: bool,
    heading: &str,
) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(plugins)?);
        return Ok(());
    }
    println!("{heading}");
    if let Some(config) = config {
        print_config_status(config);
    }
    println!();
    println!(
        "{:<18} {:<13} {:<8} {:<8} {:<14} {:<20} {:>9} {:<40} TOOLS / REASON",
        "NAME", "KIND", "CONTRACT", "STATUS", "DIGEST", "LOADED (UTC)", "IN FLIGHT", "SOURCE"
    );
    for p in plugins {
        let detail = p.reason.clone().unwrap_or_else(|| p.tools.join(", "));
        let digest = p.digest.get(..12).unwrap_or(&p.digest);
        let in_flight = match p.calls_in_flight_on_old_versions {
            0 => p.calls_in_flight.to_string(),
            old => format!("{}+{old} old", p.calls_in_flight),
        };
        let kind = p.kind.map(|k| k.to_string()).unwrap_or_else(|| "?".into());
        let contract = p.contract.as_deref().unwrap_or("?");
        println!(
            "{:<18} {:<13} {:<8} {:<8} {:<14} {:<20} {:>9} {:<40} {}",
            p.name,
            kind,
            contract,
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
            println!("    connect:    {}", list(&granted.network));
            println!("    bind:       {}", list(&granted.bind));
            println!("    dns:        {}", list(&granted.dns));
            println!("    fs:         {}", list(&dirs));
            println!("    imports:    {}", list(&p.imports));
        }
    }
    Ok(())
}

/// The configuration lines of `dsh plugins`: the file in force, a refused version and
/// why, and the settings that wait for a restart.
fn print_config_status(config: &ConfigStatus) {
    let Some(path) = &config.path else {
        println!("config: none (the defaults)");
        return;
    };
    let digest = config.digest.get(..12).unwrap_or(&config.digest);
    let watched = if config.watched {
        "watched: changes apply to the next call"
    } else {
        "not watched"
    };
    println!(
        "config: {path} (sha256 {digest}, loaded {} UTC; {watched})",
        utc_time(config.loaded_at)
    );
    if config.status == "refused" {
        println!(
            "config: REFUSED at {} UTC, the version loaded before keeps serving: {}",
            config.refused_at.map(utc_time).unwrap_or_default(),
            config.reason.as_deref().unwrap_or("no reason given")
        );
    }
    if !config.restart_needed.is_empty() {
        println!(
            "config: changed, takes effect at restart: {}",
            config.restart_needed.join(", ")
        );
    }
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
/// The first of SIGINT, SIGTERM and SIGHUP (a closed terminal ends dsh as gracefully
/// as a TERM does).
async fn shutdown_signal() -> &'static str {
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
