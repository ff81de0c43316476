//! A small blocking MCP client over stdio for the end-to-end tests: it starts `dsh serve`
//! with an `Env`'s state dir, workspace and a `dsh.toml`, initializes the session, and
//! sends `tools/call` requests whose answers a reader thread hands back by id, so a call
//! can be left running while the test does something else (signals the server, closes
//! its stdin, looks at /proc).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::{unique_marker, Env};

/// The protocol version the client asks for.
const PROTOCOL_VERSION: &str = "2025-06-18";
/// How long a request may go unanswered before the test fails (a debug build compiles
/// each plugin on its first call in a fresh state dir).
pub const ANSWER_WITHIN: Duration = Duration::from_secs(120);

type Waiting = Arc<Mutex<HashMap<u64, Sender<Value>>>>;

/// `dsh serve` on pipes this test holds.
pub struct McpServer {
    child: Child,
    stdin: Mutex<Option<ChildStdin>>,
    waiting: Waiting,
    next_id: AtomicU64,
    stderr_path: PathBuf,
    /// Lines on stdout that are not JSON-RPC messages (a log line there breaks every
    /// client): every answer waited for asserts there is none.
    stray: Arc<Mutex<Vec<String>>>,
}

/// A request sent and not yet answered.
pub struct Pending {
    id: u64,
    answer: Receiver<Value>,
    /// The answer, when [`Pending::answered`] found it come.
    early: Option<Value>,
}

/// What a `tools/call` answered.
#[derive(Debug, Clone)]
pub struct ToolReply {
    pub is_error: bool,
    /// The text of the result's content.
    pub text: String,
    /// `structuredContent.code` of an error result.
    pub code: Option<String>,
}

impl ToolReply {
    fn from_response(response: Value) -> ToolReply {
        let result = response
            .get("result")
            .unwrap_or_else(|| panic!("tools/call got a JSON-RPC error: {response}"));
        let text = result["content"]
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .filter_map(|item| item["text"].as_str())
                    .collect::<Vec<_>>()
                    .join("")
            })
            .unwrap_or_default();
        ToolReply {
            is_error: result["isError"].as_bool().unwrap_or(false),
            text,
            code: result["structuredContent"]["code"]
                .as_str()
                .map(str::to_owned),
        }
    }
}

impl McpServer {
    /// Starts `dsh serve` (its own process group) under `config` and initializes it.
    pub fn start(env: &Env, config: &str) -> McpServer {
        McpServer::start_command(env, env.dsh_configured(config))
    }

