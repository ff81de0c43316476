//! `slow_call_meter`: a middleware that runs each call once, timing it, and when it took
//! longer than `warn_ms` milliseconds (a setting, 1000 by default) adds a text item
//! saying how long after the result's content, so the model knows the tool is slow
//! (and may prefer a narrower call). The result is otherwise the tool's own.
//!
//! ```toml
//! [pipeline]
//! middleware = ["slow_call_meter"]
//! [plugins.slow_call_meter.settings]
//! warn_ms = 2000
//! ```

use std::time::Instant;

use dsh_plugin::middleware::next;
use dsh_plugin::{ContentItem, Middleware, PendingCall, ToolResult};
use serde::Deserialize;

/// `[plugins.slow_call_meter.settings]`.
#[derive(Deserialize)]
#[serde(default)]
struct Settings {
    /// A call that takes longer than this many milliseconds gets a note.
    warn_ms: u64,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings { warn_ms: 1000 }
    }
}

struct SlowCallMeter;

impl Middleware for SlowCallMeter {
    fn handle(call: PendingCall) -> ToolResult {
        let Settings { warn_ms } = call.settings();
        let started = Instant::now();
        let result = next::run(None);
        let took_ms = started.elapsed().as_millis();
        if took_ms <= u128::from(warn_ms) {
            return result;
        }
        result.with_item(ContentItem::Text(format!(
            "slow_call_meter: this {} call took {took_ms} ms (more than {warn_ms} ms)",
            call.tool
        )))
    }
}

dsh_plugin::export!(middleware: SlowCallMeter);
