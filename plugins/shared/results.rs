// The shapes of a `tool-result`, shared by the tool plugins: each includes this file
// with `include!("../../shared/results.rs")` after its `wit_bindgen::generate!`.

/// A result carrying `content`.
#[allow(dead_code)]
fn ok(content: String) -> ToolResult {
    ToolResult {
        content,
        error: None,
        full_output_path: None,
    }
}

/// A failed result: the error and no content.
#[allow(dead_code)]
fn failed(error: dsh::plugin::types::ToolError) -> ToolResult {
    ToolResult {
        content: String::new(),
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
