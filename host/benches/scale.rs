//! One `dsh serve --http` for many agents: N owners (N = 1, 10, 100, 250, 500, 1000 by
//! default; `DSH_SCALE_OWNERS=1,10,50` picks others), each an MCP session over streamable
//! HTTP holding a live terminal (an interactive bash) and a background job that prints a
//! line a second (a shell loop waiting on `read -t 1`, not a `sleep` forked every
//! second). At each N, a load of `job_output` (from the owner's cursor), `terminal_send`
//! (an echo) and `bash` (`true`) calls from random owners, 8 at a time, and then, per N:
//! the host's RSS (dsh and its keeper) and the shells' (every other process dsh
//! started), dsh's open descriptors, p50/p99 latency per tool, and dsh's CPU time per
//! call, with the ratio to N = 1 measured in the same run. Where `job_output`'s time
//! goes: the share of its calls dsh's own histogram timed within 5 and 10 ms, and the
//! round trip of an MCP `ping` sent every 10 ms during the load (the transport and the
//! machine's scheduling, with no tool and no pipeline). The server's limits
//! (`http_max_sessions`, the terminal caps) are raised for it in its `dsh.toml`.
//!
//! The server starts warm (its compile cache filled by a `dsh tools` first). The client
//! is a bare HTTP/1.1 one in this process (a connection per request, the
//! response read whole: the SSE stream of a request ends with its answer).
//!
//! Run with `cargo bench --bench scale` (or `--profile dev` to reuse a debug build).

mod support;

use support::{ms, percentile};

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const TOKEN: &str = "scale-bench-token";
const METRICS_TOKEN: &str = "scale-bench-metrics-token";
/// Calls per tool at each N.
const CALLS: usize = 150;
/// Callers at once.
const CONCURRENCY: usize = 8;

/// One owner: an MCP session with its terminal and its job.
struct Owner {
    session: String,
    terminal: String,
    job: String,
    /// `job_output`'s cursor.
    cursor: Mutex<u64>,
    /// Held during a `terminal_send` (a session takes one send at a time).
    sending: Mutex<()>,
}

struct Server {
    addr: String,
    next_id: AtomicU64,
}

impl Server {
    /// One HTTP request; the JSON-RPC answer and the response's headers.
    fn post(&self, session: Option<&str>, body: &Value) -> (Value, Vec<(String, String)>) {
        let auth = format!("Bearer {TOKEN}");
        let mut headers = vec![("Authorization", auth.as_str())];
        if let Some(session) = session {
            headers.push(("Mcp-Session-Id", session));
        }
        support::http_post(&self.addr, &headers, body)
    }

    /// The server's `/metrics` text.
    fn metrics(&self) -> String {
        let mut stream = TcpStream::connect(&self.addr).expect("connect");
        write!(
            stream,
            "GET /metrics HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {METRICS_TOKEN}\r\n\
             Connection: close\r\n\r\n",
            self.addr
        )
        .unwrap();
        let mut text = String::new();
        stream.read_to_string(&mut text).unwrap();
        assert!(text.starts_with("HTTP/1.1 200"), "/metrics: {text}");
        text
    }

