//! A hover through `dsh serve` (MCP over stdio, the pipeline, the `lsp` plugin, the lsp
//! capability, pylsp) against the same hover sent straight to another pylsp over
//! JSON-RPC by this process, interleaved in one run on the same file. Prints both p50s
//! and the overhead dsh adds (target: p50 overhead <= 1 ms).
//!
//! pylsp comes from the e2e tests' virtual environment (made under the target
//! directory on first use). Run with `cargo bench --profile dev --bench lsp`.

mod support;

#[path = "../../tests/e2e/python_env.rs"]
#[allow(dead_code)]
mod python_env;

use support::{percentile, us};

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::oneshot;

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Value>>>>;

/// A JSON-RPC client on a child's stdin/stdout: `framed` for LSP's `Content-Length`
/// frames, else one message per line (MCP over stdio).
struct Client {
    stdin: tokio::sync::Mutex<tokio::process::ChildStdin>,
    pending: Pending,
    next_id: std::sync::atomic::AtomicU64,
    framed: bool,
}

impl Client {
    fn start(child: &mut tokio::process::Child, framed: bool) -> Arc<Client> {
        let pending: Pending = Arc::default();
        let client = Arc::new(Client {
            stdin: tokio::sync::Mutex::new(child.stdin.take().unwrap()),
            pending: pending.clone(),
            next_id: 1.into(),
            framed,
        });
        let mut reader = BufReader::new(child.stdout.take().unwrap());
        let answering = client.clone();
        tokio::spawn(async move {
            loop {
                let message: Value = if framed {
                    let mut length = 0;
                    let mut line = String::new();
                    loop {
                        line.clear();
                        if reader.read_line(&mut line).await.unwrap_or(0) == 0 {
                            return;
                        }
                        match line.trim_end().split_once(':') {
                            Some((name, value)) if name.eq_ignore_ascii_case("content-length") => {
                                length = value.trim().parse().unwrap()
                            }
                            _ if line.trim_end().is_empty() => break,
                            _ => {}
                        }
                    }
                    let mut body = vec![0; length];
                    reader.read_exact(&mut body).await.unwrap();
                    serde_json::from_slice(&body).unwrap()
                } else {
                    let mut line = String::new();
                    if reader.read_line(&mut line).await.unwrap_or(0) == 0 {
                        return;
                    }
                    serde_json::from_str(&line).unwrap()
                };
                let id = message.get("id").and_then(Value::as_u64);
                match (message.get("method"), id) {
                    // A request of the server's: answered with null.
                    (Some(_), Some(_)) => {
                        answering
                            .send(json!({"jsonrpc": "2.0", "id": message["id"], "result": null}))
                            .await
                    }
                    (None, Some(id)) => {
                        if let Some(tx) = pending.lock().unwrap().remove(&id) {
                            let _ = tx.send(message);
                        }
                    }
                    _ => {}
                }
            }
        });
        client
    }

    async fn request(&self, method: &str, params: Value) -> Value {
        let id = self
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.pending.lock().unwrap().insert(id, tx);
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        rx.await.expect("answered")
    }

    async fn notify(&self, method: &str, params: Value) {
        self.send(json!({"jsonrpc": "2.0", "method": method, "params": params}))
            .await;
    }

    async fn send(&self, message: Value) {
        let body = message.to_string();
        let bytes = match self.framed {
            true => format!("Content-Length: {}\r\n\r\n{body}", body.len()),
            false => format!("{body}\n"),
        };
        self.stdin
            .lock()
            .await
            .write_all(bytes.as_bytes())
            .await
            .unwrap();
    }
}

const UTIL_PY: &str = "def add(a, b):
    \"\"\"Add two numbers.\"\"\"
    return a + b
";

const MAIN_PY: &str = "from util import add

total = add(1, 2)
";

