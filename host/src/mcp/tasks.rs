//! Jobs as tasks (MCP 2026-07-28's Tasks extension, `io.modelcontextprotocol/tasks`,
//! SEP-2663). A client that declares the extension gets a call that starts a background
//! job (`bash` or `terminal_send` with `run_in_background`/`background`) answered as a
//! task whose id is the job's id (`bash-3`); `tasks/get` is the job's state and output,
//! its result once it ended (`completed`, the output and the exit code; `cancelled` for
//! a job killed), and `tasks/cancel` kills the job's process tree as `job_kill` does.
//!
//! A foreground call of such a client still running after `[serve] task_after_ms` is
//! answered as a task too: it becomes a job of kind `call` (`call-2`), its result the
//! job's output when it ends (a question it asks the client then is unanswered: denied),
//! and `tasks/cancel` or `job_kill` cancels it.
//!
//! A task is its job: it lives as long as the job is kept (`[jobs]
//! finished_retention_ms`, `max_finished_per_owner`), the job tools see it too, and only
//! its owner reaches it: any other id, another owner's or one that never existed, is
//! the same `-32602` naming the id.

use std::time::{Duration, SystemTime};

use rmcp::model::{
    CallToolResult, ContentBlock, CreateTaskResult, DetailedTask, ErrorData, GetTaskResult, Task,
    TaskPayload, TaskStatus,
};

use crate::call::CallResult;
use crate::error::{ErrorCode, ToolError};
use crate::host::Host;
use crate::services::jobs::{JobInfo, JobState};

use super::round_trip::{CallEvent, Running};

/// How often a client is asked to poll a task.
const POLL_INTERVAL_MS: u64 = 1000;

/// The most output a task's state carries (its newest bytes); the whole of it is in
/// `job_output`, from any cursor.
const MAX_OUTPUT_BYTES: u64 = 64 * 1024;

/// The task of the job a call's result says it started (`started background job ID`),
/// if that job is `owner`'s.
pub fn started(host: &Host, owner: &str, result: &CallToolResult) -> Option<CreateTaskResult> {
    if result.is_error == Some(true) {
        return None;
    }
    let text = result.content.first()?.as_text()?.text.as_str();
    let id = text
        .strip_prefix("started background job ")?
        .split_whitespace()
        .next()?;
    let info = host
        .services
        .jobs
        .list(owner)
        .into_iter()
        .find(|job| job.id == id)?;
    Some(CreateTaskResult::new(task(
        host,
        &info,
        TaskStatus::Working,
    )))
}

/// Makes a call still running a task: a job of kind `call` of `owner` whose output is
/// the call's result when it ends, the call moved to a task of its own. `None` (the call
/// left as it was) when the owner runs the most jobs it may.
pub fn adopt(
    host: &Host,
    owner: &std::sync::Arc<str>,
    tool: &str,
    args: &str,
    running: &mut Option<Running>,
) -> Option<CreateTaskResult> {
    let jobs = &host.services.jobs;
    let shown: String = args.chars().take(500).collect();
    let command = format!("{tool} {shown}");
    let job = match jobs.create("call", owner.clone(), format!("{tool} call"), command) {
        Ok(job) => job,
        Err(refused) => {
            tracing::debug!(owner = %owner, %refused, "a long call stays a call");
            return None;
        }
    };
    let info = jobs.list(owner).into_iter().find(|j| j.id == job.id)?;
    let mut call = running.take()?;
    call.detach();
    tokio::spawn(async move {
        let result = loop {
            tokio::select! {
                _ = job.cancel.cancelled(), if !call.cancel.is_cancelled() => call.cancel.cancel(),
                event = call.events.recv() => match event {
                    Some(CallEvent::Done(result)) => break result,
                    // Nobody is there to answer: the asker sees no answer (a denial).
                    Some(CallEvent::Ask { .. }) | Some(CallEvent::Notice(_)) => {}
                    None => break CallResult::failed(ToolError::new(
                        ErrorCode::Internal,
                        "the call ended without a result",
                    )),
                },
            }
        };
        let _ = job.push_output(result.text().as_bytes());
        job.finish(match &result.error {
            Some(error) if error.code == ErrorCode::Cancelled => JobState::Killed {
                signal: dsh_launch::os::SIGTERM,
                reason: None,
            },
            Some(_) => JobState::Exited { code: 1 },
            None => JobState::Exited { code: 0 },
        });
    });
    Some(CreateTaskResult::new(task(
        host,
        &info,
        TaskStatus::Working,
    )))
}

