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

use dsh_plugin::tool::log::{self, Level};
use dsh_plugin::tool::progress;
use dsh_plugin::{
    content, structured, BinaryContent, CallContext, ContentItem, EmbeddedResource,
    ResourceContents, ResourceLink, Tool, ToolResult, Tools,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Map, Value};

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

/// Any arguments object (`{"type": "object"}`).
type AnyArgs = Map<String, Value>;

#[derive(Deserialize, JsonSchema)]
struct StructuredArgs {
    valid: Option<bool>,
}

#[derive(Deserialize, JsonSchema)]
struct ProgressArgs {
    #[schemars(range(min = 1, max = 100))]
    steps: Option<u64>,
}

// The structured output `rich_structured` declares (a plain comment: no description).
#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // only its schema is used
struct Counted {
    count: i64,
    label: String,
}

struct Rich;

impl Tools for Rich {
    fn tools() -> Vec<Tool> {
        vec![
            Tool::new(
                "rich_media",
                "Return a text, an image, audio, a resource link and an embedded resource.",
                media,
            )
            .idempotent(),
            Tool::new(
                "rich_structured",
                "Return structured output; with valid=false, output that breaks the schema.",
                |_: &CallContext, args: StructuredArgs| {
                    structured(&if args.valid.unwrap_or(true) {
                        json!({ "count": 3, "label": "three" })
                    } else {
                        json!({ "count": "three" })
                    })
                },
            )
            .idempotent()
            .output_schema::<Counted>(),
            Tool::new(
                "rich_progress",
                "Report progress `steps` times, then return.",
                progress_steps,
            )
            .idempotent(),
            Tool::new(
                "rich_log",
                "Write one log line at each level, then return.",
                log_lines,
            )
            .idempotent(),
        ]
    }
}

fn media(_context: &CallContext, _args: AnyArgs) -> ToolResult {
    content(vec![
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
    ])
}

fn progress_steps(_context: &CallContext, args: ProgressArgs) -> ToolResult {
    let steps = args.steps.unwrap_or(3);
    for step in 1..=steps {
        progress::report(
            Some(step as f64 / steps as f64),
            Some(&format!("step {step} of {steps}")),
        );
    }
    dsh_plugin::text(format!("{steps} steps done"))
}

fn log_lines(_context: &CallContext, _args: AnyArgs) -> ToolResult {
    for (level, name) in [
        (Level::Trace, "trace"),
        (Level::Debug, "debug"),
        (Level::Info, "info"),
        (Level::Warn, "warn"),
        (Level::Error, "error"),
    ] {
        log::write(level, &format!("rich {name} line"));
    }
    dsh_plugin::text("logged")
}

dsh_plugin::export!(tool: Rich);
