//! The per-call state of a plugin instance: a fresh [`CallState`] in a fresh `Store` for
//! every call, holding the call's context, the WASI context of what the plugin was granted, the
//! host services, and the CPU and memory accounting that enforces the plugin's bounds.

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, Store, UpdateDeadline};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use crate::call::CallContext;
use crate::error::{ErrorCode, ToolError};
use crate::services::Services;

use super::grants::{GuardedNameLookup, NamePolicy};

/// Which bound a call ran into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BoundHit {
    Cpu,
    Memory,
}

/// Raised (as a trap) when a bound is hit.
#[derive(Debug, thiserror::Error)]
#[error("plugin exceeded its {0:?} bound")]
pub struct BoundExceeded(pub BoundHit);

/// The bounds of one plugin instance.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    pub cpu: Duration,
    pub memory_bytes: usize,
}

/// Everything a plugin instance may reach during one call.
pub struct CallState {
    pub call: CallContext,
    pub plugin: Arc<str>,
    pub services: Services,
    /// Time spent inside host calls; it does not count against the CPU budget.
    pub host_time: Duration,
    /// The host names this call may look up (none until the plugin's grants set it).
    pub names: Arc<NamePolicy>,
    wasi: WasiCtx,
    table: ResourceTable,
    bounds: Bounds,
    started: Instant,
    bound_hit: Option<BoundHit>,
    /// Bytes of linear memory of every memory in the store together (the memory cap
    /// bounds this sum, not each memory).
    memory_total: usize,
}

impl CallState {
    /// `wasi` holds what the plugin was granted (see [`super::grants`]); nothing else.
    pub fn new(
        call: CallContext,
        plugin: Arc<str>,
        services: Services,
        bounds: Bounds,
        wasi: WasiCtx,
    ) -> Self {
        CallState {
            call,
            plugin,
            services,
            host_time: Duration::ZERO,
            names: NamePolicy::none(),
            wasi,
            table: ResourceTable::new(),
            bounds,
            started: Instant::now(),
            bound_hit: None,
            memory_total: 0,
        }
    }

    /// Guest CPU time so far: wall time minus time spent in host calls.
    fn guest_time(&self) -> Duration {
        self.started.elapsed().saturating_sub(self.host_time)
    }

    /// Turns a failed guest call into the structured error the model sees.
    pub fn classify(&self, error: wasmtime::Error) -> ToolError {
        match self.bound_hit {
            Some(BoundHit::Cpu) => ToolError::new(
                ErrorCode::PluginCpuLimit,
                format!(
                    "plugin {} used more than its CPU budget of {} ms",
                    self.plugin,
                    self.bounds.cpu.as_millis()
                ),
            ),
            Some(BoundHit::Memory) => ToolError::new(
                ErrorCode::PluginOutOfMemory,
                format!(
                    "plugin {} tried to grow its memory past its cap of {} MiB",
                    self.plugin,
                    self.bounds.memory_bytes >> 20
                ),
            ),
            None => {
                let trap = error
                    .downcast_ref::<wasmtime::Trap>()
                    .map(|t| t.to_string())
                    .unwrap_or_else(|| format!("{error:#}"));
                ToolError::new(
                    ErrorCode::PluginTrap,
                    format!("plugin {} trapped: {trap}", self.plugin),
                )
            }
        }
    }
}

/// A store for one call with the bounds armed: epoch ticks check guest CPU time and
/// yield to the async runtime; memory growth past the cap traps.
pub fn new_store(engine: &wasmtime::Engine, state: CallState) -> Store<CallState> {
    let mut store = Store::new(engine, state);
    store.limiter(|state| state as &mut dyn ResourceLimiter);
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(|mut ctx| {
        let state = ctx.data_mut();
        if state.guest_time() > state.bounds.cpu {
            state.bound_hit = Some(BoundHit::Cpu);
            return Err(BoundExceeded(BoundHit::Cpu).into());
        }
        Ok(UpdateDeadline::Yield(1))
    });
    store
}

impl ResourceLimiter for CallState {
    /// Called for every memory's creation (from 0) and growth: the store's total must
    /// stay within the cap, however many memories it has.
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let total = self
            .memory_total
            .saturating_sub(current)
            .saturating_add(desired);
        if total > self.bounds.memory_bytes {
            self.bound_hit = Some(BoundHit::Memory);
            return Err(BoundExceeded(BoundHit::Memory).into());
        }
        self.memory_total = total;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= super::MAX_TABLE_ELEMENTS)
    }
}

impl CallState {
    /// This call's `wasi:sockets/ip-name-lookup` host, behind its [`NamePolicy`].
    pub fn name_lookup(&mut self) -> GuardedNameLookup<'_> {
        GuardedNameLookup {
            sockets: wasmtime_wasi::sockets::WasiSocketsCtxView {
                ctx: self.wasi.sockets(),
                table: &mut self.table,
            },
            names: &self.names,
        }
    }
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}
