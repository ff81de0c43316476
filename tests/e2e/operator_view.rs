//! What an operator sees of dsh itself: the example configuration loads as it is, and
//! the log on stderr is plain text when stderr is not a terminal.

use std::path::Path;

use crate::support::Env;

/// `examples/dsh.toml` is a configuration dsh runs with (that it shows every section and
/// key is checked by a unit test of `config`).
#[test]
fn the_example_config_loads() {
    let env = Env::new();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/dsh.toml");
    let output = env
        .dsh()
        .arg("--config")
        .arg(&example)
        .args(["tools", "--json"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let tools: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let names = tools.to_string();
    assert!(
        names.contains("\"bash\"") && names.contains("\"lsp\""),
        "{names}"
    );
}

/// The log on a pipe (or in a file) has no ANSI colour codes; neither has it with
/// `NO_COLOR` set.
#[test]
fn the_log_on_a_pipe_has_no_colour_codes() {
    let env = Env::new();
    for no_color in [None, Some("1")] {
        let mut command = env.dsh();
        command
            .env("RUST_LOG", "dsh=info")
            .env_remove("NO_COLOR")
            .args(["call", "bash", r#"{"command":"echo hi","description":"d"}"#])
            .stdin(std::process::Stdio::null());
        if let Some(value) = no_color {
            command.env("NO_COLOR", value);
        }
        let output = command.output().unwrap();
        assert!(output.status.success(), "{output:?}");
        let log = String::from_utf8_lossy(&output.stderr);
        assert!(log.contains("INFO"), "info lines are logged: {log}");
        assert!(!output.stderr.contains(&0x1b), "an ESC byte in: {log:?}");
    }
}

/// With stderr on a terminal (so the log is coloured) and the most verbose log, `dsh
/// serve`'s stdout carries JSON-RPC messages only, a call's included; the log, colour and
/// all, is on the terminal.
#[test]
fn with_a_coloured_log_on_a_terminal_stdout_carries_only_json_rpc() {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::os::fd::AsFd;
    let env = Env::new();
    let pty = crate::support::open_pty();
    let mut child = env
        .dsh()
        .env("RUST_LOG", "debug")
        .env_remove("NO_COLOR")
        .arg("serve")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(pty.slave.as_fd().try_clone_to_owned().unwrap())
        .spawn()
        .unwrap();
    drop(pty.slave);
    let mut stdin = child.stdin.take().unwrap();
    for message in [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"bash","arguments":{"command":"echo logged-call","description":"d"}}}"#,
    ] {
        writeln!(stdin, "{message}").unwrap();
    }
    // The terminal's side is read as it comes (a full PTY buffer would block the log).
    let mut master = std::fs::File::from(pty.master);
    let log = std::thread::spawn(move || {
        let mut log = Vec::new();
        let mut chunk = [0u8; 65536];
        while let Ok(n) = master.read(&mut chunk) {
            if n == 0 {
                break;
            }
            log.extend_from_slice(&chunk[..n]);
        }
        log
    });
    let mut lines = Vec::new();
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        let message: serde_json::Value = serde_json::from_str(&line)
            .unwrap_or_else(|_| panic!("a line on stdout that is not JSON: {line:?}"));
        assert_eq!(message["jsonrpc"], "2.0", "{line}");
        let answered_call = message["id"] == 3;
        lines.push(line);
        if answered_call {
            break;
        }
    }
    drop(stdin);
    assert!(child.wait().unwrap().success());
    let log = log.join().unwrap();
    let last = lines.last().unwrap();
    assert!(last.contains("logged-call"), "{last}");
    let text = String::from_utf8_lossy(&log);
    assert!(
        log.contains(&0x1b),
        "the terminal's log is coloured: {text}"
    );
    assert!(text.contains("DEBUG") && text.contains("INFO"), "{text}");
}
