//! `tools/call` round trips over stdio against the real `dsh serve` binary, driven by a
//! bare JSON-RPC client in this process: a no-op WASM tool (`echo`) with a 1 KiB string
//! argument. Prints p50/p99, calls per second with 1 and 8 concurrent callers, the
//! server's CPU time per call, the time from start to the first answered `tools/list`,
//! and the server's peak RSS, idle (started, initialized, its tools listed) and after
//! the calls. The baseline, measured in the same run, is the same call
//! made in-process through the pipeline (no MCP, no process boundary). Then start-up:
//! the time from spawning `dsh serve` to its answer to `initialize` and to its first
//! `tools/list`, cold (an empty state directory: every embedded plugin's code, precompiled
//! when dsh was built, is stored in the compile cache) and warm (the cache filled), and
//! their ratio (the target is at most 2), against spawning and initializing a trivial stdio
//! server (a bash loop that answers one line) in the same run. It also says how many of
//! the functions the release link puts first (`link/startup-order.txt`) this binary has.
//! Last, the two protocol eras in turns: the 2025 handshake against MCP 2026-07-28's
//! stateless requests, start to first `tools/list` and `tools/call` round trips with the
//! server's CPU per call, and their ratios; then the same over HTTP on one `dsh serve
//! --http`: a 2025 session's calls against 2026-07-28's (owned by the token's principal,
//! a connection made per request), in turns. And dsh's server CPU per call against a
//! native rmcp server's (the same echo tool in Rust on rmcp's stdio transports, this bench
//! run as that server), in turns; the target is at most 0.6x rmcp's default `stdio()`.
//!
//! Run with `cargo bench --bench mcp`.

mod support;

use support::{percentile, us};

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::oneshot;

/// Of the functions `link/startup-order.txt` lists (which a release link of the binary
/// puts first and together), how many the binary has, and how many are listed: names it
/// lacks (after a toolchain or dependency change) are skipped by the linker, and the
/// idle RSS grows back. Its symbol table's names are the binary's NUL-separated strings.
fn startup_order_found() -> (usize, usize) {
    let order = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/link/startup-order.txt"
    ))
    .unwrap();
    let binary = std::fs::read(env!("CARGO_BIN_EXE_dsh")).unwrap();
    let strings: std::collections::HashSet<&[u8]> = binary.split(|b| *b == 0).collect();
    let listed: Vec<&str> = order
        .lines()
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .collect();
    let found = listed
        .iter()
        .filter(|name| strings.contains(name.as_bytes()))
        .count();
    (found, listed.len())
}

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Value>>>>;

/// A JSON-RPC client on a child's stdin/stdout; responses are matched by id.
struct Client {
    stdin: tokio::sync::Mutex<tokio::process::ChildStdin>,
    pending: Pending,
    next_id: std::sync::atomic::AtomicU64,
}

