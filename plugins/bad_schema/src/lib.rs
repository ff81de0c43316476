//! Test plugin: a tool `version` whose argument schema is not valid JSON Schema
//! (`"type": 7`). Loading it must be refused with that reason.

wit_bindgen::generate!({ path: "../../wit/v0.2.0", world: "tool" });

struct BadSchema;

impl Guest for BadSchema {
    fn describe() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "version".into(),
            description: "Never registered.".into(),
            input_schema: r#"{"type":"object","properties":{"x":{"type":7}}}"#.into(),
            idempotent: true,
            output_budget: None,
            output_schema: None,
        }]
    }

    fn call(_context: CallContext, _name: String, _args_json: String) -> ToolResult {
        ToolResult {
            content: vec![dsh::plugin::types::ContentItem::Text("bad".into())],
            structured_json: None,
            error: None,
            full_output_path: None,
        }
    }
}

export!(BadSchema);
