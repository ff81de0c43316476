//! The same `todos` tool in Rust, Python (componentize-py) and JavaScript
//! (componentize-js), in one run: first load (compile) and cached load, per-call p50 and
//! p99 with a fresh instance per call (the plugin called directly, and through the whole
//! pipeline back to back and after a pause), its page faults and CPU per call, and how much this process's RSS grows
//! (from before the cached load) once each is loaded and at its peak during 8 concurrent
//! calls (the `dsh serve` figures are printed by the e2e test).
//!
//! The components are the ones the e2e test `languages` builds (it installs the
//! toolchains): run `cargo test --test e2e languages::todos` first, then
//! `cargo bench --bench languages` (`--profile dev` for a quick debug-build figure).

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use dsh::call::CallRequest;
use dsh::config::Config;
use support::{ms, percentile, us};

/// The idle time before each call of the "after a pause" figure.
const PAUSE: Duration = Duration::from_millis(10);

fn components() -> Vec<(&'static str, PathBuf)> {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    vec![
        (
            "rust",
            Path::new(env!("DSH_WASM_TARGET_DIR")).join("wasm32-wasip2/release/todos.wasm"),
        ),
        ("python", tmp.join("langs-build/python/todos.wasm")),
        ("js", tmp.join("langs-build/js/todos.wasm")),
    ]
}

/// Minor page faults this process has taken so far.
fn minor_faults() -> i64 {
    // SAFETY: an all-zero rusage is valid; getrusage only writes it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    usage.ru_minflt
}

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::main]
async fn main() {
    println!("== todos in three languages (fresh instance per call)");
    // DSH_BENCH_LANG=python (say) runs one language; DSH_BENCH_CALLS the calls measured.
    let only = std::env::var("DSH_BENCH_LANG").ok();
    let n: usize = std::env::var("DSH_BENCH_CALLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(300);
    let mut rust_p50 = None;
    let mut missing = Vec::new();
    for (lang, wasm) in components() {
        if only.as_deref().is_some_and(|only| only != lang) {
            continue;
        }
        if !wasm.exists() {
            println!(
                "{lang}: {} missing: run `cargo test --test e2e languages::todos` first",
                wasm.display()
            );
            missing.push(lang);
            continue;
        }
        let scratch = tempfile::tempdir().unwrap();
        let data = scratch.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        std::fs::write(
            data.join("a.rs"),
            "// TODO one\nfn main() {}\n// FIXME two\n",
        )
        .unwrap();
        let plugins = scratch.path().join("plugins");
        std::fs::create_dir_all(&plugins).unwrap();
        std::fs::copy(&wasm, plugins.join("todos.wasm")).unwrap();
        let config = Config::parse(&format!(
            "[plugins.todos]\ninterfaces = [\"log\", \"progress\"]\nfs = [{{ path = {:?}, mode = \"ro\" }}]\n",
            data.display().to_string()
        ))
        .unwrap();

        let started = Instant::now();
        let first =
            support::start_host_with(scratch.path(), Some(plugins.clone()), config.clone()).await;
        let first_load = started.elapsed();
        first.services.shutdown();
        drop(first);
        let rss_before = status_kib("VmRSS:");
        let started = Instant::now();
        let host = support::start_host_with(scratch.path(), Some(plugins), config).await;
        let cached_load = started.elapsed();
        let rss_loaded = status_kib("VmRSS:");

        let pipeline = host.pipeline.clone();
        let catalog = host.registry.snapshot();
        let scope = host.registry.scope("default").unwrap();
        let todos = catalog.resolve("todos", &scope).unwrap();
        let context = support::bench_context(scratch.path(), "todos");
        let args = serde_json::json!({ "path": data.join("a.rs") });
        let args_json = args.to_string();
        let never = tokio_util::sync::CancellationToken::new();
        let mut direct = Vec::with_capacity(n);
        let mut through = Vec::with_capacity(n);
        for _ in 0..20 {
            todos
                .plugin
                .call(&pipeline.runtime, context.clone(), "todos", &args_json)
                .await;
        }
        let faults_before = minor_faults();
        let cpu_before = support::process_cpu();
        for _ in 0..n {
            let started = Instant::now();
            let result = todos
                .plugin
                .call(&pipeline.runtime, context.clone(), "todos", &args_json)
                .await;
            direct.push(started.elapsed());
            assert_eq!(result.content_text(), "a.rs: 2\ntotal: 2 in 1 files");
        }
        let faults_per_call = (minor_faults() - faults_before) / n as i64;
        let cpu_per_call = (support::process_cpu() - cpu_before) / n as u32;
        // Back to back, then as an agent calls, with idle time before each call (the host
        // may make the next call's instance during the pause).
        let mut paused = Vec::with_capacity(n);
        for (pause, samples) in [(None, &mut through), (Some(PAUSE), &mut paused)] {
            for _ in 0..n {
                if let Some(pause) = pause {
                    tokio::time::sleep(pause).await;
                }
                let started = Instant::now();
                let result = pipeline
                    .call(
                        CallRequest::new("todos", args.clone(), "bench", "default"),
                        &never,
                    )
                    .await;
                samples.push(started.elapsed());
                assert!(result.error.is_none(), "{:?}", result.error);
            }
        }
        // The peak RSS from here on: writing 5 to clear_refs resets VmHWM to the current RSS.
        let peak_reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
        let calls: Vec<_> = (0..8)
            .map(|_| {
                let (plugin, runtime, context, args_json) = (
                    todos.plugin.clone(),
                    pipeline.runtime.clone(),
                    context.clone(),
                    args_json.clone(),
                );
                tokio::spawn(
                    async move { plugin.call(&runtime, context, "todos", &args_json).await },
                )
            })
            .collect();
        for call in calls {
            call.await.unwrap();
        }
        let peak = status_kib(if peak_reset { "VmHWM:" } else { "VmRSS:" });
        let p = |samples: &mut Vec<Duration>, q| us(percentile(samples, q));
        let direct_p50 = p(&mut direct, 0.5);
        let against_rust = match rust_p50 {
            Some(rust) if lang != "rust" => format!(" ({:.1}x Rust)", direct_p50 / rust),
            _ => String::new(),
        };
        if lang == "rust" {
            rust_p50 = Some(direct_p50);
        }
        println!(
            "{lang:<7} {:>6} KiB  first load {:>7.0} ms  cached load {:>5.0} ms  direct p50 {:>7.1} µs{against_rust} p99 {:>7.1} µs  \
             pipeline p50 {:>7.1} µs, after a pause {:>7.1} µs  {} page faults and {:.0} µs CPU a call  \
             RSS +{} MiB loaded, peak +{} MiB during 8 concurrent calls",
            std::fs::metadata(&wasm).unwrap().len() / 1024,
            ms(first_load),
            ms(cached_load),
            direct_p50,
            p(&mut direct, 0.99),
            p(&mut through, 0.5),
            p(&mut paused, 0.5),
            faults_per_call,
            us(cpu_per_call),
            rss_loaded.saturating_sub(rss_before) / 1024,
            peak.saturating_sub(rss_before) / 1024,
        );
        host.services.shutdown();
    }
    // A language left out is a failed run, not a shorter table.
    assert!(missing.is_empty(), "components missing for {missing:?}");
}
