//! The engine settings that decide what compiled code is: the features, the
//! interruption scheme and the memory layout wasmtime compiles for. The runtime's engine
//! ([`super::Runtime`]) applies them, and `build.rs` (which includes this file with
//! `#[path]`) applies the same ones to precompile the embedded components, so code
//! compiled at build time loads in the engine that runs it. A setting that changes
//! compiled code belongs here, never in `Runtime::new` alone: the test
//! `every_embedded_component_loads_its_precompiled_code` fails when the two differ.
//!
//! The file stands alone (no `crate::` paths) so the build script can include it.

/// Applies the settings compiled code depends on to `config`.
pub fn apply(config: &mut wasmtime::Config) {
    config.wasm_component_model(true);
    // CPU budgets and async yields: compiled code checks the epoch.
    config.epoch_interruption(true);
    config.concurrency_support(false);
    // Linear memories start from a sealed memfd image made from the component's data,
    // never from the compile cache entry's file its code is mapped from: a file changed
    // in place after its tag verified cannot reach a guest's memory.
    config.force_memory_init_memfd(true);
}
