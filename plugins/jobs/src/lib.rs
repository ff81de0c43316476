//! The model-facing job tools over the host's job registry: `job_list`, `job_output`
//! and `job_kill`. The host scopes every one of them to the caller's own jobs.

wit_bindgen::generate!({ path: "../../wit/v0.2.0", world: "tool-process" });
include!("../../shared/results.rs");

use dsh::plugin::jobs::{self, JobInfo, JobState, OutputRequest};
use dsh::plugin::types::{ErrorCode, ToolError};
use serde::Deserialize;

/// Room in the output budget for the omitted-bytes marker and the status line.
const STATUS_ROOM: u32 = 1024;

const LIST_SCHEMA: &str = r#"{"type":"object","properties":{},"additionalProperties":false}"#;

const OUTPUT_SCHEMA: &str = r#"{
  "type": "object",
  "properties": {
    "id": { "type": "string", "pattern": "^[a-z]+-[0-9]+$", "description": "The job id, e.g. bash-3." },
    "since": { "type": "integer", "minimum": 0, "description": "Read from this byte offset: the cursor returned by the previous read (default 0, the start)." },
    "max_bytes": { "type": "integer", "minimum": 1, "maximum": 1000000, "description": "The most bytes to return (default: what fits the result budget, about 29000); when more are there, the newest are returned after an omitted-bytes marker." },
    "wait_ms": { "type": "integer", "minimum": 0, "maximum": 60000, "description": "Wait up to this long for new output or the job's end, whichever comes first (default 0: answer at once)." }
  },
  "required": ["id"],
  "additionalProperties": false
}"#;

const KILL_SCHEMA: &str = r#"{
  "type": "object",
  "properties": {
    "id": { "type": "string", "pattern": "^[a-z]+-[0-9]+$", "description": "The job id, e.g. bash-3." },
    "signal": { "type": "string", "enum": ["TERM", "INT", "HUP", "QUIT", "KILL"], "description": "The signal to send the job's whole process group (default TERM; KILL follows after a grace period if the group is still alive)." }
  },
  "required": ["id"],
  "additionalProperties": false
}"#;

#[derive(Deserialize)]
struct OutputArgs {
    id: String,
    since: Option<u64>,
    max_bytes: Option<u32>,
    wait_ms: Option<u32>,
}

#[derive(Deserialize)]
struct KillArgs {
    id: String,
    signal: Option<String>,
}

struct Jobs;

fn spec(name: &str, description: &str, schema: &str, idempotent: bool) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: description.into(),
        input_schema: schema.into(),
        idempotent,
        output_budget: None,
        output_schema: None,
    }
}

fn state_line(info: &JobInfo) -> String {
    match info.state {
        JobState::Running => "running".to_string(),
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

fn bad_arguments(error: serde_json::Error) -> ToolResult {
    failed(ToolError {
        code: ErrorCode::InvalidArguments,
        message: format!("bad arguments: {error}"),
    })
}

impl Guest for Jobs {
    fn describe() -> Vec<ToolSpec> {
        vec![
            spec(
                "job_list",
                "List your background jobs (oldest first): id, kind, state, description, command, start time, runtime and exit code.",
                LIST_SCHEMA,
                true,
            ),
            spec(
                "job_output",
                "Read a background job's output from a cursor: pass the returned `next cursor` as `since` to get only what is new. With `wait_ms`, waits for new output or the job's end, whichever comes first, instead of polling. Shows the job's state and, once it ended, its exit code.",
                OUTPUT_SCHEMA,
                false,
            ),
            spec(
                "job_kill",
                "Stop a background job: signal its whole process group (TERM by default), then KILL if it is still alive after a grace period. Reports what happened.",
                KILL_SCHEMA,
                false,
            ),
        ]
    }

    fn call(context: CallContext, name: String, args_json: String) -> ToolResult {
        match name.as_str() {
            "job_list" => {
                let jobs = jobs::list();
                if jobs.is_empty() {
                    return ok("no background jobs".into());
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
                ok(lines.join("\n"))
            }
            "job_output" => {
                let args: OutputArgs = match serde_json::from_str(&args_json) {
                    Ok(args) => args,
                    Err(error) => return bad_arguments(error),
                };
                // By default the output, the marker and the status line fit the
                // call's budget, so nothing is cut again after this read.
                let fits = context.output_budget.saturating_sub(STATUS_ROOM).max(1);
                let request = OutputRequest {
                    id: args.id,
                    since: args.since,
                    max_bytes: Some(args.max_bytes.unwrap_or(fits)),
                    wait_ms: args.wait_ms,
                };
                match jobs::output(&request) {
                    Ok(read) => {
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
                        ToolResult {
                            content: text(content),
                            structured_json: None,
                            error: None,
                            full_output_path: Some(read.full_output_path),
                        }
                    }
                    Err(error) => failed(error),
                }
            }
            "job_kill" => {
                let args: KillArgs = match serde_json::from_str(&args_json) {
                    Ok(args) => args,
                    Err(error) => return bad_arguments(error),
                };
                match jobs::kill(&args.id, args.signal.as_deref()) {
                    Ok(report) => {
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
                        ok(content)
                    }
                    Err(error) => failed(error),
                }
            }
            other => failed(ToolError {
                code: ErrorCode::UnknownTool,
                message: format!("no tool named {other:?}"),
            }),
        }
    }
}

export!(Jobs);
