//! Test plugin: a tool `version` whose argument schema is not valid JSON Schema
//! (`"type": 7`), written by hand over the derived one. Loading it must be refused
//! with that reason.

use dsh_plugin::{text, CallContext, Tool, Tools};
use serde_json::{Map, Value};

struct BadSchema;

impl Tools for BadSchema {
    fn tools() -> Vec<Tool> {
        vec![Tool::new(
            "version",
            "Never registered.",
            |_: &CallContext, _: Map<String, Value>| text("bad"),
        )
        .input_schema_json(r#"{"type":"object","properties":{"x":{"type":7}}}"#)
        .idempotent()]
    }
}

dsh_plugin::export!(tool: BadSchema);
