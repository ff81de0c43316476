//! The `bash` tool through the whole pipeline: output, exit codes, validation, timeouts,
//! process cleanup and long output.

use std::time::{Duration, Instant};

use crate::support::{output_and_peak_rss, survivors, unique_marker, Env};

#[test]
fn echo_returns_its_output_and_exit_code_zero() {
    let env = Env::new();
    let out = env.call("bash", r#"{"command":"echo hi","description":"say hi"}"#);
    assert_eq!(out.code, None, "{out:?}");
    assert_eq!(out.content, "hi\n[exit code: 0]");
    assert_eq!(out.exit_code, Some(0));
}

#[test]
fn a_failing_command_reports_its_exit_code_and_stderr() {
    let env = Env::new();
    let out = env.call(
        "bash",
        r#"{"command":"echo to-err >&2; exit 3","description":"fail"}"#,
    );
    assert_eq!(out.content, "to-err\n[exit code: 3]");
    // A command that ran and failed is a result, not a tool error.
    assert_eq!(out.code, None);
}

#[test]
fn the_plain_output_is_the_text_the_model_reads() {
    let env = Env::new();
    let output = env
        .dsh()
        .args([
            "call",
            "bash",
            r#"{"command":"printf x","description":"x"}"#,
        ])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "x\n[exit code: 0]\n"
    );
    assert!(output.status.success());
}

#[test]
fn invalid_arguments_name_the_field_and_start_no_process() {
    let env = Env::new();
    let marker = env.workdir().join("ran");
    let touch = format!("touch {}", marker.display());
    let cases = [
        (
            serde_json::json!({ "command": touch }).to_string(),
            "description",
        ),
        ("\"just a string\"".to_string(), "object"),
        (
            serde_json::json!({ "command": touch, "description": "d", "timeoutMs": "soon" })
                .to_string(),
            "/timeoutMs",
        ),
        (
            serde_json::json!({ "command": touch, "description": 7 }).to_string(),
            "/description",
        ),
        (
            serde_json::json!({ "command": touch, "description": "d", "extra": true }).to_string(),
            "extra",
        ),
    ];
    for (args, field) in cases {
        let out = env.call("bash", &args);
        assert_eq!(
            out.code.as_deref(),
            Some("INVALID_ARGUMENTS"),
            "{args}: {out:?}"
        );
        assert!(
            out.message.contains(field),
            "{args}: message {:?} does not name {field}",
            out.message
        );
        assert_eq!(out.exit_code, Some(1));
    }
    assert!(!marker.exists(), "an invalid call started a process");
}

#[test]
fn an_unknown_tool_is_unknown_tool() {
    let env = Env::new();
    let out = env.call("no_such_tool", "{}");
    assert_eq!(out.code.as_deref(), Some("UNKNOWN_TOOL"));
    assert!(out.message.contains("no_such_tool"));
}

#[test]
fn a_timeout_kills_the_whole_call_and_says_so() {
    let env = Env::new();
    let marker = unique_marker();
    let args = format!(
        r#"{{"command":"sleep 30.{marker} & sleep 30.{marker}","description":"slow","timeoutMs":500}}"#
    );
    let started = Instant::now();
    let out = env.call("bash", &args);
    let elapsed = started.elapsed();
    assert_eq!(out.code.as_deref(), Some("TIMEOUT"), "{out:?}");
    assert!(
        out.content
            .contains("[exit code: 124 (timed out after 500 ms)]"),
        "{}",
        out.content
    );
    assert!(elapsed < Duration::from_secs(10), "took {elapsed:?}");
    assert_eq!(
        survivors(&marker, Duration::from_secs(2)),
        Vec::<String>::new()
    );
}

