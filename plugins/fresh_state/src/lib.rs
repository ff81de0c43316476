//! Test tools that show what a call's instance inherited from earlier calls:
//! `calls_seen` counts, in a global of its linear memory, the calls its instance has
//! served (a fresh instance per call answers 1 every time; an instance that served a call
//! before, reused or called while it was made ahead, would answer more), and `scribble`
//! finds and leaves marks on many scattered pages of its linear memory, in its static data
//! and in memory it grows at run time (an instance whose pool slot was not fully reset
//! after the previous call, of this plugin or another, finds that call's marks).

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU32, Ordering};

use dsh_plugin::{failure, text, CallContext, ErrorCode, Tool, ToolResult, Tools};
use schemars::JsonSchema;
use serde::Deserialize;

/// Calls this instance has served.
static CALLS_SEEN: AtomicU32 = AtomicU32::new(0);

/// The host's page size: the pool resets a slot page by page.
const HOST_PAGE: usize = 4096;

/// A buffer in linear memory that `scribble` reads and writes.
struct Pages<const BYTES: usize>(UnsafeCell<[u8; BYTES]>);

// SAFETY: a component instance runs one call at a time, on one thread.
unsafe impl<const BYTES: usize> Sync for Pages<BYTES> {}

/// Zero in a fresh instance and absent from the memory image (`.bss`).
const ZEROED_PAGES: usize = 1024;
static ZEROED: Pages<{ ZEROED_PAGES * HOST_PAGE }> =
    Pages(UnsafeCell::new([0; ZEROED_PAGES * HOST_PAGE]));
/// The byte every page of [`IMAGED`] holds in a fresh instance.
const IMAGE_BYTE: u8 = 0x5a;
/// Part of the memory image (`.data`): a reset must copy it back, not zero it.
const IMAGED_PAGES: usize = 32;
static IMAGED: Pages<{ IMAGED_PAGES * HOST_PAGE }> =
    Pages(UnsafeCell::new([IMAGE_BYTE; IMAGED_PAGES * HOST_PAGE]));

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ScribbleArgs {
    /// How many pages to mark, every other page of a 4 MiB zeroed buffer (at most 512),
    /// plus every other page of a 128 KiB initialised one.
    pages: usize,
    /// How many 64 KiB WebAssembly pages to grow the memory by (at most 64), marking each
    /// host page of them: grown memory must start zeroed.
    #[serde(default)]
    grow: usize,
}

/// WebAssembly's page: what `memory.grow` counts.
#[cfg(target_arch = "wasm32")]
const WASM_PAGE: usize = 65536;

/// `pages` WebAssembly pages newly grown, as bytes (`None`: the memory cannot grow).
#[cfg(target_arch = "wasm32")]
fn grown(pages: usize) -> Option<&'static mut [u8]> {
    let before = core::arch::wasm32::memory_grow(0, pages);
    if before == usize::MAX {
        return None;
    }
    // SAFETY: the pages just grown belong to nobody else (the allocator grows past them).
    Some(unsafe {
        core::slice::from_raw_parts_mut((before * WASM_PAGE) as *mut u8, pages * WASM_PAGE)
    })
}

#[cfg(not(target_arch = "wasm32"))]
fn grown(_pages: usize) -> Option<&'static mut [u8]> {
    None
}

struct FreshState;

impl Tools for FreshState {
    fn tools() -> Vec<Tool> {
        vec![
            Tool::new(
                "calls_seen",
                "How many calls this plugin instance has served, this one included.",
                calls_seen,
            )
            .idempotent(),
            Tool::new(
                "scribble",
                "Counts the pages holding an earlier call's marks (0 in a fresh instance), \
                 then marks `pages` pages, each apart from the next.",
                scribble,
            ),
        ]
    }
}

fn calls_seen(_context: &CallContext, _args: Args) -> ToolResult {
    text((CALLS_SEEN.fetch_add(1, Ordering::Relaxed) + 1).to_string())
}

fn scribble(_context: &CallContext, args: ScribbleArgs) -> ToolResult {
    if args.pages > ZEROED_PAGES / 2 {
        return failure(
            ErrorCode::InvalidArguments,
            format!("pages: at most {}", ZEROED_PAGES / 2),
        );
    }
    // SAFETY: a component instance runs one call at a time, on one thread, and only this
    // function touches these buffers.
    let (zeroed, imaged) = unsafe { (&mut *ZEROED.0.get(), &mut *IMAGED.0.get()) };
    let marked = |buffer: &[u8], fresh: u8| {
        buffer
            .chunks(HOST_PAGE)
            .filter(|page| page.iter().any(|&byte| byte != fresh))
            .count()
    };
    if args.grow > 64 {
        return failure(ErrorCode::InvalidArguments, "grow: at most 64");
    }
    let mut seen = marked(zeroed, 0) + marked(imaged, IMAGE_BYTE);
    if args.grow > 0 {
        let Some(grown) = grown(args.grow) else {
            return failure(ErrorCode::Internal, "the memory cannot grow");
        };
        seen += marked(grown, 0);
        for page in grown.chunks_mut(HOST_PAGE) {
            page[HOST_PAGE / 3] = 0xcd;
        }
    }
    // Every other page: each mark is a run of its own for the reset to find.
    for page in zeroed.chunks_mut(2 * HOST_PAGE).take(args.pages) {
        page[HOST_PAGE / 2] = 0xab;
    }
    for page in imaged.chunks_mut(2 * HOST_PAGE) {
        page[HOST_PAGE / 2] = 0;
    }
    text(seen.to_string())
}

dsh_plugin::export!(tool: FreshState);
