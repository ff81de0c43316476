//! A server that runs for a long time stays bounded: thousands of finished background
//! jobs on one connection cost no descriptors and little memory (the oldest are retired,
//! and saying so), calls naming unknown tools do not grow the metrics table, and every
//! spill file stops at its cap (a foreground command's and a terminal job's).

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::mcp_stdio::{McpServer, ToolReply};
use crate::support::{survivors, unique_marker, Env};

/// Open descriptors of `pid`.
fn open_fds(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// Resident memory of `pid`, in KiB.
fn rss_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .expect("VmRSS in /proc/PID/status")
}

/// Files under `dir` (recursively) whose name starts with `prefix`.
fn files_named(dir: &Path, prefix: &str) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(files_named(&path, prefix));
        } else if entry.file_name().to_string_lossy().starts_with(prefix) {
            found.push(path);
        }
    }
    found
}

/// The job id in a `bash` background start's text.
fn job_id(text: &str) -> String {
    text.split_whitespace()
        .find(|word| word.starts_with("bash-") || word.starts_with("terminal-"))
        .unwrap_or_else(|| panic!("no job id in {text:?}"))
        .to_string()
}

/// Starts `batch` background jobs at once, then waits for each to end (job_output
/// with a wait returns when the job ends); returns their ids.
fn run_batch(server: &McpServer, batch: usize, first: usize) -> Vec<String> {
    let starts: Vec<_> = (0..batch)
        .map(|n| {
            server.start_call(
                "bash",
                json!({"command": format!("echo soak-{}", first + n), "description": "soak", "run_in_background": true}),
            )
        })
        .collect();
    let ids: Vec<String> = starts
        .into_iter()
        .map(|pending| {
            let reply = pending.reply(server);
            assert!(!reply.is_error, "{reply:?}\n{}", server.stderr());
            job_id(&reply.text)
        })
        .collect();
    // Read every job from its cursor, all at once, until none is running.
    let mut running: Vec<(String, u64)> = ids.iter().map(|id| (id.clone(), 0)).collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !running.is_empty() && Instant::now() < deadline {
        let reads: Vec<_> = running
            .iter()
            .map(|(id, since)| {
                server.start_call(
                    "job_output",
                    json!({"id": id, "since": since, "wait_ms": 5000}),
                )
            })
            .collect();
        let mut still = Vec::new();
        for (pending, (id, _)) in reads.into_iter().zip(running) {
            let reply = pending.reply(server);
            assert!(!reply.is_error, "{id}: {reply:?}");
            if reply.text.contains(": running;") {
                still.push((id, next_cursor(&reply.text)));
            } else {
                assert!(reply.text.contains("exited with code 0"), "{id}: {reply:?}");
            }
        }
        running = still;
    }
    assert!(running.is_empty(), "still running: {running:?}");
    ids
}

#[test]
fn two_thousand_finished_jobs_cost_no_descriptors_and_the_oldest_say_they_were_retired() {
    let env = Env::new();
    let server = McpServer::start(&env, "");
    let pid = server.pid();
    // Warm up: the first calls compile and instantiate the plugins and fill the
    // allocator's pools; a bound is measured from there.
    let first = run_batch(&server, 50, 0);
    let fds_at_start = open_fds(pid);
    let rss_at_start = rss_kib(pid);
    let started = Instant::now();
    let mut done = 50;
    while done < 2000 {
        run_batch(&server, 50, done);
        done += 50;
    }
    let elapsed = started.elapsed();
    let (fds, rss) = (open_fds(pid), rss_kib(pid));
    println!(
        "2000 jobs in {elapsed:?}: descriptors {fds_at_start} -> {fds}, RSS {} -> {} MiB",
        rss_at_start / 1024,
        rss / 1024
    );
    assert!(
        fds <= fds_at_start + 10,
        "open descriptors grew from {fds_at_start} to {fds}"
    );
    assert!(
        rss <= rss_at_start + 32 * 1024,
        "RSS grew from {rss_at_start} KiB to {rss} KiB"
    );

    // The newest finished jobs are kept (the default 256), the rest retired with their
    // spill files.
    let listed = server.call_ok("job_list", json!({}));
    assert_eq!(listed.lines().count(), 256, "{listed}");
    let spill_files = files_named(&env.state_dir(), "job-bash-");
    assert_eq!(spill_files.len(), 256, "job spill files on disk");

    let retired = server.call("job_output", json!({"id": first[0]}));
    assert!(retired.is_error, "{retired:?}");
    assert_eq!(retired.code.as_deref(), Some("NOT_FOUND"));
    assert!(
        retired.text.contains("finished and was retired")
            && retired.text.contains("max_finished_per_owner"),
        "{retired:?}"
    );
    let never = server.call("job_output", json!({"id": "bash-999999"}));
    assert_eq!(never.code.as_deref(), Some("NOT_FOUND"));
    assert!(!never.text.contains("retired"), "{never:?}");
    let kept = server.call_ok("job_output", json!({"id": "bash-2000"}));
    assert!(
        kept.contains("soak-") && kept.contains("exited with code 0"),
        "{kept}"
    );
}

