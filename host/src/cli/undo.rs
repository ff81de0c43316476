//! `dsh checkpoints` and `dsh undo`: the workspace's recorded changes, read from the
//! state directory, and a call's changes put back, as the operator (any owner's call).
//! Neither starts a host: a `dsh serve` recording the workspace meanwhile sees the
//! undo's writes as changes made outside it, and the undo's own record is journaled here.

use std::process::ExitCode;

use anyhow::Context;

use dsh::config::Config;
use dsh::services::undo::{Asker, Recorder};

use super::Globals;

#[derive(clap::Args)]
pub struct CheckpointsArgs {
    /// Print the records as JSON (an array, newest first)
    #[arg(long)]
    json: bool,
    /// How many of the newest records to show
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=10000))]
    limit: u32,
}

#[derive(clap::Args)]
pub struct UndoArgs {
    /// The record to undo as checkpoints lists it (SESSION/call-N); or use --session and --call
    #[arg(value_name = "ID", required_unless_present = "call", conflicts_with_all = ["session", "call"])]
    id: Option<String>,
    /// The session of the call (an id under STATE_DIR/sessions, as checkpoints shows it)
    #[arg(long, requires = "call")]
    session: Option<String>,
    /// The call: N or call-N
    #[arg(long, value_name = "N", requires = "session")]
    call: Option<String>,
    /// Also undo the later calls that changed the same paths since (newest first, all or none)
    #[arg(long)]
    and_later: bool,
    /// Print the summary as JSON
    #[arg(long)]
    json: bool,
}

/// The recorded workspace's records, read as this process finds them.
fn reader(globals: &Globals) -> anyhow::Result<std::sync::Arc<Recorder>> {
    let config = match globals.config_path() {
        Some(path) => Config::load(&path)?,
        None => Config::default(),
    };
    let workdir = match globals.workdir() {
        Some(dir) => dir,
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    let workdir = std::fs::canonicalize(&workdir)
        .with_context(|| format!("workspace {} does not exist", workdir.display()))?;
    Ok(Recorder::reader(
        &config.services().undo,
        &workdir,
        &globals.state_dir(),
    ))
}

pub async fn checkpoints(globals: &Globals, args: CheckpointsArgs) -> anyhow::Result<ExitCode> {
    let recorder = reader(globals)?;
    let list = recorder.checkpoints(&Asker::Operator, args.limit as usize);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&list)?);
        return Ok(ExitCode::SUCCESS);
    }
    if list.is_empty() {
        println!("No recorded changes in this workspace.");
    }
    for record in &list {
        println!(
            "{}  {}  {}",
            record["call_id"].as_str().unwrap_or("?"),
            record["tool"].as_str().unwrap_or("?"),
            record["at"].as_str().unwrap_or("?")
        );
        for change in record["changes"].as_array().into_iter().flatten() {
            let from = change["from"]
                .as_str()
                .map(|from| format!(" (from {from})"))
                .unwrap_or_default();
            println!(
                "  {:<18} {}{from}  {}",
                change["change"].as_str().unwrap_or("?"),
                change["path"].as_str().unwrap_or("?"),
                dsh::services::undo::recorder::bytes_text(change["size"].as_u64().unwrap_or(0))
            );
        }
        for what in record["not_recorded"].as_array().into_iter().flatten() {
            println!("  not recorded: {}", what.as_str().unwrap_or("?"));
        }
        if let Some(by) = record["undone_by"].as_str() {
            println!("  undone by {by}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn undo(globals: &Globals, args: UndoArgs) -> anyhow::Result<ExitCode> {
    let id = match (&args.id, &args.session, &args.call) {
        (Some(id), _, _) => id.clone(),
        (None, Some(session), Some(call)) => {
            let call = if call.starts_with("call-") {
                call.clone()
            } else {
                format!("call-{call}")
            };
            format!("{session}/{call}")
        }
        _ => anyhow::bail!("name the call: ID, or --session S --call N"),
    };
    let recorder = reader(globals)?;
    let and_later = args.and_later;
    let done =
        tokio::task::spawn_blocking(move || recorder.undo(&Asker::Operator, &id, and_later, None))
            .await?;
    match done {
        Ok(summary) => {
            if args.json {
                println!("{}", serde_json::to_string_pretty(&summary)?);
            } else {
                let undone: Vec<&str> = summary["undone"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|id| id.as_str())
                    .collect();
                println!("Undid {}; restored:", undone.join(", "));
                for path in summary["restored"].as_array().into_iter().flatten() {
                    println!("  {}", path.as_str().unwrap_or("?"));
                }
                for what in summary["not_restored"].as_array().into_iter().flatten() {
                    println!("  not restored: {}", what.as_str().unwrap_or("?"));
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(error) => {
            eprintln!("{error}");
            Ok(ExitCode::from(1))
        }
    }
}
