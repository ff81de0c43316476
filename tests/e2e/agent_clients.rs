//! Real agent clients against `dsh serve`: the Codex CLI (`@openai/codex`, pinned) runs a
//! session with dsh as its MCP server and a model endpoint of this test's own, which
//! records what Codex sends the model and answers each turn as its script says (a short
//! message, or a call of one of dsh's tools). What is checked is what a user meets:
//! whether the model's first request carries dsh's tools (Codex waits about 1 s for an MCP
//! server's tools and then starts without them), and whether Codex's model, which has no
//! sampling to offer, gets a `subagent`'s answer from the operator's model dsh is given, in
//! the foreground and in the background (read with `job_output` without `since` until it
//! has ended).
//!
//! Claude Code (`@anthropic-ai/claude-code`, pinned) is driven the same way for subagents,
//! against a model endpoint speaking Anthropic's streamed Messages API.
//!
//! Both are installed with npm into `target/tmp/codex-cli` and `target/tmp/claude-cli`
//! (once per version).

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

/// The Claude Code release the test pins.
const CLAUDE_CODE_VERSION: &str = "2.1.197";

/// The Codex CLI's launcher, installed under the target directory on first use (a lock
/// serialises test processes). `None` (after [`crate::support::skipped`]) without npm.
fn codex() -> Option<PathBuf> {
    npm_cli("codex-cli", "@openai/codex", CODEX_VERSION, "codex")
}

/// Claude Code's launcher, the same way.
fn claude_code() -> Option<PathBuf> {
    npm_cli(
        "claude-cli",
        "@anthropic-ai/claude-code",
        CLAUDE_CODE_VERSION,
        "claude",
    )
}

/// `package@version` installed with npm under the target directory's `dir` (once per
/// version; a lock serialises test processes), and its launcher `bin`.
fn npm_cli(dir: &str, package: &str, version: &str, bin: &str) -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(dir);
    let launcher = dir.join("node_modules/.bin").join(bin);
    let stamp = dir.join("dsh-installed.txt");
    std::fs::create_dir_all(&dir).unwrap();
    let lock = std::fs::File::create(dir.with_extension("lock")).unwrap();
    // SAFETY: flock on a descriptor we own; released when `lock` closes.
    unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) };
    if launcher.exists() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(version) {
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
        .arg(format!("{package}@{version}"))
        .current_dir(&dir)
        .output();
    match installed {
        Ok(output) if output.status.success() => {
            std::fs::write(&stamp, version).unwrap();
            Some(launcher)
        }
        Ok(output) => panic!(
            "npm install {package}@{version} failed:\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
        Err(error) => {
            crate::support::skipped(&format!("cannot run npm to install {package}: {error}"));
            None
        }
    }
}

/// What the scripted model answers a request with, given every request so far (the last
/// is the one answered): an output item of the Responses API.
type Script = Box<dyn Fn(&[Value]) -> Value + Send + Sync>;

/// A model endpoint speaking the Responses API's streaming: it keeps each request body
/// and answers with the item its script gives, then the response's end.
struct ModelEndpoint {
    port: u16,
    requests: Arc<Mutex<Vec<Value>>>,
}

impl ModelEndpoint {
    /// One that answers every turn with the message "done".
    fn start() -> ModelEndpoint {
        ModelEndpoint::scripted(Box::new(|_| message("done")))
    }

    fn scripted(script: Script) -> ModelEndpoint {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let kept = requests.clone();
        let script = Arc::new(script);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (kept, script) = (kept.clone(), script.clone());
                std::thread::spawn(move || answer(stream, &kept, &script));
            }
        });
        ModelEndpoint { port, requests }
    }

    /// The request bodies received so far, in order.
    fn requests(&self) -> Vec<Value> {
        self.requests.lock().unwrap().clone()
    }
}

/// An assistant message item.
fn message(text: &str) -> Value {
    json!({"type": "message", "role": "assistant", "id": "msg-1",
        "content": [{"type": "output_text", "text": text}]})
}

/// An item calling dsh's tool `name` (in Codex's namespace for the server `dsh`).
fn dsh_call(call_id: &str, name: &str, arguments: Value) -> Value {
    json!({"type": "function_call", "id": format!("fc-{call_id}"), "call_id": call_id,
        "name": name, "namespace": "mcp__dsh", "arguments": arguments.to_string()})
}