    /// How many `job_output` calls dsh has timed so far, and how many of them within 5
    /// and 10 ms (its call duration histogram: from the call's arrival to its result).
    fn job_output_timed(&self) -> [u64; 3] {
        let text = self.metrics();
        let sample = |name: &str| -> u64 {
            text.lines()
                .find_map(|line| line.strip_prefix(name))
                .and_then(|rest| rest.trim().parse::<f64>().ok())
                .unwrap_or(0.0) as u64
        };
        [
            sample(r#"dsh_call_duration_seconds_count{tool="job_output"}"#),
            sample(r#"dsh_call_duration_seconds_bucket{tool="job_output",le="0.005"}"#),
            sample(r#"dsh_call_duration_seconds_bucket{tool="job_output",le="0.01"}"#),
        ]
    }

    fn request(&self, session: &str, method: &str, params: Value) -> Value {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.post(Some(session), &message).0
    }

    /// A tool call's text; panics on an error result.
    fn call(&self, session: &str, tool: &str, args: Value) -> String {
        let answer = self.request(
            session,
            "tools/call",
            json!({"name": tool, "arguments": args}),
        );
        let result = &answer["result"];
        let text = result["content"][0]["text"].as_str().unwrap_or_default();
        assert!(result["isError"] != json!(true), "{tool} failed: {answer}");
        text.to_string()
    }

    fn open_owner(&self) -> Owner {
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "scale-bench", "version": "0"}}});
        let (_, headers) = self.post(None, &init);
        let session = headers
            .iter()
            .find(|(n, _)| n == "mcp-session-id")
            .map(|(_, v)| v.clone())
            .expect("no session id");
        self.post(
            Some(&session),
            &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        );
        let opened = self.call(&session, "terminal_open", json!({}));
        let terminal = word_with(&opened, "term-");
        let started = self.call(
            &session,
            "bash",
            json!({"command": "f=$(mktemp -u); mkfifo \"$f\"; exec 3<>\"$f\"; rm \"$f\"; \
                    while :; do printf 'tick %(%s)T\\n' -1; read -t 1 -u 3; done",
                   "description": "ticker", "run_in_background": true}),
        );
        let job = word_with(&started, "bash-");
        Owner {
            session,
            terminal,
            job,
            cursor: Mutex::new(0),
            sending: Mutex::new(()),
        }
    }
}

fn word_with(text: &str, prefix: &str) -> String {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .find(|w| w.starts_with(prefix))
        .unwrap_or_else(|| panic!("no {prefix} id in {text:?}"))
        .to_string()
}

/// The cursor a `job_output` text ends with (`next cursor: N`).
fn next_cursor(text: &str) -> Option<u64> {
    let after = text.rsplit("next cursor: ").next()?;
    after
        .trim_end_matches(|c: char| !c.is_ascii_digit())
        .parse()
        .ok()
}

/// Resident KiB, and descriptors, of `pid`.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// dsh's user + system CPU time.
fn cpu(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit(") ").next().unwrap_or_default();
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = fields.get(11).and_then(|v| v.parse().ok()).unwrap_or(0)
        + fields.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Duration::from_secs_f64(ticks as f64 / hz as f64)
}

/// Every process below `root` (its children's children too), by parent links.
fn descendants(root: u32) -> Vec<u32> {
    let mut parents: Vec<(u32, u32)> = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let after = stat.rsplit(") ").next().unwrap_or_default();
        if let Some(ppid) = after.split_whitespace().nth(1).and_then(|p| p.parse().ok()) {
            parents.push((pid, ppid));
        }
    }
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(
            parents
                .iter()
                .filter(|(_, p)| *p == parent)
                .map(|(c, _)| *c),
        );
        i += 1;
    }
    found.remove(0);
    found
}

/// The keeper: the process whose command line names dsh's keeper mode, started by dsh.
fn keeper_of(dsh: u32) -> Option<u32> {
    descendants(dsh).into_iter().find(|pid| {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        String::from_utf8_lossy(&cmdline).contains("keeper")
    })
}

/// The server, killed and reaped when dropped.
struct KilledOnDrop(std::process::Child);

