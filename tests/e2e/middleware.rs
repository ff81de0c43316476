//! Middleware and observer components, end to end through `dsh call`: a middleware
//! retries, answers without the tool, sets a deadline that kills the run's processes, is
//! stopped past the cap on its runs, and fails the call closed when it traps or runs out
//! of its CPU or memory; a filter adds a note; observers see every call off its path
//! (the shipped `audit` writes one OCSF line per call, a trapping observer fails no call,
//! one writing outside its grant is refused). The live cases (hot swap with calls in
//! flight, the rate limit, a slow observer's drops) are in `tests/mcp/test_middleware.py`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::{survivors, unique_marker, CallOutput, Env};

/// A test environment whose plugin directory holds `plugins` (file stem, built crate).
fn env_with(plugins: &[(&str, &str)]) -> Env {
    let env = Env::new();
    env.add_plugins(plugins);
    env
}

fn call(env: &Env, config: &str, tool: &str, args: Value) -> CallOutput {
    env.call_configured(config, tool, &args, &[])
}

fn bash(command: &str) -> Value {
    json!({ "command": command, "description": "middleware test" })
}

/// The `tool/result` events of the env's sessions, oldest first.
fn results(env: &Env) -> Vec<Value> {
    env.events()
        .into_iter()
        .filter(|e| e["event"] == "tool/result")
        .collect()
}