impl Client {
    async fn request(&self, method: &str, params: Value) -> Value {
        let id = self
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.pending.lock().unwrap().insert(id, tx);
        self.write_line(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        rx.await.expect("server answered")
    }

    /// The 2025 handshake: `initialize` with `version`, then `notifications/initialized`.
    async fn handshake(&self, version: &str) {
        self.request(
            "initialize",
            json!({"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}),
        )
        .await;
        self.notify("notifications/initialized").await;
    }

    async fn notify(&self, method: &str) {
        self.write_line(json!({"jsonrpc": "2.0", "method": method}))
            .await;
    }

    /// Sends one JSON-RPC message, a line of its own.
    async fn write_line(&self, message: serde_json::Value) {
        let mut line = message.to_string();
        line.push('\n');
        self.stdin
            .lock()
            .await
            .write_all(line.as_bytes())
            .await
            .unwrap();
    }
}

/// The CPU time `pid`'s threads have run, to the nanosecond (each thread's
/// `/proc/PID/task/TID/schedstat`; `/proc/PID/stat` counts 10 ms ticks, too coarse for
/// a thousand calls of 80 µs). A thread that ends between two readings takes its time
/// with it: the servers measured here keep their threads while they are called.
fn cpu_time(pid: u32) -> Duration {
    let mut nanos = 0u64;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let path = task.unwrap().path().join("schedstat");
        if let Ok(stat) = std::fs::read_to_string(path) {
            nanos += stat
                .split_whitespace()
                .next()
                .and_then(|ran| ran.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    Duration::from_nanos(nanos)
}

/// Prints one line of figures for `samples` calls that took `elapsed` in all and
/// `cpu` of server CPU; returns the p50.
fn report(label: &str, samples: &mut [Duration], elapsed: Duration, cpu: Duration) -> Duration {
    let calls = samples.len() as f64;
    let p50 = percentile(samples, 0.5);
    println!(
        "{label}: p50 {:>7.1} µs  p99 {:>7.1} µs  {:>7.0} calls/s  server CPU {:>6.1} µs/call",
        us(p50),
        us(percentile(samples, 0.99)),
        calls / elapsed.as_secs_f64(),
        us(cpu) / calls
    );
    p50
}

fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Spawns `program args` as a stdio server and times its answer to `initialize` and, when
/// `list`, to a first `tools/list` after it (the client's first two requests).
fn time_start(program: &str, args: &[&str], list: bool) -> (Duration, Option<Duration>) {
    use std::io::{BufRead, Write};
    let started = Instant::now();
    let mut child = std::process::Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut answer = |id: u64| loop {
        let mut line = String::new();
        assert!(stdout.read_line(&mut line).unwrap() > 0, "the server ended");
        let value: Value = serde_json::from_str(line.trim()).unwrap_or(Value::Null);
        if value["id"] == id {
            return value;
        }
    };
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "bench", "version": "1"}}});
    writeln!(stdin, "{initialize}").unwrap();
    answer(1);
    let initialized = started.elapsed();
    let listed = list.then(|| {
        writeln!(
            stdin,
            "{}\n{}",
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        )
        .unwrap();
        let tools = answer(2);
        assert!(tools["result"]["tools"]
            .as_array()
            .is_some_and(|t| !t.is_empty()));
        started.elapsed()
    });
    drop(stdin);
    let _ = child.wait();
    (initialized, listed)
}

/// Start-up figures (see the module doc), `runs` of each interleaved, medians.
fn start_up(scratch: &std::path::Path, runs: usize) {
    let dsh = env!("CARGO_BIN_EXE_dsh");
    // The trivial server: reads one request, answers it.
    let trivial_answer = r#"{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"t","version":"1"}}}"#;
    let trivial = format!("read -r line; echo '{trivial_answer}'");
    let warm_state = scratch.join("state-warm");
    let warm_state = warm_state.to_str().unwrap().to_string();
    time_start(dsh, &["--state-dir", &warm_state, "serve"], true);
    let (mut base, mut cold_init, mut cold_list, mut warm_init, mut warm_list) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for run in 0..runs {
        base.push(time_start("bash", &["-c", &trivial], false).0);
        let cold_state = scratch.join(format!("state-cold-{run}"));
        let (init, list) = time_start(
            dsh,
            &["--state-dir", cold_state.to_str().unwrap(), "serve"],
            true,
        );
        cold_init.push(init);
        cold_list.push(list.unwrap());
        let (init, list) = time_start(dsh, &["--state-dir", &warm_state, "serve"], true);
        warm_init.push(init);
        warm_list.push(list.unwrap());
    }
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let base = percentile(&mut base, 0.5);
    println!("== start-up over stdio ({runs} runs each, interleaved, medians)");
    println!(
        "  trivial stdio server (bash) answers initialize: {:7.1} ms",
        ms(base)
    );
    let mut first_lists = Vec::new();
    for (label, init, list) in [
        ("cold (empty state dir)", &mut cold_init, &mut cold_list),
        ("warm (cache filled)   ", &mut warm_init, &mut warm_list),
    ] {
        let (init, list) = (percentile(init, 0.5), percentile(list, 0.5));
        println!(
            "  dsh serve {label}: initialize {:7.1} ms ({:.1}x trivial), first tools/list {:7.1} ms ({:.1}x)",
            ms(init),
            ms(init) / ms(base),
            ms(list),
            ms(list) / ms(base)
        );
        first_lists.push(ms(list));
    }
    println!(
        "  first tools/list cold / warm: {:.2}x (target <= 2: the embedded code is precompiled)",
        first_lists[0] / first_lists[1]
    );
}

/// `dsh serve` on `plugins` with `state` and `workspace`, and a client on its stdio.
fn serve(
    plugins: &std::path::Path,
    state: &std::path::Path,
    workspace: &std::path::Path,
) -> (tokio::process::Child, Arc<Client>) {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_dsh"));
    command
        .arg("--plugins")
        .arg(plugins)
        .arg("--state-dir")
        .arg(state)
        .arg("--workdir")
        // A workspace apart from the state directory (a workspace holding it would have
        // the `files` plugin refused, and the idle figure would lack it).
        .arg(workspace)
        .arg("serve");
    serve_command(command)
}

/// The stdio server `command` starts, and a client on its stdio.
fn serve_command(mut command: tokio::process::Command) -> (tokio::process::Child, Arc<Client>) {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pending: Pending = Arc::default();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let reader_pending = pending.clone();
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            let value: Value = serde_json::from_str(&line).unwrap();
            if let Some(id) = value.get("id").and_then(Value::as_u64) {
                if let Some(tx) = reader_pending.lock().unwrap().remove(&id) {
                    let _ = tx.send(value);
                }
            }
        }
    });
    let client = Arc::new(Client {
        stdin: tokio::sync::Mutex::new(child.stdin.take().unwrap()),
        pending,
        next_id: 1.into(),
    });
    (child, client)
}