impl Drop for KilledOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Row {
    owners: usize,
    host_rss_kib: u64,
    shells_rss_kib: u64,
    fds: usize,
    latency: Vec<(&'static str, Duration, Duration)>,
    cpu_per_call: Duration,
    /// Of the load's `job_output` calls as dsh timed them: the share within 5 and 10 ms.
    in_dsh_within: [f64; 2],
}

fn load(server: &Arc<Server>, owners: &Arc<Vec<Owner>>) -> Vec<(&'static str, Vec<Duration>)> {
    let tools: [&'static str; 3] = ["job_output", "terminal_send", "bash"];
    let samples: Arc<Mutex<Vec<(&'static str, Duration)>>> = Arc::default();
    let next = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..CONCURRENCY)
        .map(|worker| {
            let (server, owners, samples, next) = (
                server.clone(),
                owners.clone(),
                samples.clone(),
                next.clone(),
            );
            std::thread::spawn(move || {
                let mut seed = 0x9e37_79b9_7f4a_7c15_u64 ^ worker as u64;
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed) as usize;
                    if n >= CALLS * tools.len() {
                        return;
                    }
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    let owner = &owners[(seed % owners.len() as u64) as usize];
                    let tool = tools[n % tools.len()];
                    // A session takes one send at a time: a send waits for the owner's
                    // previous one outside its measured time.
                    let _sending = (tool == "terminal_send").then(|| owner.sending.lock().unwrap());
                    let started = Instant::now();
                    match tool {
                        "job_output" => {
                            let since = *owner.cursor.lock().unwrap();
                            let text = server.call(
                                &owner.session,
                                "job_output",
                                json!({"id": owner.job, "since": since}),
                            );
                            if let Some(cursor) = next_cursor(&text) {
                                *owner.cursor.lock().unwrap() = cursor;
                            }
                        }
                        "terminal_send" => {
                            server.call(
                                &owner.session,
                                "terminal_send",
                                json!({"id": owner.terminal, "input": "echo hi",
                                       "wait": {"pattern": "(?m)^hi\\r?$", "timeout_ms": 20000}}),
                            );
                        }
                        _ => {
                            server.call(
                                &owner.session,
                                "bash",
                                json!({"command": "true", "description": "load"}),
                            );
                        }
                    }
                    samples.lock().unwrap().push((tool, started.elapsed()));
                }
            })
        })
        .collect();
    // The floor under the same load: an MCP `ping` (no tool, no pipeline) every 10 ms.
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let pinger = {
        let (server, owners, done) = (server.clone(), owners.clone(), done.clone());
        std::thread::spawn(move || {
            let mut pings = Vec::new();
            while !done.load(Ordering::Relaxed) {
                let started = Instant::now();
                server.request(
                    &owners[pings.len() % owners.len()].session,
                    "ping",
                    json!({}),
                );
                pings.push(started.elapsed());
                std::thread::sleep(Duration::from_millis(10));
            }
            pings
        })
    };
    for worker in workers {
        worker.join().unwrap();
    }
    done.store(true, Ordering::Relaxed);
    let pings = pinger.join().unwrap();
    let samples = samples.lock().unwrap();
    tools
        .iter()
        .map(|tool| {
            (
                *tool,
                samples
                    .iter()
                    .filter(|(t, _)| t == tool)
                    .map(|(_, d)| *d)
                    .collect(),
            )
        })
        .chain([("ping", pings)])
        .collect()
}

