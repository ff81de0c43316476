//! A full disk: the state directory is a small tmpfs (mounted by the test, as root) that
//! a file of zeros fills. Calls still answer, a call whose `tool/call` event cannot be
//! written is refused before it runs (`IO_ERROR`: nothing runs unlogged), a result whose
//! spill file cannot be written is still cut and says why (a plugin's result, bash's own
//! output capture and a background job's output alike, leaving no partial spill file),
//! the compile cache only warns, past sessions are still retired at start, nothing
//! panics, and once the filler is deleted the next calls run, spill and are logged.
//!
//! The tests need root (`mount`): without it they fail under `CI=true`, and otherwise
//! skip with a message that says so.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

use crate::mcp_stdio::McpServer;
use crate::support::Env;

/// A tmpfs mounted over an environment's state directory; unmounted when dropped.
pub(crate) struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    /// A tmpfs of `size` (`mount -o size=…`) over `env`'s state directory, or `None`
    /// (after saying so) when it cannot be mounted here.
    pub(crate) fn over_state_dir(env: &Env, size: &str) -> Option<Tmpfs> {
        Tmpfs::at(env.state_dir(), size, "as the state directory")
    }

    /// A tmpfs of `size` over the directory `dir`, or `None` (after saying so) when it
    /// cannot be mounted here; `role` says what it is for.
    pub(crate) fn at(dir: PathBuf, size: &str, role: &str) -> Option<Tmpfs> {
        let mounted = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(&dir)
            .output();
        let why = match mounted {
            Ok(output) if output.status.success() => return Some(Tmpfs { dir }),
            Ok(output) => String::from_utf8_lossy(&output.stderr).trim().to_string(),
            Err(error) => error.to_string(),
        };
        let uid = unsafe { libc::geteuid() };
        crate::support::skipped(&format!(
            "mounting a small tmpfs {role} needs root (uid {uid}: {why})"
        ));
        None
    }

    fn filler(&self) -> PathBuf {
        self.dir.join("filler")
    }

    /// Fills the tmpfs with zeros until it has no room left.
    pub(crate) fn fill(&self) {
        let mut file = std::fs::File::create(self.filler()).unwrap();
        let zeros = vec![0u8; 64 << 10];
        loop {
            match file.write(&zeros) {
                Ok(0) => break,
                Ok(_) => {}
                Err(error) if error.raw_os_error() == Some(libc::ENOSPC) => break,
                Err(error) => panic!("filling the tmpfs: {error}"),
            }
        }
        let _ = file.sync_all();
    }

    /// Frees `bytes` of the filler.
    pub(crate) fn free_some(&self, bytes: u64) {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(self.filler())
            .unwrap();
        let len = file.metadata().unwrap().len();
        file.set_len(len.saturating_sub(bytes)).unwrap();
    }

    /// Space returns: the filler goes.
    fn free(&self) {
        std::fs::remove_file(self.filler()).unwrap();
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazy: a server the test failed to stop must not leave the mount behind.
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

/// Every line of every event log in `state`, each of which must be whole JSON.
fn event_lines(state: &Path) -> Vec<Value> {
    let mut events = Vec::new();
    for entry in std::fs::read_dir(state.join("sessions")).unwrap().flatten() {
        let Ok(text) = std::fs::read_to_string(entry.path().join("events.jsonl")) else {
            continue;
        };
        for line in text.lines() {
            let event = serde_json::from_str::<Value>(line).unwrap_or_else(|error| {
                panic!("a broken line in the event log ({error}): {line:?}")
            });
            events.push(event);
        }
    }
    events
}

fn bash(command: &str) -> Value {
    json!({"command": command, "description": "full disk"})
}

/// Every spill file of every session in `state`.
fn spill_files(state: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for session in std::fs::read_dir(state.join("sessions")).unwrap().flatten() {
        let Ok(entries) = std::fs::read_dir(session.path().join("spill")) else {
            continue;
        };
        files.extend(entries.flatten().map(|entry| entry.path()));
    }
    files
}

/// What `seq 1 N` prints.
fn seq_output(n: u64) -> String {
    (1..=n).map(|i| format!("{i}\n")).collect()
}

/// The last `n` bytes of `text` (for failure messages).
fn end_of(text: &str, n: usize) -> &str {
    let mut start = text.len().saturating_sub(n);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

#[test]
fn a_call_whose_tool_call_event_cannot_be_written_is_refused_unrun_and_calls_recover_when_space_returns(
) {
    let env = Env::new();
    let Some(tmpfs) = Tmpfs::over_state_dir(&env, "32m") else {
        return;
    };
    let server = McpServer::start(&env, "");
    server.call_ok("bash", bash("echo before"));

    tmpfs.fill();
    let ran = env.workdir().join("ran");
    // Longer than the page the log's last line left room in (so it cannot fit in it;
    // what does fit of it is written, then cut off again).
    let padding = "p".repeat(16 << 10);
    let refused = server.call(
        "bash",
        bash(&format!("touch {} # {padding}", ran.display())),
    );
    assert!(refused.is_error, "{refused:?}");
    assert_eq!(refused.code.as_deref(), Some("IO_ERROR"), "{refused:?}");
    assert!(
        refused.text.contains("did not run")
            && refused.text.contains("cannot write the event log")
            && refused.text.contains("No space left on device"),
        "{refused:?}"
    );
    assert!(!ran.exists(), "a call ran without its tool/call event");

    tmpfs.free();
    let text = server.call_ok(
        "bash",
        bash(&format!("touch {} && echo after", ran.display())),
    );
    assert!(text.contains("after"), "{text}");
    assert!(ran.exists());
    // The log is whole (no partial line from the failed writes) and has the call again.
    let events = event_lines(&env.state_dir());
    let logged = |needle: &str| {
        events.iter().any(|event| {
            event["event"] == "tool/call"
                && event["args"]["command"]
                    .as_str()
                    .is_some_and(|c| c.contains(needle))
        })
    };
    assert!(logged("echo before") && logged("echo after"), "{events:?}");
    let stderr = server.stderr();
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn a_result_whose_spill_fails_is_still_cut_and_the_marker_says_no_space() {
    let env = Env::new();
    let Some(tmpfs) = Tmpfs::over_state_dir(&env, "32m") else {
        return;
    };
    env.add_plugins(&[("echo", "echo")]);
    let server = McpServer::start(&env, "");
    // Room for the call's event (its 200 KB of arguments), not for the spill of its
    // result as well.
    let long = "y".repeat(200_000);
    tmpfs.fill();
    tmpfs.free_some(300 << 10);
    let reply = server.call("echo", json!({"text": long}));
    assert!(!reply.is_error, "{reply:?}");
    assert!(
        reply.text.len() < 40_000,
        "not cut: {} bytes",
        reply.text.len()
    );
    assert!(
        reply
            .text
            .contains("bytes omitted (spill failed: the full output could not be kept")
            && reply.text.contains("no space left on the device"),
        "{}",
        &reply.text[reply.text.len().saturating_sub(400)..]
    );

    tmpfs.free();
    let reply = server.call("echo", json!({"text": long}));
    assert!(
        !reply.is_error && reply.text.contains("(full output: "),
        "space is back, the spill works again: {}",
        &reply.text[reply.text.len().saturating_sub(400)..]
    );
    let stderr = server.stderr();
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn a_fresh_start_on_a_full_disk_serves_warns_about_the_compile_cache_and_recovers() {
    let env = Env::new();
    let Some(tmpfs) = Tmpfs::over_state_dir(&env, "2m") else {
        return;
    };
    tmpfs.fill();
    // Every embedded plugin compiles, and none fits in the cache.
    let server = McpServer::start(&env, "");
    let refused = server.call("bash", bash("echo full"));
    assert_eq!(refused.code.as_deref(), Some("IO_ERROR"), "{refused:?}");
    tmpfs.free();
    let text = server.call_ok("bash", bash("echo room"));
    assert!(text.contains("room"), "{text}");
    let stderr = server.stderr();
    assert!(stderr.contains("compile cache"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn bash_output_past_its_budget_on_a_full_disk_keeps_head_and_tail_says_the_spill_failed_and_leaves_no_partial_file(
) {
    let env = Env::new();
    let Some(tmpfs) = Tmpfs::over_state_dir(&env, "32m") else {
        return;
    };
    let server = McpServer::start(&env, "");
    server.call_ok("bash", bash("echo before"));
    let full = seq_output(2_000_000);

    tmpfs.fill();
    // Room for the call's events, not for the 14 MB of its output: the spill file gets
    // its first bytes, then ENOSPC.
    tmpfs.free_some(256 << 10);
    let reply = server.call("bash", bash("seq 1 2000000"));
    assert!(!reply.is_error, "{reply:?}\n{}", server.stderr());
    let text = &reply.text;
    assert!(text.len() < 40_000, "not cut: {} bytes", text.len());
    assert!(text.starts_with("1\n2\n3\n"), "{}", &text[..200]);
    assert!(
        text.ends_with("1999999\n2000000\n[exit code: 0]"),
        "the tail and the exit code: {}",
        end_of(text, 400)
    );
    assert!(
        text.contains("bytes omitted (spill failed: the full output could not be kept in")
            && text.contains("no space left on the device"),
        "{}",
        end_of(text, 16_000)
    );
    assert!(
        !text.contains("(full output: "),
        "no full output is promised: {}",
        end_of(text, 16_000)
    );
    let left = spill_files(&env.state_dir());
    assert!(left.is_empty(), "a partial spill file is left: {left:?}");

    tmpfs.free();
    let text = server.call_ok("bash", bash("seq 1 2000000"));
    let path = text
        .split_once("(full output: ")
        .and_then(|(_, rest)| rest.split_once(") …"))
        .map(|(path, _)| PathBuf::from(path))
        .unwrap_or_else(|| {
            panic!(
                "space is back, the output spills again: {}",
                &text[..16_000]
            )
        });
    assert!(
        std::fs::read_to_string(&path).unwrap() == full,
        "the spill file {} holds the whole output",
        path.display()
    );
    assert!(
        text.ends_with("2000000\n[exit code: 0]"),
        "{}",
        end_of(&text, 200)
    );
    let stderr = server.stderr();
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn a_background_job_whose_spill_fails_keeps_its_tail_and_job_output_says_so() {
    let env = Env::new();
    let Some(tmpfs) = Tmpfs::over_state_dir(&env, "32m") else {
        return;
    };
    let server = McpServer::start(&env, "");
    server.call_ok("bash", bash("echo before"));
    tmpfs.fill();
    tmpfs.free_some(256 << 10);
    let started = server.call_ok(
        "bash",
        json!({"command": "seq 1 2000000", "description": "full disk", "run_in_background": true}),
    );
    let id = started
        .split_whitespace()
        .find(|word| word.starts_with("bash-"))
        .unwrap_or_else(|| panic!("no job id in {started:?}"))
        .trim_end_matches(|c: char| !c.is_ascii_digit())
        .to_string();
    // Each read waits for news past the last cursor, asks for little of it and comes a
    // moment after the last: the job writes all the time, so reads as fast as the machine
    // allows would log (each read is two events) more than the room left on the disk.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut since = 0u64;
    loop {
        std::thread::sleep(std::time::Duration::from_millis(200));
        let text = server.call_ok(
            "job_output",
            json!({"id": id, "since": since, "wait_ms": 2000, "max_bytes": 256}),
        );
        if !text.contains(": running; next cursor") {
            break;
        }
        since = text
            .rsplit("next cursor: ")
            .next()
            .and_then(|rest| rest.split(']').next())
            .and_then(|cursor| cursor.trim().parse().ok())
            .unwrap_or(since);
        assert!(
            std::time::Instant::now() < deadline,
            "the job never ended: {}",
            end_of(&text, 400)
        );
    }
    // Ended: read from the start, where the tail is all there is, with a wait and without.
    let text = server.call_ok("job_output", json!({"id": id, "wait_ms": 2000}));
    let text_again = server.call_ok("job_output", json!({"id": id}));
    for text in [&text, &text_again] {
        assert!(
            text.contains("[spill failed: the full output could not be kept in")
                && text.contains("no space left on the device")
                && text.contains("are kept, in memory]"),
            "{}",
            &text[..text.len().min(2000)]
        );
        assert!(
            text.contains("1999999\n2000000\n") && text.contains("exited with code 0"),
            "the newest output and the end: {}",
            end_of(text, 400)
        );
    }
    let left = spill_files(&env.state_dir());
    assert!(left.is_empty(), "a partial spill file is left: {left:?}");
    tmpfs.free();
    let text = server.call_ok("bash", bash("seq 1 2000000"));
    assert!(text.contains("(full output: "), "{}", end_of(&text, 400));
    let stderr = server.stderr();
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn past_sessions_on_a_full_disk_are_retired_at_start_and_dsh_serves() {
    let env = Env::new();
    let Some(tmpfs) = Tmpfs::over_state_dir(&env, "32m") else {
        return;
    };
    // Four past sessions of 1 MiB each, of a dsh long gone (a pid above pid_max), the
    // oldest first; `[state] max_sessions = 2` keeps the newest two.
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let sessions = env.state_dir().join("sessions");
    let past: Vec<PathBuf> = (0..4u64)
        .map(|i| {
            let dir = sessions.join(format!("s{}-999999999", now_ms - 10_000 + i));
            std::fs::create_dir_all(dir.join("spill")).unwrap();
            std::fs::write(dir.join("events.jsonl"), vec![b'x'; 1 << 20]).unwrap();
            dir
        })
        .collect();
    // And a file named like a session: it cannot be removed as a directory, and must not
    // stop the others.
    let odd = sessions.join(format!("s{}-999999999", now_ms - 20_000));
    std::fs::write(&odd, "not a directory").unwrap();
    tmpfs.fill();

    let server = McpServer::start(&env, "[state]\nmax_sessions = 2\n");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while past[0].exists() || past[1].exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the oldest past sessions were not retired\n{}",
            server.stderr()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(
        past[2].exists() && past[3].exists(),
        "the newest two are kept"
    );
    // Retiring them freed 2 MiB: there is room for the calls' events.
    let text = server.call_ok("bash", bash("echo served"));
    assert!(text.contains("served"), "{text}");
    tmpfs.free();
    let text = server.call_ok("bash", bash("echo still"));
    assert!(text.contains("still"), "{text}");
    let stderr = server.stderr();
    assert!(!stderr.contains("panicked"), "{stderr}");
}