    /// Starts `command serve` (a `dsh` command the caller set up, e.g. with variables in
    /// its environment) and initializes it.
    pub fn start_command(env: &Env, mut command: std::process::Command) -> McpServer {
        let stderr_path = env
            .dir
            .path()
            .join(format!("serve-{}.stderr", unique_marker()));
        let stderr = std::fs::File::create(&stderr_path).unwrap();
        let mut child = command
            .arg("serve")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .process_group(0)
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let stdin = child.stdin.take().unwrap();
        let waiting: Waiting = Arc::default();
        let answers = waiting.clone();
        let stray: Arc<Mutex<Vec<String>>> = Arc::default();
        let strays = stray.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let Ok(message) = serde_json::from_str::<Value>(&line) else {
                    strays.lock().unwrap().push(line);
                    continue;
                };
                let is_answer = message.get("result").is_some() || message.get("error").is_some();
                if let (Some(id), true) = (message["id"].as_u64(), is_answer) {
                    if let Some(sender) = answers.lock().unwrap().remove(&id) {
                        let _ = sender.send(message);
                    }
                }
            }
            // The server closed stdout: every waiting request is answered by a disconnect.
            answers.lock().unwrap().clear();
        });
        let server = McpServer {
            child,
            stdin: Mutex::new(Some(stdin)),
            waiting,
            next_id: AtomicU64::new(1),
            stderr_path,
            stray,
        };
        let init = server
            .request(
                "initialize",
                json!({
                    "protocolVersion": PROTOCOL_VERSION,
                    "capabilities": {},
                    "clientInfo": {"name": "dsh-e2e-stdio", "version": "0"},
                }),
            )
            .wait(&server);
        assert!(init.get("result").is_some(), "initialize failed: {init}");
        server.notify("notifications/initialized");
        // As clients do: the catalog first. It is answered once the plugins the server
        // started with have loaded (they load after `initialize` is answered).
        let listed = server.request("tools/list", json!({})).wait(&server);
        assert!(
            listed.get("result").is_some(),
            "tools/list failed: {listed}"
        );
        server
    }

    /// The server's process id.
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Sends a request; its answer is read with `Pending::wait`.
    pub fn request(&self, method: &str, params: Value) -> Pending {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (sender, answer) = mpsc::channel();
        self.waiting.lock().unwrap().insert(id, sender);
        self.write(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        Pending {
            id,
            answer,
            early: None,
        }
    }

    /// Sends a notification.
    pub fn notify(&self, method: &str) {
        self.write(json!({"jsonrpc": "2.0", "method": method}));
    }

    /// Starts `tools/call TOOL ARGS` and returns without waiting for its answer.
    pub fn start_call(&self, tool: &str, args: Value) -> Pending {
        self.request("tools/call", json!({"name": tool, "arguments": args}))
    }

    /// `tools/call TOOL ARGS`, answered.
    pub fn call(&self, tool: &str, args: Value) -> ToolReply {
        self.start_call(tool, args).reply(self)
    }

    /// `tools/call TOOL ARGS` that must succeed; returns its text.
    pub fn call_ok(&self, tool: &str, args: Value) -> String {
        let reply = self.call(tool, args.clone());
        assert!(
            !reply.is_error,
            "{tool} {args} failed: {reply:?}\n{}",
            self.stderr()
        );
        reply.text
    }

    /// Closes the server's stdin (EOF: `dsh serve` ends).
    pub fn close_stdin(&self) {
        self.stdin.lock().unwrap().take();
    }

    /// Sends `signal` to the server process.
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on our own child's pid.
        let sent = unsafe { libc::kill(self.pid(), signal) };
        assert_eq!(sent, 0, "kill({}, {signal}) failed", self.pid());
    }

    /// Waits up to `within` for the server to exit.
    pub fn wait_exit(&mut self, within: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The server's stderr so far (for failure messages).
    pub fn stderr(&self) -> String {
        let text = std::fs::read_to_string(&self.stderr_path).unwrap_or_default();
        let tail = text.len().saturating_sub(4000);
        format!(
            "--- dsh serve stderr ---\n{}",
            text.get(tail..).unwrap_or(&text)
        )
    }

    fn write(&self, message: Value) {
        let mut line = message.to_string();
        line.push('\n');
        let mut stdin = self.stdin.lock().unwrap();
        let stdin = stdin.as_mut().expect("stdin is still open");
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.flush().unwrap();
    }
}

impl Drop for McpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Pending {
    /// Whether the answer has come yet (it is kept for [`Pending::wait`]).
    pub fn answered(&mut self) -> bool {
        if self.early.is_none() {
            self.early = self.answer.try_recv().ok();
        }
        self.early.is_some()
    }

    /// The JSON-RPC response (result or error); fails the test after `ANSWER_WITHIN`
    /// or when the server closes stdout first.
    pub fn wait(self, server: &McpServer) -> Value {
        let stray = server.stray.lock().unwrap().clone();
        assert!(
            stray.is_empty(),
            "dsh serve wrote lines that are not JSON-RPC to stdout: {stray:?}"
        );
        if let Some(answer) = self.early {
            return answer;
        }
        match self.answer.recv_timeout(ANSWER_WITHIN) {
            Ok(response) => {
                let stray = server.stray.lock().unwrap().clone();
                assert!(
                    stray.is_empty(),
                    "dsh serve wrote lines that are not JSON-RPC to stdout: {stray:?}"
                );
                response
            }
            Err(mpsc::RecvTimeoutError::Timeout) => panic!(
                "no answer to request {} within {ANSWER_WITHIN:?}\n{}",
                self.id,
                server.stderr()
            ),
            Err(mpsc::RecvTimeoutError::Disconnected) => panic!(
                "dsh serve closed stdout before answering request {}\n{}",
                self.id,
                server.stderr()
            ),
        }
    }

    /// The answer as a tool result.
    pub fn reply(self, server: &McpServer) -> ToolReply {
        ToolReply::from_response(self.wait(server))
    }
}
