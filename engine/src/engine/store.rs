//! The per-call state of a plugin instance: a fresh [`CallState`] in a fresh `Store` for
//! every call, holding the call's context, the WASI context of what the plugin was granted, the
//! host services, and the CPU and memory accounting that enforces the plugin's bounds.
//!
//! The CPU budget counts guest CPU only ([`GuestCpu`]): the thread CPU clock
//! (`CLOCK_THREAD_CPUTIME_ID`) is read when each poll of the call's future begins and
//! ends ([`metered`]; the guest runs inside the poll, on the polling thread, so a call
//! that moves between tokio workers is summed poll by poll), and the wall time of every
//! host call and libcall within the poll (wasmtime's call hook) is taken off. Time in
//! host calls, waiting and time spent without a core never count.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wasmtime::component::ResourceTable;
use wasmtime::{CallHook, ResourceLimiter, Store, StoreContextMut, UpdateDeadline};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use crate::call::CallContext;
use crate::error::{ErrorCode, ToolError};
use crate::services::{CallCtx, CallScratch, CallView, Services};

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

/// CPU time the calling thread has used so far.
fn thread_cpu_now() -> Duration {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

/// The guest CPU time of one call, shared by its store and the future that runs it
/// ([`metered`]).
pub type SharedGuestCpu = Arc<Mutex<GuestCpu>>;

/// The guest CPU time of one call: for every poll of the call's future (one stretch on
/// one thread: wasmtime runs the guest inside the poll), the thread CPU time of the poll
/// minus the wall time the poll spent in host calls and libcalls. The thread CPU clock
/// is a system call (1.1 to 1.9 µs measured on the 2-core VM), so it is read twice per
/// poll and at epoch ticks; host call boundaries (many per call) read the monotonic
/// clock (vDSO).
/// Preemption during a host call is subtracted with it, in the guest's favour.
#[derive(Debug)]
pub struct GuestCpu {
    /// Guest CPU of the polls that have ended.
    used: Duration,
    /// The thread CPU clock when the running poll began (`None`: not being polled).
    poll_cpu: Option<Duration>,
    /// Wall time the running poll has spent in finished host stretches.
    poll_host: Duration,
    /// In the host: when its current stretch in this poll began.
    host_since: Option<Instant>,
    /// Whether the host (not the guest) is running: before the first entry into the
    /// guest, in host calls and libcalls, and after the guest returns.
    in_host: bool,
    /// When the call began: the fallback measure of a store polled without [`metered`].
    started: Instant,
    /// Whether a [`metered`] poll has begun.
    metered: bool,
}

impl Default for GuestCpu {
    fn default() -> Self {
        GuestCpu {
            used: Duration::ZERO,
            poll_cpu: None,
            poll_host: Duration::ZERO,
            host_since: None,
            in_host: true,
            started: Instant::now(),
            metered: false,
        }
    }
}

impl GuestCpu {
    /// A poll of the call's future begins on this thread.
    fn poll_started(&mut self) {
        self.metered = true;
        self.poll_cpu = Some(thread_cpu_now());
        self.poll_host = Duration::ZERO;
        if self.in_host {
            self.host_since = Some(Instant::now());
        }
    }

    /// The poll ends: the call finished or is suspended (in a host call).
    fn poll_ended(&mut self) {
        self.close_host_stretch();
        if let Some(started) = self.poll_cpu.take() {
            self.used += thread_cpu_now()
                .saturating_sub(started)
                .saturating_sub(self.poll_host);
        }
        self.poll_host = Duration::ZERO;
    }

    fn close_host_stretch(&mut self) {
        if let Some(since) = self.host_since.take() {
            self.poll_host += since.elapsed();
        }
    }

    /// The guest calls the host or returns to it.
    fn host_entered(&mut self) {
        self.in_host = true;
        self.host_since = Some(Instant::now());
    }

    /// The host calls the guest or returns to it.
    fn guest_entered(&mut self) {
        self.in_host = false;
        self.close_host_stretch();
    }

    /// Guest CPU used so far, the running poll included. A store polled outside
    /// [`metered`] has no thread CPU figures: then all the call's wall time counts.
    pub fn used(&self) -> Duration {
        if !self.metered {
            return self.started.elapsed();
        }
        let Some(started) = self.poll_cpu else {
            return self.used;
        };
        let host = self.poll_host + self.host_since.map_or(Duration::ZERO, |s| s.elapsed());
        self.used
            + thread_cpu_now()
                .saturating_sub(started)
                .saturating_sub(host)
    }
}

/// Runs `future` (which drives a store whose state holds `cpu`) with its guest CPU
/// metered: every poll reads the thread CPU clock when it begins and ends.
pub async fn metered<F: Future>(cpu: SharedGuestCpu, future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    std::future::poll_fn(move |cx| {
        lock(&cpu).poll_started();
        let polled = future.as_mut().poll(cx);
        lock(&cpu).poll_ended();
        polled
    })
    .await
}

/// The meter, even if a panic poisoned its lock (its figures stay meaningful).
fn lock(cpu: &Mutex<GuestCpu>) -> std::sync::MutexGuard<'_, GuestCpu> {
    cpu.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Everything a plugin instance may reach during one call.
pub struct CallState {
    pub call: CallContext,
    pub plugin: Arc<str>,
    pub services: Services,
    /// Wall time spent inside the dsh host services' calls (process, jobs, terminal),
    /// reported in the CPU limit error; no host call counts against the CPU budget.
    pub host_time: Duration,
    /// The host names this call may look up (none until the plugin's grants set it).
    pub names: Arc<NamePolicy>,
    /// Guest CPU used by this call, which the CPU budget bounds.
    pub guest_cpu: SharedGuestCpu,
    /// What the capabilities keep for this call (what it read through `files`, which
    /// its commits are checked against).
    pub scratch: CallScratch,
    wasi: WasiCtx,
    table: ResourceTable,
    bounds: Bounds,
    started: Instant,
    bound_hit: Option<BoundHit>,
    /// The guest CPU the budget check saw when it stopped the call: what the error
    /// reports (read again later, a host stretch the thread spent descheduled would be
    /// taken off it, in the guest's favour, and could show less than the budget).
    cpu_at_stop: Duration,
    /// Bytes of linear memory of every memory in the store together (the memory cap
    /// bounds this sum, not each memory).
    memory_total: usize,
    /// Made ahead of its call ([`super::plugin`]'s spare instance) and not yet given
    /// one: the guest may not call the host (the call hook refuses it).
    warming: bool,
    /// A middleware's call: the rest of the call below it (`next.run`).
    pub rest: Option<super::middleware::RestOfCall>,
    /// Wall time a middleware spent running the rest of its call (not its own).
    pub in_next: Duration,
    /// Why the host stopped the guest, when it did (a middleware past the runs it may
    /// make): the error the call fails with.
    pub stopped: Option<ToolError>,
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
            guest_cpu: SharedGuestCpu::default(),
            scratch: CallScratch::default(),
            wasi,
            table: ResourceTable::new(),
            bounds,
            started: Instant::now(),
            bound_hit: None,
            cpu_at_stop: Duration::ZERO,
            memory_total: 0,
            warming: false,
            rest: None,
            in_next: Duration::ZERO,
            stopped: None,
        }
    }

    /// State for an instance made ahead of its call: no call yet (an empty context), and
    /// any call of the guest into the host refused until [`CallState::begin_call`].
    pub fn warming(plugin: Arc<str>, services: Services, bounds: Bounds, wasi: WasiCtx) -> Self {
        let no_call = CallContext {
            owner: "".into(),
            session: "".into(),
            call_id: String::new(),
            workdir: std::path::PathBuf::new(),
            scope: "".into(),
            tool: "".into(),
            spill_dir: std::path::PathBuf::new(),
            output_budget: 0,
            spill_cap: 0,
            notices: Default::default(),
            sampler: None,
            step: None,
        };
        CallState {
            warming: true,
            ..CallState::new(no_call, plugin, services, bounds, wasi)
        }
    }

    /// When the call began (for an instance made ahead: when the call took it).
    pub fn call_began(&self) -> Instant {
        self.started
    }

    /// Gives an instance made ahead its call: the context, and fresh CPU accounting
    /// (making the instance is not the call's).
    pub fn begin_call(&mut self, call: CallContext) {
        self.call = call;
        self.warming = false;
        self.guest_cpu = SharedGuestCpu::default();
        self.scratch = CallScratch::default();
        self.started = Instant::now();
        self.host_time = Duration::ZERO;
    }

    /// Turns a failed guest call into the structured error the model sees.
    pub fn classify(&self, error: wasmtime::Error) -> ToolError {
        if let Some(stopped) = &self.stopped {
            return stopped.clone();
        }
        match self.bound_hit {
            Some(BoundHit::Cpu) => ToolError::new(
                ErrorCode::PluginCpuLimit,
                format!(
                    "plugin {} used {} ms of guest CPU, past its CPU budget of {} ms \
                     (the call ran {} ms, {} ms of them in dsh host calls, which do not count)",
                    self.plugin,
                    self.cpu_at_stop.as_millis(),
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

/// Tells the meter when the guest is entered and left. Libcalls (the epoch check among
/// them) are host calls too, so the epoch callback and every async suspension happen
/// with the host running.
fn track_guest_cpu(ctx: StoreContextMut<'_, CallState>, hook: CallHook) -> wasmtime::Result<()> {
    if ctx.data().warming && matches!(hook, CallHook::CallingHost) {
        // Made ahead of its call, it has no call to act for: no spare for this plugin.
        return Err(wasmtime::Error::msg(
            "the plugin calls the host while it is instantiated",
        ));
    }
    let mut cpu = lock(&ctx.data().guest_cpu);
    match hook {
        CallHook::CallingWasm | CallHook::ReturningFromHost => cpu.guest_entered(),
        CallHook::ReturningFromWasm | CallHook::CallingHost => cpu.host_entered(),
    }
    Ok(())
}

/// A store for one call with the bounds armed: epoch ticks check guest CPU time and
/// yield to the async runtime; memory growth past the cap traps. Drive it inside
/// [`metered`] with its state's `guest_cpu`; a store made ahead of its call is re-armed
/// by [`arm_for_call`] when the call begins.
pub fn new_store(engine: &wasmtime::Engine, state: CallState) -> Store<CallState> {
    let mut store = Store::new(engine, state);
    store.limiter(|state| state as &mut dyn ResourceLimiter);
    store.call_hook(track_guest_cpu);
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(|mut ctx| {
        let state = ctx.data_mut();
        let used = lock(&state.guest_cpu).used();
        if used > state.bounds.cpu {
            state.bound_hit = Some(BoundHit::Cpu);
            state.cpu_at_stop = used;
            return Err(BoundExceeded(BoundHit::Cpu).into());
        }
        Ok(UpdateDeadline::Yield(1))
    });
    store
}

/// Re-arms a store made ahead of its call for `call`: its context, fresh CPU accounting,
/// and the epoch deadline counted from now.
pub fn arm_for_call(store: &mut Store<CallState>, call: CallContext) {
    store.data_mut().begin_call(call);
    store.set_epoch_deadline(1);
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

impl CallView for CallState {
    fn call_ctx(&mut self) -> CallCtx<'_, Services> {
        CallCtx {
            call: &self.call,
            plugin: &self.plugin,
            service: &self.services,
            foundation: self.services.foundation(),
            host_time: &mut self.host_time,
            scratch: &mut self.scratch,
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
    fn guest_cpu_sums_the_guest_stretches_of_each_poll() {
        let mut cpu = GuestCpu::default();
        cpu.poll_started();
        cpu.guest_entered();
        spin_for(Duration::from_millis(30));
        cpu.host_entered(); // a host call that suspends
        cpu.poll_ended();
        let first = cpu.used();
        assert!(first >= Duration::from_millis(30), "{first:?}");
        cpu.poll_started(); // resumed, maybe on another thread
        cpu.guest_entered();
        spin_for(Duration::from_millis(30));
        assert!(
            cpu.used() >= first + Duration::from_millis(30),
            "running poll counts"
        );
        cpu.host_entered();
        cpu.poll_ended();
        let both = cpu.used();
        assert!(
            (Duration::from_millis(60)..Duration::from_millis(70)).contains(&both),
            "{both:?}"
        );
    }

    #[test]
    fn guest_cpu_does_not_count_the_host() {
        let mut cpu = GuestCpu::default();
        cpu.poll_started();
        spin_for(Duration::from_millis(20)); // the host, before the guest is entered
        cpu.guest_entered();
        cpu.host_entered();
        spin_for(Duration::from_millis(20)); // a host call
        cpu.guest_entered();
        cpu.host_entered();
        cpu.poll_ended();
        cpu.poll_started(); // the host, after the guest returned
        spin_for(Duration::from_millis(20));
        cpu.poll_ended();
        assert!(cpu.used() < Duration::from_millis(3), "{:?}", cpu.used());
    }

    #[test]
    fn guest_cpu_does_not_count_waiting_in_the_guest() {
        let mut cpu = GuestCpu::default();
        cpu.poll_started();
        cpu.guest_entered();
        std::thread::sleep(Duration::from_millis(50));
        cpu.host_entered();
        cpu.poll_ended();
        assert!(cpu.used() < Duration::from_millis(5), "{:?}", cpu.used());
    }

    #[test]
    fn an_unmetered_store_counts_all_its_wall_time() {
        let cpu = GuestCpu::default();
        std::thread::sleep(Duration::from_millis(20));
        assert!(cpu.used() >= Duration::from_millis(20));
    }

    /// A store whose state is made ahead of its call, on a plain engine.
    fn warming_store(dir: &std::path::Path) -> Store<CallState> {
        let services = Services::new(&Default::default(), dir.join("spill")).unwrap();
        let bounds = Bounds {
            cpu: Duration::from_secs(1),
            memory_bytes: 1 << 20,
        };
        let state = CallState::warming("p".into(), services, bounds, WasiCtx::builder().build());
        new_store(&wasmtime::Engine::default(), state)
    }

    #[test]
    fn an_instance_made_ahead_may_not_call_the_host_until_its_call_begins() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = warming_store(dir.path());
        use wasmtime::AsContextMut;
        assert!(
            track_guest_cpu(store.as_context_mut(), CallHook::CallingWasm).is_ok(),
            "its guest may run while it is made"
        );
        let refused = track_guest_cpu(store.as_context_mut(), CallHook::CallingHost);
        assert!(refused.is_err(), "a host call while it is made is refused");
        let mut call = store.data().call.clone();
        call.owner = "agent".into();
        call.call_id = "call-7".into();
        arm_for_call(&mut store, call);
        assert_eq!(&*store.data().call.owner, "agent");
        assert!(track_guest_cpu(store.as_context_mut(), CallHook::CallingHost).is_ok());
    }
}
