//! Retiring past sessions: when a host starts, the session directories under
//! `STATE_DIR/sessions` past the `[state]` limits (count, age, total size) are removed,
//! oldest first. A session whose dsh is still running is never removed; this host's own
//! session is neither removed nor counted.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::config::StateConfig;

/// One past session directory.
#[derive(Debug)]
struct PastSession {
    dir: PathBuf,
    started_ms: u64,
    pid: i32,
    bytes: u64,
}

/// The start time and pid in a session id `sMILLIS-PID`.
fn parse_id(name: &str) -> Option<(u64, i32)> {
    let (millis, pid) = name.strip_prefix('s')?.split_once('-')?;
    Some((millis.parse().ok()?, pid.parse().ok()?))
}

fn alive(pid: i32) -> bool {
    rustix::process::Pid::from_raw(pid)
        .is_some_and(|pid| rustix::process::test_kill_process(pid).is_ok())
}

fn size_of(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.file_type() {
            Ok(t) if t.is_dir() => size_of(&entry.path()),
            _ => entry.metadata().map(|m| m.len()).unwrap_or(0),
        })
        .sum()
}

/// Removes the sessions under `state_dir` past `limits`, oldest first; returns how many.
pub fn retire_sessions(state_dir: &Path, limits: &StateConfig) -> usize {
    let sessions_dir = state_dir.join("sessions");
    let Ok(entries) = std::fs::read_dir(&sessions_dir) else {
        return 0;
    };
    let own = std::process::id() as i32;
    let mut past: Vec<PastSession> = entries
        .flatten()
        .filter_map(|entry| {
            let (started_ms, pid) = parse_id(entry.file_name().to_str()?)?;
            // This host's own session is not a past one.
            if pid == own {
                return None;
            }
            Some(PastSession {
                dir: entry.path(),
                started_ms,
                pid,
                bytes: size_of(&entry.path()),
            })
        })
        .collect();
    // Newest first: the ones kept come first.
    past.sort_by_key(|s| std::cmp::Reverse(s.started_ms));
    let now_ms = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64;
    let max_age_ms = Duration::from_secs(limits.max_session_age_days * 86_400).as_millis() as u64;
    let max_bytes = limits.max_sessions_mb.saturating_mul(1 << 20);
    let (mut kept, mut kept_bytes, mut removed) = (0usize, 0u64, 0usize);
    for session in past {
        let too_many = kept >= limits.max_sessions;
        let too_old = limits.max_session_age_days > 0
            && now_ms.saturating_sub(session.started_ms) > max_age_ms;
        let too_big = limits.max_sessions_mb > 0 && kept_bytes + session.bytes > max_bytes;
        if (too_many || too_old || too_big) && !alive(session.pid) {
            match std::fs::remove_dir_all(&session.dir) {
                Ok(()) => removed += 1,
                Err(error) => {
                    tracing::warn!(%error, dir = %session.dir.display(), "cannot remove a past session")
                }
            }
        } else {
            kept += 1;
            kept_bytes += session.bytes;
        }
    }
    if removed > 0 {
        tracing::info!(removed, kept, "removed past sessions beyond [state] limits");
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn make(state: &Path, started_ms: u64, pid: i32, bytes: usize) -> PathBuf {
        let dir = state.join("sessions").join(format!("s{started_ms}-{pid}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("events.jsonl"), vec![b'x'; bytes]).unwrap();
        dir
    }

    /// A pid no process has (above pid_max).
    const GONE: i32 = 999_999_999;

    fn now_ms() -> u64 {
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
    }

    #[test]
    fn past_the_count_the_oldest_go() {
        let state = tempfile::tempdir().unwrap();
        let now = now_ms();
        let dirs: Vec<PathBuf> = (0..5)
            .map(|i| make(state.path(), now - 5000 + i, GONE, 10))
            .collect();
        let limits = StateConfig {
            max_sessions: 3,
            ..StateConfig::default()
        };
        assert_eq!(retire_sessions(state.path(), &limits), 2);
        assert!(!dirs[0].exists() && !dirs[1].exists());
        assert!(dirs[2].exists() && dirs[3].exists() && dirs[4].exists());
    }

    #[test]
    fn too_old_or_too_big_go_but_a_running_ones_stays() {
        let state = tempfile::tempdir().unwrap();
        let now = now_ms();
        let old = make(state.path(), now - 40 * 86_400_000, GONE, 10);
        // A running dsh's session (this test's parent, say): never removed.
        let running = make(
            state.path(),
            now - 41 * 86_400_000,
            std::os::unix::process::parent_id() as i32,
            10,
        );
        let big_older = make(state.path(), now - 2000, GONE, 700 << 10);
        let big_newer = make(state.path(), now - 1000, GONE, 700 << 10);
        let limits = StateConfig {
            max_sessions: 100,
            max_session_age_days: 30,
            max_sessions_mb: 1,
        };
        assert_eq!(retire_sessions(state.path(), &limits), 2);
        assert!(!old.exists() && !big_older.exists());
        assert!(running.exists() && big_newer.exists());
    }
}
