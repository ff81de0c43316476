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
//! `resources/subscribe` takes one of the owner's URIs (any other is the same
//! not-found error); from then on [`forward_changes`] sends
//! `notifications/resources/updated` when that screen or output changes, and every
//! connection hears `notifications/resources/list_changed` as its owner's sessions and
//! jobs come, end and go. Both are sent at most once per
//! `[serve] resource_update_interval_ms`, what changed in between together. Only the
//! owner's own changes reach a connection ([`ResourceChanges`] has a channel per
//! owner). `completion/complete` completes the templates' `id` from the owner's ids.
//!
//! [`ResourceChanges`]: crate::services::resource_changes::ResourceChanges
//! [`TerminalService::list`]: crate::services::terminal::TerminalService::list
//! [`JobRegistry::list`]: crate::services::jobs::JobRegistry::list

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CompleteRequestParams, CompleteResult, CompletionInfo, ErrorData, ListResourceTemplatesResult,
    ListResourcesResult, ReadResourceResult, Reference, Resource, ResourceContents,
    ResourceTemplate, ResourceUpdatedNotificationParam,
};
use rmcp::RoleServer;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use crate::error::{ErrorCode, ToolError};
use crate::host::Host;
use crate::services::jobs::JobInfo;
use crate::services::resource_changes::ResourceChange;
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

/// The URI of terminal session `id`'s screen (what [`parse`] reads back).
fn screen_uri(id: &str) -> String {
    format!("terminal://{id}/screen")
}

