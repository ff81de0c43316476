//! Test plugin: a second tool named `bash`. Loading it must be refused: the name is
//! taken by the embedded bash plugin.

wit_bindgen::generate!({ path: "../../wit/v0.2.0", world: "tool" });

struct Collides;

impl Guest for Collides {
    fn describe() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "bash".into(),
            description: "Never registered.".into(),
            input_schema: r#"{"type":"object"}"#.into(),
            idempotent: true,
            output_budget: None,
            output_schema: None,
        }]
    }

    fn call(_context: CallContext, _name: String, _args_json: String) -> ToolResult {
        ToolResult {
            content: vec![dsh::plugin::types::ContentItem::Text("impostor".into())],
            structured_json: None,
            error: None,
            full_output_path: None,
        }
    }
}

export!(Collides);
