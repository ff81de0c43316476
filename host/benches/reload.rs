//! Hot reload: the time from a new plugin version being read to it answering (compile
//! cache warm, so the debounce window and the file-system event are left out), against
//! a call to the version already serving; end to end, the time from the new file being
//! renamed into a watched plugin directory to the first call the new version answers
//! (file-system event, debounce, load, swap); and a cold start of `dsh` (empty compile
//! cache) against a warm one, measured in the same run.
//!
//! Run with `cargo bench --bench reload`.

mod support;

use support::ms;

use std::path::Path;
use std::time::{Duration, Instant};

use dsh::call::CallRequest;
use dsh::engine::plugin::{ComponentBytes, PluginSource};
use dsh::host::load_plugin;

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn start_once(state: &Path) -> Duration {
    let started = Instant::now();
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_dsh"))
        .arg("--state-dir")
        .arg(state)
        .arg("tools")
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    started.elapsed()
}

#[tokio::main]
async fn main() {
    let scratch = tempfile::tempdir().unwrap();
    let versions: Vec<(String, ComponentBytes)> = ["a", "b"]
        .iter()
        .map(|v| {
            let bytes = std::fs::read(support::built_plugin(&format!("version_{v}"))).unwrap();
            (v.to_string(), ComponentBytes::from(bytes))
        })
        .collect();
    let host = support::start_host(scratch.path(), None).await;
    let runtime = host.pipeline.runtime.clone();
    let never = tokio_util::sync::CancellationToken::new();
    let request = || CallRequest::new("version", serde_json::json!({}), "bench", "default");
    let source = PluginSource::Path(scratch.path().join("version.wasm"));
    // Fill the compile cache with both versions.
    for (_, bytes) in &versions {
        load_plugin(
            &runtime,
            &host.registry,
            &host.config,
            "version",
            source.clone(),
            bytes.clone(),
        )
        .await;
    }
    let (mut swaps, mut calls) = (Vec::new(), Vec::new());
    for round in 0..40 {
        let (name, bytes) = &versions[round % 2];
        let started = Instant::now();
        assert!(
            load_plugin(
                &runtime,
                &host.registry,
                &host.config,
                "version",
                source.clone(),
                bytes.clone()
            )
            .await
        );
        let answer = host.pipeline.call(request(), &never).await;
        swaps.push(started.elapsed());
        assert_eq!(&answer.content_text(), name);
        let started = Instant::now();
        host.pipeline.call(request(), &never).await;
        calls.push(started.elapsed());
    }
    println!("== hot reload (compile cache warm; debounce and file-system event not included)");
    println!(
        "baseline: a call to the serving version        median {:>7.3} ms",
        ms(median(&mut calls))
    );
    println!(
        "new version read to new version answering      median {:>7.3} ms (target ≤ 20 ms)",
        ms(median(&mut swaps))
    );

    // End to end: a watched directory, the file renamed in, calls until the new
    // version answers.
    let debounce = Duration::from_millis(host.config.serve.reload_debounce_ms);
    let watched = scratch.path().join("watched");
    std::fs::create_dir_all(&watched).unwrap();
    let _watcher = dsh::reload::watch(host.pipeline.clone(), &watched, debounce).unwrap();
    let mut end_to_end = Vec::new();
    for round in 0..10 {
        let (name, bytes) = &versions[round % 2];
        let staged = scratch.path().join("version.wasm.new");
        std::fs::write(&staged, bytes.bytes()).unwrap();
        let started = Instant::now();
        std::fs::rename(&staged, watched.join("version.wasm")).unwrap();
        loop {
            if host.pipeline.call(request(), &never).await.content_text() == *name {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{name} never answered"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        end_to_end.push(started.elapsed());
    }
    println!(
        "file renamed in to new version answering       median {:>7.1} ms (debounce {} ms; target ≤ 200 ms)",
        ms(median(&mut end_to_end)),
        debounce.as_millis()
    );

    let (mut cold, mut warm) = (Vec::new(), Vec::new());
    for round in 0..5 {
        let state = scratch.path().join(format!("start-{round}"));
        cold.push(start_once(&state));
        warm.push(start_once(&state));
    }
    let (cold, warm) = (median(&mut cold), median(&mut warm));
    println!("\n== `dsh tools` start to exit, embedded plugins");
    println!("cold compile cache  median {:>7.1} ms", ms(cold));
    println!(
        "warm compile cache  median {:>7.1} ms   (cold / warm: {:.1})",
        ms(warm),
        ms(cold) / ms(warm)
    );
    host.shutdown();
}
