//! `dsh upgrade`: asks the running `dsh serve` to execute a new binary in its own
//! process, handing over its live state (see `dsh::upgrade`), and waits until the new
//! binary answers on the control socket.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::json;

use super::Globals;

#[derive(clap::Args)]
pub struct Args {
    /// The binary to execute in the server's process (by default the file at the path
    /// the server's executable was started from: a new release installed over it)
    #[arg(long, value_name = "PATH")]
    binary: Option<PathBuf>,
    /// Which running server to upgrade, by pid (needed when several are running)
    #[arg(long, value_name = "PID")]
    server: Option<u32>,
    /// How long to wait, in all, for the server to drain its calls, check the new binary
    /// and answer from it
    #[arg(long, value_name = "MS", default_value_t = 60_000)]
    wait_ms: u64,
}

pub async fn run(globals: &Globals, args: Args) -> anyhow::Result<ExitCode> {
    let server = globals.chosen_server(args.server)?.with_context(|| {
        format!(
            "no dsh serve is running on {}",
            globals.state_dir().display()
        )
    })?;
    let binary = match args.binary {
        Some(path) => Some(
            std::path::absolute(&path)
                .with_context(|| format!("cannot make {} absolute", path.display()))?,
        ),
        None => None,
    };
    let wait = Duration::from_millis(args.wait_ms);
    let started = Instant::now();
    let asked = server.clone();
    let before =
        tokio::task::spawn_blocking(move || dsh::control::ask(&asked, "version")).await??;
    let generation = before["generation"].as_u64().unwrap_or(0);
    let request = format!("upgrade {}", json!({ "binary": binary }));
    let asked = server.clone();
    let answer =
        tokio::task::spawn_blocking(move || dsh::control::ask_within(&asked, &request, wait))
            .await??;
    eprintln!(
        "dsh: server {}: {}",
        server.pid,
        answer["upgrading"].as_str().unwrap_or("upgrading")
    );
    // The new binary listens on the same socket once it has taken over.
    loop {
        let asked = server.clone();
        let now = tokio::task::spawn_blocking(move || {
            dsh::control::ask_within(&asked, "version", Duration::from_secs(1))
        })
        .await?;
        if let Ok(now) = now {
            if now["generation"].as_u64().unwrap_or(0) > generation {
                println!(
                    "dsh serve {} now runs {} (dsh {}; upgrade {})",
                    server.pid,
                    now["exe"].as_str().unwrap_or("?"),
                    now["version"].as_str().unwrap_or("?"),
                    now["generation"]
                );
                return Ok(ExitCode::SUCCESS);
            }
        }
        if started.elapsed() > wait {
            anyhow::bail!(
                "server {} did not answer from the new binary within {} ms",
                server.pid,
                args.wait_ms
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