#[test]
fn a_retry_middleware_runs_the_tool_again_and_returns_the_second_result() {
    let env = env_with(&[("flaky", "flaky"), ("retry", "test_middleware")]);
    let scratch = env.dir.path().join("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    // The host's own retry is off: only the middleware runs the tool again.
    let base = format!(
        "[limits]\nmax_retries = 0\n[plugins.flaky]\nfs = [{{ path = {:?}, mode = \"rw\" }}]\n",
        scratch.display().to_string()
    );
    let marker = scratch.join("marker").display().to_string();
    let failed = call(&env, &base, "flaky", json!({ "marker": marker }));
    assert_eq!(
        failed.code.as_deref(),
        Some("INTERNAL"),
        "control: without the middleware the first attempt's failure is the result: {failed:?}"
    );
    std::fs::remove_file(&marker).unwrap();

    let config = format!(
        "[pipeline]\nmiddleware = [\"retry\"]\n[plugins.retry.settings]\nmode = \"retry\"\n{base}"
    );
    let retried = call(&env, &config, "flaky", json!({ "marker": marker }));
    assert_eq!(retried.code, None, "{retried:?}");
    assert!(retried.content.contains("succeeded"), "{retried:?}");
    let last = results(&env).pop().unwrap();
    assert_eq!(last["attempts"], 2, "one call, two attempts: {last}");
    assert_eq!(last["is_error"], false, "{last}");
    assert!(
        last.get("answered_by").is_none(),
        "the tool answered: {last}"
    );
}

#[test]
fn a_middleware_running_the_rest_past_the_cap_is_stopped_with_its_code() {
    let env = env_with(&[("echo", "echo"), ("greedy", "test_middleware")]);
    let config = "[pipeline]\nmiddleware = [\"greedy\"]\n[plugins.greedy.settings]\nmode = \"over_cap\"\nruns = 100\n[limits]\nmax_next_runs = 3\n";
    let stopped = call(&env, config, "echo", json!({ "text": "again" }));
    assert_eq!(
        stopped.code.as_deref(),
        Some("LIMIT_EXCEEDED"),
        "{stopped:?}"
    );
    assert!(
        stopped.message.contains("middleware greedy")
            && stopped.message.contains("max_next_runs = 3"),
        "the error names the middleware and the cap: {stopped:?}"
    );
    let last = results(&env).pop().unwrap();
    assert_eq!(
        last["attempts"], 3,
        "the tool ran as often as the cap allows: {last}"
    );
}

#[test]
fn a_middleware_deadline_ends_the_call_and_kills_every_process_of_the_run() {
    let env = env_with(&[("deadline", "test_middleware")]);
    let marker = unique_marker();
    let config = "[pipeline]\nmiddleware = [\"deadline\"]\n[plugins.deadline.settings]\nmode = \"deadline\"\ndeadline_ms = 1000\n";
    // A background sleep and a foreground one, both named by the marker (`exec -a`).
    let command =
        format!("(exec -a dsh-mw-{marker} sleep 30) & (exec -a dsh-mw-{marker} sleep 30); true");
    let started = Instant::now();
    let ended = call(&env, config, "bash", bash(&command));
    let took = started.elapsed();
    assert_eq!(ended.code.as_deref(), Some("TIMEOUT"), "{ended:?}");
    assert!(
        ended.message.contains("deadline of 1000 ms"),
        "the deadline is the middleware's: {ended:?}"
    );
    assert!(
        took < Duration::from_secs(20),
        "the call waited for the sleeps: {took:?}"
    );
    let left = survivors(&marker, Duration::from_secs(5));
    assert!(
        left.is_empty(),
        "processes of the run outlived the deadline: {left:?}"
    );
}

#[test]
fn a_caching_middleware_answers_without_running_the_tool() {
    let env = env_with(&[("cacher", "test_middleware")]);
    let trace = env.dir.path().join("ran");
    let config =
        "[pipeline]\nmiddleware = [\"cacher\"]\n[plugins.cacher.settings]\nmode = \"cache\"\n";
    let answered = call(
        &env,
        config,
        "bash",
        bash(&format!("touch {}", trace.display())),
    );
    assert_eq!(answered.code, None, "{answered:?}");
    assert_eq!(
        answered.content,
        "answered by test_middleware without running the tool"
    );
    assert!(!trace.exists(), "the tool ran");
    let last = results(&env).pop().unwrap();
    assert_eq!(last["attempts"], 0, "{last}");
    assert_eq!(
        last["answered_by"], "cacher",
        "the result is marked as the middleware's: {last}"
    );
}

#[test]
fn a_failing_middleware_fails_the_call_closed_naming_itself() {
    let settings = r#"
[plugins.trapping.settings]
mode = "trap"
[plugins.looping]
cpu_ms = 200
[plugins.looping.settings]
mode = "loop"
[plugins.hoarding]
memory_mb = 16
[plugins.hoarding.settings]
mode = "oom"
"#;
    for (middleware, code) in [
        ("trapping", "PLUGIN_TRAP"),
        ("looping", "PLUGIN_CPU_LIMIT"),
        ("hoarding", "PLUGIN_OUT_OF_MEMORY"),
    ] {
        let env = env_with(&[(middleware, "test_middleware")]);
        let trace = env.dir.path().join("ran");
        let config = format!("[pipeline]\nmiddleware = [\"{middleware}\"]\n{settings}");
        let failed = call(
            &env,
            &config,
            "bash",
            bash(&format!("touch {}", trace.display())),
        );
        assert_eq!(
            failed.code.as_deref(),
            Some(code),
            "{middleware}: {failed:?}"
        );
        assert!(
            failed
                .message
                .contains(&format!("middleware {middleware} failed")),
            "{middleware}: the error names the middleware: {failed:?}"
        );
        assert!(
            !trace.exists(),
            "{middleware}: the tool ran past a failing middleware"
        );
    }
}

#[test]
fn a_middleware_fails_even_when_the_one_around_it_would_hide_it() {
    // `retry` around a trapping middleware: the retry sees a failed result and runs it
    // again, and whatever it returns, the call fails with the inner middleware's code.
    let env = env_with(&[
        ("echo", "echo"),
        ("outer", "test_middleware"),
        ("inner", "test_middleware"),
    ]);
    let config = "[pipeline]\nmiddleware = [\"outer\", \"inner\"]\n[plugins.outer.settings]\nmode = \"retry\"\n[plugins.inner.settings]\nmode = \"trap\"\n";
    let failed = call(&env, config, "echo", json!({ "text": "x" }));
    assert_eq!(failed.code.as_deref(), Some("PLUGIN_TRAP"), "{failed:?}");
    assert!(
        failed.message.contains("middleware inner failed"),
        "{failed:?}"
    );
}

#[test]
fn a_middleware_is_only_for_the_calls_its_selection_names() {
    let env = env_with(&[("echo", "echo"), ("trapping", "test_middleware")]);
    let config = "[pipeline]\nmiddleware = [\"trapping\"]\n[pipeline.select.trapping]\ntools = [\"ech*\"]\n[plugins.trapping.settings]\nmode = \"trap\"\n";
    let failed = call(&env, config, "echo", json!({ "text": "x" }));
    assert_eq!(failed.code.as_deref(), Some("PLUGIN_TRAP"), "{failed:?}");
    let other = call(&env, config, "bash", bash("echo not selected"));
    assert_eq!(other.code, None, "{other:?}");
    assert!(other.content.starts_with("not selected"), "{other:?}");
}

#[test]
fn a_filter_adds_a_note_for_the_model_beside_the_result() {
    let env = env_with(&[("echo", "echo"), ("noting", "test_filter")]);
    let config = "[pipeline]\nfilters = [\"noting\"]\n[plugins.noting.settings]\nnote = \"note: this output is from a test\"\n";
    let noted = call(&env, config, "echo", json!({ "text": "result" }));
    assert_eq!(noted.code, None, "{noted:?}");
    assert_eq!(noted.content, "result\nnote: this output is from a test");
}

#[test]
fn dsh_plugins_shows_middleware_and_observers_with_their_grants() {
    let env = env_with(&[("mw", "test_middleware"), ("obs", "test_observer")]);
    let sink = env.dir.path().join("sink");
    std::fs::create_dir_all(&sink).unwrap();
    let config = format!(
        "[pipeline]\nmiddleware = [\"mw\"]\nobservers = [\"obs\"]\n[plugins.obs]\ninterfaces = [\"log\"]\nfs = [{{ path = {:?}, mode = \"rw\" }}]\n",
        sink.display().to_string()
    );
    let output = env
        .dsh_configured(&config)
        .args(["plugins", "--grants", "--json"])
        .output()
        .unwrap();
    let listed: Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&output.stdout)));
    let text = listed.to_string();
    let find = |name: &str| -> Value {
        listed
            .as_array()
            .or_else(|| listed["plugins"].as_array())
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} not listed: {text}"))
    };
    assert_eq!(find("mw")["kind"], "middleware", "{text}");
    let observer = find("obs");
    assert_eq!(observer["kind"], "observer", "{text}");
    assert!(
        observer.to_string().contains(&sink.display().to_string()),
        "the observer's directory grant is shown: {observer}"
    );
}

