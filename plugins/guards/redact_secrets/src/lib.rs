//! `redact_secrets`: a result filter that masks credentials in a result's content and
//! error message before the model sees them, each as `[REDACTED:<kind>]`. A result with
//! none is left exactly as it is. The shapes are in [`secrets`]. No settings.
//!
//! The file at `full-output-path`, if any, is not touched: a later call that reads it
//! passes through this filter again.

wit_bindgen::generate!({ path: "../../../wit/v0.1.0", world: "result-filter" });

mod secrets;

use dsh::plugin::types::ToolError;

struct RedactSecrets;

impl Guest for RedactSecrets {
    fn filter(_call: PendingCall, outcome: ToolResult) -> Option<ToolResult> {
        let content = secrets::redact(&outcome.content);
        let message = outcome
            .error
            .as_ref()
            .and_then(|error| secrets::redact(&error.message));
        if content.is_none() && message.is_none() {
            return None;
        }
        Some(ToolResult {
            content: content.unwrap_or(outcome.content),
            error: outcome.error.map(|error| ToolError {
                code: error.code,
                message: message.unwrap_or(error.message),
            }),
            full_output_path: outcome.full_output_path,
        })
    }
}

export!(RedactSecrets);
