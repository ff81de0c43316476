//! Test plugin `hostile`: tools that misbehave on purpose (spin forever, burn CPU, grow
//! memory without bound, overflow the stack, return huge output, panic, sleep on the WASI
//! clock), so the host's end-to-end tests can prove it bounds them. It imports no dsh host interface.

use std::hint::black_box;

use dsh::plugin::types::ErrorCode;
use serde_json::Value;

wit_bindgen::generate!({ path: "../../wit/v0.2.0", world: "tool" });
include!("../../shared/results.rs");

struct Hostile;

/// A tool spec with the shared settings of this plugin: not idempotent, default budget.
fn spec(name: &str, description: &str, properties: &str, required: &str) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: format!("Test fixture for the plugin sandbox: {description}"),
        input_schema: format!(
            r#"{{"type":"object","properties":{{{properties}}},"required":[{required}],"additionalProperties":false}}"#
        ),
        idempotent: false,
        output_budget: None,
        output_schema: None,
    }
}

impl Guest for Hostile {
    fn describe() -> Vec<ToolSpec> {
        vec![
            spec("spin", "loop forever.", "", ""),
            spec(
                "burn",
                "run a finite CPU-heavy hash chain of `iterations` steps and return its result.",
                r#""iterations":{"type":"integer","minimum":0}"#,
                r#""iterations""#,
            ),
            spec(
                "sleep",
                "sleep `ms` milliseconds on the WASI monotonic clock, then answer `slept`.",
                r#""ms":{"type":"integer","minimum":0}"#,
                r#""ms""#,
            ),
            spec("grow_memory", "allocate memory without bound.", "", ""),
            spec(
                "recurse",
                "recurse without bound until the stack overflows.",
                "",
                "",
            ),
            spec(
                "huge_output",
                "return `mb` MiB of text.",
                r#""mb":{"type":"integer","minimum":1,"maximum":1024}"#,
                r#""mb""#,
            ),
            spec(
                "panic",
                "panic with `message`.",
                r#""message":{"type":"string"}"#,
                r#""message""#,
            ),
        ]
    }

    fn call(_context: CallContext, name: String, args_json: String) -> ToolResult {
        let args: Value = serde_json::from_str(&args_json).unwrap_or(Value::Null);
        let number = |key: &str| args.get(key).and_then(Value::as_u64);
        match name.as_str() {
            "spin" => spin(),
            "burn" => match number("iterations") {
                Some(n) => success(burn(n).to_string()),
                None => failure(
                    ErrorCode::InvalidArguments,
                    "`iterations` must be an integer >= 0",
                ),
            },
            "sleep" => match number("ms") {
                Some(ms) => {
                    std::thread::sleep(std::time::Duration::from_millis(ms));
                    success("slept".into())
                }
                None => failure(ErrorCode::InvalidArguments, "`ms` must be an integer >= 0"),
            },
            "grow_memory" => grow_memory(),
            "recurse" => success(recurse(0).to_string()),
            "huge_output" => match number("mb") {
                Some(mb @ 1..=1024) => success(huge_output(mb as usize)),
                _ => failure(
                    ErrorCode::InvalidArguments,
                    "`mb` must be an integer from 1 to 1024",
                ),
            },
            "panic" => panic!(
                "{}",
                args.get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("hostile panic")
            ),
            _ => failure(
                ErrorCode::UnknownTool,
                format!("hostile has no tool `{name}`"),
            ),
        }
    }
}

/// Loops forever; `black_box` keeps the optimiser from removing the loop.
fn spin() -> ! {
    let mut counter = 0u64;
    loop {
        counter = black_box(counter.wrapping_add(1));
    }
}

/// An xorshift64 chain of `iterations` steps: work proportional to `iterations`, no
/// allocation in the loop.
fn burn(iterations: u64) -> u64 {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    for _ in 0..iterations {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state = black_box(state);
    }
    state
}

/// Allocates 1 MiB blocks, touching every page, and keeps them all, forever.
fn grow_memory() -> ! {
    let mut blocks: Vec<Vec<u8>> = Vec::new();
    loop {
        let mut block = vec![0u8; 1 << 20];
        for page in block.chunks_mut(4096) {
            page[0] = 1;
        }
        blocks.push(black_box(block));
    }
}

/// Recurses without bound. Each frame holds a stack array passed through `black_box`,
/// and the result is used after the call, so it is neither a loop nor a tail call.
#[inline(never)]
#[allow(unconditional_recursion)] // on purpose: it must overflow the stack
fn recurse(depth: u64) -> u64 {
    let mut frame = [0u8; 1024];
    frame[(depth % 1024) as usize] = depth as u8;
    let frame = black_box(frame);
    recurse(black_box(depth + 1)) + u64::from(frame[0])
}

/// One line of `huge_output`: 64 bytes, so whole lines fill a MiB exactly.
const LINE: &str = "hostile huge_output filler line, repeated to the requested size\n";
const _: () = assert!(LINE.len() == 64);

/// Exactly `mb` MiB of text.
fn huge_output(mb: usize) -> String {
    LINE.repeat(mb * (1 << 20) / LINE.len())
}

fn success(content: String) -> ToolResult {
    ToolResult {
        content: text(content),
        structured_json: None,
        error: None,
        full_output_path: None,
    }
}

export!(Hostile);
