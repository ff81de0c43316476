//! The cost of serving an older contract version: an `echo` call on the committed
//! 0.1.0 build (`tests/fixtures/v0.1.0/echo.wasm`, called through the 0.1.0 adapter:
//! its context converted down, its result converted up into content items) against the
//! same call on the 0.2.0 build of `echo`, interleaved so machine noise hits both alike:
//!
//! 1. the plugin called directly (instantiate + call, no pipeline);
//! 2. the whole pipeline (validation, guards, filters, event log).
//!
//! Run with `cargo bench --bench contract`. Figures are medians (p50) and p99; the
//! ratio is 0.1.0 over 0.2.0 (expected about 1).

mod support;

use support::{percentile, us};

use std::time::{Duration, Instant};

use dsh::call::CallRequest;

fn report(name: &str, samples: &mut [Duration]) -> Duration {
    let p50 = percentile(samples, 0.50);
    let p99 = percentile(samples, 0.99);
    println!(
        "{name:<44} p50 {:>9.1} µs   p99 {:>9.1} µs   (n={})",
        us(p50),
        us(p99),
        samples.len()
    );
    p50
}

#[tokio::main]
async fn main() {
    let (old_scratch, new_scratch) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let old_plugins = old_scratch.path().join("plugins");
    std::fs::create_dir_all(&old_plugins).unwrap();
    std::fs::copy(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/v0.1.0/echo.wasm"),
        old_plugins.join("echo.wasm"),
    )
    .unwrap();
    let new_plugins = support::plugin_dir(new_scratch.path(), &[("echo", "echo")]);
    let old_host = support::start_host(old_scratch.path(), Some(old_plugins)).await;
    let new_host = support::start_host(new_scratch.path(), Some(new_plugins)).await;

    let echo_of = |host: &dsh::host::Host| {
        let catalog = host.registry.snapshot();
        let scope = host.registry.scope("default").unwrap();
        catalog.resolve("echo", &scope).unwrap()
    };
    let (old_echo, new_echo) = (echo_of(&old_host), echo_of(&new_host));
    assert_eq!(old_echo.plugin.version.as_str(), "0.1.0");
    assert_eq!(new_echo.plugin.version.as_str(), "0.2.0");

    let text = "x".repeat(1024);
    let echo_args = serde_json::json!({ "text": text });
    let args_json = echo_args.to_string();
    let context = |scratch: &std::path::Path| support::bench_context(scratch, "echo");
    let (old_context, new_context) = (context(old_scratch.path()), context(new_scratch.path()));
    let never = tokio_util::sync::CancellationToken::new();
    let request = || CallRequest::new("echo", echo_args.clone(), "bench", "default");

    println!("== echo (1 KiB argument, fresh instance per call): contract 0.1.0 against 0.2.0");
    let n = 5_000;
    let warmup = 200;
    let (mut old_direct, mut new_direct) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for round in 0..n + warmup {
        let started = Instant::now();
        let result = old_echo
            .plugin
            .call(
                &old_host.pipeline.runtime,
                old_context.clone(),
                "echo",
                &args_json,
            )
            .await;
        let old_time = started.elapsed();
        assert_eq!(result.content_text().len(), 1024, "{}", result.text());
        let started = Instant::now();
        let result = new_echo
            .plugin
            .call(
                &new_host.pipeline.runtime,
                new_context.clone(),
                "echo",
                &args_json,
            )
            .await;
        let new_time = started.elapsed();
        assert_eq!(result.content_text().len(), 1024, "{}", result.text());
        if round >= warmup {
            old_direct.push(old_time);
            new_direct.push(new_time);
        }
    }
    let new_p50 = report("0.2.0 echo: instantiate + call", &mut new_direct);
    let old_p50 = report("0.1.0 echo through its adapter", &mut old_direct);
    println!(
        "adapter cost p50: {:.1} µs; ratio 0.1.0 / 0.2.0: {:.2}",
        us(old_p50) - us(new_p50),
        us(old_p50) / us(new_p50)
    );

    let (mut old_full, mut new_full) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for round in 0..n + warmup {
        let started = Instant::now();
        let result = old_host.pipeline.call(request(), &never).await;
        let old_time = started.elapsed();
        assert_eq!(result.content_text().len(), 1024, "{}", result.text());
        let started = Instant::now();
        let result = new_host.pipeline.call(request(), &never).await;
        let new_time = started.elapsed();
        assert_eq!(result.content_text().len(), 1024, "{}", result.text());
        if round >= warmup {
            old_full.push(old_time);
            new_full.push(new_time);
        }
    }
    let new_p50 = report("0.2.0 echo: whole pipeline + event log", &mut new_full);
    let old_p50 = report("0.1.0 echo: whole pipeline + event log", &mut old_full);
    println!(
        "adapter cost p50: {:.1} µs; ratio 0.1.0 / 0.2.0: {:.2}",
        us(old_p50) - us(new_p50),
        us(old_p50) / us(new_p50)
    );
    old_host.shutdown();
    new_host.shutdown();
}
