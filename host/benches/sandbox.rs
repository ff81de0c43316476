//! The cost of the CPU bound: the `hostile` test plugin's `burn` (a pure CPU loop) run
//! through dsh, whose engine has epoch interruption and a per-call guest CPU budget
//! (the thread CPU clock read at every guest entry and exit), against the same component
//! in an engine with dsh's own configuration (the same pooling allocator) minus epoch
//! interruption, in a store with no bound at all. For comparison it also runs the
//! alternative bound, wasmtime fuel with async yields, in the same pooled configuration,
//! and prints the fuel a millisecond of `burn` takes (the calibration a fuel budget in
//! ms would need). Rounds alternate between the engines so machine noise hits all alike.
//!
//! Run with `cargo bench --bench sandbox`.

mod support;

use support::ms;

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{Engine, Store};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use dsh::bindings::dsh::plugin::types::CallContext;
use dsh::bindings::ToolPre;
use dsh::call::CallRequest;

const ITERATIONS: u64 = 200_000_000;
const ROUNDS: usize = 7;

struct Unbounded {
    wasi: WasiCtx,
    table: ResourceTable,
}

impl WasiView for Unbounded {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// Fuel between two async yields of the fuel engine.
const FUEL_YIELD: u64 = 10_000_000;

/// The `hostile` component ready to instantiate in `engine`, with WASI only.
fn unbounded_pre(engine: &Engine, wasm: &std::path::Path) -> ToolPre<Unbounded> {
    let mut linker: Linker<Unbounded> = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker).unwrap();
    let component = Component::from_file(engine, wasm).unwrap();
    ToolPre::new(linker.instantiate_pre(&component).unwrap()).unwrap()
}

