//! `test_filter`: a test result filter whose behaviour comes from its settings, so the
//! host tests can show what a failing filter does to a result, and one that adds to it.
//! Settings: `failure` is `none` (the default: the result passes unchanged, but for
//! `note`), `trap` (panics), `loop` (spins until its CPU budget stops it) or `oom`
//! (allocates until its memory cap stops it). An unknown `failure` traps, naming it.
//!
//! `note`, a string: with `failure` `none`, the filter adds it after the result's
//! content as one more text item (context for the model; the rest of the result is as
//! it was).

use std::hint::black_box;

use dsh_plugin::{ContentItem, Filter, PendingCall, ToolResult};
use serde_json::Value;

struct TestFilter;

impl Filter for TestFilter {
    fn filter(call: PendingCall, outcome: ToolResult) -> Option<ToolResult> {
        let settings: Value = call.settings();
        match settings
            .get("failure")
            .and_then(Value::as_str)
            .unwrap_or("none")
        {
            "none" => settings
                .get("note")
                .and_then(Value::as_str)
                .map(|note| outcome.with_item(ContentItem::Text(note.to_owned()))),
            "trap" => panic!("test_filter: trap on {}", call.tool),
            "loop" => spin(),
            "oom" => hoard(),
            other => panic!("test_filter: unknown failure `{other}`"),
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

dsh_plugin::export!(result_filter: TestFilter);
