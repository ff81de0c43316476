//! `dsh call`: one call through the whole pipeline, its result printed; a guard's
//! `ask` answered from `--approval` or on the terminal.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use dsh::call::{describe_args, Approval, ApprovalFuture, ApprovalRequest, Approver, CallRequest};
use dsh::registry::DEFAULT_SCOPE;

use super::{print, shutdown_signal, Globals};

#[derive(clap::Args)]
pub struct Args {
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
}

/// Runs the call; exit status 1 when its result is an error. SIGINT, SIGTERM or
/// SIGHUP cancels it (what it started is killed) and its result is still printed.
pub async fn run(globals: &Globals, args: Args) -> anyhow::Result<ExitCode> {
    let host = globals.start().await?;
    // What the call changes is recorded under it only once the baseline is taken.
    host.baseline_taken().await;
    let arguments: serde_json::Value = serde_json::from_str(&args.args)
        .with_context(|| format!("arguments are not JSON: {}", args.args))?;
    let mut request = CallRequest::new(args.tool, arguments, "cli", args.scope);
    request.approver = Some(Arc::new(CliApprover(args.approval)));
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
    if args.json {
        print::json(&json!({
            "content": result.content_text(),
            "structured": result.structured,
            "is_error": result.is_error(),
            "error": result.error,
            "full_output_path": result.full_output_path,
        }))?;
    } else {
        let text = result.text();
        if text.ends_with('\n') {
            print!("{text}");
        } else {
            println!("{text}");
        }
    }
    host.close_observers().await;
    host.shutdown();
    Ok(if result.is_error() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// How `dsh call` answers a guard's `ask`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ApprovalMode {
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
