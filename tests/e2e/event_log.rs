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
