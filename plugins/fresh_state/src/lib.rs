//! `calls_seen`: counts, in a global of its linear memory, the calls its instance has
//! served, and answers the count. A fresh instance per call answers 1 every time; an
//! instance that served a call before (reused, or called while it was made ahead)
//! would answer more.

use std::sync::atomic::{AtomicU32, Ordering};

use dsh_plugin::{text, CallContext, Tool, ToolResult, Tools};
use schemars::JsonSchema;
use serde::Deserialize;

/// Calls this instance has served.
static CALLS_SEEN: AtomicU32 = AtomicU32::new(0);

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {}

struct FreshState;

impl Tools for FreshState {
    fn tools() -> Vec<Tool> {
        vec![Tool::new(
            "calls_seen",
            "How many calls this plugin instance has served, this one included.",
            calls_seen,
        )
        .idempotent()]
    }
}

fn calls_seen(_context: &CallContext, _args: Args) -> ToolResult {
    text((CALLS_SEEN.fetch_add(1, Ordering::Relaxed) + 1).to_string())
}

dsh_plugin::export!(tool: FreshState);
