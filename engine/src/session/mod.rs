//! A session: one run of the host serving calls. Owns the session id, the workspace
//! calls run in, the state directory (where it is, that it is this user's own and
//! private) with the event log and the spill files, and the call id sequence.

pub mod event_log;
use crate::private;
pub mod retention;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub use event_log::EventLog;

/// The directories dsh keeps under the state directory (tightened to 0700 when an
/// older dsh left them open).
const STATE_SUBDIRS: [&str; 3] = ["sessions", "cache", "run"];

/// Why the state directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum StateDirError {
    #[error("state directory {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("state directory {path} is not a directory")]
    NotADirectory { path: PathBuf },
    #[error(
        "state directory {path} belongs to uid {owner}, not to this user (uid {uid}): \
         refusing to keep event logs, output and compiled code there; \
         choose another with --state-dir or DSH_STATE_DIR"
    )]
    NotOwned { path: PathBuf, owner: u32, uid: u32 },
    #[error(
        "state directory {path} is writable by other users (mode {mode:o}): anything in \
         it may have been planted; check it and `chmod 700 {path}`, or choose another \
         with --state-dir or DSH_STATE_DIR"
    )]
    WritableByOthers { path: PathBuf, mode: u32 },
    #[error(
        "state directory {path} is a symbolic link in {parent}, a directory other users \
         can write to: refusing it; choose another with --state-dir or DSH_STATE_DIR"
    )]
    PlantedSymlink { path: PathBuf, parent: PathBuf },
}

/// A session a binary before this one in the same process started (an upgrade): its
/// event log goes on.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct SessionHandover {
    pub id: String,
    /// The number the next call gets.
    pub next_call: u64,
}

/// One session of the host.
pub struct Session {
    pub id: Arc<str>,
    /// The workspace relative paths resolve against.
    pub workdir: PathBuf,
    /// `STATE_DIR/sessions/ID`.
    pub dir: PathBuf,
    pub spill_dir: PathBuf,
    pub events: EventLog,
    next_call: AtomicU64,
}

impl Session {
    /// A new session under `state_dir` (which must pass [`prepare_state_dir`]). Its
    /// directory is made (0700) by its first event or spill file, so a command that
    /// makes no call leaves none.
    pub fn open(state_dir: &Path, workdir: PathBuf) -> std::io::Result<Session> {
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let id = format!("s{}-{}", started.as_millis(), std::process::id());
        let dir = state_dir.join("sessions").join(&id);
        let spill_dir = dir.join("spill");
        let events = EventLog::create(&dir.join("events.jsonl"));
        Ok(Session {
            id: id.into(),
            workdir,
            dir,
            spill_dir,
            events,
            next_call: AtomicU64::new(1),
        })
    }

    /// The session `id` a binary before this one in the same process started (an
    /// upgrade): its event log goes on, its calls numbered from `next_call`.
    pub fn resume(
        state_dir: &Path,
        workdir: PathBuf,
        id: &str,
        next_call: u64,
    ) -> std::io::Result<Session> {
        if id.is_empty() || id.contains(['/', '.']) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{id:?} is no session id"),
            ));
        }
        let dir = state_dir.join("sessions").join(id);
        Ok(Session {
            id: id.into(),
            workdir,
            spill_dir: dir.join("spill"),
            events: EventLog::create(&dir.join("events.jsonl")),
            dir,
            next_call: AtomicU64::new(next_call),
        })
    }

    /// The number the next call gets.
    pub fn next_call(&self) -> u64 {
        self.next_call.load(Ordering::Relaxed)
    }

    /// The next call id: `call-N`.
    pub fn next_call_id(&self) -> String {
        format!("call-{}", self.next_call.fetch_add(1, Ordering::Relaxed))
    }
}

pub use crate::private::euid;

/// The default state directory: `$XDG_STATE_HOME/dsh`, else `$HOME/.local/state/dsh`,
/// else `$XDG_RUNTIME_DIR/dsh`, else `$TMPDIR/dsh-UID` (`/tmp` when `TMPDIR` is unset;
/// never a directory shared by users). Only absolute `XDG_*` and `HOME` count.
pub fn default_state_dir() -> PathBuf {
    state_dir_from(|name| std::env::var_os(name), euid())
}

/// [`default_state_dir`] from the variables `get` gives, for the user `uid`.
fn state_dir_from(get: impl Fn(&str) -> Option<std::ffi::OsString>, uid: u32) -> PathBuf {
    let var = |name: &str| get(name).map(PathBuf::from).filter(|dir| dir.is_absolute());
    if let Some(dir) = var("XDG_STATE_HOME") {
        return dir.join("dsh");
    }
    if let Some(home) = var("HOME") {
        return home.join(".local/state/dsh");
    }
    if let Some(runtime) = var("XDG_RUNTIME_DIR") {
        return runtime.join("dsh");
    }
    std::env::temp_dir().join(format!("dsh-{uid}"))
}