/// The URI of job `id`'s output.
fn job_output_uri(id: &str) -> String {
    format!("job://{id}/output")
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
    Resource::new(screen_uri(&session.id), format!("{} screen", session.id))
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
    Resource::new(job_output_uri(&job.id), format!("{} output", job.id))
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

const SCREEN_TEMPLATE: &str = "terminal://{id}/screen";
const JOB_OUTPUT_TEMPLATE: &str = "job://{id}/output";

/// `resources/templates/list`: the two URI shapes.
pub fn templates() -> ListResourceTemplatesResult {
    ListResourceTemplatesResult::with_all_items(vec![
        ResourceTemplate::new(SCREEN_TEMPLATE, "terminal screen")
            .with_title("Terminal screen")
            .with_description(
                "The screen of a terminal session (terminal_open) as it is now; id: term-N.",
            )
            .with_mime_type(MIME),
        ResourceTemplate::new(JOB_OUTPUT_TEMPLATE, "job output")
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

/// The owner's terminal session ids, oldest first.
fn terminal_ids(host: &Host, owner: &str) -> Vec<String> {
    let sessions = host.services.terminal.list(owner);
    sessions.into_iter().map(|session| session.id).collect()
}

/// The owner's job ids, oldest first.
fn job_ids(host: &Host, owner: &str) -> Vec<String> {
    let jobs = host.services.jobs.list(owner);
    jobs.into_iter().map(|job| job.id).collect()
}

/// The URIs one connection subscribed to.
pub type Subscriptions = Arc<Mutex<HashSet<String>>>;

/// `resources/subscribe`: `uri` must name one of the owner's resources now.
pub fn subscribe(
    host: &Host,
    owner: &str,
    subscriptions: &Subscriptions,
    uri: &str,
) -> Result<(), ErrorData> {
    let exists = match parse(uri).ok_or_else(|| not_found(uri))? {
        Target::Screen(id) => terminal_ids(host, owner).iter().any(|known| known == id),
        Target::JobOutput(id) => job_ids(host, owner).iter().any(|known| known == id),
    };
    if !exists {
        return Err(not_found(uri));
    }
    subscriptions.lock().unwrap().insert(uri.to_string());
    Ok(())
}

/// `resources/unsubscribe`: forgets `uri` (one never subscribed to is no error).
pub fn unsubscribe(subscriptions: &Subscriptions, uri: &str) {
    subscriptions.lock().unwrap().remove(uri);
}

/// `completion/complete` of a template's `id`: the owner's ids that start with what the
/// client has typed, oldest first, at most [`CompletionInfo::MAX_VALUES`].
pub fn complete(
    host: &Host,
    owner: &str,
    request: &CompleteRequestParams,
) -> Result<CompleteResult, ErrorData> {
    let template = match &request.r#ref {
        Reference::Resource(reference) => reference.uri.as_str(),
        _ => {
            return Err(ErrorData::invalid_params(
                "dsh completes only its resource templates' arguments: it has no prompts",
                None,
            ))
        }
    };
    let ids = match template {
        SCREEN_TEMPLATE => terminal_ids(host, owner),
        JOB_OUTPUT_TEMPLATE => job_ids(host, owner),
        other => {
            return Err(ErrorData::invalid_params(
                format!(
                    "no resource template {other:?}; dsh's are {SCREEN_TEMPLATE:?} and {JOB_OUTPUT_TEMPLATE:?}"
                ),
                None,
            ))
        }
    };
    if request.argument.name != "id" {
        return Err(ErrorData::invalid_params(
            format!(
                "template {template:?} has no argument {:?}, only \"id\"",
                request.argument.name
            ),
            None,
        ));
    }
    let matching: Vec<String> = ids
        .into_iter()
        .filter(|id| id.starts_with(&request.argument.value))
        .collect();
    let total = matching.len();
    let values: Vec<String> = matching
        .into_iter()
        .take(CompletionInfo::MAX_VALUES)
        .collect();
    let has_more = total > values.len();
    let completion = CompletionInfo::with_pagination(values, Some(total as u32), has_more)
        .map_err(|e| ErrorData::internal_error(e, None))?;
    Ok(CompleteResult::new(completion))
}

/// The URI a change of one session or job is about.
fn changed_uri(change: &ResourceChange) -> Option<String> {
    match change {
        ResourceChange::Screen(id) => Some(screen_uri(id)),
        ResourceChange::JobOutput(id) => Some(job_output_uri(id)),
        ResourceChange::Listed => None,
    }
}

/// Where a connection's resource changes go: the connection itself (2025:
/// `resources/subscribe` and the GET stream), or one `subscriptions/listen` request
/// (2026-07-28). Each send says whether the client can still be reached.
pub trait ChangeSink: Send + Sync {
    /// `notifications/resources/updated` for `uri`.
    fn updated(&self, uri: String) -> impl std::future::Future<Output = bool> + Send;
    /// `notifications/resources/list_changed`.
    fn list_changed(&self) -> impl std::future::Future<Output = bool> + Send;
}

impl ChangeSink for rmcp::Peer<RoleServer> {
    async fn updated(&self, uri: String) -> bool {
        let update = ResourceUpdatedNotificationParam::new(uri);
        self.notify_resource_updated(update).await.is_ok()
    }
    async fn list_changed(&self) -> bool {
        self.notify_resource_list_changed().await.is_ok()
    }
}

impl ChangeSink for rmcp::service::SubscriptionSink {
    async fn updated(&self, uri: String) -> bool {
        self.notify_resource_updated(uri).await.is_ok()
    }
    async fn list_changed(&self) -> bool {
        self.notify_resource_list_changed().await.is_ok()
    }
}

/// Sends one client the changes of its owner's resources (`changes`, watched by the
/// caller before the client's next request is served) until `closed`:
/// `resources/updated` for the subscribed URIs, `resources/list_changed` for the list
/// (when `list_changes`), at most once per `interval` each time, what changed in
/// between together.
pub async fn forward_changes(
    host: Arc<Host>,
    owner: Arc<str>,
    mut changes: tokio::sync::broadcast::Receiver<
        crate::services::resource_changes::ResourceChange,
    >,
    sink: impl ChangeSink,
    subscriptions: Subscriptions,
    list_changes: bool,
    closed: CancellationToken,
) {
    let interval = Duration::from_millis(host.config.serve.resource_update_interval_ms);
    let mut updated: HashSet<String> = HashSet::new();
    let mut listed = false;
    let mut next_send = tokio::time::Instant::now();
    loop {
        let due = listed || !updated.is_empty();
        tokio::select! {
            _ = closed.cancelled() => return,
            change = changes.recv() => match change {
                Ok(change) => match changed_uri(&change) {
                    Some(uri) => {
                        if subscriptions.lock().unwrap().contains(&uri) {
                            updated.insert(uri);
                        }
                    }
                    None => listed = list_changes,
                },
                // Fell behind: whatever it watches may have changed.
                Err(RecvError::Lagged(missed)) => {
                    tracing::debug!(owner = %owner, missed, "resource changes missed; all taken as changed");
                    updated.extend(subscriptions.lock().unwrap().iter().cloned());
                    listed = list_changes;
                }
                Err(RecvError::Closed) => return,
            },
            _ = tokio::time::sleep_until(next_send), if due => {
                for uri in updated.drain() {
                    if !sink.updated(uri).await {
                        return;
                    }
                }
                if std::mem::take(&mut listed) && !sink.list_changed().await {
                    return;
                }
                next_send = tokio::time::Instant::now() + interval;
            }
        }
    }
}

/// The part of a `subscriptions/listen` filter `owner` gets: the list changes, and of
/// the resources named, those that are its own now (another owner's URI is dropped
/// exactly as one that never existed).
pub fn accepted_filter(
    host: &Host,
    owner: &str,
    requested: &rmcp::model::SubscriptionFilter,
) -> rmcp::model::SubscriptionFilter {
    let mut accepted = requested.clone();
    accepted.prompts_list_changed = None;
    accepted.resource_subscriptions = requested.resource_subscriptions.as_ref().map(|uris| {
        uris.iter()
            .filter(|uri| subscribe(host, owner, &Subscriptions::default(), uri).is_ok())
            .cloned()
            .collect()
    });
    accepted
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