/// The text of the last tool output a request carries (what dsh answered Codex's call).
fn last_tool_output(request: &Value) -> String {
    request["input"]
        .as_array()
        .into_iter()
        .flatten()
        .rfind(|item| item["type"] == "function_call_output")
        .map(|item| match &item["output"] {
            Value::String(text) => text.clone(),
            Value::Array(parts) => parts
                .iter()
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n"),
            other => other.to_string(),
        })
        .unwrap_or_default()
}

/// The next request on a connection: its request line and body (none at its end).
fn read_request(reader: &mut BufReader<TcpStream>) -> Option<(String, Vec<u8>)> {
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
        return None;
    }
    let mut length = 0usize;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).unwrap_or(0) == 0 {
            return None;
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
    reader.read_exact(&mut body).ok()?;
    Some((request_line, body))
}

/// Serves one connection's requests: `POST .../responses` gets the stream, anything else 404.
fn answer(stream: TcpStream, kept: &Mutex<Vec<Value>>, script: &Script) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    while let Some((request_line, body)) = read_request(&mut reader) {
        if !(request_line.starts_with("POST ") && request_line.contains("/responses")) {
            let _ = writer.write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n");
            continue;
        }
        let item = {
            let mut kept = kept.lock().unwrap();
            kept.push(serde_json::from_slice(&body).unwrap_or(Value::Null));
            script(&kept)
        };
        let mut events = String::new();
        for event in [
            json!({"type": "response.created", "response": {"id": "resp-1"}}),
            json!({"type": "response.output_item.done", "item": item}),
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
    assert!(
        std::fs::read_dir(env.state_dir()).unwrap().next().is_none(),
        "the state directory starts empty"
    );
    let said = run_codex(&codex, &env, &model, None, "say hi");
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

/// The operator's model dsh is given (the OpenAI chat completions API): each reply is
/// `reply(number of requests so far)`; it keeps the request bodies.
pub(crate) struct ChatEndpoint {
    pub(crate) port: u16,
    requests: Arc<Mutex<Vec<Value>>>,
}

impl ChatEndpoint {
    pub(crate) fn start(reply: fn(usize) -> Value) -> ChatEndpoint {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let kept = requests.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let kept = kept.clone();
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(stream.try_clone().unwrap());
                    let mut writer = stream;
                    while let Some((_, body)) = read_request(&mut reader) {
                        let n = {
                            let mut kept = kept.lock().unwrap();
                            kept.push(serde_json::from_slice(&body).unwrap_or(Value::Null));
                            kept.len()
                        };
                        let body = reply(n).to_string();
                        let _ = writer.write_all(
                            format!(
                                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                                 content-length: {}\r\n\r\n{body}",
                                body.len()
                            )
                            .as_bytes(),
                        );
                    }
                });
            }
        });
        ChatEndpoint { port, requests }
    }

    fn requests(&self) -> usize {
        self.requests.lock().unwrap().len()
    }
}

/// A chat completion whose message is `message`.
pub(crate) fn completion(message: Value) -> Value {
    json!({"id": "chatcmpl-1", "object": "chat.completion", "model": "operator-model",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 50, "completion_tokens": 5, "total_tokens": 55}})
}

/// `codex exec PROMPT` with dsh (started with `dsh_config` as its dsh.toml, if any) as
/// its MCP server and `model` as its model; what it printed. Fails the test when it fails.
fn run_codex(
    codex: &Path,
    env: &Env,
    model: &ModelEndpoint,
    dsh_config: Option<&str>,
    prompt: &str,
) -> String {
    let home = env.dir.path().join("codex-home");
    std::fs::create_dir_all(&home).unwrap();
    let mut dsh_args = Vec::new();
    if let Some(dsh_config) = dsh_config {
        let dsh_toml = env.dir.path().join("dsh-for-codex.toml");
        std::fs::write(&dsh_toml, dsh_config).unwrap();
        dsh_args = vec!["--config".to_string(), dsh_toml.display().to_string()];
    }
    dsh_args.extend([
        "--state-dir".to_string(),
        env.state_dir().display().to_string(),
        "--workdir".to_string(),
        env.workdir().display().to_string(),
        "serve".to_string(),
    ]);
    let config = format!(
        "model = \"stub-model\"\nmodel_provider = \"stub\"\n\n\
         [model_providers.stub]\nname = \"stub\"\nbase_url = \"http://127.0.0.1:{}/v1\"\n\
         wire_api = \"responses\"\n\n\
         [mcp_servers.dsh]\ncommand = {:?}\nargs = {}\n",
        model.port,
        env!("CARGO_BIN_EXE_dsh"),
        Value::from(dsh_args),
    );
    std::fs::write(home.join("config.toml"), config).unwrap();
    // Codex asks before an MCP tool call; `exec` has nobody to ask, so approvals are off
    // (dsh's own gate, guards and executor still stand).
    let mut codex = Command::new(codex);
    codex
        .args([
            "exec",
            "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox",
            prompt,
        ])
        .env("CODEX_HOME", &home)
        .current_dir(env.workdir());
    run_to_end(&mut codex, Duration::from_secs(120))
}

