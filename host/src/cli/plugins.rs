//! `dsh plugins`: the plugins of the running server (with its calls in flight and its
//! configuration file's status), or else the plugin set as `dsh serve` would load it.

use std::process::ExitCode;

use anyhow::Context;

use dsh::config::FsMode;
use dsh::config_watch::ConfigStatus;
use dsh::registry::PluginStatus;

use super::print::{self, utc_time};
use super::{ask, Globals};

#[derive(clap::Args)]
pub struct Args {
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
}

pub async fn run(globals: &Globals, args: Args) -> anyhow::Result<ExitCode> {
    if let Some(server) = globals.chosen_server(args.server)? {
        let pid = server.pid;
        let answer = ask(server, "plugins").await?;
        let plugins: Vec<PluginStatus> = serde_json::from_value(answer["plugins"].clone())
            .context("the server's plugin list is not what this dsh understands")?;
        let config: Option<ConfigStatus> = serde_json::from_value(answer["config"].clone()).ok();
        let heading = format!(
            "dsh serve, pid {pid}, session {}",
            answer["session"].as_str().unwrap_or("?")
        );
        print_plugins(&plugins, config.as_ref(), &args, &heading)?;
        return Ok(ExitCode::SUCCESS);
    }
    let host = globals.start().await?;
    let config = match globals.config_path() {
        Some(path) => {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            ConfigStatus::loaded(Some(&path), &text, false)
        }
        None => ConfigStatus::loaded(None, "", false),
    };
    print_plugins(
        &host.registry.plugins(),
        Some(&config),
        &args,
        "no dsh serve running here: the plugin set as it would load",
    )?;
    Ok(ExitCode::SUCCESS)
}

fn print_plugins(
    plugins: &[PluginStatus],
    config: Option<&ConfigStatus>,
    args: &Args,
    heading: &str,
) -> anyhow::Result<()> {
    if args.json {
        return print::json(&plugins);
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
        if let (true, Some(granted)) = (args.grants, &p.grants) {
            let list = |items: &[String]| match items.len() {
                0 => "none".to_string(),
                _ => items.join(", "),
            };
            let dirs: Vec<String> = granted
                .fs
                .iter()
                .map(|dir| {
                    let mode = match dir.mode {
                        FsMode::ReadOnly => "ro",
                        FsMode::ReadWrite => "rw",
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
    if args.grants {
        println!();
        println!(
            "host interfaces a plugin can be granted (`interfaces = [...]` in [plugins.NAME]):"
        );
        for capability in dsh::services::capabilities::ALL {
            println!("  {:<10} {}", capability.name, capability.summary);
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