/// A `tools/call` of `tool` answered with a JSON-RPC error (an unknown tool).
fn unknown_tool_error(answer: &Value) -> bool {
    answer["error"]["data"]["code"] == "UNKNOWN_TOOL"
}

#[test]
fn ten_thousand_calls_naming_unknown_tools_share_one_metrics_bucket() {
    let env = Env::new();
    let server = McpServer::start(&env, "");
    server.call_ok("job_list", json!({}));
    let marker = unique_marker();
    for batch in 0..20 {
        let pending: Vec<_> = (0..500)
            .map(|n| server.start_call(&format!("nope_{marker}_{batch}_{n}"), json!({})))
            .collect();
        for call in pending {
            let answer = call.wait(&server);
            assert!(unknown_tool_error(&answer), "{answer}");
        }
    }
    let output = env
        .dsh()
        .args(["stats", "--json", "--server", &server.pid().to_string()])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stats: Value = serde_json::from_slice(&output.stdout).unwrap();
    let tools = stats["tools"].as_object().unwrap();
    let names: Vec<&String> = tools.keys().collect();
    assert_eq!(names, ["(unknown)", "job_list"], "the metrics table's keys");
    assert_eq!(tools["(unknown)"]["calls"], 10_000);
    assert_eq!(tools["(unknown)"]["errors"]["UNKNOWN_TOOL"], 10_000);
}

#[test]
fn a_foreground_command_writing_200_mb_stops_its_spill_file_at_the_cap_and_says_so() {
    let env = Env::new();
    let output = env
        .dsh_configured("[limits]\nmax_spill_bytes = 10000000\n")
        .args([
            "call",
            "bash",
            r#"{"command":"yes | head -c 200000000","description":"big"}"#,
            "--json",
        ])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let value: Value = serde_json::from_slice(&output.stdout).unwrap();
    let content = value["content"].as_str().unwrap();
    let spill = value["full_output_path"].as_str().expect("a spill file");
    assert_eq!(std::fs::metadata(spill).unwrap().len(), 10_000_000);
    assert!(
        content.contains("cut at the spill cap")
            && content.contains("max_spill_bytes")
            && content.contains("holds its first 10000000 of 200000000 bytes"),
        "{}",
        &content[..content.len().min(600)]
    );
    assert!(content.contains(spill), "the content names the spill file");
    assert!(
        content.ends_with("[exit code: 0]"),
        "the command ran to its end"
    );
    assert!(
        content.len() <= 30_000,
        "content is {} bytes",
        content.len()
    );
}

/// The `next cursor` of a `job_output` text.
fn next_cursor(text: &str) -> u64 {
    text.rsplit_once("next cursor: ")
        .and_then(|(_, rest)| rest.trim_end_matches(']').trim().parse().ok())
        .unwrap_or_else(|| panic!("no next cursor in {text:?}"))
}

/// Reads job `id` from where the last read ended, waiting for news, until it is no
/// longer running; returns that last read.
fn wait_for_end(server: &McpServer, id: &str) -> ToolReply {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut since = 0;
    loop {
        let reply = server.call(
            "job_output",
            json!({"id": id, "since": since, "wait_ms": 5000, "max_bytes": 200}),
        );
        assert!(!reply.is_error, "{id}: {reply:?}");
        if !reply.text.contains(": running;") || Instant::now() > deadline {
            return reply;
        }
        since = next_cursor(&reply.text);
    }
}

