//! The `dsh` command line: the binary's edge, where errors become `anyhow` and exit
//! codes. This file is the clap definition and the dispatch; each command lives in its
//! own file under [`cli`].

#![forbid(unsafe_code)]

mod cli;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use dsh_launch::containment::keeper;

/// dsh: a host runtime for AI agent tools. Tools and guards are WebAssembly components;
/// the host owns processes, validates every call and runs it through a pipeline of
/// gates and guards.
#[derive(Parser)]
#[command(name = "dsh", version, about, long_about = None)]
struct Cli {
    #[command(flatten)]
    globals: cli::Globals,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the tool manuals a scope sees
    Tools(cli::tools::Args),
    /// Run one call through the whole pipeline and print its result
    /// (exit status 1 when the result is an error)
    Call(cli::call::Args),
    /// Serve MCP: on stdio (the default), or streamable HTTP with --http
    ///
    /// Over stdio the server ends when the client closes stdin. Over HTTP every request
    /// needs `Authorization: Bearer TOKEN`, the token taken from DSH_HTTP_TOKEN or
    /// generated and printed at start. Each connection (HTTP session) is its own owner;
    /// what it started is killed a grace period after it goes away ([serve] in dsh.toml).
    /// The same listener serves Prometheus metrics at /metrics to the token in
    /// DSH_METRICS_TOKEN (generated and printed when unset), and to no other.
    Serve(cli::serve::Args),
    /// Upgrade a running `dsh serve` in place, keeping its terminals
    ///
    /// The new binary first checks, while the server still serves, that it loads the
    /// configuration and every plugin serving now. Then the server stops reading
    /// requests (they wait), lets calls in flight finish ([serve] upgrade_drain_ms, then
    /// CANCELLED), writes its live state to a snapshot, has the new binary check it
    /// reads it, and executes that binary in its own process (same pid): terminals, background commands, their output, language servers, the stdio
    /// connection or the HTTP listener and sessions, and the session go on. Refused while
    /// a background terminal send or a subagent runs (not handed over yet), and to any
    /// process dsh itself started. SIGUSR2 to the server does the same with the
    /// installed binary.
    Upgrade(cli::upgrade::Args),
    /// Per-tool metrics: calls, errors by code, retries, latency
    ///
    /// From the `dsh serve` running on this state directory (its calls so far), or else
    /// from the event log of a session (the latest, or --session).
    Stats(cli::stats::Args),
    /// List the plugins with their source, digest, load time and status
    ///
    /// With a `dsh serve` running on the same state directory, shows that server's
    /// plugins as they are now, with the calls in flight on each (and on the versions
    /// a reload replaced), and its configuration file: the version in force, a refused
    /// version and why, settings changed that wait for a restart. With none, shows the
    /// plugin set as `dsh serve` would load it.
    Plugins(cli::plugins::Args),
    /// Work on one plugin: `new NAME --lang L` writes a project; `check FILE` loads it
    /// as `dsh serve` would and says what it is, what it needs, or why it is refused
    Plugin(cli::plugin::Args),
    /// List the recorded calls that changed the workspace's files, newest first
    ///
    /// Every owner's calls (and changes made outside dsh), each with the paths it
    /// created, modified, deleted, renamed or changed the mode of ([undo] in dsh.toml).
    /// Reads the records in the state directory; starts no host.
    Checkpoints(cli::undo::CheckpointsArgs),
    /// Put back every path a recorded call changed, as it was before that call
    ///
    /// Refuses (exit status 1, nothing changed) when a later call or something outside
    /// dsh changed one of those paths since; --and-later undoes the later calls that
    /// changed them too. The undo is itself recorded, so it can be undone.
    Undo(cli::undo::UndoArgs),
    /// Attach this terminal to a running server's terminal session (Ctrl-] detaches)
    ///
    /// Shows the session's screen, then its output as it comes; with --write, what you
    /// type goes into it (the agent's sends are refused meanwhile) and it takes this
    /// terminal's size until you detach. --list lists every session of every running
    /// server. Refused to another user and to any process dsh itself started.
    Attach(cli::attach::Args),
}

fn main() -> ExitCode {
    // First of all, before anything reads a secret or starts a thread: see the function.
    if let Err(error) = make_non_dumpable() {
        eprintln!("dsh: cannot make this process non-dumpable: {error}");
        return ExitCode::from(2);
    }
    // The keeper is this executable started under another name (see containment).
    let mut args = std::env::args_os();
    if args.next().is_some_and(|name| name == keeper::KEEPER_NAME) {
        let args: Vec<std::ffi::OsString> = args.collect();
        return ExitCode::from(keeper::main(&args));
    }
    dsh_launch::containment::supervise_children();
    let cli = Cli::parse();
    let traces = traces_wanted(&cli);
    install_log_and_traces(traces);
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
    let outcome = runtime.block_on(run(cli));
    // Whatever still waits on the runtime's blocking threads is not waited for: a read of
    // stdin that is a socket or a terminal (tokio's stdin reads on a blocking thread) never
    // ends by itself, and everything dsh started has been killed by now.
    runtime.shutdown_background();
    dsh::traces::shutdown();
    match outcome {
        Ok(code) => code,
        Err(error) => {
            eprintln!("dsh: {error:#}");
            ExitCode::from(2)
        }
    }
}

