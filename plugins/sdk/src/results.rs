//! Building a `tool-result`: a text, content items, structured output or a failure, and
//! the conversions that let a handler return `Result<ToolResult, ToolError>` (so `?`
//! works on host calls). Also reading a call's settings and a guard's arguments.

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::types::{CallContext, ContentItem, ErrorCode, PendingCall, ToolError, ToolResult};

/// A result whose content is one text item.
pub fn text(content: impl Into<String>) -> ToolResult {
    self::content(vec![ContentItem::Text(content.into())])
}

/// A result carrying `items` (text, images, audio, resource links, resources), in order.
pub fn content(items: Vec<ContentItem>) -> ToolResult {
    ToolResult {
        content: items,
        structured_json: None,
        error: None,
        full_output_path: None,
    }
}

/// A result with structured output `value` (as JSON) and no content: for a tool that
/// declares an output schema. A value that cannot be serialized is an `internal` failure.
pub fn structured(value: &impl Serialize) -> ToolResult {
    match serde_json::to_string(value) {
        Ok(json) => content(Vec::new()).with_structured_json(json),
        Err(e) => failure(
            ErrorCode::Internal,
            format!("structured output not serializable: {e}"),
        ),
    }
}

/// A failed result: `code` and `message` for the model, no content.
pub fn failure(code: ErrorCode, message: impl Into<String>) -> ToolResult {
    failed(error(code, message))
}

/// A structured error: what a failed result carries and host calls return.
pub fn error(code: ErrorCode, message: impl Into<String>) -> ToolError {
    ToolError {
        code,
        message: message.into(),
    }
}

/// A failed result carrying `error` and no content.
pub(crate) fn failed(error: ToolError) -> ToolResult {
    ToolResult {
        error: Some(error),
        ..content(Vec::new())
    }
}

impl ToolResult {
    /// The result with `error` set: a failed call whose content is still useful output.
    pub fn with_error(self, error: impl Into<Option<ToolError>>) -> ToolResult {
        ToolResult {
            error: error.into(),
            ..self
        }
    }

    /// The result with structured output (JSON text).
    pub fn with_structured_json(self, json: impl Into<String>) -> ToolResult {
        ToolResult {
            structured_json: Some(json.into()),
            ..self
        }
    }

    /// The result with `item` added after its content: what a filter or a middleware
    /// tells the model about a result without changing what the tool said.
    pub fn with_item(mut self, item: ContentItem) -> ToolResult {
        self.content.push(item);
        self
    }

    /// The result naming the file that holds the full output its text is a cut of.
    pub fn with_full_output_path(self, path: impl Into<Option<String>>) -> ToolResult {
        ToolResult {
            full_output_path: path.into(),
            ..self
        }
    }
}

impl From<ToolError> for ToolResult {
    fn from(error: ToolError) -> ToolResult {
        failed(error)
    }
}

impl From<Result<ToolResult, ToolError>> for ToolResult {
    fn from(outcome: Result<ToolResult, ToolError>) -> ToolResult {
        outcome.unwrap_or_else(failed)
    }
}

impl CallContext {
    /// This plugin's settings from `dsh.toml` (`[plugins.NAME.settings]`) as `T`; `T`'s
    /// default when there are none or they do not parse.
    pub fn settings<T: DeserializeOwned + Default>(&self) -> T {
        serde_json::from_str(&self.settings_json).unwrap_or_default()
    }
}

impl PendingCall {
    /// The call's arguments (already validated against the tool's schema) as `T`, e.g.
    /// a `serde_json::Value`.
    pub fn args<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(&self.args_json)
    }

    /// The guard's, filter's or middleware's own settings from `dsh.toml` as `T`; `T`'s
    /// default when there are none or they do not parse.
    pub fn settings<T: DeserializeOwned + Default>(&self) -> T {
        self.context.settings()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn text_is_one_text_item_and_nothing_else() {
        let result = text("hi");
        assert!(matches!(result.content.as_slice(), [ContentItem::Text(t)] if t == "hi"));
        assert!(result.structured_json.is_none() && result.error.is_none());
        assert!(result.full_output_path.is_none());
    }

    #[test]
    fn failure_carries_the_code_and_message_and_no_content() {
        let result = failure(ErrorCode::NotFound, "no such job");
        let error = result.error.unwrap();
        assert_eq!(
            (error.code, error.message.as_str()),
            (ErrorCode::NotFound, "no such job")
        );
        assert!(result.content.is_empty());
    }

    #[test]
    fn structured_is_the_json_without_content() {
        let result = structured(&json!({"count": 3}));
        assert_eq!(result.structured_json.as_deref(), Some(r#"{"count":3}"#));
        assert!(result.content.is_empty() && result.error.is_none());
    }

    #[test]
    fn with_item_adds_after_the_content_and_keeps_the_rest() {
        let result = text("out")
            .with_error(error(ErrorCode::Timeout, "slow"))
            .with_item(ContentItem::Text("note".into()));
        assert!(matches!(
            result.content.as_slice(),
            [ContentItem::Text(a), ContentItem::Text(b)] if a == "out" && b == "note"
        ));
        assert_eq!(result.error.unwrap().code, ErrorCode::Timeout);
    }

    #[test]
    fn a_host_error_becomes_the_failed_result() {
        let outcome: Result<ToolResult, ToolError> = Err(error(ErrorCode::Timeout, "slow"));
        let result = ToolResult::from(outcome);
        assert_eq!(result.error.unwrap().code, ErrorCode::Timeout);
    }

    #[test]
    fn settings_parse_or_default() {
        #[derive(serde::Deserialize, Default, PartialEq, Debug)]
        struct Settings {
            limit: Option<u32>,
        }
        let mut context = crate::types::CallContext {
            owner: String::new(),
            session: String::new(),
            call_id: String::new(),
            workdir: String::new(),
            scope: String::new(),
            settings_json: r#"{"limit":5}"#.into(),
            output_budget: 0,
        };
        assert_eq!(context.settings::<Settings>().limit, Some(5));
        context.settings_json = "not json".into();
        assert_eq!(context.settings::<Settings>(), Settings::default());
    }
}
