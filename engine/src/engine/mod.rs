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
pub mod compile_settings;
pub mod embedded;
pub mod grants;
pub mod middleware;
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
/// Bytes of each reused table and stack slot kept mapped between calls.
const KEEP_RESIDENT_BYTES: usize = 64 << 10;
/// With `pagemap_scan` (Linux 6.7+), at most this many bytes of a reused linear memory
/// slot's dirtied pages are reset in place instead of dropped. wasmtime's scan also stops
/// at the 32nd run of dirtied pages, the real bound for interpreters: what lies past it is
/// dropped and faults again on the next call. Measured (release, `languages` bench, 2-core
/// VM), 64 KiB -> 1 MiB: JavaScript (componentize-js) 194 -> 82 page faults a call, p50
/// 1.60-1.83 -> 1.20-1.33 ms; Python (componentize-py) 281 -> 222 faults, p50 2.32-2.59
/// -> 2.09-2.36 ms; Rust `echo` 101 µs either way (`pipeline` bench); 512 KiB and 2 to 16
/// MiB measure as 1 MiB (the 32-run bound comes first). Cost: the slots calls used keep
/// those pages (RSS after 8 concurrent calls of one heavy plugin +7 to +9 MiB; its peak
/// during them unchanged within noise, Python +111/+116 -> +107/+114 MiB); the `mcp`
/// bench's server peak RSS is unchanged (34.5 -> 34.4 MiB).
const LINEAR_MEMORY_KEEP_RESIDENT_BYTES: usize = 1 << 20;
/// Without `pagemap_scan` the kept bytes are rewritten on every reset, used or not: 1 MiB
/// there cost Rust `echo` +20 µs a call (125 -> 145 µs), so keep only the first pages.
const LINEAR_MEMORY_KEEP_RESIDENT_BYTES_NO_PAGEMAP: usize = KEEP_RESIDENT_BYTES;
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

/// Whether this kernel has the `PAGEMAP_SCAN` ioctl (Linux 6.7+), which wasmtime uses
/// (`pagemap_scan(Auto)`) to reset only the pages a call dirtied.
fn kernel_has_pagemap_scan() -> bool {
    cfg!(target_os = "linux")
        && std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .ok()
            .and_then(|release| kernel_version(&release))
            .is_some_and(|version| version >= (6, 7))
}