/// Where `dsh serve` sends traces, and how long one export may take: `[traces]` of its
/// configuration file. Other commands, a configuration that does not load (`serve` says
/// why itself) and an upgrade's check processes send none.
fn traces_wanted(cli: &Cli) -> Option<(String, std::time::Duration)> {
    if !matches!(cli.command, Command::Serve(_)) || dsh::upgrade::checking().is_some() {
        return None;
    }
    let config = dsh::config::Config::load(&cli.globals.config_path()?).ok()?;
    let endpoint = config.traces.endpoint_url().ok()??;
    let timeout = std::time::Duration::from_millis(config.traces.export_timeout_ms);
    Some((endpoint, timeout))
}

/// Installs the log on stderr (`RUST_LOG`, `dsh=warn` by default) and, when `traces`
/// names an endpoint, the OTLP exporter of the calls' spans; each layer takes only what
/// its own filter lets through.
fn install_log_and_traces(traces: Option<(String, std::time::Duration)>) {
    use tracing_subscriber::prelude::*;
    let log = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(log_in_colour())
        .with_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "dsh=warn".into()),
        );
    let exporting = traces.map(|(endpoint, timeout)| {
        dsh::traces::exporting(&endpoint, timeout).map(|layer| (layer, endpoint))
    });
    let (layer, failed) = match exporting {
        Some(Ok((layer, endpoint))) => {
            eprintln!("dsh: traces to {endpoint}");
            (Some(layer), None)
        }
        Some(Err(error)) => (None, Some(error)),
        None => (None, None),
    };
    tracing_subscriber::registry().with(log).with(layer).init();
    if let Some(error) = failed {
        tracing::error!(%error, "serving without traces");
    }
}

/// Whether dsh's log on stderr is coloured: only on a terminal, and not when `NO_COLOR`
/// is set to anything but the empty string (<https://no-color.org>).
fn log_in_colour() -> bool {
    use std::io::IsTerminal;
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|value| !value.is_empty());
    !no_color && std::io::stderr().is_terminal()
}

/// Makes this process non-dumpable (`prctl(PR_SET_DUMPABLE, 0)`), so that the commands
/// it runs cannot read its secrets through the kernel.
///
/// Under the `local` executor a command runs as dsh's own user, and the kernel lets any
/// process of a user read another dumpable process of that user: its environment
/// (`/proc/PID/environ`, where `DSH_HTTP_TOKEN` and every variable `[process.env]` keeps
/// from commands still are), its memory (`/proc/PID/mem`, `process_vm_readv`, ptrace,
/// where the bearer tokens are), its maps and its open files (`/proc/PID/fd`,
/// `pidfd_getfd`). Access to a non-dumpable process needs `CAP_SYS_PTRACE`, and its
/// owner-only `/proc/PID` files belong to root, so a command that is not root gets
/// `Permission denied`; nor is there a core dump, which would hold the same secrets.
///
/// dsh's own reads keep working: its world-readable `/proc/self` files (mountinfo,
/// cgroup, task children) stay so, and the kernel always lets a process at its own maps,
/// fds and exe; only the owner-only ones (environ, mem, auxv, uid_map) become root's,
/// and dsh reads none of its own. The commands it starts are dumpable again from their
/// `execve`, as ordinary processes of the user (until then a child that shares dsh's
/// memory, as `spawn` makes them, is non-dumpable as well). The keeper is this
/// executable run again (`/proc/self/exe`; `execve` makes it dumpable) and passes here
/// too. It is the first thing done, before any thread or file exists: only the instant
/// between `execve` and this call is left, before dsh has started any command.
fn make_non_dumpable() -> std::io::Result<()> {
    rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
        .map_err(std::io::Error::from)
}

/// Runs the command; an error is exit status 2 (a failed call is 1, from `dsh call`).
async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let globals = &cli.globals;
    match cli.command {
        Command::Tools(args) => cli::tools::run(globals, args).await,
        Command::Call(args) => cli::call::run(globals, args).await,
        Command::Serve(args) => cli::serve::run(globals, args).await,
        Command::Stats(args) => cli::stats::run(globals, args).await,
        Command::Upgrade(args) => cli::upgrade::run(globals, args).await,
        Command::Plugins(args) => cli::plugins::run(globals, args).await,
        Command::Plugin(args) => cli::plugin::run(globals, args).await,
        Command::Checkpoints(args) => cli::undo::checkpoints(globals, args).await,
        Command::Undo(args) => cli::undo::undo(globals, args).await,
        Command::Attach(args) => cli::attach::run(globals, args).await,
    }
}
