//! MCP resources: each terminal session's screen (`terminal://ID/screen`) and each
//! background job's output (`job://ID/output`), owner-scoped like the tools.
//!
//! `resources/list` names the calling connection's sessions and jobs only (the host's
//! own owner-scoped listings, [`TerminalService::list`] and [`JobRegistry::list`]);
//! `resources/read` returns the terminal's rendered screen as it is now, or the job's
//! output so far (its newest [`JOB_OUTPUT_MAX_BYTES`], with a note first when older
//! bytes were cut), read through the same service calls as `terminal_read` and
//! `job_output`. An id of another owner, one that never existed, a retired one and a
//! URI of no known shape are the same JSON-RPC error (resource not found), so ids
//! cannot be probed. `resources/templates/list` names the two URI templates.
//!
//! Neither `subscribe` nor `listChanged` is declared: no change is notified yet, a
//! client reads again to see more.
//!
//! [`TerminalService::list`]: crate::services::terminal::TerminalService::list
//! [`JobRegistry::list`]: crate::services::jobs::JobRegistry::list

use std::time::Duration;

use rmcp::model::{
    ErrorData, ListResourceTemplatesResult, ListResourcesResult, ReadResourceResult, Resource,
    ResourceContents, ResourceTemplate,
};

use crate::error::{ErrorCode, ToolError};
use crate::host::Host;
use crate::services::jobs::JobInfo;
use crate::services::terminal::{SessionInfo, View};

/// The most of a job's output one read returns (its newest bytes).
pub const JOB_OUTPUT_MAX_BYTES: u64 = 1024 * 1024;

const MIME: &str = "text/plain";

/// What a resource URI names.
#[derive(Debug, PartialEq, Eq)]
enum Target<'a> {
    Screen(&'a str),
    JobOutput(&'a str),
}

/// Parses `terminal://ID/screen` and `job://ID/output`; anything else is `None`.
fn parse(uri: &str) -> Option<Target<'_>> {
    if let Some(id) = uri
        .strip_prefix("terminal://")
        .and_then(|rest| rest.strip_suffix("/screen"))
    {
        return valid_id(id).then_some(Target::Screen(id));
    }
    if let Some(id) = uri
        .strip_prefix("job://")
        .and_then(|rest| rest.strip_suffix("/output"))
    {
        return valid_id(id).then_some(Target::JobOutput(id));
    }
    None
}

/// An id as the host makes them (`term-1`, `bash-3`): nothing that could be a path.
fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// A service's refusal as the answer to a read: `NOT_FOUND` (another owner's id, one
/// that never existed, one retired) is [`not_found`]; anything else (a spill file that
/// cannot be read) happened to one of the owner's own resources and is said as it is.
fn read_error(uri: &str, error: ToolError) -> ErrorData {
    if error.code == ErrorCode::NotFound {
        not_found(uri)
    } else {
        ErrorData::internal_error(
            format!("reading {uri}: {}", error.message),
            Some(serde_json::json!({ "uri": uri, "code": error.code })),
        )
    }
}

/// The one answer for every URI that names nothing this owner can read.
fn not_found(uri: &str) -> ErrorData {
    ErrorData::resource_not_found(
        format!("no resource {uri:?}"),
        Some(serde_json::json!({ "uri": uri })),
    )
}

fn terminal_resource(session: &SessionInfo) -> Resource {
    let state = if session.alive {
        "running".to_string()
    } else {
        match session.exit_code {
            Some(code) => format!("exited (code {code})"),
            None => "exited".to_string(),
        }
    };
    Resource::new(
        format!("terminal://{}/screen", session.id),
        format!("{} screen", session.id),
    )
    .with_title(format!("Terminal {} ({})", session.id, session.shell))
    .with_description(format!(
        "The screen of terminal session {} as it is now ({} in {}, {}x{}, {state}).",
        session.id,
        session.shell,
        session.cwd.display(),
        session.cols,
        session.rows
    ))
    .with_mime_type(MIME)
}

