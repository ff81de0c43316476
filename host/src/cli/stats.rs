//! `dsh stats`: per-tool metrics, from the running server or from a session's event log.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use serde_json::json;

use dsh::pipeline::s6_observe::{Metrics, ToolStats, LATENCY_BUCKETS_MS};

use super::{ask, print, Globals};

#[derive(clap::Args)]
pub struct Args {
    /// Print JSON: {origin (the server or session the figures are from), tools: {NAME:
    /// {calls, errors, retries, latency_buckets, latency_total_us, latency_max_us}},
    /// latency_bucket_bounds_ms}
    #[arg(long)]
    json: bool,
    /// Which running server to ask, by pid (needed when several are running)
    #[arg(long, value_name = "PID")]
    server: Option<u32>,
    /// Read this session's event log instead (an id under STATE_DIR/sessions)
    #[arg(long, value_name = "ID", conflicts_with = "server")]
    session: Option<String>,
}

/// Prints the metrics; starts no host.
pub async fn run(globals: &Globals, args: Args) -> anyhow::Result<ExitCode> {
    let (origin, tools) = match (&args.session, globals.chosen_server(args.server)?) {
        (None, Some(server)) => {
            let pid = server.pid;
            let answer = ask(server, "stats").await?;
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
            let (id, events) = session_events(&globals.state_dir(), session.as_deref())?;
            (
                format!("session {id} (from its event log)"),
                Metrics::from_events(&events).snapshot(),
            )
        }
    };
    print_stats(&origin, &tools, args.json)?;
    Ok(ExitCode::SUCCESS)
}

/// The events of session `id` (the latest session when `None`).
fn session_events(
    state_dir: &Path,
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
    tools: &BTreeMap<String, ToolStats>,
    json: bool,
) -> anyhow::Result<()> {
    if json {
        return print::json(&json!({
            "origin": origin,
            "tools": tools,
            "latency_bucket_bounds_ms": LATENCY_BUCKETS_MS,
        }));
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