#[test]
fn a_background_child_of_a_foreground_command_is_gone_when_it_returns() {
    let env = Env::new();
    let marker = unique_marker();
    let pid_file = env.dir.path().join("child.pid");
    // The child writes its pid before it sleeps; the command returns once it has.
    let command = format!(
        "sh -c 'echo $$ > {pid}; exec sleep 1000.{marker}' & while [ ! -s {pid} ]; do sleep 0.01; done; echo started",
        pid = pid_file.display()
    );
    let started = Instant::now();
    let out = env.call(
        "bash",
        &serde_json::json!({"command": command, "description": "bg"}).to_string(),
    );
    assert_eq!(out.content, "started\n[exit code: 0]");
    let pid = std::fs::read_to_string(&pid_file).unwrap();
    assert!(!pid.trim().is_empty(), "the child never ran");
    let gone = crate::support::wait_for(Duration::from_secs(2), || {
        !std::path::Path::new(&format!("/proc/{}", pid.trim())).exists()
    });
    assert!(gone, "the child {} is alive", pid.trim());
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(
        survivors(&marker, Duration::from_secs(2)),
        Vec::<String>::new()
    );
}

#[test]
fn a_grandchild_holding_the_pipe_outside_the_group_does_not_hang_the_call_nor_outlive_it() {
    let env = Env::new();
    let marker = unique_marker();
    // setsid moves the sleeper out of the process group; it keeps stdout open.
    // It writes its pid before it sleeps, and the command returns only once it has: the
    // escapee is proven to have run.
    let pid_file = env.dir.path().join("escapee.pid");
    let command = format!(
        "setsid sh -c 'echo $$ > {pid}; exec sleep 5.{marker}' & while [ ! -s {pid} ]; do sleep 0.01; done; echo ok",
        pid = pid_file.display()
    );
    let started = Instant::now();
    let out = env.call(
        "bash",
        &serde_json::json!({"command": command, "description": "escape"}).to_string(),
    );
    assert!(out.content.starts_with("ok\n"), "{out:?}");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "the call waited for the escaped sleeper"
    );
    let pid = std::fs::read_to_string(&pid_file).unwrap();
    assert!(!pid.trim().is_empty(), "the escapee never ran");
    // And it did not outlive the call: its container was killed with the shell.
    assert_eq!(
        survivors(&marker, Duration::from_secs(1)),
        Vec::<String>::new()
    );
    let gone = crate::support::wait_for(Duration::from_secs(2), || {
        !std::path::Path::new(&format!("/proc/{}", pid.trim())).exists()
    });
    assert!(gone, "the escapee {} is alive", pid.trim());
}

#[test]
fn relative_workdir_resolves_against_the_session_workspace() {
    let env = Env::new();
    std::fs::create_dir_all(env.workdir().join("sub")).unwrap();
    let out = env.call(
        "bash",
        r#"{"command":"pwd","description":"where","workdir":"sub"}"#,
    );
    let expected = std::fs::canonicalize(env.workdir().join("sub")).unwrap();
    assert_eq!(
        out.content,
        format!("{}\n[exit code: 0]", expected.display())
    );
    let missing = env.call(
        "bash",
        r#"{"command":"pwd","description":"where","workdir":"nope"}"#,
    );
    assert_eq!(
        missing.code.as_deref(),
        Some("INVALID_ARGUMENTS"),
        "{missing:?}"
    );
}

#[test]
fn fifty_megabytes_of_output_are_cut_spilled_and_never_held_whole() {
    let env = Env::new();
    let (baseline, baseline_rss) = output_and_peak_rss(env.dsh().args([
        "call",
        "bash",
        r#"{"command":"true","description":"t"}"#,
        "--json",
    ]));
    assert!(baseline.status.success());
    let (output, rss) = output_and_peak_rss(env.dsh().args([
        "call",
        "bash",
        r#"{"command":"yes | head -c 50000000","description":"big"}"#,
        "--json",
    ]));
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let value: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let content = value["content"].as_str().unwrap();
    assert!(
        content.len() <= 30_000 + 300,
        "content is {} bytes",
        content.len()
    );
    assert!(content.contains("bytes omitted"), "no marker");
    assert!(content.ends_with("[exit code: 0]"));
    let spill = value["full_output_path"].as_str().expect("a spill file");
    assert!(content.contains(spill), "the content names the spill file");
    assert_eq!(std::fs::metadata(spill).unwrap().len(), 50_000_000);
    // Peak memory grows by far less than the output (50 MB).
    assert!(
        rss - baseline_rss < 20 * 1024,
        "peak RSS {rss} KiB against {baseline_rss} KiB for `true`"
    );
}

