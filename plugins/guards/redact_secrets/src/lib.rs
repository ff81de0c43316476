//! `redact_secrets`: a result filter that masks credentials in a result's text (its text
//! items, the text of embedded resources, its structured output) and error message
//! before the model sees them, each as `[REDACTED:<kind>]`. A result with none is left
//! exactly as it is. Images, audio and blobs are not looked into. The shapes are in
//! [`secrets`]. No settings.
//!
//! The file at `full-output-path`, if any, is not touched: a later call that reads it
//! passes through this filter again.

mod secrets;

use dsh_plugin::{ContentItem, Filter, PendingCall, ResourceContents, ToolError, ToolResult};

struct RedactSecrets;

/// `item` with its text redacted, or `None` when it has nothing to redact.
fn redact_item(item: &ContentItem) -> Option<ContentItem> {
    match item {
        ContentItem::Text(text) => secrets::redact(text).map(ContentItem::Text),
        ContentItem::Resource(resource) => match &resource.contents {
            ResourceContents::Text(text) => secrets::redact(text).map(|text| {
                let mut resource = resource.clone();
                resource.contents = ResourceContents::Text(text);
                ContentItem::Resource(resource)
            }),
            ResourceContents::Blob(_) => None,
        },
        ContentItem::Image(_) | ContentItem::Audio(_) | ContentItem::ResourceLink(_) => None,
    }
}

impl Filter for RedactSecrets {
    fn filter(_call: PendingCall, outcome: ToolResult) -> Option<ToolResult> {
        let items: Vec<Option<ContentItem>> = outcome.content.iter().map(redact_item).collect();
        let structured = outcome.structured_json.as_deref().and_then(secrets::redact);
        let message = outcome
            .error
            .as_ref()
            .and_then(|error| secrets::redact(&error.message));
        if items.iter().all(Option::is_none) && structured.is_none() && message.is_none() {
            return None;
        }
        Some(ToolResult {
            content: outcome
                .content
                .into_iter()
                .zip(items)
                .map(|(item, redacted)| redacted.unwrap_or(item))
                .collect(),
            structured_json: structured.or(outcome.structured_json),
            error: outcome.error.map(|error| ToolError {
                code: error.code,
                message: message.unwrap_or(error.message),
            }),
            full_output_path: outcome.full_output_path,
        })
    }
}

dsh_plugin::export!(result_filter: RedactSecrets);
