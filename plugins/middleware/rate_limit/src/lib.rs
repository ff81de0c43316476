//! `rate_limit`: a middleware that lets each owner call each tool at most `per_minute`
//! times in any 60 seconds (a sliding window the host keeps in `tally`, one key per
//! owner and tool). A call within the limit runs as it would without it; one past it
//! does not run and fails with `limit-exceeded`, its message saying when to retry (in
//! seconds, and in milliseconds as `retry_after_ms=N`). A refused call is not counted.
//!
//! Settings: `per_minute`, a positive integer, required: without it (or with anything
//! else) every call fails with `internal`, naming the setting.
//!
//! The counts are in the host's memory: a restart of dsh starts them again.

use dsh_plugin::middleware::{next, tally};
use dsh_plugin::{failure, ErrorCode, Middleware, PendingCall, ToolResult};
use serde_json::Value;

/// The window the limit counts over.
const WINDOW_MS: u32 = 60_000;

struct RateLimit;

impl Middleware for RateLimit {
    fn handle(call: PendingCall) -> ToolResult {
        let settings: Value = call.settings();
        let Some(per_minute) = settings
            .get("per_minute")
            .and_then(Value::as_u64)
            .filter(|&n| n > 0)
        else {
            return failure(
                ErrorCode::Internal,
                "rate_limit: [plugins.rate_limit.settings] per_minute must be a positive \
                 integer",
            );
        };
        let owner = &call.context.owner;
        // The unit separator, which no tool name holds: no two owner and tool pairs share
        // a key.
        let key = format!("{owner}\u{1f}{}", call.tool);
        let window = tally::add(&key, 1, WINDOW_MS, Some(per_minute));
        if window.added {
            return next::run(None);
        }
        failure(
            ErrorCode::LimitExceeded,
            refusal(owner, &call.tool, per_minute, window.next_expiry_ms),
        )
    }
}

/// The message of a call refused for being past the limit, when the window's oldest
/// call leaves it in `retry_ms`.
fn refusal(owner: &str, tool: &str, per_minute: u64, retry_ms: u64) -> String {
    let retry_s = retry_ms.div_ceil(1000).max(1);
    let times = if per_minute == 1 { "time" } else { "times" };
    format!(
        "rate limit: {owner} may call {tool} {per_minute} {times} a minute \
         ([plugins.rate_limit.settings] per_minute); retry in {retry_s} s \
         (retry_after_ms={retry_ms})"
    )
}

dsh_plugin::export!(middleware: RateLimit);

#[cfg(test)]
mod tests {
    use super::refusal;

    #[test]
    fn the_refusal_says_the_limit_and_when_to_retry_rounding_up() {
        assert_eq!(
            refusal("agent", "bash", 5, 12_001),
            "rate limit: agent may call bash 5 times a minute \
             ([plugins.rate_limit.settings] per_minute); retry in 13 s (retry_after_ms=12001)"
        );
        assert!(refusal("a", "echo", 1, 0).contains("1 time a minute"));
        assert!(refusal("a", "echo", 1, 0).contains("retry in 1 s (retry_after_ms=0)"));
        assert!(refusal("a", "echo", 1, 1000).contains("retry in 1 s"));
    }
}
