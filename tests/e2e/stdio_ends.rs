//! `dsh serve` on stdio ends cleanly whatever its stdin and stdout are — a socketpair (as
//! Node and Bun clients give them), a pipe, a terminal — on SIGINT, SIGTERM, SIGHUP and on
//! the end of its input, with what it started killed; and a cold start (an empty state
//! directory) answers `initialize` and then a `tools/list` that holds every embedded tool.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::{plugins_listed, survivors, unique_marker, Env};

/// What stdin and stdout are.
#[derive(Debug, Clone, Copy)]
enum Stream {
    Socketpair,
    Pipe,
    Terminal,
}

/// How the server is told to end.
#[derive(Debug, Clone, Copy)]
enum Ending {
    Signal(i32),
    InputClosed,
}

/// A `dsh serve` and the client's ends of its stdin and stdout.
struct Served {
    child: Child,
    to_server: Option<std::fs::File>,
    from_server: BufReader<std::fs::File>,
}

impl Served {
    fn start(env: &Env, stream: Stream) -> Served {
        Served::start_command(env.dsh(), stream)
    }

    /// `command serve` with stdin and stdout of kind `stream`.
    fn start_command(mut command: std::process::Command, stream: Stream) -> Served {
        command.arg("serve").stderr(Stdio::null());
        let (to_server, from_server) = match stream {
            Stream::Socketpair => {
                let (input_ours, input_theirs) = std::os::unix::net::UnixStream::pair().unwrap();
                let (output_ours, output_theirs) = std::os::unix::net::UnixStream::pair().unwrap();
                command
                    .stdin(OwnedFd::from(input_theirs))
                    .stdout(OwnedFd::from(output_theirs));
                (
                    std::fs::File::from(OwnedFd::from(input_ours)),
                    std::fs::File::from(OwnedFd::from(output_ours)),
                )
            }
            Stream::Pipe => {
                let (input_read, input_write) = std::io::pipe().unwrap();
                let (output_read, output_write) = std::io::pipe().unwrap();
                command.stdin(input_read).stdout(output_write);
                (
                    std::fs::File::from(OwnedFd::from(input_write)),
                    std::fs::File::from(OwnedFd::from(output_read)),
                )
            }
            Stream::Terminal => {
                let (master, slave) = raw_pty();
                let slave_again = slave.try_clone().unwrap();
                command.stdin(slave).stdout(slave_again);
                let master = std::fs::File::from(master);
                (master.try_clone().unwrap(), master)
            }
        };
        let child = command.spawn().unwrap();
        // The command's copies of the server's ends are closed with it (Stdio took them).
        drop(command);
        Served {
            child,
            to_server: Some(to_server),
            from_server: BufReader::new(from_server),
        }
    }

    fn send(&mut self, message: Value) {
        let writer = self.to_server.as_mut().unwrap();
        writeln!(writer, "{message}").unwrap();
        writer.flush().unwrap();
    }

    /// The answer to request `id` (notifications before it are skipped).
    fn answer(&mut self, id: u64) -> Value {
        loop {
            let mut line = String::new();
            assert!(
                self.from_server.read_line(&mut line).unwrap() > 0,
                "the server closed its output before answering {id}"
            );
            let value: Value = serde_json::from_str(line.trim()).unwrap_or(Value::Null);
            if value["id"] == id {
                return value;
            }
        }
    }

