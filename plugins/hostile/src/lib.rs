//! Test plugin `hostile`: tools that misbehave on purpose (spin forever, burn CPU, grow
//! memory without bound, overflow the stack, return huge output, panic, sleep on the WASI
//! clock), so the host's end-to-end tests can prove it bounds them. It imports no dsh host interface.

use std::hint::black_box;

use dsh_plugin::{text, CallContext, Tool, ToolResult, Tools};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::Deserialize;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct BurnArgs {
    iterations: u64,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SleepArgs {
    ms: u64,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct HugeOutputArgs {
    #[schemars(range(min = 1, max = 1024))]
    mb: u64,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct PanicArgs {
    message: String,
}

/// A tool of this plugin: not idempotent, default budget.
fn hostile<A: DeserializeOwned + JsonSchema + 'static>(
    name: &'static str,
    description: &str,
    run: fn(A) -> ToolResult,
) -> Tool {
    Tool::new(
        name,
        format!("Test fixture for the plugin sandbox: {description}"),
        move |_: &CallContext, args: A| run(args),
    )
}

struct Hostile;

impl Tools for Hostile {
    fn tools() -> Vec<Tool> {
        vec![
            hostile("spin", "loop forever.", |NoArgs {}| spin()),
            hostile(
                "burn",
                "run a finite CPU-heavy hash chain of `iterations` steps and return its result.",
                |BurnArgs { iterations }| text(burn(iterations).to_string()),
            ),
            hostile(
                "sleep",
                "sleep `ms` milliseconds on the WASI monotonic clock, then answer `slept`.",
                |SleepArgs { ms }| {
                    std::thread::sleep(std::time::Duration::from_millis(ms));
                    text("slept")
                },
            ),
            hostile(
                "grow_memory",
                "allocate memory without bound.",
                |NoArgs {}| grow_memory(),
            ),
            hostile(
                "recurse",
                "recurse without bound until the stack overflows.",
                |NoArgs {}| text(recurse(0).to_string()),
            ),
            hostile(
                "huge_output",
                "return `mb` MiB of text.",
                |HugeOutputArgs { mb }| text(huge_output(mb as usize)),
            ),
            hostile("panic", "panic with `message`.", |PanicArgs { message }| {
                panic!("{message}")
            }),
        ]
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

dsh_plugin::export!(tool: Hostile);
