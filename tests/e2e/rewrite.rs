//! Guard rewrite verdicts (contract 0.2.0): a guard that rewrites `timeoutMs` to a cap
//! makes the tool run the capped call, the rewrite is a `tool/rewrite` event and the next
//! guard sees the rewritten call; a rewrite that breaks the tool's schema (or is not a
//! JSON object) is refused, `DENIED` naming the guard; a deny after a rewrite is final.
//! The guards are `test_guard` under several names, configured by their settings.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::{unique_marker, Env};

fn setup(guards: &[&str]) -> Env {
    let env = Env::new();
    let plugins: Vec<(&str, &str)> = guards.iter().map(|name| (*name, "test_guard")).collect();
    env.add_plugins(&plugins);
    env
}

fn events_named<'a>(events: &'a [Value], name: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["event"] == name).collect()
}

const CAP: &str = r#"
[plugins.cap_timeout.settings]
tools = "bash"
rewrite = { timeoutMs = 1000 }
"#;

#[test]
fn a_guard_rewrites_timeout_ms_to_a_cap_and_the_tool_runs_the_capped_call() {
    let env = setup(&["cap_timeout"]);
    let config = format!("[pipeline]\nguards = [\"cap_timeout\"]\n{CAP}");
    let marker = unique_marker();
    let trace = env.dir.path().join("ran");
    let command = format!(
        "touch {}; sleep 30.{marker}; echo finished",
        trace.display()
    );
    let started = Instant::now();
    let result = env.call_configured(
        &config,
        "bash",
        &json!({ "command": command, "description": "slow", "timeoutMs": 600000 }),
        &[],
    );
    let took = started.elapsed();
    assert!(trace.exists(), "the rewritten call runs: {result:?}");
    assert_eq!(result.code.as_deref(), Some("TIMEOUT"), "{result:?}");
    assert!(
        result.message.contains("timed out after 1000 ms"),
        "the tool ran the capped timeout: {result:?}"
    );
    assert!(took < Duration::from_secs(20), "took {took:?}");

    let events = env.events();
    let calls = events_named(&events, "tool/call");
    assert_eq!(calls[0]["args"]["timeoutMs"], 600000, "the call as sent");
    let rewrites = events_named(&events, "tool/rewrite");
    assert_eq!(rewrites.len(), 1, "{events:?}");
    assert_eq!(rewrites[0]["guard"], "cap_timeout");
    assert_eq!(rewrites[0]["tool"], "bash");
    assert_eq!(rewrites[0]["call_id"], calls[0]["call_id"]);
    assert_eq!(rewrites[0]["args"]["timeoutMs"], 1000);
    assert_eq!(
        rewrites[0]["args"]["command"],
        command.as_str(),
        "the rest stands"
    );
}

#[test]
fn the_next_guard_sees_the_rewritten_call_and_its_deny_is_final() {
    let env = setup(&["cap_timeout", "deny_capped", "allow_last"]);
    let config = format!(
        r#"[pipeline]
guards = ["cap_timeout", "deny_capped", "allow_last"]
{CAP}
[plugins.deny_capped.settings]
verdict = "deny"
args_contain = '"timeoutMs":1000'
reason = "saw the capped call"
[plugins.allow_last.settings]
verdict = "allow"
"#
    );
    let trace = env.dir.path().join("ran");
    let command = format!("touch {}", trace.display());
    let denied = env.call_configured(
        &config,
        "bash",
        &json!({ "command": command, "description": "d", "timeoutMs": 600000 }),
        &[],
    );
    assert_eq!(denied.code.as_deref(), Some("DENIED"), "{denied:?}");
    assert_eq!(
        denied.message, "denied by guard deny_capped: saw the capped call",
        "the second guard saw timeoutMs 1000, not 600000"
    );
    assert!(
        !trace.exists(),
        "a call denied after a rewrite starts nothing"
    );
    let events = env.events();
    assert_eq!(events_named(&events, "tool/rewrite").len(), 1);
    let result = events_named(&events, "tool/result")[0];
    assert_eq!(result["code"], "DENIED");
    assert_eq!(result["attempts"], 0, "the tool never ran");

    // Without the rewrite, the same guard lets the call through: it saw the rewrite.
    let config = config.replace(r#""cap_timeout", "#, "");
    let allowed = env.call_configured(
        &config,
        "bash",
        &json!({ "command": "echo ran", "description": "d", "timeoutMs": 600000 }),
        &[],
    );
    assert_eq!(allowed.code, None, "{allowed:?}");
}

#[test]
fn a_rewrite_that_breaks_the_schema_or_is_no_object_is_denied_naming_the_guard() {
    let env = setup(&["bad_rewrite", "not_object"]);
    let trace = env.dir.path().join("ran");
    let args = json!({ "command": format!("touch {}", trace.display()), "description": "d" });
    let config = r#"[pipeline]
guards = ["bad_rewrite"]
[plugins.bad_rewrite.settings]
rewrite = { timeoutMs = "soon" }
"#;
    let denied = env.call_configured(config, "bash", &args, &[]);
    assert_eq!(denied.code.as_deref(), Some("DENIED"), "{denied:?}");
    assert!(
        denied.message.starts_with(
            "guard bad_rewrite rewrote the arguments of bash, and the rewrite is refused"
        ),
        "{denied:?}"
    );
    assert!(
        denied.message.contains("/timeoutMs"),
        "names the schema error: {denied:?}"
    );

    let config = r#"[pipeline]
guards = ["not_object"]
[plugins.not_object.settings]
rewrite_raw = "[1, 2]"
"#;
    let denied = env.call_configured(config, "bash", &args, &[]);
    assert_eq!(denied.code.as_deref(), Some("DENIED"), "{denied:?}");
    assert!(
        denied.message.contains("guard not_object") && denied.message.contains("not a JSON object"),
        "{denied:?}"
    );
    assert!(!trace.exists(), "a refused rewrite starts nothing");
    let events = env.events();
    assert!(
        events_named(&events, "tool/rewrite").is_empty(),
        "a refused rewrite is not logged as one: {events:?}"
    );
}