    fn initialize(&mut self) -> Value {
        self.send(
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "e2e", "version": "1"}}}),
        );
        let answer = self.answer(1);
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        answer
    }

    fn end(&mut self, ending: Ending) {
        match ending {
            // SAFETY: signalling our own child.
            Ending::Signal(signal) => unsafe {
                libc::kill(self.child.id() as i32, signal);
            },
            Ending::InputClosed => {
                drop(self.to_server.take());
                // A terminal ends when its master closes: the reading end too.
                self.from_server = BufReader::new(std::fs::File::open("/dev/null").unwrap());
            }
        }
    }

    /// How long the server took to exit after `since` (None: still running after 3 s).
    fn exited_within(&mut self, since: Instant) -> Option<Duration> {
        while since.elapsed() < Duration::from_secs(3) {
            if self.child.try_wait().unwrap().is_some() {
                return Some(since.elapsed());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        None
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A PTY pair with the slave in raw mode (no echo, no newline translation): JSON-RPC
/// lines pass as they are. Both ends are close-on-exec: the master must close when the
/// test closes it, so the server may not inherit it.
fn raw_pty() -> (OwnedFd, OwnedFd) {
    let pty = crate::support::open_pty();
    // SAFETY: termios is plain data filled by tcgetattr on a descriptor the value owns.
    unsafe {
        let mut termios: libc::termios = std::mem::zeroed();
        assert_eq!(libc::tcgetattr(pty.slave.as_raw_fd(), &mut termios), 0);
        libc::cfmakeraw(&mut termios);
        assert_eq!(
            libc::tcsetattr(pty.slave.as_raw_fd(), libc::TCSANOW, &termios),
            0
        );
    }
    (pty.master, pty.slave)
}

/// The longest a server may take to end; the clients' own patience is a few hundred
/// milliseconds before they escalate (measured times are printed).
const ENDS_WITHIN: Duration = Duration::from_millis(500);

fn ends_cleanly(stream: Stream, endings: &[Ending]) {
    let env = Env::new();
    for &ending in endings {
        let mut served = Served::start(&env, stream);
        served.initialize();
        let marker = unique_marker();
        served.send(
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "bash", "arguments": {"command": format!("sleep 9{marker}"),
            "description": "outlive the server", "run_in_background": true}}}),
        );
        let started = served.answer(2);
        assert_eq!(started["result"]["isError"], false, "{stream:?}: {started}");
        let running = Instant::now();
        while crate::support::processes_with(&marker).is_empty() {
            assert!(
                running.elapsed() < Duration::from_secs(5),
                "{stream:?}: the job is not running"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let since = Instant::now();
        served.end(ending);
        let took = served.exited_within(since);
        eprintln!("{stream:?} {ending:?}: ended in {took:?}");
        assert!(
            took.is_some_and(|t| t <= ENDS_WITHIN),
            "{stream:?}: dsh serve was still running {took:?} after {ending:?}"
        );
        assert_eq!(
            survivors(&marker, Duration::from_millis(1500)),
            Vec::<String>::new(),
            "{stream:?} {ending:?}: the job outlived dsh"
        );
    }
}

const EVERY_ENDING: &[Ending] = &[
    Ending::Signal(libc::SIGINT),
    Ending::Signal(libc::SIGTERM),
    Ending::Signal(libc::SIGHUP),
    Ending::InputClosed,
];

#[test]
fn over_a_socketpair_a_signal_or_the_end_of_input_ends_dsh_serve_and_its_jobs() {
    ends_cleanly(Stream::Socketpair, EVERY_ENDING);
}

#[test]
fn over_a_pipe_a_signal_or_the_end_of_input_ends_dsh_serve_and_its_jobs() {
    ends_cleanly(Stream::Pipe, EVERY_ENDING);
}

#[test]
fn on_a_terminal_a_signal_or_a_hangup_ends_dsh_serve_and_its_jobs() {
    // A terminal's input ends when its master closes: the server reads EOF or EIO.
    ends_cleanly(Stream::Terminal, EVERY_ENDING);
}

#[test]
fn a_cold_start_answers_initialize_and_then_lists_every_embedded_tool() {
    // An empty state directory: nothing compiled yet.
    let env = Env::new();
    let mut served = Served::start(&env, Stream::Pipe);
    let answer = served.initialize();
    assert_eq!(answer["result"]["serverInfo"]["name"], "dsh", "{answer}");
    served.send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
    let listed = served.answer(2);
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{listed}"))
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    // Every embedded tool plugin's tools (the same list `dsh tools` gives once warm).
    let warm = env.dsh().args(["tools", "--json"]).output().unwrap();
    let expected: Vec<Value> = serde_json::from_slice(&warm.stdout).unwrap();
    let mut expected: Vec<&str> = expected.iter().filter_map(|t| t["name"].as_str()).collect();
    expected.sort();
    let mut names = names.clone();
    names.sort();
    assert_eq!(names, expected, "the first tools/list is the whole catalog");
    for tool in ["bash", "job_list", "terminal_open", "lsp"] {
        assert!(names.contains(&tool), "{tool} missing from {names:?}");
    }
    // And a call works at once.
    served.send(
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "bash", "arguments": {"command": "echo cold", "description": "x"}}}),
    );
    let called = served.answer(3);
    assert!(
        called["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("cold\n")),
        "{called}"
    );
}

