//! `dsh upgrade` under load: a `dsh serve` on stdio holding 16 terminal sessions (an
//! interactive bash each) and 16 background jobs (a shell loop printing a line a second,
//! waiting on `read -t 1`), a client calling `job_output` back to back, and an upgrade
//! to a copy of the binary at another path, then back. Per upgrade it prints: how long
//! requests waited for the upgrade itself, as the new binary measured it (from the moment
//! the old one stopped reading requests to the moment the new one read them again, the
//! drain taken out; the target is 200 ms), the longest a client's call took across the
//! upgrade (which adds the plugins' load in the new binary and the call itself), the
//! median call before the upgrade (the baseline, in the same run), the snapshot's size,
//! and how long `dsh upgrade` took in all.
//!
//! Run with `cargo bench --bench upgrade` (or `--profile dev` to reuse a debug build).

mod support;

use support::{ms, percentile};

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const TERMINALS: usize = 16;
const JOBS: usize = 16;

struct Stdio2 {
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
}

impl Stdio2 {
    fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(self.stdin, "{line}").unwrap();
        loop {
            let mut answer = String::new();
            assert!(
                self.stdout.read_line(&mut answer).unwrap() > 0,
                "dsh closed stdout"
            );
            let answer: Value = serde_json::from_str(&answer).unwrap();
            if answer["id"] == json!(id) {
                return answer;
            }
        }
    }

    fn call(&mut self, tool: &str, arguments: Value) -> String {
        let answer = self.request("tools/call", json!({"name": tool, "arguments": arguments}));
        let result = &answer["result"];
        assert_ne!(result["isError"], json!(true), "{tool}: {answer}");
        result["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }
}

struct KilledOnDrop(Child);

impl Drop for KilledOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn main() {
    let scratch = tempfile::tempdir().unwrap();
    let state = scratch.path().join("state");
    let work = scratch.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let dsh = std::path::PathBuf::from(env!("CARGO_BIN_EXE_dsh"));
    let next = scratch.path().join("next").join("dsh");
    std::fs::create_dir_all(next.parent().unwrap()).unwrap();
    std::fs::copy(&dsh, &next).unwrap();
    let warmed = Command::new(&dsh)
        .arg("--state-dir")
        .arg(&state)
        .arg("tools")
        .stdout(Stdio::null())
        .status()
        .expect("dsh tools");
    assert!(warmed.success());
    let mut child = Command::new(&dsh)
        .arg("--state-dir")
        .arg(&state)
        .arg("--workdir")
        .arg(&work)
        .arg("serve")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start dsh serve");
    let mut client = Stdio2 {
        stdin: child.stdin.take().unwrap(),
        stdout: BufReader::new(child.stdout.take().unwrap()),
        next_id: 0,
    };
    let _server = KilledOnDrop(child);
    client.request(
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}),
    );
    writeln!(
        client.stdin,
        "{}",
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
    )
    .unwrap();
    for _ in 0..TERMINALS {
        let opened = client.call("terminal_open", json!({}));
        assert!(opened.starts_with("opened term-"), "{opened}");
    }
    let mut jobs = Vec::new();
    for _ in 0..JOBS {
        let started = client.call(
            "bash",
            json!({
                "command": "f=$(mktemp -u); mkfifo \"$f\"; exec 3<>\"$f\"; rm \"$f\"; \
                            i=0; while :; do i=$((i+1)); echo line-$i; read -t 1 -u 3; done",
                "description": "a line a second",
                "run_in_background": true,
            }),
        );
        let id = started
            .split_whitespace()
            .find(|w| w.starts_with("bash-"))
            .expect("a job id")
            .trim_end_matches([',', ':', '.'])
            .to_string();
        jobs.push(id);
    }
    std::thread::sleep(Duration::from_secs(1));
    println!(
        "dsh upgrade with {TERMINALS} terminals and {JOBS} jobs live, a client calling job_output back to back"
    );
    println!(
        "{:<10} {:>16} {:>18} {:>14} {:>16} {:>14}",
        "upgrade",
        "requests wait ms",
        "longest call ms",
        "call p50 ms",
        "snapshot bytes",
        "dsh upgrade ms"
    );
    for (round, binary) in [(1, &next), (2, &dsh)] {
        let mut before = Vec::new();
        for _ in 0..200 {
            let started = Instant::now();
            client.call("job_output", json!({"id": jobs[0], "max_bytes": 100}));
            before.push(started.elapsed());
        }
        let asked = Instant::now();
        let mut upgrading = Command::new(&dsh)
            .arg("--state-dir")
            .arg(&state)
            .args(["upgrade", "--binary"])
            .arg(binary)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("dsh upgrade");
        let mut longest = Duration::ZERO;
        let status = loop {
            let started = Instant::now();
            client.call("job_output", json!({"id": jobs[0], "max_bytes": 100}));
            longest = longest.max(started.elapsed());
            if let Some(status) = upgrading.try_wait().unwrap() {
                break status;
            }
        };
        let took = asked.elapsed();
        assert!(status.success(), "dsh upgrade failed");
        // Calls after the upgrade: the longest may come right after it returned.
        for _ in 0..20 {
            let started = Instant::now();
            client.call("job_output", json!({"id": jobs[0], "max_bytes": 100}));
            longest = longest.max(started.elapsed());
        }
        let figures = ask_version(&state);
        println!(
            "{:<10} {:>16.1} {:>18.1} {:>14.3} {:>16} {:>14.0}",
            round,
            figures["last_upgrade"]["resumed_after_ms"]
                .as_f64()
                .unwrap_or(f64::NAN),
            ms(longest),
            ms(percentile(&mut before, 0.5)),
            figures["last_upgrade"]["snapshot_bytes"],
            ms(took)
        );
    }
    // Every terminal and job survived both upgrades.
    let listed = client.call("job_list", json!({}));
    assert_eq!(listed.matches("running").count(), JOBS, "{listed}");
    let terminals = client.call("terminal_list", json!({}));
    assert_eq!(terminals.matches("term-").count(), TERMINALS, "{terminals}");
}

/// The server's `version` answer on its control socket.
fn ask_version(state: &std::path::Path) -> Value {
    let run = state.join("run");
    let socket = std::fs::read_dir(&run)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "sock"))
        .expect("a control socket");
    let mut stream = std::os::unix::net::UnixStream::connect(socket).unwrap();
    stream.write_all(b"version\n").unwrap();
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).unwrap();
    let answer: Value = serde_json::from_str(&line).unwrap();
    answer["ok"].clone()
}