/// The `_meta` every request of MCP 2026-07-28 carries.
fn modern_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
    })
}

/// The two protocol eras side by side, in turns (so load from elsewhere moves both
/// alike): a server spoken to with the 2025 handshake (`initialize`, then requests
/// without `_meta`) and one with MCP 2026-07-28's stateless requests (`server/discover`,
/// then `_meta` on every request). For each: the time from spawning `dsh serve` to its
/// first answered `tools/list` (the compile cache warm), and `tools/call` round trips of
/// one caller with the server's CPU per call; then the ratios modern / legacy (target:
/// the modern path within 1.05x).
async fn eras(scratch: &std::path::Path, plugins: &std::path::Path, text: &str) {
    const ROUNDS: usize = 6;
    const CALLS: usize = 1000;
    let workspace = scratch.join("workspace");
    let state = scratch.join("state");
    let mut starts: [Vec<Duration>; 2] = Default::default();
    let mut round_trips: [Vec<Duration>; 2] = Default::default();
    let mut cpu = [Duration::ZERO; 2];
    for _ in 0..ROUNDS {
        for (era, modern) in [false, true].into_iter().enumerate() {
            let started = Instant::now();
            let (mut child, client) = serve(plugins, &state, &workspace);
            let pid = child.id().unwrap();
            let meta = modern.then(modern_meta);
            let with_meta = |mut params: Value| {
                if let Some(meta) = &meta {
                    params["_meta"] = meta.clone();
                }
                params
            };
            if modern {
                let found = client
                    .request("server/discover", with_meta(json!({})))
                    .await;
                assert_eq!(
                    found["result"]["supportedVersions"][0], "2026-07-28",
                    "{found}"
                );
            } else {
                client.handshake("2025-11-25").await;
            }
            let tools = client.request("tools/list", with_meta(json!({}))).await;
            starts[era].push(started.elapsed());
            assert!(tools["result"]["tools"].as_array().is_some(), "{tools}");
            let call = with_meta(json!({"name": "echo", "arguments": {"text": text}}));
            for _ in 0..200 {
                client.request("tools/call", call.clone()).await;
            }
            let before = cpu_time(pid);
            for _ in 0..CALLS {
                let t = Instant::now();
                let answer = client.request("tools/call", call.clone()).await;
                round_trips[era].push(t.elapsed());
                assert_eq!(answer["result"]["isError"], false, "{answer}");
            }
            cpu[era] += cpu_time(pid) - before;
            drop(client);
            let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
        }
    }
    println!(
        "== the two protocol eras over stdio, in turns ({ROUNDS} servers each, {CALLS} calls each)"
    );
    let mut figures = [(0.0, 0.0, 0.0); 2];
    for (era, name) in ["2025 handshake", "2026-07-28   "].into_iter().enumerate() {
        let start = percentile(&mut starts[era], 0.5);
        let p50 = percentile(&mut round_trips[era], 0.5);
        let cpu = us(cpu[era]) / (ROUNDS * CALLS) as f64;
        println!(
            "  {name}: start to first tools/list {:6.1} ms  tools/call p50 {:6.1} µs  server CPU {:6.1} µs/call",
            start.as_secs_f64() * 1e3,
            us(p50),
            cpu
        );
        figures[era] = (start.as_secs_f64(), us(p50), cpu);
    }
    let (legacy, modern) = (figures[0], figures[1]);
    println!(
        "  modern / legacy: start {:.2}, tools/call p50 {:.2}, server CPU per call {:.2} (target ≤ 1.05)",
        modern.0 / legacy.0,
        modern.1 / legacy.1,
        modern.2 / legacy.2
    );
}

