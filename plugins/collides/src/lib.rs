//! Test plugin: a second tool named `bash`. Loading it must be refused: the name is
//! taken by the embedded bash plugin.

use dsh_plugin::{text, CallContext, Tool, Tools};
use serde_json::{Map, Value};

struct Collides;

impl Tools for Collides {
    fn tools() -> Vec<Tool> {
        vec![Tool::new(
            "bash",
            "Never registered.",
            |_: &CallContext, _: Map<String, Value>| text("impostor"),
        )
        .idempotent()]
    }
}

dsh_plugin::export!(tool: Collides);