fn main() {
    let counts: Vec<usize> = std::env::var("DSH_SCALE_OWNERS")
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 10, 100, 250, 500, 1000]);
    let most = counts.iter().copied().max().unwrap_or(1);
    let scratch = tempfile::tempdir().unwrap();
    let config = scratch.path().join("dsh.toml");
    std::fs::write(
        &config,
        format!(
            "[serve]\nhttp_max_sessions = {}\n\n[terminal]\nmax_sessions = {}\n",
            most + 16,
            most + 16
        ),
    )
    .unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    // A warm start, as every start after a server's first: the compile cache is filled
    // first, so the RSS below is not Cranelift's from compiling the embedded set.
    let warmed = std::process::Command::new(env!("CARGO_BIN_EXE_dsh"))
        .arg("--state-dir")
        .arg(scratch.path().join("state"))
        .arg("tools")
        .stdout(std::process::Stdio::null())
        .status()
        .expect("dsh tools");
    assert!(warmed.success());
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_dsh"))
        .arg("--state-dir")
        .arg(scratch.path().join("state"))
        .arg("--config")
        .arg(&config)
        .args(["serve", "--http", &addr])
        .env("DSH_HTTP_TOKEN", TOKEN)
        .env("DSH_METRICS_TOKEN", METRICS_TOKEN)
        .current_dir(scratch.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start dsh serve --http");
    // Killed however the bench ends (a failed call panics): its terminals and jobs go
    // with it.
    let child = KilledOnDrop(child);
    let dsh = child.0.id();
    let deadline = Instant::now() + Duration::from_secs(60);
    while TcpStream::connect(&addr).is_err() {
        assert!(Instant::now() < deadline, "dsh serve --http did not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
    let server = Arc::new(Server {
        addr,
        next_id: AtomicU64::new(1),
    });
    let mut owners = Vec::new();
    let mut rows = Vec::new();
    for &n in &counts {
        let started = Instant::now();
        while owners.len() < n {
            owners.push(server.open_owner());
        }
        let opened = started.elapsed();
        let shared = Arc::new(std::mem::take(&mut owners));
        // Let every job print a few lines and every terminal settle.
        std::thread::sleep(Duration::from_secs(2));
        let cpu_before = cpu(dsh);
        let timed_before = server.job_output_timed();
        let calls = load(&server, &shared);
        let cpu_used = cpu(dsh).saturating_sub(cpu_before);
        let timed_after = server.job_output_timed();
        let timed = |i: usize| (timed_after[i] - timed_before[i]) as f64;
        let total: usize = calls.iter().map(|(_, s)| s.len()).sum();
        let keeper = keeper_of(dsh);
        let shells: u64 = descendants(dsh)
            .into_iter()
            .filter(|pid| Some(*pid) != keeper)
            .map(rss_kib)
            .sum();
        rows.push(Row {
            owners: n,
            host_rss_kib: rss_kib(dsh) + keeper.map_or(0, rss_kib),
            shells_rss_kib: shells,
            fds: fds(dsh),
            latency: calls
                .into_iter()
                .map(|(tool, mut samples)| {
                    (
                        tool,
                        percentile(&mut samples, 0.5),
                        percentile(&mut samples, 0.99),
                    )
                })
                .collect(),
            cpu_per_call: cpu_used / total.max(1) as u32,
            in_dsh_within: [timed(1) / timed(0).max(1.0), timed(2) / timed(0).max(1.0)],
        });
        eprintln!("{n} owners ready in {:.1} s", opened.as_secs_f64());
        owners = Arc::try_unwrap(shared).ok().expect("load threads ended");
    }
    drop(child);

    println!(
        "one dsh serve --http, N owners each with a terminal and a ticking job; {CALLS} calls per tool at each N, {CONCURRENCY} at once:"
    );
    println!(
        "{:>6} {:>12} {:>12} {:>6} {:>22} {:>22} {:>22} {:>10}",
        "N",
        "host RSS",
        "shells RSS",
        "fds",
        "job_output p50/p99",
        "terminal_send p50/p99",
        "bash p50/p99",
        "CPU/call"
    );
    let base = &rows[0];
    for row in &rows {
        let cell = |i: usize| {
            let (_, p50, p99) = row.latency[i];
            format!("{:.2}/{:.2} ms", ms(p50), ms(p99))
        };
        println!(
            "{:>6} {:>9} MiB {:>8} MiB {:>6} {:>22} {:>22} {:>22} {:>7.0} µs",
            row.owners,
            row.host_rss_kib / 1024,
            row.shells_rss_kib / 1024,
            row.fds,
            cell(0),
            cell(1),
            cell(2),
            row.cpu_per_call.as_secs_f64() * 1e6,
        );
    }
    println!(
        "where job_output's time goes: the share of its calls dsh itself timed (arrival to \
         result) within 5 / 10 ms, and an MCP ping's round trip under the same load \
         (every 10 ms: no tool, no pipeline)"
    );
    for row in &rows {
        let (_, p50, p99) = row.latency[3];
        println!(
            "{:>6}: in dsh {:.1} % / {:.1} %; ping p50/p99 {:.2}/{:.2} ms",
            row.owners,
            row.in_dsh_within[0] * 100.0,
            row.in_dsh_within[1] * 100.0,
            ms(p50),
            ms(p99)
        );
    }
    println!("against N = {} in the same run:", base.owners);
    for row in &rows[1..] {
        let ratio = |i: usize| ms(row.latency[i].2) / ms(base.latency[i].2).max(1e-9);
        println!(
            "{:>6}: host RSS {:.2}x, fds {:.2}x, p99 job_output {:.2}x, terminal_send {:.2}x, bash {:.2}x, CPU/call {:.2}x",
            row.owners,
            row.host_rss_kib as f64 / base.host_rss_kib.max(1) as f64,
            row.fds as f64 / base.fds.max(1) as f64,
            ratio(0),
            ratio(1),
            ratio(2),
            row.cpu_per_call.as_secs_f64() / base.cpu_per_call.as_secs_f64().max(1e-9),
        );
    }
}
