//! What the benchmarks share: percentiles, unit conversions, and an in-process host on
//! a scratch directory. Each bench binary uses a part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use dsh::config::Config;
use dsh::host::{Host, HostOptions};

/// The `p` quantile (0.0 to 1.0) of `samples`, which it sorts.
pub fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    samples[((samples.len() as f64 - 1.0) * p).round() as usize]
}

/// The mean of `samples`.
pub fn mean(samples: &[Duration]) -> Duration {
    samples.iter().sum::<Duration>() / samples.len().max(1) as u32
}

pub fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[path = "../../../engine/guest_build.rs"]
mod guest_build;

/// The component built from the `plugins/` crate `name`, test-only ones included: the
/// host's build builds only the embedded ones, so the first call in this process builds
/// the whole plugins workspace into `DSH_PLUGIN_WASM_DIR`.
pub fn built_plugin(name: &str) -> PathBuf {
    let plugins = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/Cargo.toml");
    guest_build::build_all_once(&plugins, Path::new(env!("DSH_WASM_TARGET_DIR")))
        .join(format!("{name}.wasm"))
}

/// `scratch/plugins` holding built components as (file stem, built component).
pub fn plugin_dir(scratch: &std::path::Path, plugins: &[(&str, &str)]) -> PathBuf {
    let dir = scratch.join("plugins");
    std::fs::create_dir_all(&dir).unwrap();
    for (file, built) in plugins {
        std::fs::copy(built_plugin(built), dir.join(format!("{file}.wasm"))).unwrap();
    }
    dir
}

/// A host with the default config, its state and workspace in `scratch`.
pub async fn start_host(scratch: &std::path::Path, plugins_dir: Option<PathBuf>) -> Host {
    start_host_with(scratch, plugins_dir, Config::default()).await
}

/// A host with `config`, its state and workspace in `scratch`.
pub async fn start_host_with(
    scratch: &std::path::Path,
    plugins_dir: Option<PathBuf>,
    config: Config,
) -> Host {
    let host = Host::start(HostOptions {
        config,
        plugins_dir,
        state_dir: scratch.join("state"),
        workdir: scratch.to_path_buf(),
        config_file: None,
        resume: None,
    })
    .await
    .expect("the host starts");
    host.loaded().await;
    host
}

/// CPU this process has used so far (user + system, all threads).
pub fn process_cpu() -> Duration {
    // SAFETY: an all-zero rusage is valid; getrusage only writes it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let time = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    time(usage.ru_utime) + time(usage.ru_stime)
}

/// The context of a call by owner `bench` in scope `default` to `tool`, with `scratch` as
/// its workspace and spill directory: for benches that call a plugin directly.
pub fn bench_context(scratch: &std::path::Path, tool: &str) -> dsh::call::CallContext {
    dsh::call::CallContext {
        owner: "bench".into(),
        session: "bench".into(),
        call_id: "call-0".into(),
        workdir: scratch.to_path_buf(),
        scope: "default".into(),
        tool: tool.into(),
        spill_dir: scratch.to_path_buf(),
        output_budget: 30_000,
        spill_cap: dsh::output::DEFAULT_SPILL_CAP,
        notices: Default::default(),
        sampler: None,
        step: None,
    }
}

/// The `_sum` and `_count` of a histogram series (`name{labels}`) in Prometheus text.
pub fn histogram(text: &str, series: &str) -> (f64, f64) {
    let (name, labels) = series.split_once('{').unwrap_or((series, ""));
    let labels = if labels.is_empty() {
        String::new()
    } else {
        format!("{{{labels}")
    };
    let value = |suffix: &str| {
        let key = format!("{name}{suffix}{labels} ");
        text.lines()
            .find_map(|line| line.strip_prefix(&key))
            .map_or(0.0, |value| value.trim().parse::<f64>().unwrap())
    };
    (value("_sum"), value("_count"))
}

/// The mean time (µs) the pipeline's calls spent in `stage` between two readings of the
/// host's metrics.
pub fn stage_mean(stage: &str, before: &str, after: &str) -> f64 {
    histogram_mean(
        &format!("dsh_stage_duration_seconds{{stage=\"{stage}\"}}"),
        before,
        after,
    )
}

/// The mean (µs) of the observations of histogram `series` between two readings.
fn histogram_mean(series: &str, before: &str, after: &str) -> f64 {
    let (sum_before, count_before) = histogram(before, series);
    let (sum_after, count_after) = histogram(after, series);
    (sum_after - sum_before) / (count_after - count_before).max(1.0) * 1e6
}

/// Prints the mean time the pipeline's calls of `tool` spent in each stage between two readings
/// of the host's metrics, and the rest of the call's time (the `tool/call` and
/// `tool/result` events, resolving and validating, the observers).
pub fn where_the_time_goes(tool: &str, before: &str, after: &str) {
    let total = histogram_mean(
        &format!("dsh_call_duration_seconds{{tool=\"{tool}\"}}"),
        before,
        after,
    );
    let mut parts = vec![(
        "admission",
        histogram_mean("dsh_admission_wait_seconds", before, after),
    )];
    for stage in ["gate", "guards", "execute", "filters", "finalize"] {
        parts.push((stage, stage_mean(stage, before, after)));
    }
    let staged: f64 = parts.iter().map(|(_, mean)| mean).sum();
    let listed: Vec<String> = parts
        .iter()
        .map(|(stage, mean)| format!("{stage} {mean:.1}"))
        .collect();
    println!(
        "where a {tool} call's time goes (means, µs): {}; the rest (events, resolve, validate, observers) {:.1}; whole call {total:.1}",
        listed.join(", "),
        total - staged
    );
}

/// One MCP request over HTTP/1.1 to `addr`'s `/mcp` with `headers` besides the usual
/// ones (a connection of its own, `Connection: close`, the response read whole: the SSE
/// stream of a request ends with its answer): the JSON-RPC answer (the `data:` event
/// with an `id`, or the JSON body) and the response's headers, lower-cased.
pub fn http_post(
    addr: &str,
    headers: &[(&str, &str)],
    body: &serde_json::Value,
) -> (serde_json::Value, Vec<(String, String)>) {
    use serde_json::Value;
    use std::io::{BufRead, BufReader, Read, Write};
    let body = body.to_string();
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    let mut head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n\
         Connection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body.as_bytes()).unwrap();
    let mut reader = BufReader::new(stream);
    let mut status = String::new();
    reader.read_line(&mut status).unwrap();
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
        }
    }
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"));
    let mut raw = Vec::new();
    if chunked {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size).unwrap();
            let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            if size == 0 {
                break;
            }
            let mut chunk = vec![0; size + 2];
            reader.read_exact(&mut chunk).unwrap();
            raw.extend_from_slice(&chunk[..size]);
        }
    } else {
        reader.read_to_end(&mut raw).unwrap();
    }
    let text = String::from_utf8_lossy(&raw);
    assert!(
        status.contains(" 200 ") || status.contains(" 202 "),
        "{status} {text}"
    );
    let answer = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .find(|m| m.get("id").is_some())
        .or_else(|| serde_json::from_str(&text).ok())
        .unwrap_or(Value::Null);
    (answer, headers)
}