/// `tasks/get`: the state of `owner`'s job `id`, with its output.
pub async fn get(host: &Host, owner: &str, id: &str) -> Result<GetTaskResult, ErrorData> {
    let read = host
        .services
        .jobs
        .output(owner, id, 0, MAX_OUTPUT_BYTES, Duration::ZERO)
        .await
        .map_err(|_| no_task(id))?;
    let mut text = read.output;
    if read.omitted_bytes > 0 {
        text.insert_str(
            0,
            &format!(
                "[{} earlier bytes omitted: job_output {{\"id\":\"{id}\"}} reads them]\n",
                read.omitted_bytes
            ),
        );
    }
    let payload = match &read.info.state {
        JobState::Running => TaskPayload::Working,
        JobState::Killed { .. } => TaskPayload::Cancelled,
        JobState::Exited { code } => {
            text.push_str(&format!("[exit code: {code}]"));
            completed(text, *code != 0)
        }
        JobState::Failed { reason } => {
            text.push_str(&format!("[failed: {reason}]"));
            completed(text, true)
        }
    };
    let mut task = task(host, &read.info, payload.status());
    if let Some(note) = &read.info.note {
        task = task.with_status_message(note.clone());
    }
    Ok(GetTaskResult::new(DetailedTask::new(task, payload)))
}

/// `tasks/cancel`: kills `owner`'s job `id` and its process tree (TERM, then KILL after
/// the grace period), as `job_kill` does.
pub async fn cancel(host: &Host, owner: &str, id: &str) -> Result<(), ErrorData> {
    let report = host
        .services
        .jobs
        .kill(owner, id, "TERM")
        .await
        .map_err(|_| no_task(id))?;
    tracing::info!(
        owner,
        job = id,
        sent = report.sent,
        "task cancelled: its job killed"
    );
    Ok(())
}

/// The answer for any id that is not one of the caller's tasks.
fn no_task(id: &str) -> ErrorData {
    ErrorData::invalid_params(format!("no task {id:?}"), None)
}

/// A completed task's result: the call's result as a tool would give it.
fn completed(text: String, is_error: bool) -> TaskPayload {
    let result = if is_error {
        CallToolResult::error(vec![ContentBlock::text(text)])
    } else {
        CallToolResult::success(vec![ContentBlock::text(text)])
    };
    let result = match serde_json::to_value(result) {
        Ok(serde_json::Value::Object(map)) => map,
        _ => serde_json::Map::new(),
    };
    TaskPayload::Completed { result }
}

/// The task of `job`, as `status`.
fn task(host: &Host, job: &JobInfo, status: TaskStatus) -> Task {
    let ttl = host.config.jobs.finished_retention_ms;
    Task::new(
        job.id.clone(),
        status,
        timestamp(job.started_at),
        timestamp(SystemTime::now()),
    )
    .with_ttl_ms(ttl.saturating_add(job.runtime.as_millis() as u64))
    .with_poll_interval_ms(POLL_INTERVAL_MS)
}

/// `at` in ISO 8601 (RFC 3339, UTC).
fn timestamp(at: SystemTime) -> String {
    jiff::Timestamp::try_from(at)
        .map(|t| t.to_string())
        .unwrap_or_default()
}