#[test]
fn with_dev_null_as_stdin_dsh_serve_ends_at_once_and_writes_nothing_but_json_rpc() {
    let env = Env::new();
    let started = Instant::now();
    let output = env
        .dsh()
        .arg("serve")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .unwrap();
    eprintln!("ended in {:?}", started.elapsed());
    assert!(output.status.success(), "{output:?}");
    // No request came: nothing at all on stdout, which is the protocol's.
    assert_eq!(String::from_utf8_lossy(&output.stdout), "");
}

#[test]
fn a_plugin_whose_describe_spins_delays_only_its_own_tools() {
    let env = Env::new();
    // First in name order, so loading one after another would put echo behind it.
    env.add_plugins(&[("aaa_spins", "spin_describe"), ("echo", "echo")]);
    let command = env.dsh_configured("[plugins.aaa_spins]\ncpu_ms = 5000\n");
    let mut served = Served::start_command(command, Stream::Pipe);
    served.initialize();
    served.send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "echo", "arguments": {"text": "served meanwhile"}}}),
    );
    let echoed = served.answer(2);
    assert_eq!(
        echoed["result"]["content"][0]["text"], "served meanwhile",
        "{echoed}"
    );
    // echo answered while the spinning plugin was still loading: it is not refused yet.
    let spinner = |plugins: &[Value]| plugins.iter().find(|p| p["name"] == "aaa_spins").cloned();
    let now = spinner(&plugins_listed(env.dsh()));
    assert!(
        now.as_ref().is_none_or(|p| p["status"] != "refused"),
        "echo waited for the spinning plugin: {now:?}"
    );
    // It is refused at its CPU budget, naming it, and echo keeps serving.
    let deadline = Instant::now() + Duration::from_secs(30);
    let refused = loop {
        if let Some(p) = spinner(&plugins_listed(env.dsh())).filter(|p| p["status"] == "refused") {
            break p;
        }
        assert!(
            Instant::now() < deadline,
            "the spinning plugin was never refused"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        refused.to_string().contains("CPU"),
        "the refusal names the CPU budget: {refused}"
    );
    served.send(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}));
    let listed = served.answer(3);
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        names.contains(&"echo") && names.contains(&"bash"),
        "{names:?}"
    );
}

impl Served {
    /// Writes `line` and a newline as they are (not necessarily JSON).
    fn send_raw(&mut self, line: &[u8]) {
        let writer = self.to_server.as_mut().unwrap();
        writer.write_all(line).unwrap();
        writer.write_all(b"\n").unwrap();
        writer.flush().unwrap();
    }

    /// Sends `ping` with id `id` and returns the responses (lines with an `id` and no
    /// `method`) that came before its answer; the ping must be answered.
    fn responses_before_ping(&mut self, id: u64) -> Vec<Value> {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": "ping"}));
        let mut before = Vec::new();
        loop {
            let mut line = String::new();
            assert!(
                self.from_server.read_line(&mut line).unwrap() > 0,
                "the server closed its output before answering the ping {id}"
            );
            let value: Value = serde_json::from_str(line.trim())
                .unwrap_or_else(|e| panic!("the server wrote a line that is not JSON ({e})"));
            if value["id"] == id {
                assert_eq!(value["result"], json!({}), "{value}");
                return before;
            }
            if value.get("id").is_some() && value.get("method").is_none() {
                before.push(value);
            }
        }
    }
}