#[test]
fn a_terminal_background_job_is_killed_at_the_job_cap_and_its_spill_file_stops_there() {
    let env = Env::new();
    let server = McpServer::start(&env, "[jobs]\nmax_output_bytes = 200000\n");
    let opened = server.call_ok("terminal_open", json!({}));
    let term = opened
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .find(|word| word.starts_with("term-"))
        .unwrap_or_else(|| panic!("no session id in {opened:?}"))
        .to_string();
    let started = server.call_ok(
        "terminal_send",
        json!({"id": term, "input": "yes terminal-cap-line", "background": true, "wait": {"timeout_ms": 60000}}),
    );
    assert_killed_at_the_cap(&env, &server, &job_id(&started));
    // The send was interrupted: the shell answers again.
    let echoed = server.call_ok(
        "terminal_send",
        json!({"id": term, "input": "echo still-$((40+2))", "wait": {"pattern": "still-42"}}),
    );
    assert!(echoed.contains("still-42"), "{echoed}");
}

#[test]
fn a_bash_background_job_is_killed_at_the_job_cap_with_its_process_group_and_its_spill_file_stops_there(
) {
    let env = Env::new();
    let server = McpServer::start(&env, "[jobs]\nmax_output_bytes = 200000\n");
    // A `sleep` duration no other process has: its command line is the marker.
    let marker = format!("600.{}", unique_marker());
    let started = server.call_ok(
        "bash",
        json!({"command": format!("sleep {marker} & yes bash-cap-line"), "description": "past the cap", "run_in_background": true}),
    );
    assert_killed_at_the_cap(&env, &server, &job_id(&started));
    // Its whole process group went with it, the `sleep` it left running too.
    let left = survivors(&marker, Duration::from_secs(10));
    assert!(
        left.is_empty(),
        "a process of the killed job lives on: {left:?}"
    );
}

/// Background job `job` ended killed for passing `[jobs] max_output_bytes` (200000 in
/// these tests), its spill file exactly that long.
fn assert_killed_at_the_cap(env: &Env, server: &McpServer, job: &str) {
    let ended = wait_for_end(server, job);
    assert!(
        ended.text.contains("killed") && ended.text.contains("max_output_bytes"),
        "{ended:?}"
    );
    let spill = files_named(&env.state_dir(), &format!("job-{job}"));
    assert_eq!(spill.len(), 1, "{spill:?}");
    assert_eq!(std::fs::metadata(&spill[0]).unwrap().len(), 200_000);
}

#[test]
fn a_command_that_makes_no_call_leaves_no_session_directory() {
    let env = Env::new();
    let output = env.dsh().args(["tools", "--json"]).output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let sessions: Vec<_> = std::fs::read_dir(env.state_dir().join("sessions"))
        .map(|entries| entries.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert_eq!(sessions, Vec::<std::path::PathBuf>::new());
    // A call does make one.
    let out = env.call("bash", r#"{"command":"true","description":"x"}"#);
    assert_eq!(out.code, None, "{out:?}");
    assert_eq!(
        std::fs::read_dir(env.state_dir().join("sessions"))
            .unwrap()
            .count(),
        1
    );
}

#[test]
fn past_sessions_beyond_the_configured_count_are_removed_oldest_first() {
    let env = Env::new();
    let sessions = env.state_dir().join("sessions");
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    // Five past sessions of a dsh that is gone (a pid above pid_max), oldest first.
    let past: Vec<std::path::PathBuf> = (0..5)
        .map(|i| {
            let dir = sessions.join(format!("s{}-999999999", now_ms - 10_000 + i * 1000));
            std::fs::create_dir_all(dir.join("spill")).unwrap();
            std::fs::write(dir.join("events.jsonl"), "{}\n").unwrap();
            dir
        })
        .collect();
    let out = env.call_configured(
        "[state]\nmax_sessions = 2\n",
        "bash",
        &serde_json::json!({"command": "echo hi", "description": "x"}),
        &[],
    );
    assert_eq!(out.code, None, "{out:?}");
    let left: Vec<bool> = past.iter().map(|dir| dir.exists()).collect();
    assert_eq!(
        left,
        [false, false, false, true, true],
        "the two newest past sessions stay"
    );
    // And the call's own session, which is not counted among the past ones.
    assert_eq!(std::fs::read_dir(&sessions).unwrap().count(), 3);
}
