//! Test plugins `version_a` and `version_b` (both build this file): one tool, `version`,
//! that answers with the version it was built as, the last letter of its package name
//! (`a` or `b`). The hot-reload tests swap the two.

use dsh_plugin::{text, CallContext, Tool, ToolResult, Tools};
use schemars::JsonSchema;
use serde::Deserialize;

/// `a` for `version_a`, `b` for `version_b`.
const VERSION: &str = match env!("CARGO_PKG_NAME").as_bytes() {
    [.., b'_', b'a'] => "a",
    [.., b'_', b'b'] => "b",
    _ => panic!("version_a or version_b"),
};

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

struct Versioned;

impl Tools for Versioned {
    fn tools() -> Vec<Tool> {
        vec![Tool::new(
            "version",
            "Say which build of this test plugin answers.",
            |_: &CallContext, NoArgs {}| -> ToolResult { text(VERSION) },
        )
        .idempotent()]
    }
}

dsh_plugin::export!(tool: Versioned);
