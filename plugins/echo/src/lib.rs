//! `echo`: returns its `text` argument unchanged. No host interface is used, so a call
//! measures the host's own overhead: validation, the pipeline, a fresh instance.

wit_bindgen::generate!({ path: "../../wit/v0.2.0", world: "tool" });

struct Echo;

impl Guest for Echo {
    fn describe() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "echo".into(),
            description: "Return `text` unchanged.".into(),
            input_schema: r#"{"type":"object","properties":{"text":{"type":"string"}},"required":["text"],"additionalProperties":false}"#.into(),
            idempotent: true,
            output_budget: None,
            output_schema: None,
        }]
    }

    fn call(_context: CallContext, _name: String, args_json: String) -> ToolResult {
        // The host validated the arguments against the schema: `text` is a string.
        let text = serde_json::from_str::<serde_json::Value>(&args_json)
            .ok()
            .and_then(|args| args.get("text").and_then(|t| t.as_str()).map(str::to_owned))
            .unwrap_or_default();
        ToolResult {
            content: vec![dsh::plugin::types::ContentItem::Text(text)],
            structured_json: None,
            error: None,
            full_output_path: None,
        }
    }
}

export!(Echo);
