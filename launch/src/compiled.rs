//! Native code dsh compiled itself, loaded into wasmtime: the one `unsafe` of the
//! compile cache (host `engine/cache.rs`), which wasmtime cannot check for itself. The
//! cache decides what it may load (code this process's engine just compiled, the code
//! the binary carries, or an entry whose HMAC tag under the user's secret key verifies)
//! and vouches for it by calling these; nothing else in dsh loads compiled code.

use std::path::Path;

use wasmtime::component::Component;
use wasmtime::Engine;

/// `code` (compiled by wasmtime of this version for an engine like `engine`) loaded as
/// a component. The caller vouches for the bytes: loading them runs them as native code.
pub fn load(engine: &Engine, code: &[u8]) -> wasmtime::Result<Component> {
    // SAFETY: the caller (the compile cache) vouches that the code is what wasmtime
    // compiled: just now by this engine, when the binary was built (checked by wasmtime
    // against this engine as it loads it), or an entry whose tag verified.
    unsafe { Component::deserialize(engine, code) }
}

/// The compiled code in the file at `path` mapped as a component (shared with the page
/// cache: only the pages that run are resident). The caller vouches for the file, as
/// for [`load`], and that nobody without its own rights can change it under the
/// mapping.
pub fn map(engine: &Engine, path: &Path) -> wasmtime::Result<Component> {
    // SAFETY: as in `load`, vouched for by the caller, for the file's bytes.
    unsafe { Component::deserialize_file(engine, path) }
}
