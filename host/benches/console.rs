//! What watching a terminal in the console costs: a terminal printing about 10 MB/s, first
//! unwatched, then watched by one page, in the same run. The page is a `curl` reading the
//! terminal's event stream (`/console/api/watch`), in a process of its own, so its
//! CPU is not counted: the server does the same work for any reader of the stream (the
//! frames, their base64, the writes), and the browser's own work is the browser's.
//!
//! It prints, for each window: dsh's CPU (this process: the host, its PTY reading, the
//! screen parsing and the console's streams) as a share of one core, the output rate the
//! terminal made, the frames per second the page got and the bytes they carried, and the
//! resident memory before and after; then the added CPU of watching (target: at most 10 %
//! of one core) and the frame rate (target: at most 30 a second).
//!
//! Two runs on 2 cores (2026-12-07): unwatched 29.0 % and 30.1 % of a core at 9.9 MB/s,
//! watched 27.2 % and 28.3 %: watching added nothing measurable (-1.7, -1.9 points, the
//! runs' noise). Where the time goes: the PTY's reads, the scrollback and the `vt100`
//! parse, which happens watched or not (the screen is parsed in 64 KB batches as output
//! comes); a frame at this rate is always the screen's redraw (a third of a megabyte
//! arrives between two frames, more than `MAX_OUTPUT_FRAME`), a few KB rendered from the
//! parsed screen 28.5-28.7 times a second (0.15 MB/s of stream). RSS 38-40 MiB either way.
//!
//! Run with `cargo bench --bench console` (it needs `curl` and `python3`).

mod support;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh::call::CallRequest;
use dsh::services::terminal::View;
use serde_json::json;
use support::process_cpu;

/// How long each window lasts.
const WINDOW: Duration = Duration::from_secs(6);
const TOKEN: &str = "bench-console-token-0123456789";

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let scratch = tempfile::tempdir().unwrap();
    let host = Arc::new(support::start_host(scratch.path(), None).await);
    let console = dsh::console::Console::open(host.clone(), TOKEN.into(), &[]).unwrap();
    let router = console.router();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let service = hyper_util::service::TowerToHyperService::new(router.clone());
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });

    let never = tokio_util::sync::CancellationToken::new();
    let call =
        |tool: &str, args: serde_json::Value| CallRequest::new(tool, args, "bench", "default");
    let opened = host
        .pipeline
        .call(call("terminal_open", json!({})), &never)
        .await;
    assert!(opened.error.is_none(), "{opened:?}");
    let id = opened
        .content_text()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .to_string();
    // About 10 MB/s: 100 KB of text lines every 10 ms, for as long as the bench runs.
    let flood = "python3 -c \"import sys,time\nline=('x'*99+'\\n')*1000\nend=time.time()+60\nwhile time.time()<end:\n  t=time.time(); sys.stdout.write(line); sys.stdout.flush(); time.sleep(max(0,0.01-(time.time()-t)))\"";
    let started = host
        .pipeline
        .call(
            call(
                "terminal_send",
                json!({"id": id, "input": flood, "background": true}),
            ),
            &never,
        )
        .await;
    assert!(started.error.is_none(), "{started:?}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let terminals = host.services.terminal.clone();
    let total = || {
        terminals
            .read("bench", &id, View::Raw, u64::MAX, 0)
            .map(|read| read.next_cursor)
            .unwrap_or(0)
    };

    let window = |label: &'static str| {
        let (cpu, out, at, rss) = (process_cpu(), total(), Instant::now(), rss_kib());
        move |total_now: u64| {
            let elapsed = at.elapsed().as_secs_f64();
            let cpu = (process_cpu() - cpu).as_secs_f64() / elapsed;
            let rate = (total_now - out) as f64 / elapsed / 1e6;
            println!(
                "{label:<10} dsh CPU {:>5.1} % of a core, output {rate:>5.1} MB/s, RSS {} -> {} MiB",
                cpu * 100.0,
                rss / 1024,
                rss_kib() / 1024
            );
            cpu
        }
    };

    let unwatched = window("unwatched");
    tokio::time::sleep(WINDOW).await;
    let quiet_cpu = unwatched(total());

    let jar = scratch.path().join("cookies");
    let origin = format!("http://{addr}");
    let login = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-c"])
        .arg(&jar)
        .args([
            "-H",
            &format!("Origin: {origin}"),
            "-d",
            &format!("token={TOKEN}"),
        ])
        .arg(format!("{origin}/console/login"))
        .status()
        .expect("curl runs");
    assert!(login.success());
    let stream_file = scratch.path().join("stream");
    let mut page = Command::new("curl")
        .args(["-s", "-N", "-b"])
        .arg(&jar)
        .arg(format!("{origin}/console/api/watch?term=bench/{id}"))
        .stdout(Stdio::from(std::fs::File::create(&stream_file).unwrap()))
        .spawn()
        .expect("curl runs");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = std::fs::read_to_string(&stream_file).unwrap_or_default();
    let watched = window("watched");
    let at = Instant::now();
    tokio::time::sleep(WINDOW).await;
    let watched_cpu = watched(total());
    let elapsed = at.elapsed().as_secs_f64();
    let after = std::fs::read_to_string(&stream_file).unwrap_or_default();
    let _ = page.kill();
    let _ = page.wait();
    let frames = |text: &str| {
        text.lines()
            .filter(|l| *l == "event: screen" || *l == "event: output")
            .count()
    };
    let screens = |text: &str| text.lines().filter(|l| *l == "event: screen").count();
    let new_frames = frames(&after) - frames(&before);
    println!(
        "the page got {:.1} frames/s ({} of them screens), {:.2} MB/s of stream",
        new_frames as f64 / elapsed,
        screens(&after) - screens(&before),
        (after.len() - before.len()) as f64 / elapsed / 1e6
    );
    println!(
        "watching added {:.1} % of one core (target <= 10 %); frames {:.1}/s (target <= 30)",
        (watched_cpu - quiet_cpu) * 100.0,
        new_frames as f64 / elapsed
    );
    let _ = host
        .pipeline
        .call(call("terminal_close", json!({"id": id})), &never)
        .await;
}
