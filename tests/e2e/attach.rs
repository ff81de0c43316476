//! `dsh attach` from a real terminal (tmux's, on a private socket): a person watches an
//! agent's terminal session, detaches leaving it running, types into it (the agent's
//! sends refused meanwhile, the session at the person's size), hands it back, and sees
//! it exit; `--list` lists it; a command the agent runs may neither list nor attach.

use std::process::{Command, Output};
use std::time::Duration;

use serde_json::{json, Value};

use crate::mcp_stdio::McpServer;
use crate::support::{skipped, unique_marker, wait_for, Env};

/// How long a screen may take to show what is expected.
const SHOWN_WITHIN: Duration = Duration::from_secs(30);

/// A tmux server of this test's own (`tmux -L`), killed when dropped.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn start() -> Option<Tmux> {
        let found = Command::new("tmux").arg("-V").output();
        if !found.is_ok_and(|o| o.status.success()) {
            skipped("tmux is not installed");
            return None;
        }
        Some(Tmux {
            socket: format!("dsh-attach-{}", unique_marker()),
        })
    }

    fn run(&self, args: &[&str]) -> Output {
        let output = Command::new("tmux")
            .args(["-L", &self.socket, "-f", "/dev/null"])
            .args(args)
            .env_remove("TMUX")
            .env("TERM", "xterm-256color")
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        output
    }

    /// A window of 100×30 running `sh`, named `name`.
    fn window(&self, name: &str) {
        self.run(&[
            "new-session",
            "-d",
            "-s",
            name,
            "-x",
            "100",
            "-y",
            "30",
            "/bin/sh",
        ]);
    }

    /// Types `line` and Enter in window `name`.
    fn type_line(&self, name: &str, line: &str) {
        self.run(&["send-keys", "-t", name, "-l", line]);
        self.run(&["send-keys", "-t", name, "Enter"]);
    }

    fn screen(&self, name: &str) -> String {
        let output = self.run(&["capture-pane", "-p", "-t", name]);
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Waits for window `name` to show what `shown` accepts; its screen.
    fn wait_screen(&self, name: &str, what: &str, shown: impl Fn(&str) -> bool) -> String {
        let mut screen = String::new();
        let came = wait_for(SHOWN_WITHIN, || {
            screen = self.screen(name);
            shown(&screen)
        });
        assert!(came, "window {name} never showed {what}:\n{screen}");
        screen
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .output();
    }
}

/// `dsh attach ARGS` as typed in a window: this environment's state directory.
fn attach_line(env: &Env, args: &str) -> String {
    format!(
        "'{}' --state-dir '{}' attach {args}",
        env!("CARGO_BIN_EXE_dsh"),
        env.state_dir().display()
    )
}