/// The two eras over HTTP, in turns on one `dsh serve --http` (a TCP connection per
/// request, as `support::http_post` makes them, in both): a 2025 session (`initialize`,
/// then requests with its `Mcp-Session-Id`) against 2026-07-28's stateless requests (the
/// revision's headers and `_meta`, owned by the token's principal). `tools/call` round
/// trips and the server's CPU per call; the ratios modern / legacy (target ≤ 1.05).
fn http_eras(scratch: &std::path::Path, plugins: &std::path::Path, text: &str) {
    const ROUNDS: usize = 6;
    const CALLS: usize = 300;
    const TOKEN: &str = "eras-bench-token";
    let addr = {
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        free.local_addr().unwrap().to_string()
    };
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_dsh"))
        .arg("--plugins")
        .arg(plugins)
        .arg("--state-dir")
        .arg(scratch.join("state"))
        .arg("--workdir")
        .arg(scratch.join("workspace"))
        .args(["serve", "--http", &addr])
        .env("DSH_HTTP_TOKEN", TOKEN)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::net::TcpStream::connect(&addr).is_err() {
        assert!(Instant::now() < deadline, "dsh serve --http did not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = child.id();
    let auth = format!("Bearer {TOKEN}");
    let call = json!({"name": "echo", "arguments": {"text": text}});
    let mut round_trips: [Vec<Duration>; 2] = Default::default();
    let mut cpu = [Duration::ZERO; 2];
    for round in 0..ROUNDS {
        for (era, modern) in [false, true].into_iter().enumerate() {
            let (headers, params): (Vec<(&str, String)>, Value) = if modern {
                let mut params = call.clone();
                params["_meta"] = modern_meta();
                let headers = vec![
                    ("Authorization", auth.clone()),
                    ("MCP-Protocol-Version", "2026-07-28".into()),
                    ("Mcp-Method", "tools/call".into()),
                    ("Mcp-Name", "echo".into()),
                ];
                (headers, params)
            } else {
                let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params":
                    {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}});
                let (_, answered) =
                    support::http_post(&addr, &[("Authorization", &auth)], &initialize);
                let session = answered
                    .iter()
                    .find(|(name, _)| name == "mcp-session-id")
                    .map(|(_, value)| value.clone())
                    .expect("a session id");
                let headers = vec![
                    ("Authorization", auth.clone()),
                    ("Mcp-Session-Id", session),
                    ("MCP-Protocol-Version", "2025-11-25".into()),
                ];
                let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
                let borrowed: Vec<(&str, &str)> =
                    headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
                support::http_post(&addr, &borrowed, &initialized);
                (headers, call.clone())
            };
            let headers: Vec<(&str, &str)> =
                headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
            let request = |id: usize| json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
            for id in 0..50 {
                support::http_post(&addr, &headers, &request(id));
            }
            let before = cpu_time(pid);
            for id in 0..CALLS {
                let t = Instant::now();
                let (answer, _) = support::http_post(&addr, &headers, &request(id + 100));
                round_trips[era].push(t.elapsed());
                assert_eq!(
                    answer["result"]["isError"], false,
                    "round {round}: {answer}"
                );
            }
            cpu[era] += cpu_time(pid) - before;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    println!("== the two protocol eras over HTTP, in turns ({ROUNDS} rounds, {CALLS} calls each)");
    let mut figures = [(0.0, 0.0); 2];
    for (era, name) in ["2025 session ", "2026-07-28   "].into_iter().enumerate() {
        let p50 = percentile(&mut round_trips[era], 0.5);
        let cpu = us(cpu[era]) / (ROUNDS * CALLS) as f64;
        println!(
            "  {name}: tools/call p50 {:6.1} µs  server CPU {:6.1} µs/call",
            us(p50),
            cpu
        );
        figures[era] = (us(p50), cpu);
    }
    let (legacy, modern) = (figures[0], figures[1]);
    println!(
        "  modern / legacy: tools/call p50 {:.2}, server CPU per call {:.2} (target ≤ 1.05)",
        modern.0 / legacy.0,
        modern.1 / legacy.1
    );
}

/// A native MCP server in Rust: rmcp's own server loop with one tool, `echo`, that
/// answers its `text` argument, on rmcp's stdio transport. What it costs per call is the
/// floor dsh's server CPU is set against. The bench runs itself as this server when
/// [`NATIVE_ECHO`] names the transport.
mod native_echo {
    use rmcp::model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
        PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    };
    use rmcp::service::{RequestContext, RoleServer};
    use rmcp::{ErrorData, ServerHandler, ServiceExt};

    /// The environment variable that makes the bench this server: `stdio` (rmcp's
    /// `transport::stdio()`, tokio's stdin and stdout, which hand each read and write to
    /// a blocking thread: what rmcp's examples use) or `pipes` (`stdio_pipes()`, the
    /// pipes read on the event loop, as dsh reads them).
    pub const NATIVE_ECHO: &str = "DSH_BENCH_NATIVE_ECHO";

    struct Echo;

    impl ServerHandler for Echo {
        fn get_info(&self) -> ServerConfig {
            ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
        }

        async fn list_tools(
            &self,
            _request: Option<PaginatedRequestParams>,
            _context: RequestContext<RoleServer>,
        ) -> Result<ListToolsResult, ErrorData> {
            let schema = serde_json::json!({
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"],
            });
            let serde_json::Value::Object(schema) = schema else {
                unreachable!("an object")
            };
            Ok(ListToolsResult::with_all_items(vec![Tool::new(
                "echo",
                "Answers its text.",
                schema,
            )]))
        }

        async fn call_tool(
            &self,
            request: CallToolRequestParams,
            _context: RequestContext<RoleServer>,
        ) -> Result<CallToolResponse, ErrorData> {
            let text = request
                .arguments
                .as_ref()
                .and_then(|arguments| arguments.get("text"))
                .and_then(|text| text.as_str())
                .ok_or_else(|| ErrorData::invalid_params("echo takes a text", None))?;
            Ok(CallToolResponse::Complete(CallToolResult::success(vec![
                ContentBlock::text(text.to_string()),
            ])))
        }
    }

    /// Serves MCP on stdin and stdout until stdin ends.
    pub async fn serve(transport: &str) {
        let running = match transport {
            "pipes" => Echo.serve(rmcp::transport::io::stdio_pipes()).await,
            _ => Echo.serve(rmcp::transport::io::stdio()).await,
        };
        let _ = running.expect("the client initialized").waiting().await;
    }
}

/// Server CPU per sequential `tools/call` of `dsh serve` (the echo plugin) against a
/// native rmcp server's (the same tool in Rust, [`native_echo`]) on each of rmcp's two
/// stdio transports, in turns: a fresh server of each per round, the 2025 handshake,
/// warm-up calls, then `CALLS` measured calls with the server's CPU. Prints each figure
/// and dsh / native (target ≤ 0.6 against rmcp's default transport).
async fn against_native(scratch: &std::path::Path, plugins: &std::path::Path, text: &str) {
    const ROUNDS: usize = 6;
    const CALLS: usize = 1000;
    let servers = ["dsh serve", "rmcp stdio()", "rmcp stdio_pipes()"];
    let mut cpu = [Duration::ZERO; 3];
    let mut round_trips: [Vec<Duration>; 3] = Default::default();
    let call = json!({"name": "echo", "arguments": {"text": text}});
    for _ in 0..ROUNDS {
        for (server, figure) in cpu.iter_mut().enumerate() {
            let (mut child, client) = match server {
                0 => serve(plugins, &scratch.join("state"), &scratch.join("workspace")),
                _ => {
                    let mut command =
                        tokio::process::Command::new(std::env::current_exe().unwrap());
                    let transport = if server == 1 { "stdio" } else { "pipes" };
                    command.env(native_echo::NATIVE_ECHO, transport);
                    serve_command(command)
                }
            };
            let pid = child.id().unwrap();
            client.handshake("2025-11-25").await;
            for _ in 0..200 {
                client.request("tools/call", call.clone()).await;
            }
            let before = cpu_time(pid);
            for _ in 0..CALLS {
                let t = Instant::now();
                let answer = client.request("tools/call", call.clone()).await;
                round_trips[server].push(t.elapsed());
                assert_eq!(answer["result"]["content"][0]["text"], text, "{answer}");
            }
            *figure += cpu_time(pid) - before;
            drop(client);
            let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
        }
    }
    println!(
        "== dsh against a native rmcp server, one caller over stdio, in turns ({ROUNDS} servers each, {CALLS} calls each)"
    );
    let per_call: Vec<f64> = cpu
        .iter()
        .map(|cpu| us(*cpu) / (ROUNDS * CALLS) as f64)
        .collect();
    for (server, name) in servers.iter().enumerate() {
        println!(
            "  {name:<19}: tools/call p50 {:6.1} µs  server CPU {:6.1} µs/call",
            us(percentile(&mut round_trips[server], 0.5)),
            per_call[server]
        );
    }
    println!(
        "  dsh / native server CPU per call: {:.2} against rmcp stdio() (target ≤ 0.6), {:.2} against stdio_pipes()",
        per_call[0] / per_call[1],
        per_call[0] / per_call[2]
    );
}

#[tokio::main]
async fn main() {
    if let Ok(transport) = std::env::var(native_echo::NATIVE_ECHO) {
        return native_echo::serve(&transport).await;
    }
    let scratch = tempfile::tempdir().unwrap();
    let plugins = support::plugin_dir(scratch.path(), &[("echo", "echo")]);
    let text = "x".repeat(1024);
    let call_params = json!({"name": "echo", "arguments": {"text": text}});

    // Baseline: the same call in-process through the pipeline.
    let inproc_workspace = scratch.path().join("workspace-inproc");
    std::fs::create_dir_all(&inproc_workspace).unwrap();
    let host = dsh::host::Host::start(dsh::host::HostOptions {
        config: dsh::config::Config::default(),
        plugins_dir: Some(plugins.clone()),
        state_dir: scratch.path().join("state-inproc"),
        // A workspace of its own: undo ([undo]) would record the served dsh's growing
        // event log under `scratch` as changes made outside this host.
        workdir: inproc_workspace.clone(),
        config_file: None,
        resume: None,
    })
    .await
    .unwrap();
    host.loaded().await;
    let never = tokio_util::sync::CancellationToken::new();
    let request =
        || dsh::call::CallRequest::new("echo", json!({ "text": text }), "bench", "default");
    for _ in 0..500 {
        host.pipeline.call(request(), &never).await;
    }
    let mut inproc = Vec::new();
    for _ in 0..3000 {
        let started = Instant::now();
        host.pipeline.call(request(), &never).await;
        inproc.push(started.elapsed());
    }
    let inproc_p50 = percentile(&mut inproc, 0.5);

    // A first start fills the compile cache; the measured start finds it warm.
    let warm_up = std::process::Command::new(env!("CARGO_BIN_EXE_dsh"))
        .arg("--plugins")
        .arg(&plugins)
        .arg("--state-dir")
        .arg(scratch.path().join("state"))
        .arg("tools")
        .output()
        .unwrap();
    assert!(warm_up.status.success());

    // The server.
    let workspace = scratch.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    let started = Instant::now();
    let (mut child, client) = serve(&plugins, &scratch.path().join("state"), &workspace);
    let pid = child.id().unwrap();
    client.handshake("2025-06-18").await;
    let tools = client.request("tools/list", json!({})).await;
    let first_list = started.elapsed();
    assert!(tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["name"] == "echo"));
    // The idle server: the embedded set and the bench's plugin loaded, listed, no call
    // made yet (a second for anything loading in the background to settle).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle_rss = peak_rss_kib(pid);

    for _ in 0..500 {
        client.request("tools/call", call_params.clone()).await;
    }

    println!("== MCP tools/call round trip over stdio (echo, 1 KiB argument)");
    // One caller.
    let n = 5000;
    let cpu_before = cpu_time(pid);
    let wall = Instant::now();
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let answer = client.request("tools/call", call_params.clone()).await;
        samples.push(t.elapsed());
        assert_eq!(answer["result"]["isError"], false, "{answer}");
    }
    let p50 = report(
        "1 caller ",
        &mut samples,
        wall.elapsed(),
        cpu_time(pid) - cpu_before,
    );

    // Eight callers on the same connection.
    let per_caller = 2000;
    let cpu_before = cpu_time(pid);
    let wall = Instant::now();
    let mut callers = Vec::new();
    for _ in 0..8 {
        let (client, params) = (client.clone(), call_params.clone());
        callers.push(tokio::spawn(async move {
            let mut samples = Vec::with_capacity(per_caller);
            for _ in 0..per_caller {
                let t = Instant::now();
                client.request("tools/call", params.clone()).await;
                samples.push(t.elapsed());
            }
            samples
        }));
    }
    let mut samples = Vec::new();
    for caller in callers {
        samples.extend(caller.await.unwrap());
    }
    report(
        "8 callers",
        &mut samples,
        wall.elapsed(),
        cpu_time(pid) - cpu_before,
    );
    println!(
        "start to first answered tools/list: {:.1} ms",
        first_list.as_secs_f64() * 1e3
    );
    println!(
        "idle server peak RSS (started, initialized, tools listed): {:.1} MiB (target ≤ 20)",
        idle_rss as f64 / 1024.0
    );
    println!(
        "server peak RSS after the calls: {:.1} MiB",
        peak_rss_kib(pid) as f64 / 1024.0
    );
    let (found, listed) = startup_order_found();
    println!(
        "startup order: {found} of the {listed} functions host/link/startup-order.txt lists are in this binary \
         (regenerate it with host/link/generate-startup-order.py when many are not: the idle RSS grows back)"
    );
    println!(
        "baseline (same call in-process through the pipeline): p50 {:.1} µs; MCP round trip / baseline: {:.2}",
        us(inproc_p50),
        us(p50) / us(inproc_p50)
    );
    drop(client);
    let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
    start_up(scratch.path(), 5);
    against_native(scratch.path(), &plugins, &text).await;
    eras(scratch.path(), &plugins, &text).await;
    http_eras(scratch.path(), &plugins, &text);
    host.shutdown();
}