/// `(major, minor)` of a kernel release such as `6.18.44-fc-v595`.
fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.trim().split(['.', '-']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
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
    /// The host's metrics (one registry per runtime, so per host): the engine counts
    /// limit hits, the pipeline its calls.
    pub metrics: Arc<crate::metrics::Metrics>,
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
        compile_settings::apply(&mut config);
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
            // Reused slots keep pages mapped: no page faults to re-touch them on the
            // next call.
            .linear_memory_keep_resident(if kernel_has_pagemap_scan() {
                LINEAR_MEMORY_KEEP_RESIDENT_BYTES
            } else {
                LINEAR_MEMORY_KEEP_RESIDENT_BYTES_NO_PAGEMAP
            })
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
        middleware::add_to_linker(&mut linker)?;

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

        let metrics = Arc::new(crate::metrics::Metrics::new());
        let spares: Arc<std::sync::atomic::AtomicUsize> = Default::default();
        let made_ahead = spares.clone();
        metrics.gauge_fn(
            "dsh_plugin_spare_instances",
            "Plugin instances of the pool made ahead of their calls now (at most 64; \
             the pool's other instances are the calls' own)",
            move || made_ahead.load(Ordering::Relaxed) as i64,
        );
        Ok(Runtime {
            cache: cache::ComponentCache::new(&engine, state_dir.as_ref().map(|d| d.join("cache"))),
            state_dir,
            engine,
            linker,
            services,
            spares,
            metrics,
            ticker_stop,
        })
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.ticker_stop.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::kernel_version;

    #[test]
    fn kernel_version_reads_major_and_minor_of_a_release() {
        assert_eq!(kernel_version("6.18.44-fc-v595\n"), Some((6, 18)));
        assert_eq!(kernel_version("6.7.0"), Some((6, 7)));
        assert_eq!(kernel_version("5.15-generic"), Some((5, 15)));
        assert!(kernel_version("6.6.1") < Some((6, 7)));
        assert_eq!(kernel_version("garbage"), None);
    }

    /// A runtime with the default configuration and its state directory in `state`.
    fn runtime_in(state: &std::path::Path) -> std::sync::Arc<super::Runtime> {
        let config = crate::config::Config::default();
        let services =
            crate::services::Services::new(&config.services(), state.join("spill")).unwrap();
        std::sync::Arc::new(super::Runtime::new(services, Some(state.to_path_buf())).unwrap())
    }

    /// Every embedded component's first load takes the code precompiled when dsh was
    /// built (stored as a cache entry, then a hit), and loads it without a cache too:
    /// `build.rs` compiled it with the runtime's settings. A setting changed in
    /// `Runtime::new` alone, not in `compile_settings`, fails here.
    #[test]
    fn every_embedded_component_loads_its_precompiled_code() {
        use super::cache::{CacheOutcome, ComponentCache};
        let state = tempfile::tempdir().unwrap();
        let runtime = runtime_in(state.path());
        let fresh_cache = || ComponentCache::new(&runtime.engine, Some(state.path().join("cache")));
        for plugin in super::embedded::PLUGINS {
            let component = plugin.component();
            let (_, first) = fresh_cache().load(&runtime.engine, &component).unwrap();
            assert_eq!(first, CacheOutcome::Precompiled, "{}", plugin.name);
            let (_, again) = fresh_cache().load(&runtime.engine, &component).unwrap();
            assert_eq!(again, CacheOutcome::Hit, "{}", plugin.name);
            let entry = state.path().join("cache").join(format!(
                "{}-{}.cwasm",
                plugin.digest,
                runtime.cache.engine_key()
            ));
            assert_eq!(
                std::fs::read(&entry).unwrap(),
                plugin.precompiled.unwrap(),
                "{}: the entry is the binary's code, not a compile of its own",
                plugin.name
            );
        }
    }

    /// Code that does not fit the engine (made under other settings, or not code at all)
    /// is never run: the component is compiled, stored, and its entry then hit.
    #[test]
    fn precompiled_code_that_does_not_fit_the_engine_is_compiled_instead() {
        use super::cache::{CacheOutcome, ComponentCache};
        let state = tempfile::tempdir().unwrap();
        let runtime = runtime_in(state.path());
        let mut other = wasmtime::Config::new();
        super::compile_settings::apply(&mut other);
        other.epoch_interruption(false);
        let other = wasmtime::Engine::new(&other).unwrap();
        let jobs = super::embedded::component("jobs").unwrap();
        let misfit: &'static [u8] = Box::leak(
            other
                .precompile_component(jobs.bytes())
                .unwrap()
                .into_boxed_slice(),
        );
        for (case, code) in [
            ("other settings", misfit),
            ("not code", &b"\x7fELF garbage"[..]),
        ] {
            let cache_dir = state
                .path()
                .join(format!("cache-{}", case.replace(' ', "-")));
            let component = jobs.clone().with_precompiled(Some(code));
            let cache = || ComponentCache::new(&runtime.engine, Some(cache_dir.clone()));
            let (_, first) = cache().load(&runtime.engine, &component).unwrap();
            assert_eq!(first, CacheOutcome::Miss, "{case}");
            let (_, again) = cache().load(&runtime.engine, &component).unwrap();
            assert_eq!(again, CacheOutcome::Hit, "{case}");
            let without = ComponentCache::new(&runtime.engine, None);
            let (_, outcome) = without.load(&runtime.engine, &component).unwrap();
            assert_eq!(outcome, CacheOutcome::Disabled, "{case}");
        }
    }

    /// Two plugins loaded from the same bytes (one component under two names) share
    /// one compiled component, mapped once from its entry, while either lives; each
    /// still answers from instances of its own.
    #[tokio::test]
    async fn plugins_of_the_same_bytes_share_their_compiled_code() {
        use super::plugin::{Plugin, PluginSource};
        let state = tempfile::tempdir().unwrap();
        let runtime = runtime_in(state.path());
        let jobs = super::embedded::component("jobs").unwrap();
        let entry = state.path().join("cache").join(jobs.digest());
        let entry = entry.to_string_lossy();
        let mappings = || {
            let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
            maps.lines()
                .filter(|line| line.contains(&*entry) && line.ends_with(".cwasm"))
                .count()
        };
        // Granted what it imports under either name.
        let granted = crate::config::PluginConfig {
            interfaces: Some(vec!["jobs".into()]),
            ..Default::default()
        };
        let load = |name: &'static str| {
            Plugin::load(
                &runtime,
                name,
                PluginSource::Embedded,
                jobs.clone(),
                granted.clone(),
            )
        };
        let first = load("jobs").await.unwrap();
        let once = mappings();
        assert!(once > 0, "the entry is mapped");
        let second = load("jobs_again").await.unwrap();
        assert_eq!(mappings(), once, "the second plugin maps nothing more");
        assert!(!second.specs.is_empty(), "the second describes its tools");
        assert_eq!(first.specs.len(), second.specs.len());
        drop(first);
        assert_eq!(mappings(), once, "held by the second");
        drop(second);
        assert_eq!(mappings(), 0, "unmapped with the last plugin");
    }

    /// A plugin loaded from the compile cache runs code mapped from its entry, while
    /// its linear memory starts from a sealed memfd image: no mapping of an entry is
    /// ever writable, so changing the file in place cannot reach a guest's memory.
    #[tokio::test]
    async fn guest_memory_never_maps_a_cache_entry() {
        use super::plugin::{Plugin, PluginSource};
        let state = tempfile::tempdir().unwrap();
        let runtime = runtime_in(state.path());
        let jobs = super::embedded::component("jobs").unwrap();
        let digest = jobs.digest().to_string();
        let load = || {
            Plugin::load(
                &runtime,
                "jobs",
                PluginSource::Embedded,
                jobs.clone(),
                Default::default(),
            )
        };
        // Compiled and stored, then (once nothing holds it) loaded again from the entry;
        // both read `describe()` from a fresh instance.
        drop(load().await.unwrap());
        let _cached = load().await.unwrap();
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let entries: Vec<&str> = maps
            .lines()
            .filter(|line| line.contains(&digest) && line.ends_with(".cwasm"))
            .collect();
        assert!(!entries.is_empty(), "the entry's code is mapped:\n{maps}");
        for line in &entries {
            let perms = line.split_whitespace().nth(1).unwrap();
            assert!(
                !perms.contains('w'),
                "a writable mapping of the entry: {line}"
            );
        }
        assert!(
            maps.contains("memfd:wasm-memory-image"),
            "the guest's memory image is a memfd:\n{maps}"
        );
    }
}
