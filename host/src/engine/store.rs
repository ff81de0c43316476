//! The per-call state of a plugin instance: a fresh [`CallState`] in a fresh `Store` for
//! every call, holding the call's context, the WASI context of what the plugin was granted, the
//! host services, and the CPU and memory accounting that enforces the plugin's bounds.
//!
//! The CPU budget counts guest CPU only: the thread CPU clock
//! (`CLOCK_THREAD_CPUTIME_ID`) is read whenever the guest is entered or resumed and
//! whenever it returns or calls out to the host (wasmtime's call hook), and the deltas
//! are summed ([`GuestCpu`]). Every suspension of an async call happens inside a host
//! call or libcall, so a segment never spans a move to another worker thread; time in
//! host calls, waiting and time spent without a core never count.

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::component::ResourceTable;
use wasmtime::{CallHook, ResourceLimiter, Store, StoreContextMut, UpdateDeadline};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use crate::call::CallContext;
use crate::error::{ErrorCode, ToolError};
use crate::services::Services;

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

/// CPU time the calling thread has used so far.
fn thread_cpu_now() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable timespec; the clock id is a constant Linux knows.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    if status != 0 {
        return Duration::ZERO;
    }
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

/// The guest CPU time of one call: the sum of the thread CPU time of every stretch the
/// guest ran, each read on the thread that ran it.
#[derive(Debug, Default)]
pub struct GuestCpu {
    used: Duration,
    /// The thread CPU clock when the running stretch of guest code began (`None`: the
    /// guest is not running; the host is).
    entered: Option<Duration>,
}

impl GuestCpu {
    /// The guest starts or resumes running on this thread.
    fn enter(&mut self) {
        self.entered = Some(thread_cpu_now());
    }

    /// The guest stops running on this thread (it returned, trapped or called the host).
    fn leave(&mut self) {
        if let Some(entered) = self.entered.take() {
            self.used += thread_cpu_now().saturating_sub(entered);
        }
    }

    /// Guest CPU used so far, the running stretch included.
    pub fn used(&self) -> Duration {
        match self.entered {
            Some(entered) => self.used + thread_cpu_now().saturating_sub(entered),
            None => self.used,
        }
    }
}

/// Everything a plugin instance may reach during one call.
pub struct CallState {
    pub call: CallContext,
    pub plugin: Arc<str>,
    pub services: Services,
    /// Wall time spent inside the dsh host services' calls (process, jobs, terminal),
    /// reported in the CPU limit error; no host call counts against the CPU budget.
    pub host_time: Duration,
    /// Guest CPU used by this call, which the CPU budget bounds.
    pub guest_cpu: GuestCpu,
    wasi: WasiCtx,
    table: ResourceTable,
    bounds: Bounds,
    started: Instant,
    bound_hit: Option<BoundHit>,
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
            guest_cpu: GuestCpu::default(),
            wasi,
            table: ResourceTable::new(),
            bounds,
            started: Instant::now(),
            bound_hit: None,
        }
    }

    /// Turns a failed guest call into the structured error the model sees.
    pub fn classify(&self, error: wasmtime::Error) -> ToolError {
        match self.bound_hit {
            Some(BoundHit::Cpu) => ToolError::new(
                ErrorCode::PluginCpuLimit,
                format!(
                    "plugin {} used {} ms of guest CPU, past its CPU budget of {} ms \
                     (the call ran {} ms, {} ms of them in dsh host calls, which do not count)",
                    self.plugin,
                    self.guest_cpu.used().as_millis(),
                    self.bounds.cpu.as_millis(),
                    self.started.elapsed().as_millis(),
                    self.host_time.as_millis()
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

/// Starts and stops the guest CPU clock as the guest is entered and left. Libcalls
/// (the epoch check among them) are host calls too, so the epoch callback and every
/// async suspension run with the clock stopped.
fn track_guest_cpu(
    mut ctx: StoreContextMut<'_, CallState>,
    hook: CallHook,
) -> wasmtime::Result<()> {
    let cpu = &mut ctx.data_mut().guest_cpu;
    match hook {
        CallHook::CallingWasm | CallHook::ReturningFromHost => cpu.enter(),
        CallHook::ReturningFromWasm | CallHook::CallingHost => cpu.leave(),
    }
    Ok(())
}

/// A store for one call with the bounds armed: epoch ticks check guest CPU time and
/// yield to the async runtime; memory growth past the cap traps.
pub fn new_store(engine: &wasmtime::Engine, state: CallState) -> Store<CallState> {
    let mut store = Store::new(engine, state);
    store.limiter(|state| state as &mut dyn ResourceLimiter);
    store.call_hook(track_guest_cpu);
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(|mut ctx| {
        let state = ctx.data_mut();
        if state.guest_cpu.used() > state.bounds.cpu {
            state.bound_hit = Some(BoundHit::Cpu);
            return Err(BoundExceeded(BoundHit::Cpu).into());
        }
        Ok(UpdateDeadline::Yield(1))
    });
    store
}

impl ResourceLimiter for CallState {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.bounds.memory_bytes {
            self.bound_hit = Some(BoundHit::Memory);
            return Err(BoundExceeded(BoundHit::Memory).into());
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 1_000_000)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Spins on this thread until its CPU clock has advanced by `amount`.
    fn spin_for(amount: Duration) {
        let start = thread_cpu_now();
        while thread_cpu_now().saturating_sub(start) < amount {
            std::hint::black_box(0u64);
        }
    }

    #[test]
    fn guest_cpu_counts_cpu_while_entered_and_nothing_while_left() {
        let mut cpu = GuestCpu::default();
        cpu.enter();
        spin_for(Duration::from_millis(30));
        cpu.leave();
        let after_guest = cpu.used();
        assert!(after_guest >= Duration::from_millis(30), "{after_guest:?}");
        // The host runs (spins) with the guest left: none of it counts.
        spin_for(Duration::from_millis(30));
        assert_eq!(cpu.used(), after_guest);
        // Waiting while entered burns no CPU, so it barely counts either.
        cpu.enter();
        std::thread::sleep(Duration::from_millis(50));
        cpu.leave();
        let waited = cpu.used() - after_guest;
        assert!(
            waited < Duration::from_millis(5),
            "sleeping counted {waited:?}"
        );
    }

    #[test]
    fn guest_cpu_includes_the_running_stretch() {
        let mut cpu = GuestCpu::default();
        cpu.enter();
        spin_for(Duration::from_millis(20));
        assert!(cpu.used() >= Duration::from_millis(20));
    }
}
