//! Guards and result filters as WASM components, and the execute middleware: a denied
//! call starts nothing and is logged with the guard's name and reason; guards run in
//! order and a deny is final; a failing guard denies, naming itself; `ask` needs an
//! approval; `redact_secrets` masks credentials in output; idempotent tools are
//! retried, bash never; `dsh stats` counts it all.

use std::path::PathBuf;

use serde_json::{json, Value};

use crate::support::{CallOutput, Env};

/// A test environment with a plugin directory holding `plugins` as (file stem, built
/// component) pairs.
struct Setup {
    env: Env,
}

impl Setup {
    fn new(plugins: &[(&str, &str)]) -> Setup {
        let env = Env::new();
        env.add_plugins(plugins);
        Setup { env }
    }

    fn dsh(&self, config: &str) -> std::process::Command {
        self.env.dsh_configured(config)
    }

    fn call(&self, config: &str, tool: &str, args: Value, extra: &[&str]) -> CallOutput {
        self.env.call_configured(config, tool, &args, extra)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.env.dir.path().join(name)
    }
}

fn bash(command: &str) -> Value {
    json!({ "command": command, "description": "guard test" })
}

#[test]
fn a_denied_call_starts_no_process_and_the_log_says_who_denied_it() {
    let setup = Setup::new(&[]);
    let trace = setup.path("trace");
    let config = "[pipeline]\nguards = [\"deny_destructive\"]\n";
    let command = format!("touch {}; rm -rf /", trace.display());
    let denied = setup.call(config, "bash", bash(&command), &[]);
    assert_eq!(denied.code.as_deref(), Some("DENIED"), "{denied:?}");
    assert!(
        denied.message.contains("guard deny_destructive"),
        "{denied:?}"
    );
    assert!(
        denied.message.contains("rm -rf /"),
        "the reason is shown: {denied:?}"
    );
    assert!(!trace.exists(), "a denied call started a process");

    let events = setup.env.events();
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["tool/call", "tool/result"], "{events:?}");
    assert_eq!(events[1]["code"], "DENIED");
    assert_eq!(events[1]["attempts"], 0, "the tool never ran");
    assert!(events[1]["message"]
        .as_str()
        .unwrap()
        .contains("deny_destructive"));

    let fine = setup.call(config, "bash", bash("echo harmless"), &[]);
    assert_eq!(fine.code, None, "{fine:?}");
}

const ORDERED_GUARDS: &str = r#"
[plugins.allow_first.settings]
verdict = "allow"
[plugins.deny_echo.settings]
verdict = "deny"
tools = "echo"
reason = "echo is not allowed here"
[plugins.allow_last.settings]
verdict = "allow"
"#;

#[test]
fn guards_run_in_order_and_no_later_guard_undoes_a_deny() {
    let setup = Setup::new(&[
        ("echo", "echo"),
        ("allow_first", "test_guard"),
        ("deny_echo", "test_guard"),
        ("allow_last", "test_guard"),
    ]);
    for order in [
        r#"["allow_first", "deny_echo", "allow_last"]"#,
        r#"["deny_echo", "allow_first", "allow_last"]"#,
    ] {
        let config = format!("[pipeline]\nguards = {order}\n{ORDERED_GUARDS}");
        let denied = setup.call(&config, "echo", json!({"text": "hi"}), &[]);
        assert_eq!(
            denied.code.as_deref(),
            Some("DENIED"),
            "{order}: {denied:?}"
        );
        assert_eq!(
            denied.message, "denied by guard deny_echo: echo is not allowed here",
            "{order}"
        );
        let other = setup.call(&config, "bash", bash("echo other tools pass"), &[]);
        assert_eq!(other.code, None, "{order}: {other:?}");
    }
    let config =
        format!("[pipeline]\nguards = [\"allow_first\", \"allow_last\"]\n{ORDERED_GUARDS}");
    let allowed = setup.call(&config, "echo", json!({"text": "hi"}), &[]);
    assert_eq!((allowed.code, allowed.content.as_str()), (None, "hi"));
}

