//! The versioned plugin contract: components built against the frozen `dsh:plugin@0.1.0`
//! (the committed fixtures in `tests/fixtures/v0.1.0/`: the `echo` tool, `test_guard`
//! and `redact_secrets`) load from a plugin directory and behave as before beside 0.2.0
//! plugins in one `dsh serve`; hot-replacing a 0.1.0 plugin by its 0.2.0 build keeps
//! serving; a component of a version this dsh does not serve is refused, naming the
//! versions it serves.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::mcp_stdio::McpServer;
use crate::support::{built_plugin, plugins_listed, with_bytes_replaced, Env};

/// A committed component built against contract 0.1.0.
fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/v0.1.0")
        .join(format!("{name}.wasm"))
}

/// Copies `from` into the plugin directory as `NAME.wasm`.
fn install(env: &Env, name: &str, from: &Path) {
    std::fs::create_dir_all(env.plugins_dir()).unwrap();
    std::fs::copy(from, env.plugins_dir().join(format!("{name}.wasm"))).unwrap();
}

/// `dsh plugins --json` of the running server: every plugin's status.
fn statuses(env: &Env) -> Vec<Value> {
    plugins_listed(env.dsh())
}

fn status_of(plugins: &[Value], name: &str) -> Value {
    plugins
        .iter()
        .find(|p| p["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("{name} is not listed: {plugins:?}"))
}

const SECRET: &str = "AKIAIOSFODNN7EXAMPLE";

#[test]
fn the_0_1_0_tool_guard_and_filter_serve_beside_0_2_0_plugins_in_one_serve() {
    let env = Env::new();
    install(&env, "echo", &fixture("echo"));
    install(&env, "old_guard", &fixture("test_guard"));
    install(&env, "old_redact", &fixture("redact_secrets"));
    install(&env, "new_guard", &built_plugin("test_guard"));
    let config = r#"
[pipeline]
guards = ["old_guard", "new_guard"]
filters = ["old_redact"]

[plugins.old_guard.settings]
verdict = "deny"
tools = "bash"
reason = "the 0.1.0 guard says no"

[plugins.new_guard.settings]
verdict = "deny"
tools = "job_*"
reason = "the 0.2.0 guard says no"
"#;
    let server = McpServer::start(&env, config);

    let plugins = statuses(&env);
    for (name, kind, contract) in [
        ("echo", "tool", "0.1.0"),
        ("old_guard", "guard", "0.1.0"),
        ("old_redact", "result-filter", "0.1.0"),
        ("new_guard", "guard", "0.2.0"),
        ("bash", "tool", "0.2.0"),
        ("terminal", "tool", "0.2.0"),
    ] {
        let status = status_of(&plugins, name);
        assert_eq!(status["status"], "serving", "{status}");
        assert_eq!(status["kind"], kind, "{status}");
        assert_eq!(status["contract"], contract, "{status}");
    }
    let text = env.dsh().arg("plugins").output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("CONTRACT"), "{text}");
    let echo_line = text.lines().find(|l| l.starts_with("echo ")).unwrap();
    assert!(echo_line.contains(" 0.1.0 "), "{echo_line}");

    // The 0.1.0 tool answers through both guards and the 0.1.0 filter, as before.
    let echoed = server.call("echo", json!({"text": "hello from 0.1.0"}));
    assert!(!echoed.is_error, "{echoed:?}");
    assert_eq!(echoed.text, "hello from 0.1.0");

    // The 0.1.0 filter masks what it always masked.
    let secret = server.call("echo", json!({"text": format!("key {SECRET} here")}));
    assert!(!secret.is_error, "{secret:?}");
    assert!(!secret.text.contains(SECRET), "{secret:?}");
    assert!(secret.text.contains("[REDACTED:"), "{secret:?}");
    assert!(secret.text.starts_with("key "), "{secret:?}");

    // The 0.1.0 guard denies the 0.2.0 bash, naming itself; nothing runs.
    let marker = crate::support::unique_marker();
    let denied = server.call(
        "bash",
        json!({"command": format!("echo {marker}"), "description": "contract"}),
    );
    assert!(denied.is_error, "{denied:?}");
    assert_eq!(denied.code.as_deref(), Some("DENIED"), "{denied:?}");
    assert!(
        denied.text.contains("old_guard") && denied.text.contains("the 0.1.0 guard says no"),
        "{denied:?}"
    );

    // The 0.2.0 guard decides too, after the 0.1.0 one let the call through.
    let jobs = server.call("job_list", json!({}));
    assert_eq!(jobs.code.as_deref(), Some("DENIED"), "{jobs:?}");
    assert!(
        jobs.text.contains("new_guard") && jobs.text.contains("the 0.2.0 guard says no"),
        "{jobs:?}"
    );

    // A 0.2.0 tool passes both guards and the 0.1.0 filter.
    let sessions = server.call("terminal_list", json!({}));
    assert!(!sessions.is_error, "{sessions:?}");
}

#[test]
fn hot_replacing_the_0_1_0_echo_by_its_0_2_0_build_keeps_serving() {
    let env = Env::new();
    install(&env, "echo", &fixture("echo"));
    let server = McpServer::start(&env, "");
    let old = status_of(&statuses(&env), "echo");
    assert_eq!(old["contract"], "0.1.0", "{old}");
    let before = server.call("echo", json!({"text": "before"}));
    assert_eq!(before.text, "before", "{before:?}");

    // Swap in the 0.2.0 build whole (a rename, so the watcher never sees half a file).
    let staged = env.dir.path().join("echo-0.2.0.staged");
    std::fs::copy(built_plugin("echo"), &staged).unwrap();
    std::fs::rename(&staged, env.plugins_dir().join("echo.wasm")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let new = loop {
        let status = status_of(&statuses(&env), "echo");
        if status["contract"] == "0.2.0" || Instant::now() > deadline {
            break status;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(new["contract"], "0.2.0", "{new}");
    assert_eq!(new["status"], "serving", "{new}");
    assert_ne!(new["digest"], old["digest"]);

    let after = server.call("echo", json!({"text": "after"}));
    assert!(!after.is_error, "{after:?}");
    assert_eq!(after.text, "after");
}

#[test]
fn a_component_of_an_unsupported_contract_version_is_refused_naming_the_served_versions() {
    let env = Env::new();
    // The 0.1.0 echo with its contract's version rewritten to 0.9.0 (same length, so the
    // component stays well formed): what a plugin built against a future dsh looks like.
    let bytes = std::fs::read(fixture("echo")).unwrap();
    let patched = with_bytes_replaced(&bytes, b"dsh:plugin/types@0.1.0", b"dsh:plugin/types@0.9.0");
    std::fs::create_dir_all(env.plugins_dir()).unwrap();
    std::fs::write(env.plugins_dir().join("future.wasm"), &patched).unwrap();
    install(&env, "echo", &built_plugin("echo"));

    let plugins = env.plugins_configured("");
    let future = status_of(&plugins, "future");
    assert_eq!(future["status"], "refused", "{future}");
    let reason = future["reason"].as_str().unwrap();
    assert!(reason.contains("dsh:plugin@0.9.0"), "{reason}");
    assert!(
        reason.contains("dsh:plugin@0.1.0, dsh:plugin@0.2.0"),
        "{reason}"
    );
    // The others load as ever.
    assert_eq!(status_of(&plugins, "echo")["status"], "serving");
    let echoed = env.call_configured("", "echo", &json!({"text": "still here"}), &[]);
    assert_eq!(echoed.content, "still here", "{echoed:?}");
}
