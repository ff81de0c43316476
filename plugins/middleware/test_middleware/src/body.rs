// The body of `test_middleware` and `test_middleware_b` (each includes it after
// defining `VERSION`); what each mode does is in `test_middleware`'s crate docs.

use std::hint::black_box;

use dsh_plugin::middleware::next;
use dsh_plugin::{text, ContentItem, Middleware, PendingCall, ToolResult};
use serde_json::Value;

struct TestMiddleware;

impl Middleware for TestMiddleware {
    fn handle(call: PendingCall) -> ToolResult {
        let settings: Value = call.settings();
        let number = |name: &str, default: u64| {
            settings
                .get(name)
                .and_then(Value::as_u64)
                .unwrap_or(default)
        };
        match settings
            .get("mode")
            .and_then(Value::as_str)
            .unwrap_or("pass")
        {
            "pass" => next::run(None),
            "retry" => {
                let attempts = number("attempts", 2);
                let mut result = next::run(None);
                let mut runs = 1;
                while result.error.is_some() && runs < attempts {
                    result = next::run(None);
                    runs += 1;
                }
                result
            }
            "over_cap" => {
                let mut result = next::run(None);
                for _ in 1..number("runs", 100) {
                    result = next::run(None);
                }
                result
            }
            "deadline" => {
                let deadline_ms = u32::try_from(number("deadline_ms", 500)).unwrap_or(u32::MAX);
                next::run(Some(deadline_ms))
            }
            "cache" => text("answered by test_middleware without running the tool"),
            "tag" => next::run(None)
                .with_item(ContentItem::Text(format!("middleware version {VERSION}"))),
            "trap" => panic!("test_middleware: trap on {}", call.tool),
            "loop" => spin(),
            "oom" => hoard(),
            other => panic!("test_middleware: unknown mode `{other}`"),
        }
    }
}

/// Burns CPU until the host stops it.
fn spin() -> ! {
    let mut count = 0u64;
    loop {
        count = black_box(count.wrapping_add(1));
    }
}

/// Takes memory a megabyte at a time, touching every page, until the host stops it.
fn hoard() -> ! {
    let mut chunks = Vec::new();
    loop {
        chunks.push(vec![1u8; 1 << 20]);
        black_box(&chunks);
    }
}

dsh_plugin::export!(middleware: TestMiddleware);