fn job_resource(job: &JobInfo) -> Resource {
    Resource::new(
        format!("job://{}/output", job.id),
        format!("{} output", job.id),
    )
    .with_title(format!("Job {}: {}", job.id, job.description))
    .with_description(format!(
        "The output so far of background job {} ({}, {}): {}",
        job.id,
        job.kind,
        job.state.name(),
        job.command
    ))
    .with_mime_type(MIME)
}

/// `resources/list`: the owner's terminal sessions, then its jobs, oldest first.
pub fn list(host: &Host, owner: &str) -> ListResourcesResult {
    let services = &host.services;
    let mut resources: Vec<Resource> = services
        .terminal
        .list(owner)
        .iter()
        .map(terminal_resource)
        .collect();
    resources.extend(services.jobs.list(owner).iter().map(job_resource));
    ListResourcesResult::with_all_items(resources)
}

/// `resources/templates/list`: the two URI shapes.
pub fn templates() -> ListResourceTemplatesResult {
    ListResourceTemplatesResult::with_all_items(vec![
        ResourceTemplate::new("terminal://{id}/screen", "terminal screen")
            .with_title("Terminal screen")
            .with_description(
                "The screen of a terminal session (terminal_open) as it is now; id: term-N.",
            )
            .with_mime_type(MIME),
        ResourceTemplate::new("job://{id}/output", "job output")
            .with_title("Job output")
            .with_description(format!(
                "The output so far of a background job (job_list); id: bash-N, terminal-N. \
                 At most the newest {} MiB.",
                JOB_OUTPUT_MAX_BYTES / (1024 * 1024)
            ))
            .with_mime_type(MIME),
    ])
}

/// `resources/read`: the current text of one of the owner's resources.
pub async fn read(host: &Host, owner: &str, uri: &str) -> Result<ReadResourceResult, ErrorData> {
    let services = &host.services;
    let text = match parse(uri).ok_or_else(|| not_found(uri))? {
        Target::Screen(id) => {
            services
                .terminal
                // The screen is the grid as it is now: no cursor, no byte budget.
                .read(owner, id, View::Screen, 0, usize::MAX)
                .map_err(|e| read_error(uri, e))?
                .text
        }
        Target::JobOutput(id) => {
            let read = services
                .jobs
                .output(owner, id, 0, JOB_OUTPUT_MAX_BYTES, Duration::ZERO)
                .await
                .map_err(|e| read_error(uri, e))?;
            if read.omitted_bytes > 0 {
                format!(
                    "[{} earlier bytes omitted; the whole output is in {}]\n{}",
                    read.omitted_bytes,
                    read.full_output_path.display(),
                    read.output
                )
            } else {
                read.output
            }
        }
    };
    Ok(ReadResourceResult::new(vec![ResourceContents::text(
        text, uri,
    )
    .with_mime_type(MIME)]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_parse_to_their_targets_and_nothing_else_does() {
        assert_eq!(
            parse("terminal://term-1/screen"),
            Some(Target::Screen("term-1"))
        );
        assert_eq!(
            parse("job://bash-3/output"),
            Some(Target::JobOutput("bash-3"))
        );
        for uri in [
            "terminal://term-1/plain",
            "terminal:///screen",
            "terminal://../x/screen",
            "terminal://a/b/screen",
            "job://bash-3/output/",
            "file:///etc/passwd",
            "",
        ] {
            assert_eq!(parse(uri), None, "{uri}");
        }
    }

    #[test]
    fn not_found_is_the_resource_not_found_code() {
        let error = not_found("job://bash-9/output");
        assert_eq!(error.code, rmcp::model::ErrorCode::RESOURCE_NOT_FOUND);
        let refused = ToolError::new(ErrorCode::NotFound, "no job \"bash-9\"");
        let theirs = read_error("job://bash-9/output", refused);
        assert_eq!(theirs.code, rmcp::model::ErrorCode::RESOURCE_NOT_FOUND);
        assert_eq!(
            theirs.message, error.message,
            "the service's words are not passed on"
        );
    }
}