#[test]
fn a_failing_guard_denies_naming_itself() {
    let setup = Setup::new(&[
        ("trapping", "test_guard"),
        ("looping", "test_guard"),
        ("hoarding", "test_guard"),
    ]);
    let settings = r#"
[plugins.trapping.settings]
verdict = "trap"
[plugins.looping]
cpu_ms = 200
[plugins.looping.settings]
verdict = "loop"
[plugins.hoarding]
memory_mb = 16
[plugins.hoarding.settings]
verdict = "oom"
"#;
    for (guard, code) in [
        ("trapping", "PLUGIN_TRAP"),
        ("looping", "PLUGIN_CPU_LIMIT"),
        ("hoarding", "PLUGIN_OUT_OF_MEMORY"),
        ("missing", "not loaded"),
    ] {
        let config = format!("[pipeline]\nguards = [\"{guard}\"]\n{settings}");
        let denied = setup.call(&config, "bash", bash("echo should not run"), &[]);
        assert_eq!(
            denied.code.as_deref(),
            Some("DENIED"),
            "{guard}: {denied:?}"
        );
        assert!(
            denied.message.contains(&format!("guard {guard}")),
            "{guard}: {denied:?}"
        );
        assert!(denied.message.contains(code), "{guard}: {denied:?}");
    }
}

#[test]
fn an_ask_needs_approval() {
    let setup = Setup::new(&[]);
    let config = "[pipeline]\nguards = [\"ask_git_push\"]\n";
    let push = bash("git push --dry-run nowhere 2>/dev/null; echo push-ran");

    let unapproved = setup.call(config, "bash", push.clone(), &[]);
    assert_eq!(unapproved.code.as_deref(), Some("DENIED"), "{unapproved:?}");
    assert!(
        unapproved
            .message
            .starts_with("approval required: guard ask_git_push"),
        "{unapproved:?}"
    );
    let refused = setup.call(config, "bash", push.clone(), &["--approval", "no"]);
    assert_eq!(refused.code.as_deref(), Some("DENIED"), "{refused:?}");
    assert!(refused.message.contains("refused"), "{refused:?}");
    let approved = setup.call(config, "bash", push, &["--approval", "yes"]);
    assert_eq!(approved.code, None, "{approved:?}");
    assert!(approved.content.contains("push-ran"), "{approved:?}");
    let unasked = setup.call(config, "bash", bash("echo no push here"), &[]);
    assert_eq!(unasked.code, None, "{unasked:?}");

    let decisions: Vec<(String, String)> = setup
        .env
        .events()
        .iter()
        .filter(|e| e["event"] == "approval")
        .map(|e| {
            assert_eq!(e["guard"], "ask_git_push");
            (
                e["decision"].as_str().unwrap().into(),
                e["channel"].as_str().unwrap().into(),
            )
        })
        .collect();
    let expected = [
        ("unavailable", "terminal"),
        ("denied", "flag"),
        ("approved", "flag"),
    ];
    assert_eq!(
        decisions,
        expected.map(|(d, c)| (d.to_string(), c.to_string())),
        "every decision is in the event log"
    );
}

const PEM: &str = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\nVTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxK\n-----END RSA PRIVATE KEY-----";

