//! MCP resources: what the capabilities show their owners ([`ResourceSource`]: each
//! terminal session's screen, `terminal://ID/screen`, and each background job's output,
//! `job://ID/output`), owner-scoped like the tools. This module names no capability: it
//! serves whatever kinds [`Services::resources`] gives, in list order.
//!
//! `resources/list` names the calling connection's own resources only; `resources/read`
//! returns one as it is now, read through the same service calls as the tools
//! (`terminal_read`, `job_output`). An id of another owner, one that never existed, a
//! retired one and a URI of no known shape are the same JSON-RPC error (resource not
//! found), so ids cannot be probed. `resources/templates/list` names each kind's URI
//! template.
//!
//! `resources/subscribe` takes one of the owner's URIs (any other is the same
//! not-found error); from then on [`forward_changes`] sends
//! `notifications/resources/updated` when that resource changes, and every connection
//! hears `notifications/resources/list_changed` as its owner's resources come, end and
//! go. Both are sent at most once per `[serve] resource_update_interval_ms`, what changed
//! in between together. Only the owner's own changes reach a connection
//! ([`ResourceChanges`] has a channel per owner). `completion/complete` completes the
//! templates' `id` from the owner's ids.
//!
//! [`ResourceChanges`]: crate::services::resource_changes::ResourceChanges
//! [`Services::resources`]: crate::services::Services::resources

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
use crate::services::resource_changes::ResourceChange;
use crate::services::resources::ResourceSource;

const MIME: &str = "text/plain";

/// The source `uri` is of and the id it names; `None` for a URI of no known shape.
fn parse<'a>(host: &Host, uri: &'a str) -> Option<(Arc<dyn ResourceSource>, &'a str)> {
    host.services
        .resources()
        .iter()
        .find_map(|source| Some((source.clone(), source.kind().id_of(uri)?)))
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

/// `resources/list`: the owner's resources, kind by kind in list order (terminal
/// sessions, then jobs), oldest first.
pub fn list(host: &Host, owner: &str) -> ListResourcesResult {
    let mut resources = Vec::new();
    for source in host.services.resources() {
        let kind = source.kind();
        resources.extend(source.list(owner).into_iter().map(|owned| {
            Resource::new(kind.uri(&owned.id), owned.name)
                .with_title(owned.title)
                .with_description(owned.description)
                .with_mime_type(MIME)
        }));
    }
    ListResourcesResult::with_all_items(resources)
}

/// `resources/templates/list`: each kind's URI shape.
pub fn templates(host: &Host) -> ListResourceTemplatesResult {
    let templates = host
        .services
        .resources()
        .iter()
        .map(|source| {
            let kind = source.kind();
            ResourceTemplate::new(kind.template(), kind.name)
                .with_title(kind.title)
                .with_description(kind.description.clone())
                .with_mime_type(MIME)
        })
        .collect();
    ListResourceTemplatesResult::with_all_items(templates)
}

/// `resources/read`: the current text of one of the owner's resources.
pub async fn read(host: &Host, owner: &str, uri: &str) -> Result<ReadResourceResult, ErrorData> {
    let (source, id) = parse(host, uri).ok_or_else(|| not_found(uri))?;
    let text = source
        .read(owner, id)
        .await
        .map_err(|e| read_error(uri, e))?;
    Ok(ReadResourceResult::new(vec![ResourceContents::text(
        text, uri,
    )
    .with_mime_type(MIME)]))
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
    let (source, id) = parse(host, uri).ok_or_else(|| not_found(uri))?;
    if !source.list(owner).iter().any(|owned| owned.id == id) {
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
    let sources = host.services.resources();
    let Some(source) = sources
        .iter()
        .find(|source| source.kind().template() == template)
    else {
        let known: Vec<String> = sources
            .iter()
            .map(|source| format!("{:?}", source.kind().template()))
            .collect();
        return Err(ErrorData::invalid_params(
            format!(
                "no resource template {template:?}; dsh's are {}",
                known.join(" and ")
            ),
            None,
        ));
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
    let matching: Vec<String> = source
        .list(owner)
        .into_iter()
        .map(|owned| owned.id)
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

/// The URI a change of one resource is about (none: the list changed).
fn changed_uri(host: &Host, change: &ResourceChange) -> Option<String> {
    match change {
        ResourceChange::Updated { scheme, id } => host
            .services
            .resources()
            .iter()
            .find(|source| source.kind().scheme == *scheme)
            .map(|source| source.kind().uri(id)),
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
                Ok(change) => match changed_uri(&host, &change) {
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
