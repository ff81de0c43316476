//! The cost of the CPU bound: the `hostile` test plugin's `burn` (a pure CPU loop) run
//! through dsh, whose engine has epoch interruption and a per-call budget, against the
//! same component in a plain wasmtime engine with no bound at all, in the same run.
//! Rounds alternate between the two so machine noise hits both alike.
//!
//! Run with `cargo bench --bench sandbox`.

mod support;

use support::ms;

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{Engine, Store};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use dsh::call::CallRequest;
use dsh::engine::bindings::dsh::plugin::types::CallContext;
use dsh::engine::bindings::ToolPre;

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

    let mut config = wasmtime::Config::new();
    config.wasm_component_model(true);
    config.concurrency_support(false);
    let engine = Engine::new(&config).unwrap();
    let mut linker: Linker<Unbounded> = Linker::new(&engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker).unwrap();
    let component = Component::from_file(&engine, &wasm).unwrap();
    let pre = ToolPre::new(linker.instantiate_pre(&component).unwrap()).unwrap();
    let context = CallContext {
        owner: "bench".into(),
        session: "bench".into(),
        call_id: "call-1".into(),
        workdir: "/".into(),
        scope: "default".into(),
        settings_json: "{}".into(),
        output_budget: 30_000,
    };

    let (mut bounded, mut unbounded) = (Vec::new(), Vec::new());
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
        answers.push(result.content);
    }
    assert!(
        answers.windows(2).all(|w| w[0] == w[1]),
        "both computed the same: {answers:?}"
    );
    let (bounded, unbounded) = (median(&mut bounded), median(&mut unbounded));
    println!("burn({ITERATIONS}) median of {ROUNDS} rounds:");
    println!(
        "  unbounded (plain wasmtime engine): {:8.1} ms",
        ms(unbounded)
    );
    println!(
        "  bounded (dsh, epoch + CPU budget): {:8.1} ms",
        ms(bounded)
    );
    println!(
        "  cost of the CPU bound: {:+.1} % (target <= +15 %)",
        (bounded.as_secs_f64() / unbounded.as_secs_f64() - 1.0) * 100.0
    );
    host.shutdown();
}