/// An env whose `obs` observer is `crate_name` with `settings` and the directory `sink`
/// granted read-write.
fn observed(crate_name: &str, settings: &str) -> (Env, PathBuf, String) {
    let env = env_with(&[("echo", "echo"), ("obs", crate_name)]);
    let sink = env.dir.path().join("sink");
    std::fs::create_dir_all(&sink).unwrap();
    let config = format!(
        "[pipeline]\nobservers = [\"obs\"]\n[plugins.obs]\ninterfaces = [\"log\"]\nfs = [{{ path = {:?}, mode = \"rw\" }}]\n[plugins.obs.settings]\n{settings}\n",
        sink.display().to_string()
    );
    (env, sink, config)
}

#[test]
fn the_audit_observer_writes_one_ocsf_line_per_call_matching_the_event_log() {
    let env = env_with(&[("echo", "echo")]);
    let sink = env.dir.path().join("audit");
    std::fs::create_dir_all(&sink).unwrap();
    let file = sink.join("audit.jsonl");
    let config = format!(
        "[pipeline]\nobservers = [\"audit\"]\n[plugins.audit]\nfs = [{{ path = {:?}, mode = \"rw\" }}]\n[plugins.audit.settings]\npath = {:?}\n[gate]\nrules = [{{ action = \"deny\", tool = \"bash\", arg = \"command\", pattern = \"forbidden\", reason = \"not here\" }}]\n",
        sink.display().to_string(),
        file.display().to_string()
    );
    let calls = [
        ("echo", json!({ "text": "one" })),
        ("bash", bash("echo two")),
        ("bash", bash("echo forbidden")),
        ("bash", bash("exit 3")),
        ("no_such_tool", json!({})),
    ];
    for (tool, args) in &calls {
        call(&env, &config, tool, args.clone());
    }
    let text = std::fs::read_to_string(&file).unwrap_or_default();
    let lines: Vec<Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect();
    let results = results(&env);
    assert_eq!(lines.len(), results.len(), "one line per call:\n{text}");
    for (line, result) in lines.iter().zip(&results) {
        assert_eq!(line["class_uid"], 6003, "{line}");
        assert_eq!(line["api"]["request"]["uid"], result["call_id"], "{line}");
        assert_eq!(line["api"]["operation"], result["tool"], "{line}");
        assert_eq!(line["actor"]["user"]["uid"], result["owner"], "{line}");
        assert_eq!(line["time"], result["ts_ms"], "{line}");
        match result["code"].as_str() {
            None => assert_eq!(line["status_id"], 1, "{line}"),
            Some(code) => {
                assert_eq!(line["status_id"], 2, "{line}");
                assert_eq!(line["status_code"], code, "{line}");
            }
        }
    }
    let codes: Vec<Option<&str>> = lines.iter().map(|l| l["status_code"].as_str()).collect();
    assert!(codes.contains(&Some("DENIED")), "{codes:?}");
    assert!(codes.contains(&Some("UNKNOWN_TOOL")), "{codes:?}");
}

