//! A one-line echo through `terminal_send` (the whole pipeline, the terminal plugin,
//! the host's PTY session) against the same echo on a raw PTY driven directly, measured
//! in the same run: both run `echo hi` in an interactive bash and wait for `hi`.
//!
//! Run with `cargo bench --bench terminal`.

mod support;

use support::{percentile, us};

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh::call::CallRequest;
use serde_json::json;

/// The baseline: bash on a PTY, written to and read from directly.
fn raw_pty_samples(n: usize) -> Vec<Duration> {
    let (mut master, mut slave) = (-1, -1);
    // SAFETY: openpty fills two descriptors; null name, termios and size are allowed.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0);
    // SAFETY: fresh descriptors we own.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    let mut child = std::process::Command::new("bash")
        .args(["--noprofile", "--norc", "-i"])
        .env("PS1", "$ ")
        .stdin(slave.try_clone().unwrap())
        .stdout(slave.try_clone().unwrap())
        .stderr(slave)
        .spawn()
        .unwrap();
    let mut file = std::fs::File::from(master);
    let mut buf = [0u8; 4096];
    let mut seen = Vec::new();
    let mut wait_for = |file: &mut std::fs::File, needle: &[u8], seen: &mut Vec<u8>| loop {
        if let Some(at) = seen.windows(needle.len()).position(|w| w == needle) {
            seen.drain(..at + needle.len());
            return;
        }
        let n = file.read(&mut buf).unwrap();
        seen.extend_from_slice(&buf[..n]);
    };
    wait_for(&mut file, b"$ ", &mut seen);
    let mut samples = Vec::with_capacity(n);
    for i in 0..n + 50 {
        let started = Instant::now();
        file.write_all(b"echo hi\r").unwrap();
        // The terminal's echo of the input, then the command's own line.
        wait_for(&mut file, b"echo hi\r\n", &mut seen);
        wait_for(&mut file, b"hi\r\n", &mut seen);
        if i >= 50 {
            samples.push(started.elapsed());
        }
        wait_for(&mut file, b"$ ", &mut seen);
    }
    let _ = file.write_all(b"exit\r");
    let _ = child.kill();
    let _ = child.wait();
    let _ = file.as_raw_fd();
    samples
}

#[tokio::main]
async fn main() {
    let n = 500;
    let mut raw = tokio::task::spawn_blocking(move || raw_pty_samples(n))
        .await
        .unwrap();

    let scratch = tempfile::tempdir().unwrap();
    let host = support::start_host(scratch.path(), None).await;
    let never = tokio_util::sync::CancellationToken::new();
    let call =
        |tool: &str, args: serde_json::Value| CallRequest::new(tool, args, "bench", "default");
    let opened = host
        .pipeline
        .call(call("terminal_open", json!({})), &never)
        .await;
    assert!(opened.error.is_none(), "{opened:?}");
    let id = opened
        .content
        .split_whitespace()
        .nth(1)
        .unwrap()
        .to_string();
    let send = json!({ "id": id, "input": "echo hi", "wait": { "pattern": "(?m)^hi$" } });
    let mut dsh = Vec::with_capacity(n);
    for i in 0..n + 50 {
        let started = Instant::now();
        let result = host
            .pipeline
            .call(call("terminal_send", send.clone()), &never)
            .await;
        if i >= 50 {
            dsh.push(started.elapsed());
        }
        assert!(result.content.contains("\nhi\n"), "{result:?}");
        // Let the prompt come back before the next send.
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    // For scale: a terminal_list through the pipeline (the plugin call without I/O).
    let mut listing = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        host.pipeline
            .call(call("terminal_list", json!({})), &never)
            .await;
        listing.push(started.elapsed());
    }
    println!(
        "(for scale: terminal_list through the pipeline  p50 {:>8.1} µs)",
        us(percentile(&mut listing, 0.5))
    );
    // For scale: the terminal service alone, without the pipeline and the plugin.
    let owner: Arc<str> = Arc::from("bench");
    let mut service = Vec::with_capacity(n);
    let hi = regex::Regex::new("(?m)^hi$").unwrap();
    for _ in 0..n {
        let wait = dsh::services::terminal::SendWait {
            quiet: Duration::from_millis(300),
            pattern: Some(hi.clone()),
            timeout: Duration::from_secs(10),
        };
        let started = Instant::now();
        host.services
            .terminal
            .send(&owner, &id, "echo hi", true, wait, false)
            .await
            .unwrap();
        service.push(started.elapsed());
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    println!(
        "(for scale: the terminal service alone          p50 {:>8.1} µs)",
        us(percentile(&mut service, 0.5))
    );
    let raw_p50 = percentile(&mut raw, 0.5);
    let dsh_p50 = percentile(&mut dsh, 0.5);
    println!("== one-line echo in an interactive bash on a PTY");
    println!(
        "baseline: raw PTY, written and read directly   p50 {:>8.1} µs   p99 {:>8.1} µs",
        us(raw_p50),
        us(percentile(&mut raw, 0.99))
    );
    println!(
        "dsh: terminal_send through the pipeline        p50 {:>8.1} µs   p99 {:>8.1} µs",
        us(dsh_p50),
        us(percentile(&mut dsh, 0.99))
    );
    println!(
        "ratio p50: {:.2} (target ≤ 2, and p50 ≤ 1 ms)",
        us(dsh_p50) / us(raw_p50)
    );
    host.shutdown();
}
