//! `calls_seen`: counts, in a global of its linear memory, the calls its instance has
//! served, and answers the count. A fresh instance per call answers 1 every time; an
//! instance that served a call before (reused, or called while it was made ahead)
//! would answer more.

use std::sync::atomic::{AtomicU32, Ordering};

wit_bindgen::generate!({ path: "../../wit/v0.2.0", world: "tool" });

/// Calls this instance has served.
static CALLS_SEEN: AtomicU32 = AtomicU32::new(0);

struct FreshState;

impl Guest for FreshState {
    fn describe() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "calls_seen".into(),
            description: "How many calls this plugin instance has served, this one included.".into(),
            input_schema: r#"{"type":"object","properties":{},"additionalProperties":false}"#.into(),
            idempotent: true,
            output_budget: None,
            output_schema: None,
        }]
    }

    fn call(_context: CallContext, _name: String, _args_json: String) -> ToolResult {
        let seen = CALLS_SEEN.fetch_add(1, Ordering::Relaxed) + 1;
        ToolResult {
            content: vec![dsh::plugin::types::ContentItem::Text(seen.to_string())],
            structured_json: None,
            error: None,
            full_output_path: None,
        }
    }
}

export!(FreshState);
