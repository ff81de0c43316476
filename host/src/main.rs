//! The `dsh` command line: the binary's edge, where errors become `anyhow` and exit
//! codes.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use serde_json::json;

use dsh::call::CallRequest;
use dsh::config::Config;
use dsh::host::{Host, HostOptions};
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
            let result = tokio::select! {
                result = host.pipeline.call(request) => result,
                signal = shutdown_signal() => {
                    host.shutdown();
                    bail!("interrupted by {signal}; every process of the call was killed");
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