/// Makes `path` ready to be the state directory: created 0700 (with any missing
/// parents) when it does not exist; refused when it belongs to another user, is
/// writable by other users, or is a symbolic link in a directory others can write to
/// (a link planted in `/tmp`). An existing one that others can only read is
/// tightened to 0700, and so are the directories dsh keeps in it.
pub fn prepare_state_dir(path: &Path) -> Result<(), StateDirError> {
    let io_error = |source| StateDirError::Io {
        path: path.to_path_buf(),
        source,
    };
    match std::fs::symlink_metadata(path) {
        Ok(_) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            private::create_dir_all(path).map_err(io_error)?;
        }
        Err(error) => return Err(io_error(error)),
    }
    // Looked at again after creating: someone may have put a link there first.
    if std::fs::symlink_metadata(path)
        .map_err(io_error)?
        .file_type()
        .is_symlink()
    {
        let parent = match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        let parent_mode = std::fs::metadata(parent).map_err(io_error)?.mode();
        if parent_mode & 0o022 != 0 {
            return Err(StateDirError::PlantedSymlink {
                path: path.to_path_buf(),
                parent: parent.to_path_buf(),
            });
        }
    }
    check_state_dir(path)?;
    for dir in std::iter::once(path.to_path_buf()).chain(STATE_SUBDIRS.map(|d| path.join(d))) {
        let Ok(meta) = std::fs::metadata(&dir) else {
            continue;
        };
        let mode = meta.mode() & 0o7777;
        if meta.is_dir() && meta.uid() == euid() && mode & 0o077 != 0 {
            tracing::warn!(dir = %dir.display(), mode = format!("{mode:o}"), "state directory readable by other users: made private (0700)");
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(private::DIR_MODE))
                .map_err(io_error)?;
        }
    }
    Ok(())
}

/// Checks, without changing anything, that the existing `path` is a directory that
/// belongs to this user and that other users cannot write to.
pub fn check_state_dir(path: &Path) -> Result<(), StateDirError> {
    let meta = std::fs::metadata(path).map_err(|source| StateDirError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    if !meta.is_dir() {
        return Err(StateDirError::NotADirectory {
            path: path.to_path_buf(),
        });
    }
    let uid = euid();
    if meta.uid() != uid {
        return Err(StateDirError::NotOwned {
            path: path.to_path_buf(),
            owner: meta.uid(),
            uid,
        });
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(StateDirError::WritableByOthers {
            path: path.to_path_buf(),
            mode,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_new_state_dir_is_created_private() {
        let root = tempfile::tempdir().unwrap();
        let state = root.path().join("x/dsh");
        prepare_state_dir(&state).unwrap();
        assert_eq!(private::mode_of(&state).unwrap(), 0o700);
        assert_eq!(private::mode_of(&root.path().join("x")).unwrap(), 0o700);
    }

    #[test]
    fn a_state_dir_others_can_read_is_tightened_and_one_they_can_write_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let state = root.path().join("state");
        std::fs::create_dir_all(state.join("sessions")).unwrap();
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(
            state.join("sessions"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        prepare_state_dir(&state).unwrap();
        assert_eq!(private::mode_of(&state).unwrap(), 0o700);
        assert_eq!(private::mode_of(&state.join("sessions")).unwrap(), 0o700);

        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o777)).unwrap();
        let error = prepare_state_dir(&state).unwrap_err();
        assert!(
            matches!(error, StateDirError::WritableByOthers { .. }),
            "{error}"
        );
        assert!(error.to_string().contains("chmod 700"), "{error}");
    }

    #[test]
    fn a_state_dir_of_another_user_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let state = root.path().join("state");
        std::fs::create_dir(&state).unwrap();
        // Fails harmlessly when not root.
        if std::os::unix::fs::chown(&state, Some(65534), Some(65534)).is_err() {
            // Not root: no directory another user owns can be made here.
            assert!(
                std::env::var_os("CI").is_none_or(|ci| ci != "true"),
                "this test needs root (chown), and CI=true: it must run"
            );
            eprintln!("skipped: making a directory another user owns needs root");
            return;
        }
        let error = prepare_state_dir(&state).unwrap_err();
        assert!(
            matches!(error, StateDirError::NotOwned { owner: 65534, .. }),
            "{error}"
        );
    }

    #[test]
    fn a_symlink_planted_in_a_world_writable_dir_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let shared = root.path().join("tmp");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let target = root.path().join("elsewhere");
        std::fs::create_dir(&target).unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o700)).unwrap();
        let link = shared.join("dsh-0");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let error = prepare_state_dir(&link).unwrap_err();
        assert!(
            matches!(error, StateDirError::PlantedSymlink { .. }),
            "{error}"
        );
        // A symlink in the user's own directory is fine.
        let own = root.path().join("mine");
        std::os::unix::fs::symlink(&target, &own).unwrap();
        prepare_state_dir(&own).unwrap();
    }

    #[test]
    fn the_default_falls_back_to_a_per_user_dir_never_a_shared_one() {
        let vars = |set: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                set.iter()
                    .find(|(key, _)| *key == name)
                    .map(|(_, value)| std::ffi::OsString::from(value))
            }
        };
        let all: &'static [(&str, &str)] = &[
            ("XDG_STATE_HOME", "/s"),
            ("HOME", "/h"),
            ("XDG_RUNTIME_DIR", "/r"),
        ];
        assert_eq!(state_dir_from(vars(all), 7), Path::new("/s/dsh"));
        assert_eq!(
            state_dir_from(vars(&all[1..]), 7),
            Path::new("/h/.local/state/dsh")
        );
        assert_eq!(state_dir_from(vars(&all[2..]), 7), Path::new("/r/dsh"));
        // Relative or empty values do not count.
        let relative: &'static [(&str, &str)] = &[("XDG_STATE_HOME", "rel"), ("HOME", "")];
        assert_eq!(
            state_dir_from(vars(relative), 7),
            std::env::temp_dir().join("dsh-7")
        );
    }
}
