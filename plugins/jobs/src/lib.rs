//! The model-facing job tools over the host's job registry: `job_list`, `job_output`
//! and `job_kill`. The host scopes every one of them to the caller's own jobs.

use dsh_plugin::tool_process::jobs::{self, JobInfo, JobState, OutputRequest};
use dsh_plugin::{text, CallContext, Tool, ToolError, ToolResult, Tools};
use schemars::JsonSchema;
use serde::Deserialize;

/// Room in the output budget for the omitted-bytes marker and the status line.
const STATUS_ROOM: u32 = 1024;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ListArgs {}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct OutputArgs {
    /// The job id, e.g. bash-3.
    #[schemars(regex(pattern = r"^[a-z]+-[0-9]+$"))]
    id: String,
    /// Read from this byte offset: the cursor returned by the previous read (default 0, the start).
    since: Option<u64>,
    /// The most bytes to return (default: what fits the result budget, about 29000); when more are there, the newest are returned after an omitted-bytes marker.
    #[schemars(range(min = 1, max = 1000000))]
    max_bytes: Option<u32>,
    /// Wait up to this long for output newer than `since` (without `since`: newer than what the job had when you asked) or the job's end, whichever comes first (default 0: answer at once). The answer still holds everything from `since`.
    #[schemars(range(max = 60000))]
    wait_ms: Option<u32>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct KillArgs {
    /// The job id, e.g. bash-3.
    #[schemars(regex(pattern = r"^[a-z]+-[0-9]+$"))]
    id: String,
    /// The signal to send the job's whole process group (default TERM; KILL follows after a grace period if the group is still alive).
    signal: Option<Signal>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "UPPERCASE")]
enum Signal {
    Term,
    Int,
    Hup,
    Quit,
    Kill,
}

impl Signal {
    fn name(&self) -> &'static str {
        match self {
            Signal::Term => "TERM",
            Signal::Int => "INT",
            Signal::Hup => "HUP",
            Signal::Quit => "QUIT",
            Signal::Kill => "KILL",
        }
    }
}

struct Jobs;

impl Tools for Jobs {
    fn tools() -> Vec<Tool> {
        vec![
            Tool::new(
                "job_list",
                "List your background jobs (oldest first): id, kind, state, description, command, start time, runtime and exit code.",
                job_list,
            )
            .idempotent(),
            Tool::new(
                "job_output",
                "Read a background job's output from a cursor: pass the returned `next cursor` as `since` to get only what is new. With `wait_ms`, waits for new output or the job's end, whichever comes first, instead of polling. Shows the job's state and, once it ended, its exit code.",
                job_output,
            ),
            Tool::new(
                "job_kill",
                "Stop a background job: signal its whole process group (TERM by default), then KILL if it is still alive after a grace period. Reports what happened.",
                job_kill,
            ),
        ]
    }
}

fn state_line(info: &JobInfo) -> String {
    match info.state {
        JobState::Running => match &info.reason {
            // What it is doing, when its producer says (a subagent's turn and wait).
            Some(note) => format!("running ({note})"),
            None => "running".to_string(),
        },
        JobState::Exited => format!("exited with code {}", info.exit_code.unwrap_or(-1)),
        JobState::Killed => {
            let mut line = format!("killed by signal {}", info.signal.unwrap_or(0));
            if let Some(reason) = &info.reason {
                line.push_str(&format!(" ({reason})"));
            }
            line
        }
        JobState::Failed => format!(
            "failed: {}",
            info.reason.as_deref().unwrap_or("unknown reason")
        ),
    }
}

fn job_list(_context: &CallContext, _args: ListArgs) -> ToolResult {
    let jobs = jobs::list();
    if jobs.is_empty() {
        return text("no background jobs");
    }
    let lines: Vec<String> = jobs
        .iter()
        .map(|job| {
            format!(
                "{}\t{}\t{}\tstarted_at_ms={}\truntime_ms={}\t{}\t$ {}",
                job.id,
                job.kind,
                state_line(job),
                job.started_at_ms,
                job.runtime_ms,
                job.description,
                job.command
            )
        })
        .collect();
    text(lines.join("\n"))
}

fn job_output(context: &CallContext, args: OutputArgs) -> Result<ToolResult, ToolError> {
    // By default the output, the marker and the status line fit the call's budget, so
    // nothing is cut again after this read.
    let fits = context.output_budget.saturating_sub(STATUS_ROOM).max(1);
    let request = OutputRequest {
        id: args.id,
        since: args.since,
        max_bytes: Some(args.max_bytes.unwrap_or(fits)),
        wait_ms: args.wait_ms,
    };
    let read = jobs::output(&request)?;
    let mut content = String::new();
    if read.omitted_bytes > 0 {
        content.push_str(&format!(
            "… {} bytes omitted (full output: {}) …\n",
            read.omitted_bytes, read.full_output_path
        ));
    }
    content.push_str(&read.output);
    if !content.is_empty() && !content.ends_with('\n') {
        content.push('\n');
    }
    content.push_str(&format!(
        "[{}: {}; next cursor: {}]",
        read.info.id,
        state_line(&read.info),
        read.next_cursor
    ));
    Ok(text(content).with_full_output_path(read.full_output_path))
}

fn job_kill(_context: &CallContext, args: KillArgs) -> Result<ToolResult, ToolError> {
    let report = jobs::kill(&args.id, args.signal.as_ref().map(Signal::name))?;
    let mut content = format!(
        "{}: sent SIG{} to its process group",
        report.info.id, report.signal
    );
    if report.escalated {
        content.push_str("; it outlived the grace period, so SIGKILL followed");
    }
    content.push_str(&format!(
        "; now {} (after {} ms)",
        state_line(&report.info),
        report.waited_ms
    ));
    Ok(text(content))
}

dsh_plugin::export!(tool_process: Jobs);