#[test]
fn a_configured_deny_rule_stops_the_call_before_any_process() {
    let env = Env::new();
    let config = env.dir.path().join("dsh.toml");
    std::fs::write(
        &config,
        "[[gate.rules]]\naction = \"deny\"\ntool = \"bash\"\narg = \"command\"\npattern = 'touch'\nreason = \"no touching\"\n",
    )
    .unwrap();
    let marker = env.workdir().join("touched");
    let args =
        serde_json::json!({ "command": format!("touch {}", marker.display()), "description": "t" });
    let output = env
        .dsh()
        .arg("--config")
        .arg(&config)
        .args(["call", "bash", &args.to_string()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.starts_with("DENIED: denied by the gate (rule 0 in dsh.toml): no touching"),
        "{stdout}"
    );
    assert!(!marker.exists());
}

#[test]
fn no_echo_loses_its_output_while_cpu_bound_calls_spin_on_every_worker() {
    // Eight calls of a plugin that spins to its CPU limit keep both cores and every
    // runtime worker busy; a `bash` call finishing meanwhile must still return all that
    // its command printed (it once came back as just `[exit code: 0]`).
    let env = Env::new();
    env.add_plugins(&[("hostile", "hostile")]);
    let server = crate::mcp_stdio::McpServer::start(
        &env,
        "[plugins.hostile]\ncpu_ms = 300\nmemory_mb = 32\n",
    );
    let spin = serde_json::json!({"iterations": u64::MAX});
    let mut lost = Vec::new();
    let mut echoes = 0;
    for round in 0..6 {
        let burns: Vec<_> = (0..8)
            .map(|_| server.start_call("burn", spin.clone()))
            .collect();
        for n in 0..40 {
            let word = format!("word-{round}-{n}");
            let reply = server.call(
                "bash",
                serde_json::json!({"command": format!("echo {word}"), "description": "echo"}),
            );
            echoes += 1;
            if reply.text != format!("{word}\n[exit code: 0]") {
                lost.push(reply.text);
            }
        }
        for burn in burns {
            let reply = burn.reply(&server);
            assert_eq!(
                reply.code.as_deref(),
                Some("PLUGIN_CPU_LIMIT"),
                "the burn spun to its limit: {reply:?}"
            );
        }
    }
    assert!(
        lost.is_empty(),
        "{} of {echoes} echoes lost output: {lost:?}",
        lost.len()
    );
}

/// A `bash` command of `size` bytes or more that writes a file through a quoted heredoc,
/// then prints `$0`, `$#` and how many memfds its shell holds, and exits 3; and the
/// bytes the file must hold.
pub fn heredoc_command(size: usize) -> (String, String) {
    let mut body = String::new();
    let mut n = 0;
    while body.len() < size {
        // Quotes, `$`, backslashes and backticks stay as they are in a quoted heredoc.
        body.push_str(&format!("{n:06} \"$HOME\" '\\n' `x` $((1+1)) \\\n"));
        n += 1;
    }
    let command = format!(
        "cat > written.txt <<'EOF'\n{body}EOF\necho \"0=$0 #=$# memfds=$(ls -l /proc/$$/fd | grep -c memfd)\"\nexit 3\n"
    );
    (command, body)
}

#[test]
fn a_command_longer_than_an_argument_may_be_runs_whole_and_keeps_its_exit_code() {
    // 300 KiB: over the kernel's 128 KiB limit on one argument, which `bash -c` hit.
    let env = Env::new();
    let server = crate::mcp_stdio::McpServer::start(&env, "");
    let (command, body) = heredoc_command(300 * 1024);
    let reply = server.call(
        "bash",
        serde_json::json!({"command": command, "description": "write a file"}),
    );
    assert!(!reply.is_error, "{reply:?}\n{}", server.stderr());
    // `$0` and `$#` as under `bash -c`; the shell (so no program it runs) holds no
    // descriptor of the script.
    assert_eq!(
        crate::support::without_undo_line(&reply.text),
        "0=bash #=0 memfds=0\n[exit code: 3]"
    );
    let written = std::fs::read(env.workdir().join("written.txt")).unwrap();
    assert!(
        written == body.as_bytes(),
        "the file differs from the heredoc"
    );

    // A background job takes the same way.
    std::fs::remove_file(env.workdir().join("written.txt")).unwrap();
    let started = server.call_ok(
        "bash",
        serde_json::json!({"command": command, "description": "write it again", "run_in_background": true}),
    );
    let job = started
        .split_whitespace()
        .find(|w| w.starts_with("bash-"))
        .unwrap_or_else(|| panic!("no job id in {started}"))
        .to_string();
    let output = server.call_ok(
        "job_output",
        serde_json::json!({"id": job, "wait_ms": 20000}),
    );
    assert!(output.contains("0=bash #=0 memfds=0"), "{output}");
    let written = std::fs::read(env.workdir().join("written.txt")).unwrap();
    assert!(
        written == body.as_bytes(),
        "the job's file differs from the heredoc"
    );
}

#[test]
fn a_syntax_error_reports_bash_s_message_and_exit_code_two_short_or_long() {
    let env = Env::new();
    let server = crate::mcp_stdio::McpServer::start(&env, "");
    // Short: exactly `bash -c`'s words.
    let reply = server.call(
        "bash",
        serde_json::json!({"command": "echo before\necho )\necho after", "description": "bad"}),
    );
    assert_eq!(
        reply.text,
        "before\nbash: -c: line 2: syntax error near unexpected token `)'\nbash: -c: line 2: `echo )'\n[exit code: 2]"
    );
    assert!(!reply.is_error, "{reply:?}");
    // Long (200 KiB of comment first): the same message from `eval`, the same line
    // number, the same exit code; what came before the error ran.
    let command = format!(
        "# {}\necho before\necho )\necho after",
        "x".repeat(200 * 1024)
    );
    let reply = server.call(
        "bash",
        serde_json::json!({"command": command, "description": "bad and long"}),
    );
    assert_eq!(
        reply.text,
        "before\nbash: eval: line 3: syntax error near unexpected token `)'\nbash: eval: line 3: `echo )'\n[exit code: 2]",
        "{}",
        server.stderr()
    );
    assert!(!reply.is_error, "{reply:?}");
}

#[test]
fn a_command_over_one_mebibyte_is_invalid_arguments_and_runs_nothing() {
    let env = Env::new();
    let server = crate::mcp_stdio::McpServer::start(&env, "");
    let marker = env.workdir().join("ran");
    let command = format!("touch {}\n# {}", marker.display(), "x".repeat(1024 * 1024));
    let reply = server.call(
        "bash",
        serde_json::json!({"command": command, "description": "too long"}),
    );
    assert_eq!(
        reply.code.as_deref(),
        Some("INVALID_ARGUMENTS"),
        "{reply:?}"
    );
    assert!(reply.text.contains("1048576 (1 MiB)"), "{}", reply.text);
    assert!(reply.text.len() < 1000, "the error quotes the command");
    assert!(!marker.exists(), "a refused command ran");
    // Exactly 1 MiB runs.
    let exact = format!("touch {}\n#", marker.display());
    let exact = format!("{exact}{}", "x".repeat((1 << 20) - exact.len()));
    assert_eq!(exact.len(), 1 << 20);
    let reply = server.call(
        "bash",
        serde_json::json!({"command": exact, "description": "just fits"}),
    );
    assert_eq!(
        crate::support::without_undo_line(&reply.text),
        "[exit code: 0]",
        "{reply:?}"
    );
    assert!(marker.exists());
}

#[test]
fn a_timed_out_command_that_traps_term_gets_term_then_kill() {
    let env = Env::new();
    let marker = unique_marker();
    let seen = env.dir.path().join("term-seen");
    // It notes the TERM and carries on; only KILL ends it.
    let command = format!(
        "trap 'echo term >> {}' TERM; while :; do sleep 0.05; done; : {marker}",
        seen.display()
    );
    let out = env.call_configured(
        "[process]\nkill_grace_ms = 500\n",
        "bash",
        &serde_json::json!({"command": command, "description": "ignores TERM", "timeoutMs": 300}),
        &[],
    );
    assert_eq!(out.code.as_deref(), Some("TIMEOUT"), "{out:?}");
    assert_eq!(
        std::fs::read_to_string(&seen).unwrap_or_default(),
        "term\n",
        "TERM came first, once"
    );
    let left = survivors(&marker, Duration::from_secs(5));
    assert!(left.is_empty(), "KILL did not follow: {left:?}");
}

#[test]
fn a_command_reads_dev_null_and_holds_no_descriptor_above_two() {
    let env = Env::new();
    let out = env.call(
        "bash",
        r#"{"command":"readlink /proc/$$/fd/0; ls /proc/$$/fd > fds.txt; sort -n fds.txt | tr '\\n' ' '; cat; echo read-nothing","description":"stdin"}"#,
    );
    assert_eq!(out.code, None, "{out:?}");
    // `ls` itself opens the directory it lists as 3 in its own process, not the shell's.
    // It runs alone, its output to a file: as the first command of a pipeline it could
    // list the shell's fds while the shell still held a pipe to the next command.
    assert_eq!(
        crate::support::without_undo_line(&out.content),
        "/dev/null\n0 1 2 read-nothing\n[exit code: 0]",
        "{out:?}"
    );
}

/// Python that prints `pdeathsig=N`: its own parent-death signal (`prctl(PR_GET_PDEATHSIG)`,
/// 2). Run with `exec`, it is the process dsh spawned (a forked child's would be 0). The
/// word is spelled apart so that a terminal's echo of the typed line does not match.
const PRINT_PDEATHSIG: &str = "exec python3 -c 'import ctypes; v = ctypes.c_int(-1); ctypes.CDLL(None).prctl(2, ctypes.byref(v)); print(\"pdeath\" + \"sig=%d\" % v.value)'";

/// Under `dsh` the keeper alone kills what is left when dsh dies (see the containment
/// tests, which SIGKILL dsh): a run gets no parent-death signal, which fires when the
/// thread that spawned it ends, and would kill every run at an upgrade's `exec`.
#[test]
fn a_command_and_a_terminal_shell_get_no_parent_death_signal_under_the_keeper() {
    let env = Env::new();
    let out = env.call(
        "bash",
        &serde_json::json!({"command": PRINT_PDEATHSIG, "description": "pdeathsig"}).to_string(),
    );
    assert_eq!(out.code, None, "{out:?}");
    assert!(out.content.contains("pdeathsig=0"), "{out:?}");
    // A terminal session's shell: the same, read by the program it becomes.
    let server = crate::mcp_stdio::McpServer::start(&env, "");
    let opened = server.call_ok("terminal_open", serde_json::json!({}));
    let term = opened
        .split_whitespace()
        .find(|word| word.starts_with("term-"))
        .unwrap_or_else(|| panic!("no session id in {opened:?}"))
        .to_string();
    let reply = server.call(
        "terminal_send",
        serde_json::json!({"id": term, "input": PRINT_PDEATHSIG, "wait": {"pattern": "pdeathsig=-?[0-9]+", "timeout_ms": 20000}}),
    );
    assert!(reply.text.contains("pdeathsig=0"), "{reply:?}");
}