#[tokio::main]
async fn main() {
    let pylsp = python_env::venv_program("pylsp");
    let scratch = tempfile::tempdir().unwrap();
    let work = scratch.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(work.join("util.py"), UTIL_PY).unwrap();
    std::fs::write(work.join("main.py"), MAIN_PY).unwrap();
    let config = scratch.path().join("dsh.toml");
    std::fs::write(
        &config,
        format!(
            "[lsp]\ndefaults = false\n[lsp.servers.pylsp]\ncommand = [\"{}\"]\nextensions = [\"py\"]\n",
            pylsp.display()
        ),
    )
    .unwrap();

    // pylsp, straight.
    let mut direct_child = tokio::process::Command::new(&pylsp)
        .current_dir(&work)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let direct = Client::start(&mut direct_child, true);
    let root = format!("file://{}", work.display());
    let uri = format!("{root}/main.py");
    direct
        .request(
            "initialize",
            // What dsh sends (services/lsp/server.rs), so both servers work alike.
            json!({
                "processId": std::process::id(),
                "rootUri": root,
                "workspaceFolders": [{ "uri": root, "name": "work" }],
                "capabilities": dsh::services::lsp::client_capabilities(),
                "initializationOptions": null,
            }),
        )
        .await;
    direct.notify("initialized", json!({})).await;
    direct
        .notify(
            "textDocument/didOpen",
            json!({"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": MAIN_PY}}),
        )
        .await;
    let hover_params =
        json!({"textDocument": {"uri": uri}, "position": {"line": 2, "character": 9}});

    // dsh serve.
    let mut dsh_child = tokio::process::Command::new(env!("CARGO_BIN_EXE_dsh"))
        .arg("--config")
        .arg(&config)
        .arg("--state-dir")
        .arg(scratch.path().join("state"))
        .arg("--workdir")
        .arg(&work)
        .arg("serve")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let dsh = Client::start(&mut dsh_child, false);
    dsh.request(
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}),
    )
    .await;
    dsh.notify("notifications/initialized", json!({})).await;
    let call = json!({"name": "lsp", "arguments": {"op": "hover", "path": "main.py", "line": 3, "column": 10}});

    // Warm both up (imports, jedi's caches, the plugin's instance).
    for _ in 0..30 {
        let answer = direct
            .request("textDocument/hover", hover_params.clone())
            .await;
        assert!(
            answer["result"]["contents"]
                .to_string()
                .contains("Add two numbers"),
            "{answer}"
        );
        let answer = dsh.request("tools/call", call.clone()).await;
        assert_eq!(answer["result"]["isError"], false, "{answer}");
        assert!(answer.to_string().contains("Add two numbers"), "{answer}");
    }

    let n = 1000;
    let (mut straight, mut through) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        let t = Instant::now();
        direct
            .request("textDocument/hover", hover_params.clone())
            .await;
        straight.push(t.elapsed());
        let t = Instant::now();
        dsh.request("tools/call", call.clone()).await;
        through.push(t.elapsed());
    }
    // Each pair's difference: drift of the machine (shared cores) cancels within a pair.
    let mut paired: Vec<i128> = straight
        .iter()
        .zip(&through)
        .map(|(s, t)| t.as_nanos() as i128 - s.as_nanos() as i128)
        .collect();
    paired.sort();
    let paired_p50 = paired[paired.len() / 2] as f64 / 1e3;
    let straight_p50 = percentile(&mut straight, 0.5);
    let through_p50 = percentile(&mut through, 0.5);
    println!(
        "== hover: through dsh serve vs straight to pylsp over JSON-RPC ({n} each, interleaved)"
    );
    println!(
        "straight to pylsp: p50 {:>8.1} µs  p99 {:>8.1} µs",
        us(straight_p50),
        us(percentile(&mut straight, 0.99))
    );
    println!(
        "through dsh serve: p50 {:>8.1} µs  p99 {:>8.1} µs",
        us(through_p50),
        us(percentile(&mut through, 0.99))
    );
    println!(
        "p50 overhead of dsh: {:.1} µs (target <= 1000 µs)",
        us(through_p50.saturating_sub(straight_p50))
    );
    println!("p50 of the paired differences (through - straight): {paired_p50:.1} µs");
    drop(dsh);
    let _ = tokio::time::timeout(Duration::from_secs(5), dsh_child.wait()).await;
}
