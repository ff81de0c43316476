//! The session event log: `tool/call` before execution, `tool/result` after, for every
//! call, rejected ones included.

use crate::support::Env;

#[test]
fn every_call_has_a_call_event_then_a_result_event() {
    let env = Env::new();
    env.call("bash", r#"{"command":"echo ok","description":"ok"}"#);
    env.call("bash", r#"{"command":"echo missing description"}"#);
    env.call("no_such_tool", "{}");
    let events = env.events();
    assert_eq!(events.len(), 6, "{events:#?}");
    for pair in events.chunks(2) {
        assert_eq!(pair[0]["event"], "tool/call");
        assert_eq!(pair[1]["event"], "tool/result");
        assert_eq!(pair[0]["call_id"], pair[1]["call_id"]);
        assert_eq!(pair[0]["owner"], "cli");
        assert!(pair[0]["ts_ms"].as_u64() <= pair[1]["ts_ms"].as_u64());
    }
    assert_eq!(events[0]["tool"], "bash");
    assert_eq!(events[1]["is_error"], false);
    assert_eq!(events[3]["code"], "INVALID_ARGUMENTS");
    assert_eq!(events[4]["tool"], "no_such_tool");
    assert_eq!(events[5]["code"], "UNKNOWN_TOOL");
}

#[test]
fn the_call_event_is_written_before_the_command_runs() {
    let env = Env::new();
    // The command reads the event log while it runs: its own tool/call is already there.
    let log_glob = format!("{}/sessions/*/events.jsonl", env.state_dir().display());
    let args =
        serde_json::json!({ "command": format!("cat {log_glob}"), "description": "read log" });
    let out = env.call("bash", &args.to_string());
    assert!(
        out.content.contains("\"event\":\"tool/call\""),
        "{}",
        out.content
    );
    assert!(
        !out.content.contains("\"event\":\"tool/result\""),
        "{}",
        out.content
    );
}

#[test]
fn dsh_stats_reads_the_latest_session_or_the_one_named() {
    let env = Env::new();
    let stats = |session: Option<&str>| -> serde_json::Value {
        let mut command = env.dsh();
        command.args(["stats", "--json"]);
        if let Some(session) = session {
            command.args(["--session", session]);
        }
        let output = command.output().unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_slice(&output.stdout).unwrap()
    };
    let echo = r#"{"command":"echo hi","description":"d"}"#;
    env.call("bash", echo);
    let sessions = || -> Vec<String> {
        let mut ids: Vec<String> = std::fs::read_dir(env.state_dir().join("sessions"))
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        ids.sort();
        ids
    };
    let first = sessions().pop().unwrap();
    env.call("bash", r#"{"command":"exit 3","description":"d"}"#);
    env.call("bash", r#"{"command":"exit 4","description":"d"}"#);
    // Each `dsh call` is its own session: the latest has one call.
    let latest = stats(None);
    let last = sessions().pop().unwrap();
    assert_ne!(last, first);
    assert_eq!(
        latest["origin"],
        format!("session {last} (from its event log)")
    );
    assert_eq!(latest["tools"]["bash"]["calls"], 1, "{latest}");
    let named = stats(Some(&first));
    assert_eq!(
        named["origin"],
        format!("session {first} (from its event log)")
    );
    assert_eq!(named["tools"]["bash"]["calls"], 1, "{named}");
    assert_eq!(
        named["tools"]["bash"]["errors"],
        serde_json::json!({}),
        "{named}"
    );
    // A session that is not there is an error naming it.
    let output = env
        .dsh()
        .args(["stats", "--session", "s-no-such-session"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("s-no-such-session"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
