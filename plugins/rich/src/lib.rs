//! Test plugin `rich` (contract 0.2.0, test-only): what a 0.2.0 tool can give back
//! beyond one string, for the host's MCP tests.
//!
//! - `rich_media`: a text item, an image (a 1×1 PNG), audio (a few WAV bytes), a
//!   resource link and an embedded text resource.
//! - `rich_structured {valid}`: structured output under a declared output schema
//!   (`{count: integer, label: string}`); with `valid: false` it returns output that
//!   breaks that schema.
//! - `rich_progress {steps}`: reports progress `steps` times (fraction i/steps, message
//!   `step i of steps`), then returns.
//! - `rich_log`: writes one log line at each level (`rich debug line`, `rich info
//!   line`, ...), then returns.

wit_bindgen::generate!({ path: "../../wit/v0.2.0", world: "tool" });

use dsh::plugin::log::{self, Level};
use dsh::plugin::progress;
use dsh::plugin::types::{
    BinaryContent, ContentItem, EmbeddedResource, ErrorCode, ResourceContents, ResourceLink,
    ToolError,
};
use serde_json::{json, Value};

/// A 1×1 transparent PNG.
pub const PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4,
    0x89, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0x00, 0x01, 0x00, 0x00,
    0x05, 0x00, 0x01, 0x0d, 0x0a, 0x2d, 0xb4, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae,
    0x42, 0x60, 0x82,
];

/// The start of a WAV file: enough bytes to tell audio through.
pub const WAV: &[u8] = b"RIFF\x24\x00\x00\x00WAVEfmt ";

const OUTPUT_SCHEMA: &str = r#"{"type":"object","properties":{"count":{"type":"integer"},"label":{"type":"string"}},"required":["count","label"],"additionalProperties":false}"#;

struct Rich;

fn spec(
    name: &str,
    description: &str,
    input_schema: &str,
    output_schema: Option<&str>,
) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: description.into(),
        input_schema: input_schema.into(),
        idempotent: true,
        output_budget: None,
        output_schema: output_schema.map(Into::into),
    }
}

fn result(content: Vec<ContentItem>, structured: Option<Value>) -> ToolResult {
    ToolResult {
        content,
        structured_json: structured.map(|value| value.to_string()),
        error: None,
        full_output_path: None,
    }
}

impl Guest for Rich {
    fn describe() -> Vec<ToolSpec> {
        vec![
            spec(
                "rich_media",
                "Return a text, an image, audio, a resource link and an embedded resource.",
                r#"{"type":"object"}"#,
                None,
            ),
            spec(
                "rich_structured",
                "Return structured output; with valid=false, output that breaks the schema.",
                r#"{"type":"object","properties":{"valid":{"type":"boolean"}}}"#,
                Some(OUTPUT_SCHEMA),
            ),
            spec(
                "rich_progress",
                "Report progress `steps` times, then return.",
                r#"{"type":"object","properties":{"steps":{"type":"integer","minimum":1,"maximum":100}}}"#,
                None,
            ),
            spec(
                "rich_log",
                "Write one log line at each level, then return.",
                r#"{"type":"object"}"#,
                None,
            ),
        ]
    }

    fn call(_context: CallContext, name: String, args_json: String) -> ToolResult {
        let args: Value = serde_json::from_str(&args_json).unwrap_or(Value::Null);
        match name.as_str() {
            "rich_media" => result(
                vec![
                    ContentItem::Text("a picture, a sound and two resources".into()),
                    ContentItem::Image(BinaryContent {
                        data: PNG.to_vec(),
                        mime_type: "image/png".into(),
                    }),
                    ContentItem::Audio(BinaryContent {
                        data: WAV.to_vec(),
                        mime_type: "audio/wav".into(),
                    }),
                    ContentItem::ResourceLink(ResourceLink {
                        uri: "file:///tmp/rich/report.txt".into(),
                        name: "report.txt".into(),
                        description: Some("the full report".into()),
                        mime_type: Some("text/plain".into()),
                    }),
                    ContentItem::Resource(EmbeddedResource {
                        uri: "file:///tmp/rich/note.txt".into(),
                        mime_type: Some("text/plain".into()),
                        contents: ResourceContents::Text("an embedded note".into()),
                    }),
                ],
                None,
            ),
            "rich_structured" => {
                let structured = if args["valid"].as_bool().unwrap_or(true) {
                    json!({ "count": 3, "label": "three" })
                } else {
                    json!({ "count": "three" })
                };
                result(Vec::new(), Some(structured))
            }
            "rich_progress" => {
                let steps = args["steps"].as_u64().unwrap_or(3);
                for step in 1..=steps {
                    progress::report(
                        Some(step as f64 / steps as f64),
                        Some(&format!("step {step} of {steps}")),
                    );
                }
                result(vec![ContentItem::Text(format!("{steps} steps done"))], None)
            }
            "rich_log" => {
                for (level, name) in [
                    (Level::Trace, "trace"),
                    (Level::Debug, "debug"),
                    (Level::Info, "info"),
                    (Level::Warn, "warn"),
                    (Level::Error, "error"),
                ] {
                    log::write(level, &format!("rich {name} line"));
                }
                result(vec![ContentItem::Text("logged".into())], None)
            }
            other => ToolResult {
                content: Vec::new(),
                structured_json: None,
                error: Some(ToolError {
                    code: ErrorCode::InvalidArguments,
                    message: format!("rich has no tool {other}"),
                }),
                full_output_path: None,
            },
        }
    }
}

export!(Rich);