#[test]
fn redact_secrets_masks_credentials_and_leaves_ordinary_text_alone() {
    let setup = Setup::new(&[]);
    let secrets = setup.path("secrets.txt");
    let ordinary = "build finished: 42 tests passed, skipping nothing";
    std::fs::write(
        &secrets,
        format!("{ordinary}\naws_access_key_id = AKIAIOSFODNN7EXAMPLE\n{PEM}\nthe end\n"),
    )
    .unwrap();
    let command = format!("cat {}", secrets.display());

    let unfiltered = setup.call("", "bash", bash(&command), &[]);
    assert!(
        unfiltered.content.contains("AKIAIOSFODNN7EXAMPLE"),
        "control: {unfiltered:?}"
    );

    let config = "[pipeline]\nfilters = [\"redact_secrets\"]\n";
    let filtered = setup.call(config, "bash", bash(&command), &[]);
    assert_eq!(filtered.code, None, "{filtered:?}");
    assert!(
        !filtered.content.contains("AKIAIOSFODNN7EXAMPLE"),
        "{filtered:?}"
    );
    assert!(
        !filtered.content.contains("MIIEowIBAAKCAQEA"),
        "{filtered:?}"
    );
    assert!(
        !filtered.content.contains("BEGIN RSA PRIVATE KEY"),
        "{filtered:?}"
    );
    assert!(filtered.content.contains("[REDACTED:"), "{filtered:?}");
    assert!(filtered.content.starts_with(ordinary), "{filtered:?}");
    assert!(filtered.content.contains("the end"), "{filtered:?}");

    let echo_ordinary = bash(&format!("echo '{ordinary}'"));
    let plain = setup.call(config, "bash", echo_ordinary.clone(), &[]);
    let control = setup.call("", "bash", echo_ordinary, &[]);
    assert_eq!(
        plain.content, control.content,
        "ordinary text is left as it was"
    );
    assert!(plain.content.starts_with(ordinary), "{plain:?}");
}

#[test]
fn an_idempotent_tool_is_retried_and_bash_never() {
    let setup = Setup::new(&[("flaky", "flaky")]);
    let scratch = setup.path("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    let config = format!(
        "[plugins.flaky]\nfs = [{{ path = {:?}, mode = \"rw\" }}]\n",
        scratch.display().to_string()
    );
    let marker = scratch.join("marker").display().to_string();
    let retried = setup.call(&config, "flaky", json!({ "marker": marker }), &[]);
    assert_eq!(retried.code, None, "{retried:?}");
    assert!(retried.content.contains("succeeded"), "{retried:?}");
    let result = setup
        .env
        .events()
        .into_iter()
        .rfind(|e| e["event"] == "tool/result")
        .unwrap();
    assert_eq!(result["attempts"], 2, "{result}");

    let stats = setup
        .dsh(&config)
        .args(["stats", "--json"])
        .output()
        .unwrap();
    let stats: Value = serde_json::from_slice(&stats.stdout).unwrap();
    assert_eq!(stats["tools"]["flaky"]["calls"], 1, "{stats}");
    assert_eq!(stats["tools"]["flaky"]["retries"], 1, "{stats}");

    let no_retries = format!("{config}[limits]\nmax_retries = 0\n");
    std::fs::remove_file(&marker).unwrap();
    let failed = setup.call(&no_retries, "flaky", json!({ "marker": marker }), &[]);
    assert_eq!(failed.code.as_deref(), Some("INTERNAL"), "{failed:?}");

    // bash times out (a code retried for idempotent tools) and is not run again.
    let counter = setup.path("runs");
    let command = format!("echo run >> {}; sleep 5", counter.display());
    let timed_out = setup.call(
        "",
        "bash",
        json!({ "command": command, "description": "counts its runs", "timeoutMs": 300 }),
        &[],
    );
    assert_eq!(timed_out.code.as_deref(), Some("TIMEOUT"), "{timed_out:?}");
    // `dsh call` has exited, so a retry would have run before it did; and the session's
    // log counts no retry.
    assert_eq!(std::fs::read_to_string(&counter).unwrap(), "run\n");
    let stats = setup.dsh("").args(["stats", "--json"]).output().unwrap();
    let stats: Value = serde_json::from_slice(&stats.stdout).unwrap();
    assert_eq!(stats["tools"]["bash"]["calls"], 1, "{stats}");
    assert_eq!(stats["tools"]["bash"]["retries"], 0, "{stats}");
}

