//! `echo`: returns its `text` argument unchanged. No host interface is used, so a call
//! measures the host's own overhead: validation, the pipeline, a fresh instance.

use dsh_plugin::{text, CallContext, Tool, ToolResult, Tools};
use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    text: String,
}

struct Echo;

impl Tools for Echo {
    fn tools() -> Vec<Tool> {
        vec![Tool::new("echo", "Return `text` unchanged.", echo).idempotent()]
    }
}

fn echo(_context: &CallContext, args: Args) -> ToolResult {
    text(args.text)
}

dsh_plugin::export!(tool: Echo);
