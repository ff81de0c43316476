//! The WebAssembly engine: one wasmtime `Engine` and one `Linker` for the process, the
//! pooling allocator, epoch interruption for CPU bounds, and plugin loading
//! ([`plugin`]). Nothing on the call path builds an engine, a linker or an instance-pre.
//!
//! The pool is bounded per component as well as in total: one linear memory, at most
//! [`MAX_TABLES_PER_COMPONENT`] tables of at most [`MAX_TABLE_ELEMENTS`] elements, at most
//! [`MAX_CORE_INSTANCES_PER_COMPONENT`] core instances. wasmtime checks a component
//! against these when it is compiled or read from the cache, so one that declares more
//! is refused at load ([`bounds_refusal`] says why), never at a call. The pool holds
//! [`MAX_LIVE_INSTANCES`] instances: [`MAX_CALL_SLOTS`] for calls (a call holds one
//! instance at a time, so admitting at most that many calls can never exhaust it) and the
//! rest for loads (`describe()`).

pub mod cache;
pub mod embedded;
pub mod grants;
pub mod plugin;
pub mod store;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::Linker;
use wasmtime::{Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use crate::services::{self, Services};
use store::CallState;

/// How often the epoch advances: the granularity of CPU budgets and async yields.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);
pub use crate::config::{MAX_CALL_SLOTS, MAX_LIVE_INSTANCES};
/// Linear memories one component may define (all its core modules together).
pub const MAX_MEMORIES_PER_COMPONENT: u32 = 1;
/// Tables one component may define (all its core modules together). A Rust
/// `wasm32-wasip2` plugin has 2 (its own and the component shim's).
pub const MAX_TABLES_PER_COMPONENT: u32 = 4;
/// Elements one table may have, initially or after growing.
pub const MAX_TABLE_ELEMENTS: usize = 10_000;
/// Core module instances one component may create. A Rust `wasm32-wasip2` plugin
/// creates 3 (its module, the shim and the fixups); a componentize-py (Python) one 14.
pub const MAX_CORE_INSTANCES_PER_COMPONENT: u32 = 32;
/// Bytes of each reused memory, table and stack slot kept mapped between calls.
const KEEP_RESIDENT_BYTES: usize = 64 << 10;
/// The largest linear memory any plugin may have; per-plugin caps are lower.
const MAX_MEMORY_BYTES: usize = 1 << 30;

/// Why the engine could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("cannot set up the WebAssembly engine: {0:#}")]
pub struct EngineError(#[from] wasmtime::Error);

/// Why a component does not fit the pool's per-component bounds, when that is why it
/// could not be compiled or read: the bounds and what wasmtime found.
pub fn bounds_refusal(error: &wasmtime::Error) -> Option<String> {
    let text = format!("{error:#}");
    // wasmtime's pooling allocator names itself in every per-component refusal
    // (memories, tables, table elements, core instances, instance sizes).
    text.contains("pooling allocator").then(|| {
        format!(
            "declares more than a plugin may have (one linear memory, at most \
             {MAX_TABLES_PER_COMPONENT} tables of at most {MAX_TABLE_ELEMENTS} elements, at most \
             {MAX_CORE_INSTANCES_PER_COMPONENT} core instances): {text}"
        )
    })
}

/// The engine, the linker with every host interface, and the host services.
pub struct Runtime {
    pub engine: Engine,
    pub cache: cache::ComponentCache,
    /// The state directory (`None`: none), which no plugin grant may reach.
    pub state_dir: Option<std::path::PathBuf>,
    pub linker: Linker<CallState>,
    pub services: Services,
    /// Instances made ahead of their calls now (see [`plugin`]), at most `MAX_SPARES`.
    pub spares: Arc<std::sync::atomic::AtomicUsize>,
    ticker_stop: Arc<AtomicBool>,
}

impl Runtime {
    /// `state_dir/cache` holds compiled components (`None`: compile every time, and
    /// no state directory to keep plugins out of).
    pub fn new(
        services: Services,
        state_dir: Option<std::path::PathBuf>,
    ) -> Result<Runtime, EngineError> {
        let mut config = wasmtime::Config::new();
        config.wasm_component_model(true);
        config.epoch_interruption(true);
        config.concurrency_support(false);
        let mut pool = PoolingAllocationConfig::default();
        pool.total_component_instances(MAX_LIVE_INSTANCES)
            .total_core_instances(MAX_LIVE_INSTANCES * MAX_CORE_INSTANCES_PER_COMPONENT)
            .total_memories(MAX_LIVE_INSTANCES * MAX_MEMORIES_PER_COMPONENT)
            .total_tables(MAX_LIVE_INSTANCES * MAX_TABLES_PER_COMPONENT)
            .total_stacks(MAX_LIVE_INSTANCES)
            .max_core_instances_per_component(MAX_CORE_INSTANCES_PER_COMPONENT)
            .max_memories_per_component(MAX_MEMORIES_PER_COMPONENT)
            .max_tables_per_component(MAX_TABLES_PER_COMPONENT)
            .max_memories_per_module(MAX_MEMORIES_PER_COMPONENT)
            .table_elements(MAX_TABLE_ELEMENTS)
            .max_memory_size(MAX_MEMORY_BYTES)
            // Reused slots keep their first pages mapped: no page faults to re-touch
            // them on the next call.
            .linear_memory_keep_resident(KEEP_RESIDENT_BYTES)
            .table_keep_resident(KEEP_RESIDENT_BYTES)
            .async_stack_keep_resident(KEEP_RESIDENT_BYTES)
            // On Linux 6.7+, reset only the pages a call dirtied (PAGEMAP_SCAN) instead
            // of dropping them: the next call takes no page faults on them. Measured
            // here: a guard check 18.7 µs -> 7.8 µs, peak RSS unchanged. Older kernels
            // fall back to memset + madvise.
            .pagemap_scan(wasmtime::Enabled::Auto);
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = Engine::new(&config)?;

        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        grants::add_name_lookup_to_linker(&mut linker, CallState::name_lookup)?;
        services::wit::add_to_linker(&mut linker)?;

        let ticker_stop = Arc::new(AtomicBool::new(false));
        let (weak_engine, stop) = (engine.weak(), ticker_stop.clone());
        std::thread::Builder::new()
            .name("dsh-epoch".into())
            .spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    match weak_engine.upgrade() {
                        Some(engine) => engine.increment_epoch(),
                        None => break,
                    }
                }
            })
            .map_err(|e| EngineError(e.into()))?;

        Ok(Runtime {
            cache: cache::ComponentCache::new(&engine, state_dir.as_ref().map(|d| d.join("cache"))),
            state_dir,
            engine,
            linker,
            services,
            spares: Default::default(),
            ticker_stop,
        })
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.ticker_stop.store(true, Ordering::Relaxed);
    }
}