/// Runs `command` with no input to its end, within `limit`; what it printed. Fails the
/// test when it fails or outlasts `limit`.
fn run_to_end(command: &mut Command, limit: Duration) -> String {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "{command:?} did not end in {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let output = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{said}");
    said
}

/// dsh.toml giving subagents the operator's model at `port`.
pub(crate) fn operator_model_config(port: u16) -> String {
    format!(
        "[subagent]\nmodel = \"local\"\n[subagent.models.local]\napi = \"openai-chat\"\n\
         base_url = \"http://127.0.0.1:{port}/v1\"\nmodel = \"operator-model\"\n"
    )
}

/// Codex offers no sampling: with an operator's model configured, its model's `subagent`
/// call gets the answer in the foreground.
#[test]
fn codex_s_model_gets_a_subagent_s_answer_from_the_operator_model() {
    let Some(codex) = codex() else { return };
    let env = Env::new();
    let operator = ChatEndpoint::start(|_| {
        completion(json!({"role": "assistant", "content": "the magic word is xyzzy"}))
    });
    let model = ModelEndpoint::scripted(Box::new(|requests| match requests.len() {
        1 => dsh_call(
            "call-1",
            "subagent",
            json!({"prompt": "find the magic word"}),
        ),
        _ => message("done"),
    }));
    let said = run_codex(
        &codex,
        &env,
        &model,
        Some(&operator_model_config(operator.port)),
        "ask",
    );
    let requests = model.requests();
    assert_eq!(requests.len(), 2, "{said}");
    let output = last_tool_output(&requests[1]);
    assert!(
        output.contains("the magic word is xyzzy") && output.contains("by model local"),
        "what Codex's model got back: {output}\n{said}"
    );
    assert_eq!(operator.requests(), 1);
}

/// In the background: Codex's model starts a subagent, then calls `job_output {id,
/// wait_ms}` without `since`, as models do, until it has ended; it works on its own.
#[test]
fn codex_s_model_reads_a_background_subagent_without_since_until_it_ends() {
    let Some(codex) = codex() else { return };
    let env = Env::new();
    let operator = ChatEndpoint::start(|n| match n {
        1 => completion(
            json!({"role": "assistant", "content": null, "tool_calls": [{
            "id": "call_b", "type": "function", "function": {"name": "bash",
            "arguments": "{\"command\":\"sleep 1; echo from-the-subagent\",\"description\":\"wait\"}"}}]}),
        ),
        _ => completion(json!({"role": "assistant", "content": "the magic word is plugh"})),
    });
    let model = ModelEndpoint::scripted(Box::new(|requests| {
        let n = requests.len();
        if n == 1 {
            return dsh_call(
                "call-1",
                "subagent",
                json!({"prompt": "find the magic word", "run_in_background": true}),
            );
        }
        let output = last_tool_output(&requests[n - 1]);
        if n > 30 || output.contains("exited") || output.contains("failed") {
            return message("done");
        }
        dsh_call(
            &format!("call-{n}"),
            "job_output",
            json!({"id": "subagent-1", "wait_ms": 10000}),
        )
    }));
    let said = run_codex(
        &codex,
        &env,
        &model,
        Some(&operator_model_config(operator.port)),
        "ask",
    );
    let requests = model.requests();
    let outputs: Vec<String> = requests.iter().skip(1).map(last_tool_output).collect();
    assert!(
        outputs[0].contains("subagent-1 started in the background"),
        "{outputs:#?}\n{said}"
    );
    let last = outputs.last().unwrap();
    assert!(
        last.contains("[turn 1] result bash: ok: from-the-subagent")
            && last.contains("[turn 2] answer: the magic word is plugh")
            && last.contains("exited with code 0"),
        "the last job_output Codex's model read: {last}\n{outputs:#?}"
    );
    assert!(requests.len() < 31, "it never ended: {outputs:#?}");
    assert_eq!(operator.requests(), 2);
}

