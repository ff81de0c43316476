// The shapes of a `tool-result` (contract 0.2.0), shared by the tool plugins: each
// includes this file with `include!("../../shared/results.rs")` after its
// `wit_bindgen::generate!`. A result's content is one text item.

/// `content` as the one text item of a result.
#[allow(dead_code)]
fn text(content: impl Into<String>) -> Vec<dsh::plugin::types::ContentItem> {
    vec![dsh::plugin::types::ContentItem::Text(content.into())]
}

/// A result carrying `content`.
#[allow(dead_code)]
fn ok(content: String) -> ToolResult {
    ToolResult {
        content: text(content),
        structured_json: None,
        error: None,
        full_output_path: None,
    }
}

/// A failed result: the error and no content.
#[allow(dead_code)]
fn failed(error: dsh::plugin::types::ToolError) -> ToolResult {
    ToolResult {
        content: Vec::new(),
        structured_json: None,
        error: Some(error),
        full_output_path: None,
    }
}

/// A failed result from its code and message.
#[allow(dead_code)]
fn failure(code: dsh::plugin::types::ErrorCode, message: impl Into<String>) -> ToolResult {
    failed(dsh::plugin::types::ToolError {
        code,
        message: message.into(),
    })
}