/// `dsh attach --list --json` run by the test, parsed.
fn listed(env: &Env) -> Vec<Value> {
    let output = env
        .dsh()
        .args(["attach", "--list", "--json"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    serde_json::from_slice::<Value>(&output.stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

/// What the agent's send printed (its text), the send having succeeded.
fn agent_sends(server: &McpServer, term: &str, input: &str, pattern: &str) -> String {
    server.call_ok(
        "terminal_send",
        json!({"id": term, "input": input, "wait": {"pattern": pattern, "timeout_ms": 20000}}),
    )
}

#[test]
fn a_person_watches_types_into_and_hands_back_an_agents_terminal() {
    let Some(tmux) = Tmux::start() else { return };
    let env = Env::new();
    let server = McpServer::start(&env, "");
    let pid = server.pid();
    let opened = server.call_ok("terminal_open", json!({"cols": 120, "rows": 40}));
    let term = opened
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .find(|word| word.starts_with("term-"))
        .unwrap_or_else(|| panic!("no session id in {opened:?}"))
        .to_string();
    agent_sends(&server, &term, "python3 -q", ">>> $");

    // The list: the session, its size, nobody holding it.
    let sessions = listed(&env);
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    let session = &sessions[0];
    assert_eq!(session["server"], pid);
    assert_eq!(session["owner"], "stdio");
    assert_eq!(session["id"], term.as_str());
    assert_eq!(
        (session["cols"].as_u64(), session["rows"].as_u64()),
        (Some(120), Some(40))
    );
    assert_eq!(session["alive"], true);
    assert!(session["held_by"].is_null(), "{session}");
    let table = env.dsh().args(["attach", "--list"]).output().unwrap();
    let table = String::from_utf8_lossy(&table.stdout).into_owned();
    assert!(
        table.contains(&format!("{pid}"))
            && table.contains(&format!("stdio/{term}"))
            && table.contains("120×40")
            && table.contains("alive"),
        "{table}"
    );

    // Read-only: the screen (the REPL's prompt), then what the agent does, live.
    tmux.window("watch");
    tmux.type_line(
        "watch",
        &attach_line(&env, &format!("--pid {pid} stdio/{term}")),
    );
    tmux.wait_screen("watch", "the REPL's prompt", |s| s.contains(">>>"));
    agent_sends(&server, &term, "print('agent-' + 'after')", "agent-after");
    tmux.wait_screen("watch", "the agent's output", |s| s.contains("agent-after"));
    assert!(
        listed(&env)[0]["held_by"].is_null(),
        "a watcher holds nothing"
    );
    // Keys are not typed into the session by a watcher.
    tmux.type_line("watch", "print('watcher-' + 'typed')");
    std::thread::sleep(Duration::from_millis(300));
    // Detach: the session runs on, the agent's sends work.
    tmux.run(&["send-keys", "-t", "watch", "C-]"]);
    tmux.wait_screen("watch", "the detach note", |s| {
        s.contains(&format!("[detached from stdio/{term}]"))
    });
    let said = agent_sends(&server, &term, "print(1 + 1)", r"(?m)^2\s*$");
    assert!(!said.contains("watcher-typed"), "{said}");

    // Writing (a bare id: one owner has it): the session takes the window's size and is
    // held; what is typed runs; the agent is refused meanwhile.
    tmux.window("type");
    tmux.type_line(
        "type",
        &attach_line(&env, &format!("--write --pid {pid} {term}")),
    );
    tmux.wait_screen("type", "the REPL's prompt", |s| s.contains(">>>"));
    let held = &listed(&env)[0];
    assert!(
        held["held_by"]
            .as_str()
            .is_some_and(|by| by.starts_with("attach (pid ")),
        "{held}"
    );
    assert_eq!(
        (held["cols"].as_u64(), held["rows"].as_u64()),
        (Some(100), Some(30))
    );
    // The window resized: the session follows (SIGWINCH).
    tmux.run(&["resize-window", "-t", "type", "-x", "90", "-y", "25"]);
    let followed = wait_for(Duration::from_secs(10), || {
        let now = &listed(&env)[0];
        (now["cols"].as_u64(), now["rows"].as_u64()) == (Some(90), Some(25))
    });
    assert!(followed, "{:?}", listed(&env));
    tmux.type_line("type", "print(6*7)");
    tmux.wait_screen("type", "what the person typed, run", |s| {
        s.lines().any(|line| line.trim() == "42")
    });
    let refused = server.call(
        "terminal_send",
        json!({"id": term, "input": "print('agent-' + 'refused')", "wait": {"timeout_ms": 2000}}),
    );
    assert!(refused.is_error, "{refused:?}");
    assert_eq!(
        refused.code.as_deref(),
        Some("TERMINAL_HELD"),
        "{refused:?}"
    );
    tmux.run(&["send-keys", "-t", "type", "C-]"]);
    tmux.wait_screen("type", "the detach note", |s| {
        s.contains(&format!("[detached from stdio/{term}]"))
    });
    // Handed back: the agent's sends work, at the session's own size.
    assert!(wait_for(Duration::from_secs(5), || listed(&env)[0]
        ["held_by"]
        .is_null()));
    let back = &listed(&env)[0];
    assert_eq!(
        (back["cols"].as_u64(), back["rows"].as_u64()),
        (Some(120), Some(40))
    );
    let said = agent_sends(&server, &term, "print('free-' + 'again')", "free-again");
    assert!(!said.contains("agent-refused"), "{said}");

    // A command the agent runs may neither list the terminals nor attach to one.
    for args in ["--list".to_string(), format!("--pid {pid} stdio/{term}")] {
        let command = format!("{} </dev/null; echo rc=$?", attach_line(&env, &args));
        let ran = server.call_ok("bash", json!({"command": command, "description": "attach"}));
        assert!(
            ran.contains("refused") && !ran.contains("rc=0"),
            "{args}: {ran}"
        );
    }
    // Nor may it have got hold of the session.
    assert!(listed(&env)[0]["held_by"].is_null());

    // Watching a session to its end: the exit note, with the shell's code.
    tmux.window("end");
    tmux.type_line("end", &attach_line(&env, &format!("stdio/{term}")));
    tmux.wait_screen("end", "the REPL's prompt", |s| s.contains(">>>"));
    agent_sends(&server, &term, "exit()", r"\$ $");
    let _ = server.call(
        "terminal_send",
        json!({"id": term, "input": "exit 3", "wait": {"timeout_ms": 10000}}),
    );
    tmux.wait_screen("end", "the exit note", |s| {
        s.contains(&format!("[{term} exited with code 3]"))
    });
}