/// `[[[…]]]` nested `depth` deep.
fn nested_arrays(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

#[test]
fn a_tools_call_nested_100000_deep_gets_a_parse_error_with_its_id_and_a_ping_after_it_is_answered()
{
    let env = Env::new();
    let mut served = Served::start(&env, Stream::Pipe);
    served.initialize();
    let deep = format!(
        r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"bash","arguments":{{"command":{},"description":"deep"}}}}}}"#,
        nested_arrays(100_000)
    );
    served.send_raw(deep.as_bytes());
    let before = served.responses_before_ping(3);
    assert_eq!(before.len(), 1, "{before:?}");
    assert_eq!(before[0]["id"], 2, "{}", before[0]);
    assert_eq!(before[0]["error"]["code"], -32700, "{}", before[0]);
    let message = before[0]["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("recursion limit"), "{message}");
}

#[test]
fn a_20_mb_line_gets_the_size_error_with_its_id_and_a_ping_after_it_is_answered() {
    let env = Env::new();
    let mut served = Served::start(&env, Stream::Pipe);
    served.initialize();
    let long = format!(
        r#"{{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{{"name":"bash","arguments":{{"command":"echo {}","description":"long"}}}}}}"#,
        "x".repeat(20_000_000)
    );
    served.send_raw(long.as_bytes());
    let before = served.responses_before_ping(5);
    assert_eq!(before.len(), 1, "{before:?}");
    let error = &before[0];
    assert_eq!(error["id"], 4, "{error}");
    assert_eq!(error["error"]["code"], -32600, "{error}");
    assert_eq!(
        error["error"]["data"]["max_message_bytes"],
        16 << 20,
        "{error}"
    );
    let message = error["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("16777216") && message.contains("stdio_max_message_bytes"),
        "the error names the limit: {message}"
    );
}

#[test]
fn a_line_of_garbage_gets_a_parse_error_with_id_null_and_a_ping_after_it_is_answered() {
    let env = Env::new();
    let mut served = Served::start(&env, Stream::Pipe);
    served.initialize();
    served.send_raw(b"this is not JSON {]");
    let before = served.responses_before_ping(2);
    assert_eq!(before.len(), 1, "{before:?}");
    assert_eq!(before[0]["id"], Value::Null, "{}", before[0]);
    assert_eq!(before[0]["error"]["code"], -32700, "{}", before[0]);
}

#[test]
fn json_that_is_no_message_gets_invalid_request_with_its_id_and_a_ping_after_it_is_answered() {
    let env = Env::new();
    let mut served = Served::start(&env, Stream::Pipe);
    served.initialize();
    // A request whose method is no string, then a JSON value that is no object at all.
    served.send_raw(br#"{"jsonrpc":"2.0","id":7,"method":12}"#);
    served.send_raw(b"[1,2,3]");
    let before = served.responses_before_ping(2);
    assert_eq!(before.len(), 2, "{before:?}");
    assert_eq!(before[0]["id"], 7, "{}", before[0]);
    assert_eq!(before[0]["error"]["code"], -32600, "{}", before[0]);
    assert_eq!(before[1]["id"], Value::Null, "{}", before[1]);
    assert_eq!(before[1]["error"]["code"], -32600, "{}", before[1]);
}

#[test]
fn a_notification_that_fails_to_parse_gets_no_answer_and_a_ping_after_it_is_answered() {
    let env = Env::new();
    let mut served = Served::start(&env, Stream::Pipe);
    served.initialize();
    let deep = format!(
        r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":1,"reason":{}}}}}"#,
        nested_arrays(100_000)
    );
    served.send_raw(deep.as_bytes());
    // Garbage after it: its parse error is the only answer before the ping's.
    served.send_raw(b"garbage");
    let before = served.responses_before_ping(2);
    assert_eq!(before.len(), 1, "only the garbage is answered: {before:?}");
    assert_eq!(before[0]["id"], Value::Null, "{}", before[0]);
    assert_eq!(before[0]["error"]["code"], -32700, "{}", before[0]);
}