#[test]
fn an_observer_sees_the_records_of_calls_and_jobs() {
    let (env, sink, config) = observed(
        "test_observer",
        &format!("path = {:?}", "SINK/events.jsonl"),
    );
    let config = config.replace("SINK", &sink.display().to_string());
    let started = call(
        &env,
        &config,
        "bash",
        json!({ "command": "sleep 0.2", "description": "a job", "run_in_background": true }),
    );
    assert_eq!(started.code, None, "{started:?}");
    let records: Vec<Value> = std::fs::read_to_string(sink.join("events.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let kinds: Vec<&str> = records
        .iter()
        .map(|r| r["event"].as_str().unwrap())
        .collect();
    assert!(kinds.contains(&"tool/call"), "{kinds:?}");
    assert!(kinds.contains(&"tool/result"), "{kinds:?}");
    assert!(kinds.contains(&"job/start"), "{kinds:?}");
    let logged: Vec<Value> = env
        .events()
        .into_iter()
        .filter(|e| {
            ["tool/call", "tool/result", "job/start"].contains(&e["event"].as_str().unwrap())
        })
        .collect();
    for record in &logged {
        assert!(
            records.contains(record),
            "the observer was given the event log's record as it is: {record}"
        );
    }
}

#[test]
fn a_trapping_observer_fails_no_call() {
    let (env, _sink, config) = observed("test_observer", "mode = \"trap\"");
    for n in 0..3 {
        let echoed = call(&env, &config, "echo", json!({ "text": format!("n{n}") }));
        assert_eq!(
            (echoed.code, echoed.content.as_str()),
            (None, format!("n{n}").as_str())
        );
    }
}

#[test]
fn an_observer_writing_outside_its_grant_is_refused() {
    let outside = std::env::temp_dir().join(format!("dsh-observer-escape-{}", unique_marker()));
    let (env, _sink, config) = observed(
        "test_observer",
        &format!(
            "mode = \"escape\"\npath = {:?}",
            outside.display().to_string()
        ),
    );
    let output = env
        .dsh_configured(&config)
        .args(["call", "echo", r#"{"text":"hi"}"#, "--json"])
        .env("RUST_LOG", "info")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(!outside.exists(), "the observer wrote outside its grant");
    assert!(
        stderr.contains(&format!(
            "test_observer: cannot write {}",
            outside.display()
        )),
        "the observer's write was refused: {stderr}"
    );
}

/// Builds the Rust example `name` (`examples/plugins/rust/NAME`) into the test plugins'
/// target directory (their dependencies are built already) and returns the component.
fn built_example(name: &str) -> PathBuf {
    // The test plugins first: the example shares their target directory.
    crate::support::plugin_wasm_dir();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let target = std::path::Path::new(env!("DSH_WASM_TARGET_DIR"));
    let status = std::process::Command::new("cargo")
        .args([
            "build",
            "--release",
            "--target",
            "wasm32-wasip2",
            "--manifest-path",
        ])
        .arg(root.join(format!("examples/plugins/rust/{name}/Cargo.toml")))
        .env("CARGO_TARGET_DIR", target)
        .status()
        .unwrap();
    assert!(status.success(), "cargo build of the {name} example failed");
    target.join(format!("wasm32-wasip2/release/{name}.wasm"))
}

#[test]
fn the_rust_middleware_and_observer_examples_build_and_run() {
    let env = env_with(&[("echo", "echo")]);
    for name in ["slow_call_meter", "jsonl_sink"] {
        std::fs::copy(
            built_example(name),
            env.plugins_dir().join(format!("{name}.wasm")),
        )
        .unwrap();
    }
    let sink = env.dir.path().join("sink");
    std::fs::create_dir_all(&sink).unwrap();
    let records = sink.join("records.jsonl");
    let config = format!(
        "[pipeline]\nmiddleware = [\"slow_call_meter\"]\nobservers = [\"jsonl_sink\"]\n[plugins.slow_call_meter.settings]\nwarn_ms = 10\n[plugins.jsonl_sink]\ninterfaces = [\"log\"]\nfs = [{{ path = {:?}, mode = \"rw\" }}]\n[plugins.jsonl_sink.settings]\npath = {:?}\n",
        sink.display().to_string(),
        records.display().to_string()
    );
    let noted = call(&env, &config, "bash", bash("sleep 0.05; echo slow"));
    assert_eq!(noted.code, None, "{noted:?}");
    assert!(
        noted.content.starts_with("slow\n")
            && noted
                .content
                .contains("slow_call_meter: this bash call took"),
        "the middleware noted the call's time: {noted:?}"
    );
    let lines = std::fs::read_to_string(&records).unwrap_or_default();
    assert_eq!(lines.lines().count(), 2, "the call and its result: {lines}");
}

#[test]
fn a_selected_guard_and_filter_apply_only_to_the_calls_their_selection_names() {
    let env = env_with(&[
        ("echo", "echo"),
        ("denier", "test_guard"),
        ("noting", "test_filter"),
    ]);
    let config = "[pipeline]\nguards = [\"denier\"]\nfilters = [\"noting\"]\n[pipeline.select.denier]\ntools = [\"echo\"]\n[pipeline.select.noting]\nscopes = [\"default\"]\ntools = [\"bash\"]\n[plugins.denier.settings]\nverdict = \"deny\"\nreason = \"not echo\"\n[plugins.noting.settings]\nnote = \"noted\"\n";
    let denied = call(&env, config, "echo", json!({ "text": "x" }));
    assert_eq!(denied.code.as_deref(), Some("DENIED"), "{denied:?}");
    let ran = call(&env, config, "bash", bash("echo ran"));
    assert_eq!(ran.code, None, "the guard is not for bash: {ran:?}");
    assert!(
        ran.content.ends_with("\nnoted"),
        "the filter is for bash: {ran:?}"
    );
}