/// What one read of `CLOCK_THREAD_CPUTIME_ID` costs, in ns.
fn thread_clock_read_ns() -> f64 {
    const READS: u32 = 200_000;
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    let started = Instant::now();
    for _ in 0..READS {
        // SAFETY: `now` is a valid, writable timespec.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    }
    started.elapsed().as_nanos() as f64 / f64::from(READS)
}

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

#[tokio::main]
async fn main() {
    let scratch = tempfile::tempdir().unwrap();
    let wasm = support::built_plugin("hostile");
    let plugins = support::plugin_dir(scratch.path(), &[("hostile", "hostile")]);
    let host = support::start_host(scratch.path(), Some(plugins)).await;
    let args = serde_json::json!({ "iterations": ITERATIONS });

    // dsh's engine configuration, pooling allocator included, without the bound.
    let mut config = host.pipeline.runtime.engine.config().clone();
    config.epoch_interruption(false);
    let engine = Engine::new(&config).unwrap();
    let pre = unbounded_pre(&engine, &wasm);
    // The same, with fuel instead: the other way to bound guest CPU.
    config.consume_fuel(true);
    let fuel_engine = Engine::new(&config).unwrap();
    let fuel_pre = unbounded_pre(&fuel_engine, &wasm);
    let context = CallContext {
        owner: "bench".into(),
        session: "bench".into(),
        call_id: "call-1".into(),
        workdir: "/".into(),
        scope: "default".into(),
        settings_json: "{}".into(),
        output_budget: 30_000,
    };

    let (mut bounded, mut unbounded, mut fueled) = (Vec::new(), Vec::new(), Vec::new());
    let mut fuel_used = 0;
    let mut answers = Vec::new();
    for _ in 0..ROUNDS {
        let started = Instant::now();
        let result = host
            .pipeline
            .call(
                CallRequest::new("burn", args.clone(), "bench", "default"),
                &CancellationToken::new(),
            )
            .await;
        bounded.push(started.elapsed());
        assert!(!result.is_error(), "{}", result.text());
        answers.push(result.text());

        let started = Instant::now();
        let mut store = Store::new(
            &engine,
            Unbounded {
                wasi: WasiCtx::builder().build(),
                table: ResourceTable::new(),
            },
        );
        let tool = pre.instantiate_async(&mut store).await.unwrap();
        let result = tool
            .call_call(&mut store, &context, "burn", &args.to_string())
            .await
            .unwrap();
        unbounded.push(started.elapsed());
        answers.push(dsh::bindings::text_of(&result.content));

        let started = Instant::now();
        let mut store = Store::new(
            &fuel_engine,
            Unbounded {
                wasi: WasiCtx::builder().build(),
                table: ResourceTable::new(),
            },
        );
        store.set_fuel(u64::MAX).unwrap();
        store.fuel_async_yield_interval(Some(FUEL_YIELD)).unwrap();
        let tool = fuel_pre.instantiate_async(&mut store).await.unwrap();
        let result = tool
            .call_call(&mut store, &context, "burn", &args.to_string())
            .await
            .unwrap();
        fueled.push(started.elapsed());
        fuel_used = u64::MAX - store.get_fuel().unwrap();
        answers.push(dsh::bindings::text_of(&result.content));
    }
    assert!(
        answers.windows(2).all(|w| w[0] == w[1]),
        "both computed the same: {answers:?}"
    );
    let (bounded, unbounded, fueled) = (
        median(&mut bounded),
        median(&mut unbounded),
        median(&mut fueled),
    );
    let cost = |d: Duration| (d.as_secs_f64() / unbounded.as_secs_f64() - 1.0) * 100.0;
    println!("burn({ITERATIONS}) median of {ROUNDS} rounds:");
    println!(
        "  unbounded (dsh's pooled engine, no epochs, no bound): {:8.1} ms",
        ms(unbounded)
    );
    println!(
        "  bounded (dsh: epochs + guest CPU clock budget):       {:8.1} ms  {:+.1} %",
        ms(bounded),
        cost(bounded)
    );
    println!(
        "  fuel (same pooled engine, consume_fuel + yields):     {:8.1} ms  {:+.1} %",
        ms(fueled),
        cost(fueled)
    );
    println!(
        "  cost of the CPU bound: {:+.1} % (target <= +15 %); ratio bounded/unbounded {:.3}",
        cost(bounded),
        bounded.as_secs_f64() / unbounded.as_secs_f64()
    );
    println!(
        "  fuel per call {fuel_used}, {:.0} fuel per ms of burn (a fuel budget in ms needs this rate)",
        fuel_used as f64 / (ms(fueled))
    );
    println!(
        "  thread CPU clock read: {:.0} ns (the bound reads it twice per poll of a call and once per epoch tick)",
        thread_clock_read_ns()
    );
    host.shutdown();

    accuracy_under_contention(scratch.path(), &fuel_pre, &context).await;
}

/// The budget of the accuracy runs.
const ACCURACY_BUDGET_MS: u64 = 500;

/// How exactly each bound stops calls that share the cores: `spin` under a
/// `ACCURACY_BUDGET_MS` budget alone and 4 at once (dsh's bound; the figure it reports
/// against the process CPU it took), and the same `burn` alone and 4 at once in the fuel
/// engine (a fixed amount of fuel: how much CPU it stands for when the cores are shared).
async fn accuracy_under_contention(
    scratch: &std::path::Path,
    fuel_pre: &ToolPre<Unbounded>,
    context: &CallContext,
) {
    let config = dsh::config::Config::parse(&format!(
        "[plugins.hostile]\ncpu_ms = {ACCURACY_BUDGET_MS}\n"
    ))
    .unwrap();
    let plugins = support::plugin_dir(&scratch.join("accuracy"), &[("hostile", "hostile")]);
    let host = support::start_host_with(&scratch.join("accuracy"), Some(plugins), config).await;
    let spin = |host: &dsh::host::Host| {
        let pipeline = host.pipeline.clone();
        async move {
            let result = pipeline
                .call(
                    CallRequest::new("spin", serde_json::json!({}), "bench", "default"),
                    &CancellationToken::new(),
                )
                .await;
            let text = result.text();
            assert!(text.contains("PLUGIN_CPU_LIMIT"), "{text}");
            text.split("used ")
                .nth(1)
                .and_then(|rest| rest.split(" ms").next())
                .and_then(|ms| ms.parse::<u64>().ok())
                .unwrap_or_else(|| panic!("no CPU figure in {text}"))
        }
    };
    spin(&host).await; // compile and warm
    println!("accuracy, {ACCURACY_BUDGET_MS} ms budget, `spin` (dsh's bound):");
    for concurrent in [1usize, 4] {
        let (cpu_before, started) = (support::process_cpu(), Instant::now());
        let tasks: Vec<_> = (0..concurrent).map(|_| tokio::spawn(spin(&host))).collect();
        let mut reported = Vec::new();
        for task in tasks {
            reported.push(task.await.unwrap());
        }
        let (cpu, wall) = (support::process_cpu() - cpu_before, started.elapsed());
        println!(
            "  {concurrent} at once: reported guest CPU {reported:?} ms; process CPU {:.0} ms per call; wall {:.0} ms",
            ms(cpu) / concurrent as f64,
            ms(wall)
        );
    }
    host.shutdown();

    println!("accuracy, the same fuel (burn({ITERATIONS})) in the fuel engine:");
    for concurrent in [1usize, 4] {
        let (cpu_before, started) = (support::process_cpu(), Instant::now());
        let tasks: Vec<_> = (0..concurrent)
            .map(|_| {
                let (pre, context) = (fuel_pre.clone(), context.clone());
                tokio::spawn(async move {
                    let mut store = Store::new(
                        pre.engine(),
                        Unbounded {
                            wasi: WasiCtx::builder().build(),
                            table: ResourceTable::new(),
                        },
                    );
                    store.set_fuel(u64::MAX).unwrap();
                    store.fuel_async_yield_interval(Some(FUEL_YIELD)).unwrap();
                    let args = serde_json::json!({ "iterations": ITERATIONS }).to_string();
                    let tool = pre.instantiate_async(&mut store).await.unwrap();
                    tool.call_call(&mut store, &context, "burn", &args)
                        .await
                        .unwrap();
                    u64::MAX - store.get_fuel().unwrap()
                })
            })
            .collect();
        let mut fuel = 0;
        for task in tasks {
            fuel = task.await.unwrap();
        }
        let (cpu, wall) = (support::process_cpu() - cpu_before, started.elapsed());
        println!(
            "  {concurrent} at once: {fuel} fuel each; process CPU {:.0} ms per call; wall {:.0} ms",
            ms(cpu) / concurrent as f64,
            ms(wall)
        );
    }
}
