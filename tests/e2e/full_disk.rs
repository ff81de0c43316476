//! A full disk: the state directory is a small tmpfs (mounted by the test, as root) that
//! a file of zeros fills. Calls still answer, a call whose `tool/call` event cannot be
//! written is refused before it runs (`IO_ERROR`: nothing runs unlogged), a result whose
//! spill file cannot be written is still cut and says why, the compile cache only warns,
//! nothing panics, and once the filler is deleted the next calls run and are logged.
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
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    /// A tmpfs of `size` (`mount -o size=…`) over `env`'s state directory, or `None`
    /// (after saying so) when it cannot be mounted here.
    fn over_state_dir(env: &Env, size: &str) -> Option<Tmpfs> {
        let dir = env.state_dir();
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
        assert!(
            std::env::var("CI").map_or(true, |ci| ci != "true"),
            "this test needs root to mount a tmpfs (uid {uid}: {why}), and CI=true: it must run"
        );
        eprintln!(
            "skipped: mounting a small tmpfs as the state directory needs root (uid {uid}: {why})"
        );
        None
    }

    fn filler(&self) -> PathBuf {
        self.dir.join("filler")
    }

    /// Fills the tmpfs with zeros until it has no room left.
    fn fill(&self) {
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
    fn free_some(&self, bytes: u64) {
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

#[test]
fn a_call_whose_tool_call_event_cannot_be_written_is_refused_unrun_and_calls_recover_when_space_returns(
) {
    let env = Env::cold();
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
    let env = Env::cold();
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
    let env = Env::cold();
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
