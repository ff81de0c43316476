//! `dsh stats`: per-tool metrics, from the running server or from a session's event log,
//! per operator model (the subagents' `subagent/model` events of the session) and per host
//! contained runs reached or were refused through the egress proxy (its
//! `egress/connection` events).

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
    /// latency_bucket_bounds_ms, models: {NAME: {requests, errors, input_tokens,
    /// output_tokens, duration_total_ms}}, hosts: {HOST: {connections, refused, bytes_up,
    /// bytes_down}}}
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
    let (origin, tools, events) = match (&args.session, globals.chosen_server(args.server)?) {
        (None, Some(server)) => {
            let pid = server.pid;
            let answer = ask(server, "stats").await?;
            let tools = serde_json::from_value(answer["tools"].clone())
                .context("the server's stats are not what this dsh understands")?;
            let session = answer["session"].as_str().unwrap_or("?");
            // The models' and hosts' figures are the session's events (the log is flushed
            // per line).
            let events = session_events(&globals.state_dir(), Some(session))
                .map(|(_, events)| events)
                .unwrap_or_default();
            (
                format!("dsh serve, pid {pid}, session {session}"),
                tools,
                events,
            )
        }
        (session, _) => {
            let (id, events) = session_events(&globals.state_dir(), session.as_deref())?;
            (
                format!("session {id} (from its event log)"),
                Metrics::from_events(&events).snapshot(),
                events,
            )
        }
    };
    let (models, hosts) = (model_stats(&events), host_stats(&events));
    print_stats(&origin, &tools, &models, &hosts, args.json)?;
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

/// What the subagents asked of one operator model in a session.
#[derive(Debug, Default, serde::Serialize)]
struct ModelStats {
    requests: u64,
    errors: u64,
    input_tokens: u64,
    output_tokens: u64,
    duration_total_ms: f64,
}

/// Per operator model, from the session's `subagent/model` events.
fn model_stats(events: &[serde_json::Value]) -> BTreeMap<String, ModelStats> {
    let mut models: BTreeMap<String, ModelStats> = BTreeMap::new();
    for event in events.iter().filter(|e| e["event"] == "subagent/model") {
        let Some(name) = event["model"].as_str() else {
            continue;
        };
        let stats = models.entry(name.to_string()).or_default();
        stats.requests += 1;
        stats.errors += u64::from(!event["error"].is_null());
        stats.input_tokens += event["input_tokens"].as_u64().unwrap_or(0);
        stats.output_tokens += event["output_tokens"].as_u64().unwrap_or(0);
        stats.duration_total_ms += event["duration_ms"].as_f64().unwrap_or(0.0);
    }
    models
}

/// What contained runs did with one host through the egress proxy in a session.
#[derive(Debug, Default, serde::Serialize)]
struct HostStats {
    connections: u64,
    refused: u64,
    bytes_up: u64,
    bytes_down: u64,
}

/// Per host, from the session's `egress/connection` events.
fn host_stats(events: &[serde_json::Value]) -> BTreeMap<String, HostStats> {
    let mut hosts: BTreeMap<String, HostStats> = BTreeMap::new();
    for event in events.iter().filter(|e| e["event"] == "egress/connection") {
        let Some(host) = event["host"].as_str() else {
            continue;
        };
        let port = event["port"].as_u64().unwrap_or(0);
        let stats = hosts.entry(format!("{host}:{port}")).or_default();
        match event["decision"].as_str() {
            Some("refused") => stats.refused += 1,
            _ => stats.connections += 1,
        }
        stats.bytes_up += event["bytes_up"].as_u64().unwrap_or(0);
        stats.bytes_down += event["bytes_down"].as_u64().unwrap_or(0);
    }
    hosts
}

fn print_stats(
    origin: &str,
    tools: &BTreeMap<String, ToolStats>,
    models: &BTreeMap<String, ModelStats>,
    hosts: &BTreeMap<String, HostStats>,
    json: bool,
) -> anyhow::Result<()> {
    if json {
        return print::json(&json!({
            "origin": origin,
            "tools": tools,
            "latency_bucket_bounds_ms": LATENCY_BUCKETS_MS,
            "models": models,
            "hosts": hosts,
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
    if !models.is_empty() {
        println!(
            "\n{:<20} {:>8} {:>7} {:>12} {:>12} {:>10}",
            "MODEL", "REQUESTS", "ERRORS", "TOKENS IN", "TOKENS OUT", "MEAN ms"
        );
        for (name, stats) in models {
            println!(
                "{:<20} {:>8} {:>7} {:>12} {:>12} {:>10.1}",
                name,
                stats.requests,
                stats.errors,
                stats.input_tokens,
                stats.output_tokens,
                stats.duration_total_ms / stats.requests.max(1) as f64
            );
        }
    }
    if !hosts.is_empty() {
        println!(
            "\n{:<32} {:>11} {:>8} {:>12} {:>12}",
            "HOST (egress)", "CONNECTIONS", "REFUSED", "BYTES UP", "BYTES DOWN"
        );
        for (name, stats) in hosts {
            println!(
                "{:<32} {:>11} {:>8} {:>12} {:>12}",
                name, stats.connections, stats.refused, stats.bytes_up, stats.bytes_down
            );
        }
    }
    Ok(())
}
