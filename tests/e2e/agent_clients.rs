//! Real agent clients against `dsh serve`: the Codex CLI (`@openai/codex`, pinned) runs a
//! session with dsh as its MCP server and a model endpoint of this test's own, which
//! records what Codex sends the model and answers every turn with one short message. What
//! is checked is what a user meets: whether the model's first request carries dsh's tools.
//! Codex waits about 1 s for an MCP server's tools and then starts without them.
//!
//! Codex is installed with npm into `target/tmp/codex-cli` (once per version).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::Env;

/// The Codex CLI release the test pins (the one the README's client notes were checked with).
const CODEX_VERSION: &str = "0.171.0";

/// The Codex CLI's launcher, installed under the target directory on first use (a lock
/// serialises test processes). `None` (after [`crate::support::skipped`]) without npm.
fn codex() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("codex-cli");
    let launcher = dir.join("node_modules/.bin/codex");
    let stamp = dir.join("dsh-installed.txt");
    std::fs::create_dir_all(&dir).unwrap();
    let lock = std::fs::File::create(dir.with_extension("lock")).unwrap();
    // SAFETY: flock on a descriptor we own; released when `lock` closes.
    unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) };
    if launcher.exists() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(CODEX_VERSION) {
        return Some(launcher);
    }
    let installed = Command::new("npm")
        .args([
            "install",
            "--no-audit",
            "--no-fund",
            "--silent",
            "--no-save",
        ])
        .arg(format!("@openai/codex@{CODEX_VERSION}"))
        .current_dir(&dir)
        .output();
    match installed {
        Ok(output) if output.status.success() => {
            std::fs::write(&stamp, CODEX_VERSION).unwrap();
            Some(launcher)
        }
        Ok(output) => panic!(
            "npm install @openai/codex@{CODEX_VERSION} failed:\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
        Err(error) => {
            crate::support::skipped(&format!("cannot run npm to install Codex: {error}"));
            None
        }
    }
}

/// A model endpoint speaking the Responses API's streaming: it keeps each request body
/// and answers with one assistant message, then the response's end.
struct ModelEndpoint {
    port: u16,
    requests: Arc<Mutex<Vec<Value>>>,
}

impl ModelEndpoint {
    fn start() -> ModelEndpoint {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let kept = requests.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let kept = kept.clone();
                std::thread::spawn(move || answer(stream, &kept));
            }
        });
        ModelEndpoint { port, requests }
    }

    /// The request bodies received so far, in order.
    fn requests(&self) -> Vec<Value> {
        self.requests.lock().unwrap().clone()
    }
}

/// Serves one connection's requests: `POST .../responses` gets the stream, anything else 404.
fn answer(stream: TcpStream, kept: &Mutex<Vec<Value>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let mut length = 0usize;
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        if !(request_line.starts_with("POST ") && request_line.contains("/responses")) {
            let _ = writer.write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n");
            continue;
        }
        kept.lock()
            .unwrap()
            .push(serde_json::from_slice(&body).unwrap_or(Value::Null));
        let mut events = String::new();
        for event in [
            json!({"type": "response.created", "response": {"id": "resp-1"}}),
            json!({"type": "response.output_item.done", "item": {
                "type": "message", "role": "assistant", "id": "msg-1",
                "content": [{"type": "output_text", "text": "done"}]}}),
            json!({"type": "response.completed", "response": {"id": "resp-1", "usage": {
                "input_tokens": 1, "input_tokens_details": null, "output_tokens": 1,
                "output_tokens_details": null, "total_tokens": 2}}}),
        ] {
            events.push_str(&format!(
                "event: {}\ndata: {event}\n\n",
                event["type"].as_str().unwrap()
            ));
        }
        let _ = writer.write_all(
            format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\
                 content-length: {}\r\n\r\n{events}",
                events.len()
            )
            .as_bytes(),
        );
        return;
    }
}

/// The tool names under Codex's namespace for the MCP server `dsh` in one model request
/// (`mcp__dsh`, holding the server's tools), empty when it has none.
fn dsh_tools_offered(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|tool| tool["name"] == "mcp__dsh")
        .flat_map(|namespace| namespace["tools"].as_array().cloned().unwrap_or_default())
        .filter_map(|tool| tool["name"].as_str().map(str::to_string))
        .collect()
}

/// A user's first Codex session with dsh on an empty state directory: the model's first
/// request already offers every embedded tool (the plugins' code is precompiled, so dsh
/// answers `tools/list` well within Codex's wait). Before, that first session had none.
#[test]
fn codex_first_session_on_an_empty_state_directory_offers_dsh_tools() {
    let Some(codex) = codex() else { return };
    let env = Env::new();
    let model = ModelEndpoint::start();
    let home = env.dir.path().join("codex-home");
    std::fs::create_dir_all(&home).unwrap();
    let config = format!(
        "model = \"stub-model\"\nmodel_provider = \"stub\"\n\n\
         [model_providers.stub]\nname = \"stub\"\nbase_url = \"http://127.0.0.1:{}/v1\"\n\
         wire_api = \"responses\"\n\n\
         [mcp_servers.dsh]\ncommand = {:?}\nargs = [\"--state-dir\", {:?}, \"--workdir\", {:?}, \"serve\"]\n",
        model.port,
        env!("CARGO_BIN_EXE_dsh"),
        env.state_dir().display().to_string(),
        env.workdir().display().to_string(),
    );
    std::fs::write(home.join("config.toml"), config).unwrap();
    assert!(
        std::fs::read_dir(env.state_dir()).unwrap().next().is_none(),
        "the state directory starts empty"
    );
    let mut child = Command::new(codex)
        .args(["exec", "--skip-git-repo-check", "say hi"])
        .env("CODEX_HOME", &home)
        .current_dir(env.workdir())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "codex exec did not end in 120 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    let output = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{said}");
    let requests = model.requests();
    let first = requests
        .first()
        .unwrap_or_else(|| panic!("no model request: {said}"));
    let offered = dsh_tools_offered(first);
    for tool in [
        "bash",
        "job_list",
        "terminal_open",
        "lsp",
        "read",
        "edit",
        "subagent",
    ] {
        assert!(
            offered.iter().any(|name| name == tool),
            "{tool} not offered in Codex's first model request: {offered:?}\n{said}"
        );
    }
}