/// What Claude Code's scripted model does next, given the request: text or a tool use.
enum ClaudeTurn {
    Text(&'static str),
    Use(&'static str, Value),
}

/// A model endpoint speaking Anthropic's streamed Messages API (what Claude Code asks):
/// each `POST /v1/messages` is answered by `script` as an event stream; token counts get a
/// count. It keeps the request bodies.
struct ClaudeEndpoint {
    port: u16,
    requests: Arc<Mutex<Vec<Value>>>,
}

impl ClaudeEndpoint {
    fn start(script: fn(&Value) -> ClaudeTurn) -> ClaudeEndpoint {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let kept = requests.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let kept = kept.clone();
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(stream.try_clone().unwrap());
                    let mut writer = stream;
                    while let Some((line, body)) = read_request(&mut reader) {
                        let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                        let (content_type, body) = if line.contains("count_tokens") {
                            ("application/json", json!({"input_tokens": 10}).to_string())
                        } else {
                            let turn = script(&request);
                            kept.lock().unwrap().push(request);
                            ("text/event-stream", message_stream(turn))
                        };
                        let _ = writer.write_all(
                            format!(
                                "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\n\
                                 content-length: {}\r\n\r\n{body}",
                                body.len()
                            )
                            .as_bytes(),
                        );
                    }
                });
            }
        });
        ClaudeEndpoint { port, requests }
    }
}

/// `turn` as the Messages API's event stream.
fn message_stream(turn: ClaudeTurn) -> String {
    let usage = json!({"input_tokens": 1, "output_tokens": 1});
    let mut events = vec![json!({"type": "message_start", "message": {"id": "msg_1",
        "type": "message", "role": "assistant", "model": "claude-stub", "content": [],
        "stop_reason": null, "stop_sequence": null, "usage": usage}})];
    let stop = match turn {
        ClaudeTurn::Text(text) => {
            events.push(json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "text", "text": ""}}));
            events.push(json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": text}}));
            "end_turn"
        }
        ClaudeTurn::Use(name, input) => {
            // Each tool use its own id, as a model gives (Claude Code keys results by it).
            static USES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let id = format!(
                "toolu_{}",
                USES.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            );
            events.push(json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}));
            events.push(json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": input.to_string()}}));
            "tool_use"
        }
    };
    events.push(json!({"type": "content_block_stop", "index": 0}));
    events.push(
        json!({"type": "message_delta", "delta": {"stop_reason": stop,
        "stop_sequence": null}, "usage": {"output_tokens": 1}}),
    );
    events.push(json!({"type": "message_stop"}));
    events
        .iter()
        .map(|event| {
            format!(
                "event: {}\ndata: {event}\n\n",
                event["type"].as_str().unwrap()
            )
        })
        .collect()
}

/// The text of the last tool result a Messages request carries, if any.
fn last_tool_result(request: &Value) -> Option<String> {
    let content = request["messages"].as_array()?.last()?["content"].as_array()?;
    let result = content.iter().rfind(|c| c["type"] == "tool_result")?;
    Some(match &result["content"] {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        other => other.to_string(),
    })
}

/// Whether a Messages request offers dsh's `subagent` (Claude Code's own side requests do not).
fn offers_subagent(request: &Value) -> bool {
    request["tools"]
        .as_array()
        .is_some_and(|tools| tools.iter().any(|t| t["name"] == "mcp__dsh__subagent"))
}