#[test]
fn the_gate_decides_before_any_guard_runs() {
    let setup = Setup::new(&[]);
    let config = r#"
[[gate.rules]]
action = "deny"
tool = "bash"
arg = "command"
pattern = 'git\s+push'
reason = "no pushing from here"

[pipeline]
guards = ["ask_git_push"]
"#;
    let push = bash("git push origin main");
    let denied = setup.call(config, "bash", push, &["--approval", "yes"]);
    assert_eq!(denied.code.as_deref(), Some("DENIED"), "{denied:?}");
    assert!(
        denied.message.contains("no pushing from here"),
        "{denied:?}"
    );
    assert!(
        !setup.env.events().iter().any(|e| e["event"] == "approval"),
        "the guard was never asked"
    );
}

/// Every file under `dir`, at any depth.
fn files_under(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else {
                found.push(path);
            }
        }
    }
    found
}

#[test]
fn a_failing_filter_withholds_the_result_and_the_unfiltered_text_appears_nowhere() {
    let setup = Setup::new(&[
        ("trapping", "test_filter"),
        ("looping", "test_filter"),
        ("hoarding", "test_filter"),
        ("passing", "test_filter"),
    ]);
    let settings = r#"
[plugins.trapping.settings]
failure = "trap"
[plugins.looping]
cpu_ms = 200
[plugins.looping.settings]
failure = "loop"
[plugins.hoarding]
memory_mb = 16
[plugins.hoarding.settings]
failure = "oom"
"#;
    // The output is not in the command's text (which the log keeps as the call's
    // arguments): `printf` joins it from two halves.
    let command = bash("printf 'unfil%s\\n' tered-output-7c1e");
    let passing = setup.call(
        &format!("[pipeline]\nfilters = [\"passing\"]\n{settings}"),
        "bash",
        command.clone(),
        &[],
    );
    assert_eq!(
        passing.content, "unfiltered-output-7c1e\n[exit code: 0]",
        "control: a filter that passes the result: {passing:?}"
    );
    for (filter, failure) in [
        ("trapping", "PLUGIN_TRAP"),
        ("looping", "PLUGIN_CPU_LIMIT"),
        ("hoarding", "PLUGIN_OUT_OF_MEMORY"),
    ] {
        let setup = Setup::new(&[(filter, "test_filter")]);
        let config = format!("[pipeline]\nfilters = [\"{filter}\"]\n{settings}");
        let withheld = setup.call(&config, "bash", command.clone(), &[]);
        assert_eq!(
            withheld.code.as_deref(),
            Some("INTERNAL"),
            "{filter}: {withheld:?}"
        );
        assert!(
            withheld.message.contains(filter) && withheld.message.contains(failure),
            "{filter}: the error names the filter and its failure: {withheld:?}"
        );
        assert!(
            !format!("{withheld:?}").contains("unfiltered-output-7c1e"),
            "{filter}: the unfiltered text is in the result: {withheld:?}"
        );
        let files = files_under(&setup.env.state_dir());
        assert!(
            files.iter().any(|f| f.ends_with("events.jsonl")),
            "{filter}: the call was logged: {files:?}"
        );
        let leaked: Vec<_> = files
            .into_iter()
            .filter(|file| {
                std::fs::read_to_string(file)
                    .is_ok_and(|text| text.contains("unfiltered-output-7c1e"))
            })
            .collect();
        assert!(
            leaked.is_empty(),
            "{filter}: the unfiltered text is in {leaked:?}"
        );
    }
}

#[test]
fn a_guard_without_cpu_ms_gets_one_second_of_guest_cpu() {
    let setup = Setup::new(&[("looping", "test_guard")]);
    let config =
        "[pipeline]\nguards = [\"looping\"]\n[plugins.looping.settings]\nverdict = \"loop\"\n";
    let denied = setup.call(config, "bash", bash("echo should not run"), &[]);
    assert_eq!(denied.code.as_deref(), Some("DENIED"), "{denied:?}");
    assert!(
        denied.message.contains("PLUGIN_CPU_LIMIT")
            && denied.message.contains("CPU budget of 1000 ms"),
        "{denied:?}"
    );
}