/// `claude -p PROMPT` with dsh (with `dsh_config`) as its MCP server and `model` as its
/// model endpoint, allowed dsh's `subagent` and `job_output`; what it printed.
fn run_claude_code(claude: &Path, env: &Env, model: &ClaudeEndpoint, dsh_config: &str) -> String {
    let home = env.dir.path().join("claude-home");
    std::fs::create_dir_all(&home).unwrap();
    let dsh_toml = env.dir.path().join("dsh-for-claude.toml");
    std::fs::write(&dsh_toml, dsh_config).unwrap();
    let servers = json!({"mcpServers": {"dsh": {"command": env!("CARGO_BIN_EXE_dsh"), "args": [
        "--config", dsh_toml, "--state-dir", env.state_dir(), "--workdir", env.workdir(), "serve"]}}});
    let mut claude = Command::new(claude);
    claude
        .args([
            "-p",
            "ask a subagent",
            "--output-format",
            "text",
            "--mcp-config",
        ])
        .arg(servers.to_string())
        .args(["--allowedTools", "mcp__dsh__subagent,mcp__dsh__job_output"])
        .env("HOME", &home)
        .env(
            "ANTHROPIC_BASE_URL",
            format!("http://127.0.0.1:{}", model.port),
        )
        .env("ANTHROPIC_API_KEY", "sk-stub")
        .env("DISABLE_TELEMETRY", "1")
        .env("DISABLE_AUTOUPDATER", "1")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .current_dir(env.workdir());
    run_to_end(&mut claude, Duration::from_secs(180))
}

/// Claude Code offers no sampling either: its model's `subagent` call gets the answer of
/// the operator's model dsh is given.
#[test]
fn claude_code_s_model_gets_a_subagent_s_answer_from_the_operator_model() {
    let Some(claude) = claude_code() else { return };
    let env = Env::new();
    let operator = ChatEndpoint::start(|_| {
        completion(json!({"role": "assistant", "content": "the magic word is xyzzy"}))
    });
    let model = ClaudeEndpoint::start(|request| {
        if offers_subagent(request) && last_tool_result(request).is_none() {
            ClaudeTurn::Use(
                "mcp__dsh__subagent",
                json!({"prompt": "find the magic word"}),
            )
        } else {
            ClaudeTurn::Text("done")
        }
    });
    let said = run_claude_code(&claude, &env, &model, &operator_model_config(operator.port));
    let results: Vec<String> = model
        .requests
        .lock()
        .unwrap()
        .iter()
        .filter_map(last_tool_result)
        .collect();
    assert!(
        results
            .iter()
            .any(|r| r.contains("the magic word is xyzzy") && r.contains("by model local")),
        "what Claude Code's model got back: {results:#?}\n{said}"
    );
    assert_eq!(operator.requests(), 1);
}

/// In the background, read with `job_output` without `since` until it has ended.
#[test]
fn claude_code_s_model_reads_a_background_subagent_without_since_until_it_ends() {
    let Some(claude) = claude_code() else { return };
    let env = Env::new();
    let operator = ChatEndpoint::start(|n| match n {
        1 => completion(
            json!({"role": "assistant", "content": null, "tool_calls": [{
            "id": "call_b", "type": "function", "function": {"name": "bash",
            "arguments": "{\"command\":\"sleep 1; echo from-the-subagent\",\"description\":\"wait\"}"}}]}),
        ),
        _ => completion(json!({"role": "assistant", "content": "the magic word is plugh"})),
    });
    let model = ClaudeEndpoint::start(|request| {
        if !offers_subagent(request) {
            return ClaudeTurn::Text("done");
        }
        let turns = request["messages"].as_array().map_or(0, Vec::len);
        match last_tool_result(request) {
            None => ClaudeTurn::Use(
                "mcp__dsh__subagent",
                json!({"prompt": "find the magic word", "run_in_background": true}),
            ),
            Some(result)
                if result.contains("exited") || result.contains("failed") || turns > 60 =>
            {
                ClaudeTurn::Text("done")
            }
            Some(_) => ClaudeTurn::Use(
                "mcp__dsh__job_output",
                json!({"id": "subagent-1", "wait_ms": 10000}),
            ),
        }
    });
    let said = run_claude_code(&claude, &env, &model, &operator_model_config(operator.port));
    let results: Vec<String> = model
        .requests
        .lock()
        .unwrap()
        .iter()
        .filter_map(last_tool_result)
        .collect();
    assert!(
        results
            .first()
            .is_some_and(|r| r.contains("subagent-1 started in the background")),
        "{results:#?}\n{said}"
    );
    let last = results.last().unwrap();
    assert!(
        last.contains("[turn 1] result bash: ok: from-the-subagent")
            && last.contains("[turn 2] answer: the magic word is plugh")
            && last.contains("exited with code 0"),
        "the last job_output Claude Code's model read: {last}\n{results:#?}"
    );
    assert_eq!(operator.requests(), 2);
}
