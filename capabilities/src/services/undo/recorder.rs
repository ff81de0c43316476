//! The recorder: which calls are running ([`ActivityHold`]: a call in the pipeline, a
//! background job or a terminal session holds the call that started it), the paths the
//! watch says changed and whom to attribute them to, a call's record made when its hold
//! ends (each changed path read once, its new contents kept), and an undo: the checks
//! that it overwrites nothing it did not make, then the paths put back.
//!
//! Cost: a call's record costs what the call changed. The one walk of the tree is the
//! baseline at start (watching every directory, reading the files the last run did not
//! leave as they are); after it, only the paths an event names are read.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, SystemTime};

use super::config::UndoConfig;
use super::journal::{Change, IndexFile, Journal, Known, Record, Records, Segment};
use super::state::{self, Blobs, PathState};
use super::watch::{Found, Ignores, Seen, Watch, WatchError};
use crate::error::{ErrorCode, ToolError};

/// A call as the recorder knows it.
#[derive(Debug, Clone)]
pub struct CallRef {
    /// `SESSION/call-N`: the record's id.
    pub id: Arc<str>,
    pub owner: Arc<str>,
    pub tool: Arc<str>,
}

impl CallRef {
    pub fn of(call: &crate::call::CallContext) -> CallRef {
        CallRef {
            id: format!("{}/{}", call.session, call.call_id).into(),
            owner: call.owner.clone(),
            tool: call.tool.clone(),
        }
    }
}

/// Who asks for an undo or the list of records.
#[derive(Debug, Clone)]
pub enum Asker {
    /// An owner, within its session: it reaches its own calls only; `call-N` means
    /// `session/call-N`.
    Owner { owner: Arc<str>, session: Arc<str> },
    /// The operator at the command line: every record.
    Operator,
}

impl Asker {
    fn reaches(&self, record: &Record) -> bool {
        match self {
            Asker::Owner { owner, .. } => record.owner.as_deref() == Some(&**owner),
            Asker::Operator => true,
        }
    }

    fn full_id(&self, id: &str) -> String {
        match self {
            Asker::Owner { session, .. } if !id.contains('/') => format!("{session}/{id}"),
            _ => id.to_string(),
        }
    }
}

/// How long a call that starts while the baseline is being taken waits for it; past it,
/// the call runs unrecorded (its changes are recorded as made outside dsh).
pub const BASELINE_WAIT: Duration = Duration::from_secs(2);

const STARTING: u8 = 0;
const READY: u8 = 1;
const OFF: u8 = 2;

/// What undo records for one workspace.
pub struct Recorder {
    config: UndoConfig,
    root: PathBuf,
    dir: PathBuf,
    /// dsh's state directory (canonical): never recorded, even inside the workspace.
    state_dir: PathBuf,
    inner: Mutex<Inner>,
    readiness: AtomicU8,
    ready_changed: Condvar,
    ready_lock: Mutex<()>,
    stop: AtomicBool,
    /// Why nothing is recorded, when nothing is.
    off_reason: Mutex<Option<String>>,
    /// This process's name for the records of changes no call made.
    outside_prefix: String,
    /// Paths read since the baseline (what a record cost: the tests and the bench).
    paths_read: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("root", &self.root)
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

struct Inner {
    watch: Option<Watch>,
    index: HashMap<String, Known>,
    /// Paths an event named, not read yet, each with the activities live then (none:
    /// no call ran).
    dirty: HashMap<String, BTreeSet<Arc<str>>>,
    live: HashMap<Arc<str>, Live>,
    records: Records,
    journal: Journal,
    blobs: Blobs,
    session_bytes: u64,
    outside_count: u64,
    /// Held while this process records the workspace (another process does not).
    _lock: Option<std::fs::File>,
}

/// A live activity: a call running, or a job or terminal session one started.
struct Live {
    call: CallRef,
    holds: usize,
    changes: BTreeMap<String, Change>,
    not_recorded: BTreeSet<String>,
    ignored: BTreeSet<String>,
    bytes: u64,
    undoes: Vec<String>,
}

impl Live {
    fn new(call: CallRef) -> Live {
        Live {
            call,
            holds: 0,
            changes: BTreeMap::new(),
            not_recorded: BTreeSet::new(),
            ignored: BTreeSet::new(),
            bytes: 0,
            undoes: Vec::new(),
        }
    }

    fn add_change(&mut self, path: &str, change: Change) {
        match self.changes.get_mut(path) {
            Some(kept) => {
                kept.after = change.after;
                kept.shared |= change.shared;
            }
            None => {
                self.changes.insert(path.to_string(), change);
            }
        }
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
}

/// The directory under `state_dir` that holds `workspace`'s records.
pub fn records_dir(state_dir: &Path, workspace: &Path) -> PathBuf {
    let digest = state::digest(workspace.as_os_str().as_encoded_bytes());
    state_dir.join("undo").join(&digest[..16])
}

impl Recorder {
    /// A recorder that records nothing, for `why`.
    pub fn off(config: &UndoConfig, why: &str) -> Arc<Recorder> {
        let recorder = Recorder::new(config, PathBuf::new(), PathBuf::new(), PathBuf::new());
        recorder.readiness.store(OFF, Ordering::Release);
        *recorder.off_reason.lock().unwrap() = Some(why.to_string());
        Arc::new(recorder)
    }

    fn new(config: &UndoConfig, root: PathBuf, dir: PathBuf, state_dir: PathBuf) -> Recorder {
        Recorder {
            state_dir,
            config: config.clone(),
            inner: Mutex::new(Inner {
                watch: None,
                index: HashMap::new(),
                dirty: HashMap::new(),
                live: HashMap::new(),
                records: Records::default(),
                journal: Journal::new(dir.join("journal.jsonl")),
                blobs: Blobs::new(dir.join("blobs")),
                session_bytes: 0,
                outside_count: 0,
                _lock: None,
            }),
            root,
            dir,
            readiness: AtomicU8::new(STARTING),
            ready_changed: Condvar::new(),
            ready_lock: Mutex::new(()),
            stop: AtomicBool::new(false),
            off_reason: Mutex::new(None),
            outside_prefix: format!("outside-{}-{}", now_ms(), std::process::id()),
            paths_read: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Starts recording `workspace` (its baseline taken off the caller's way, then its
    /// changes watched), keeping the records under `state_dir`.
    pub fn start(config: &UndoConfig, workspace: &Path, state_dir: &Path) -> Arc<Recorder> {
        if !config.enabled {
            return Recorder::off(config, "[undo] enabled = false");
        }
        let root = match workspace.canonicalize() {
            Ok(root) => root,
            Err(error) => {
                return Recorder::off(
                    config,
                    &format!(
                        "the workspace {} cannot be opened: {error}",
                        workspace.display()
                    ),
                )
            }
        };
        let dir = records_dir(state_dir, &root);
        let state_dir = state_dir
            .canonicalize()
            .unwrap_or_else(|_| state_dir.to_path_buf());
        let recorder = Arc::new(Recorder::new(config, root, dir, state_dir));
        let started = recorder.clone();
        let spawned = std::thread::Builder::new()
            .name("dsh-undo".into())
            .spawn(move || started.run());
        if let Err(error) = spawned {
            recorder.turn_off(format!("its thread cannot start: {error}"));
        }
        recorder
    }

    /// The records of `workspace` for a process that does not watch it (`dsh undo` and
    /// `dsh checkpoints` at the command line, beside a `dsh serve` that does).
    pub fn reader(config: &UndoConfig, workspace: &Path, state_dir: &Path) -> Arc<Recorder> {
        let root = workspace
            .canonicalize()
            .unwrap_or_else(|_| workspace.to_path_buf());
        let dir = records_dir(state_dir, &root);
        let recorder = Recorder::new(config, root, dir, state_dir.to_path_buf());
        {
            let mut inner = recorder.inner.lock().unwrap();
            let inner = &mut *inner;
            inner.journal.catch_up(&mut inner.records);
            if let Some(index) = IndexFile::read(&recorder.dir.join("index.json")) {
                inner.index = index.paths;
            }
        }
        recorder.readiness.store(READY, Ordering::Release);
        Arc::new(recorder)
    }

    fn turn_off(&self, why: String) {
        tracing::warn!(reason = %why, workspace = %self.root.display(), "undo records nothing in this workspace");
        *self.off_reason.lock().unwrap() = Some(why);
        self.set_readiness(OFF);
    }

    fn set_readiness(&self, to: u8) {
        let _guard = self.ready_lock.lock().unwrap();
        self.readiness.store(to, Ordering::Release);
        self.ready_changed.notify_all();
    }

    /// How many paths were read since the baseline (each path an event named, once per
    /// record): what the records cost.
    pub fn paths_read(&self) -> u64 {
        self.paths_read.load(Ordering::Relaxed)
    }

    /// Why nothing is recorded, when nothing is.
    pub fn off_reason(&self) -> Option<String> {
        self.off_reason.lock().unwrap().clone()
    }

    /// Whether the baseline is still being taken (a call that starts now waits for it a
    /// moment: see [`BASELINE_WAIT`]).
    pub fn is_starting(&self) -> bool {
        self.readiness.load(Ordering::Acquire) == STARTING
    }

    /// Waits up to `within` for the baseline; whether it is taken.
    pub fn wait_ready(&self, within: Duration) -> bool {
        let guard = self.ready_lock.lock().unwrap();
        let (_guard, _) = self
            .ready_changed
            .wait_timeout_while(guard, within, |_| {
                self.readiness.load(Ordering::Acquire) == STARTING
            })
            .unwrap();
        self.readiness.load(Ordering::Acquire) == READY
    }

    /// Stops watching, and keeps what every path is now so the next start need not read
    /// the files again.
    pub fn shutdown(&self) {
        self.stop.store(true, Ordering::Release);
        if self.readiness.load(Ordering::Acquire) != READY {
            return;
        }
        let mut inner = self.inner.lock().unwrap();
        if inner.watch.is_none() {
            return;
        }
        let index = IndexFile {
            journal_bytes: inner.journal.read_to(),
            paths: std::mem::take(&mut inner.index),
        };
        if let Err(error) = index.write(&self.dir.join("index.json")) {
            tracing::warn!(%error, "cannot keep the undo index; the next start reads the workspace's files again");
        }
        inner.index = index.paths;
        inner.watch = None;
    }

    /// Holds `call` live: what changes while it (or another) is held is attributed to
    /// it; its record is written when its last hold ends. Blocking: changes made
    /// outside dsh since the last call are read and recorded first.
    pub fn hold(self: &Arc<Self>, call: &CallRef) -> ActivityHold {
        match self.hold_reading(call, true) {
            Some(hold) => hold,
            None => unreachable!("a hold that may read always holds"),
        }
    }

    /// [`Recorder::hold`] from async code: at once when that reads no file, else (changes
    /// made outside dsh wait to be recorded, a file written all the while read whole) on
    /// the blocking pool, never on the caller's async worker.
    pub async fn hold_async(self: &Arc<Self>, call: CallRef) -> ActivityHold {
        if let Some(hold) = self.try_hold(&call) {
            return hold;
        }
        let (reading, held) = (self.clone(), call.clone());
        match tokio::task::spawn_blocking(move || reading.hold(&held)).await {
            Ok(hold) => hold,
            Err(_) => self.hold(&call),
        }
    }

    /// [`Recorder::hold`] when that reads no file; `None` (nothing held) when changes
    /// made outside dsh wait to be recorded first.
    fn try_hold(self: &Arc<Self>, call: &CallRef) -> Option<ActivityHold> {
        self.hold_reading(call, false)
    }

    fn hold_reading(self: &Arc<Self>, call: &CallRef, may_read: bool) -> Option<ActivityHold> {
        let unheld = || {
            Some(ActivityHold {
                recorder: self.clone(),
                key: None,
            })
        };
        // Starting: what the call changes is recorded as changed outside dsh once the
        // baseline is taken (`dsh call` waits for it); off: nothing is recorded.
        if self.readiness.load(Ordering::Acquire) != READY {
            return unheld();
        }
        let mut inner = self.inner.lock().unwrap();
        if inner.watch.is_none() {
            return unheld();
        }
        // What happened before it started is not its doing: changes no call made are
        // recorded as such now, not merged into this call's.
        self.take_events(&mut inner);
        if inner.dirty.values().any(|by| by.is_empty()) {
            if !may_read {
                return None;
            }
            self.record_outside(&mut inner);
        }
        inner
            .live
            .entry(call.id.clone())
            .or_insert_with(|| Live::new(call.clone()))
            .holds += 1;
        Some(ActivityHold {
            recorder: self.clone(),
            key: Some(call.id.clone()),
        })
    }

    // The watching thread.

    fn run(self: Arc<Self>) {
        if let Err(why) = self.take_baseline() {
            self.turn_off(why);
            return;
        }
        self.set_readiness(READY);
        let fd = {
            let inner = self.inner.lock().unwrap();
            match inner
                .watch
                .as_ref()
                .map(|watch| watch.fd().try_clone_to_owned())
            {
                Some(Ok(fd)) => fd,
                _ => return,
            }
        };
        let mut outside_pending = false;
        while !self.stop.load(Ordering::Acquire) {
            let wait = if outside_pending { 100 } else { 1000 };
            let mut fds = [rustix::event::PollFd::new(
                &fd,
                rustix::event::PollFlags::IN,
            )];
            let timeout = rustix::event::Timespec {
                tv_sec: wait / 1000,
                tv_nsec: (wait % 1000) * 1_000_000,
            };
            let ready = match rustix::event::poll(&mut fds, Some(&timeout)) {
                Ok(ready) => ready,
                Err(rustix::io::Errno::INTR) => continue,
                Err(error) => {
                    // Never a busy loop: wait the period out and try again.
                    tracing::warn!(%error, "waiting on the workspace's change notifications failed");
                    std::thread::sleep(Duration::from_millis(wait as u64));
                    0
                }
            };
            let mut inner = self.inner.lock().unwrap();
            if inner.watch.is_none() {
                return;
            }
            self.take_events(&mut inner);
            // Changes no call made are recorded once the workspace has been quiet for a
            // moment (an editor's save is several events).
            if ready == 0 && outside_pending {
                self.record_outside(&mut inner);
            }
            outside_pending = inner.dirty.values().any(|by| by.is_empty());
        }
    }

    /// Watches the workspace, compares it with what the last run kept (reading only
    /// the files that differ by their inode, size or times), and records as changes
    /// no call made what changed while no dsh watched.
    fn take_baseline(&self) -> Result<(), String> {
        crate::private::create_dir_all(&self.dir).map_err(|error| {
            format!(
                "its directory {} cannot be made: {error}",
                self.dir.display()
            )
        })?;
        let lock = crate::private::open_file(
            &self.dir.join("lock"),
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false),
        )
        .map_err(|error| format!("its lock cannot be opened: {error}"))?;
        if rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
            return Err("another dsh process records this workspace with the same state directory; this one records nothing (undo its calls there)".into());
        }
        let mut inner = self.inner.lock().unwrap();
        let inner = &mut *inner;
        inner._lock = Some(lock);
        let kept = IndexFile::read(&self.dir.join("index.json"));
        let first = kept.is_none() && !inner.journal.path().exists();
        let kept = kept.unwrap_or_default();
        inner.index = kept.paths;
        // The index stands where the journal then ended; what was recorded after it
        // (a run that was killed) says what those paths became.
        let segments = inner.journal.catch_up(&mut inner.records);
        for (end, segment) in segments {
            if end <= kept.journal_bytes {
                continue;
            }
            for (path, change) in segment.changes {
                set_known(&mut inner.index, &path, change.after, None);
            }
        }
        let ignores = Ignores::new(
            &self.root,
            self.config.gitignore,
            &self.config.ignore,
            std::slice::from_ref(&self.state_dir),
        );
        let mut watch = Watch::new(&self.root, ignores).map_err(|error| {
            format!("the kernel's change notifications cannot be used: {error}")
        })?;
        let mut found = Vec::new();
        watch
            .walk("", self.config.max_files, &mut |path, kind| {
                if kind == Found::OtherFilesystem {
                    tracing::info!(path, "another filesystem is mounted here: undo does not record it");
                } else if !path.is_empty() {
                    found.push(path.to_string());
                }
            })
            .map_err(|error| match error {
                WatchError::Watch { .. } if watch_limit_hit(&error) => format!(
                    "{error}: the system's inotify watch limit is reached (raise fs.inotify.max_user_watches)"
                ),
                error => error.to_string(),
            })?;
        inner.watch = Some(watch);
        let mut changed = BTreeMap::new();
        let mut seen = HashSet::with_capacity(found.len());
        let mut baseline_bytes = 0u64;
        for path in found {
            let full = self.root.join(&path);
            let known = inner.index.get(&path);
            if let (Some(known), Ok(meta)) = (known, std::fs::symlink_metadata(&full)) {
                if known.stamp == Some(state::Stamp::of(&meta)) {
                    seen.insert(path);
                    continue;
                }
            }
            let Ok(observed) = state::read_state(&self.root, &path, self.config.max_file_bytes)
            else {
                continue;
            };
            if let Some(contents) = &observed.contents {
                baseline_bytes += contents.len() as u64;
                if baseline_bytes > self.config.max_baseline_bytes {
                    return Err(format!(
                        "the workspace's files hold more than [undo] max_baseline_bytes ({})",
                        bytes_text(self.config.max_baseline_bytes)
                    ));
                }
                let sha = observed.state.blob().unwrap_or_default().to_string();
                if let Err(error) = inner.blobs.put(&sha, contents) {
                    return Err(format!("the baseline's contents cannot be kept: {error}"));
                }
            }
            let before = inner
                .index
                .get(&path)
                .map_or(PathState::Absent, |known| known.state.clone());
            if !first && before != observed.state {
                changed.insert(
                    path.clone(),
                    Change {
                        before,
                        after: observed.state.clone(),
                        shared: false,
                    },
                );
            }
            set_known(&mut inner.index, &path, observed.state, observed.stamp);
            seen.insert(path);
        }
        let gone: Vec<String> = inner
            .index
            .keys()
            .filter(|path| !seen.contains(*path))
            .cloned()
            .collect();
        for path in gone {
            if let Some(known) = inner.index.remove(&path) {
                if !first {
                    changed.insert(
                        path,
                        Change {
                            before: known.state,
                            after: PathState::Absent,
                            shared: false,
                        },
                    );
                }
            }
        }
        if !changed.is_empty() {
            self.write_outside(
                inner,
                changed,
                vec!["changed while no dsh watched the workspace".into()],
            );
        }
        // Records past `[undo] days_kept` go, and the contents only they held.
        let oldest = now_ms().saturating_sub(u64::from(self.config.days_kept) * 86_400_000);
        if inner
            .records
            .list
            .iter()
            .any(|record| record.at_ms < oldest)
        {
            let keep: Vec<Record> = inner
                .records
                .list
                .iter()
                .filter(|record| record.at_ms >= oldest)
                .cloned()
                .collect();
            if inner.journal.rewrite(&keep).is_ok() {
                let mut records = Records::default();
                inner.journal = Journal::new(inner.journal.path().to_path_buf());
                inner.journal.catch_up(&mut records);
                inner.records = records;
            }
        }
        let index = IndexFile {
            journal_bytes: inner.journal.read_to(),
            paths: std::mem::take(&mut inner.index),
        };
        let _ = index.write(&self.dir.join("index.json"));
        inner.index = index.paths;
        let mut keep = HashSet::new();
        for known in inner.index.values() {
            keep.extend(known.state.blob().map(str::to_string));
        }
        for record in &inner.records.list {
            for change in record.changes.values() {
                keep.extend(change.before.blob().map(str::to_string));
                keep.extend(change.after.blob().map(str::to_string));
            }
        }
        let removed = inner.blobs.retain(&keep);
        tracing::info!(
            paths = inner.index.len(),
            watched = inner.watch.as_ref().map_or(0, Watch::watched),
            records = inner.records.list.len(),
            removed_contents = removed,
            "undo's baseline of the workspace is taken"
        );
        Ok(())
    }

    /// Reads the queued events and marks what they name, attributed to the activities
    /// live now.
    fn take_events(&self, inner: &mut Inner) {
        let Some(watch) = inner.watch.as_mut() else {
            return;
        };
        let seen = watch.drain();
        if seen.is_empty() {
            return;
        }
        let by: BTreeSet<Arc<str>> = inner.live.keys().cloned().collect();
        for event in seen {
            match event {
                Seen::Path(path) => mark(&mut inner.dirty, path, &by),
                Seen::NewDir(dir) => {
                    let mut found = Vec::new();
                    let mut not_recorded = Vec::new();
                    let walked = inner.watch.as_mut().map(|watch| {
                        watch.walk(&dir, self.config.max_files, &mut |path, kind| match kind {
                            Found::Path => found.push(path.to_string()),
                            Found::OtherFilesystem => not_recorded
                                .push(format!("{path}/: another filesystem is mounted there")),
                        })
                    });
                    if let Some(Err(error)) = walked {
                        not_recorded.push(format!("{dir}/: {error}"));
                    }
                    for key in &by {
                        if let Some(live) = inner.live.get_mut(key) {
                            live.not_recorded.extend(not_recorded.iter().cloned());
                        }
                    }
                    for path in found {
                        mark(&mut inner.dirty, path, &by);
                    }
                }
                Seen::GoneDir(dir) => {
                    if let Some(watch) = inner.watch.as_mut() {
                        watch.forget(&dir);
                    }
                    let prefix = format!("{dir}/");
                    let under: Vec<String> = inner
                        .index
                        .keys()
                        .filter(|path| path.starts_with(&prefix))
                        .cloned()
                        .collect();
                    for path in under {
                        mark(&mut inner.dirty, path, &by);
                    }
                    mark(&mut inner.dirty, dir, &by);
                }
                Seen::Ignored(path) => {
                    let top = ignored_name(&path, &self.root);
                    for key in &by {
                        if let Some(live) = inner.live.get_mut(key) {
                            live.ignored.insert(top.clone());
                        }
                    }
                }
                Seen::Overflow => {
                    for key in &by {
                        if let Some(live) = inner.live.get_mut(key) {
                            live.not_recorded.insert("some changes may be missing: the kernel's change queue overflowed, and the workspace was compared again".into());
                        }
                    }
                    self.compare_again(inner, &by);
                }
            }
        }
    }

    /// After lost events: every path watched and kept is marked to be read again.
    fn compare_again(&self, inner: &mut Inner, by: &BTreeSet<Arc<str>>) {
        let mut found = Vec::new();
        if let Some(watch) = inner.watch.as_mut() {
            watch.forget("");
            let _ = watch.walk("", self.config.max_files, &mut |path, kind| {
                if kind == Found::Path && !path.is_empty() {
                    found.push(path.to_string())
                }
            });
        }
        found.extend(inner.index.keys().cloned());
        for path in found {
            mark(&mut inner.dirty, path, by);
        }
    }

    /// Reads the marked paths `pick` chooses and records their changes with the
    /// activities they are attributed to (or as a change no call made).
    fn resolve(
        &self,
        inner: &mut Inner,
        pick: impl Fn(&BTreeSet<Arc<str>>) -> bool,
    ) -> BTreeMap<String, Change> {
        let mut paths: Vec<(String, BTreeSet<Arc<str>>)> = Vec::new();
        inner.dirty.retain(|path, by| {
            if pick(by) {
                paths.push((path.clone(), std::mem::take(by)));
                false
            } else {
                true
            }
        });
        paths.sort();
        let mut outside = BTreeMap::new();
        for (path, by) in paths {
            self.paths_read.fetch_add(1, Ordering::Relaxed);
            let observed = match state::read_state(&self.root, &path, self.config.max_file_bytes) {
                Ok(observed) => observed,
                Err(error) => {
                    note(inner, &by, format!("{path}: cannot be read ({error})"));
                    continue;
                }
            };
            let before = inner
                .index
                .get(&path)
                .map_or(PathState::Absent, |known| known.state.clone());
            let mut after = observed.state;
            if before == after {
                set_known(&mut inner.index, &path, after, observed.stamp);
                continue;
            }
            if matches!(after, PathState::File { sha256: None, .. }) {
                note(
                    inner,
                    &by,
                    format!(
                        "{path} ({}): larger than [undo] max_file_bytes ({})",
                        bytes_text(after.size()),
                        bytes_text(self.config.max_file_bytes)
                    ),
                );
            }
            if let (Some(contents), Some(sha)) =
                (&observed.contents, after.blob().map(str::to_string))
            {
                let size = contents.len() as u64;
                let over_call = by.iter().any(|key| {
                    inner
                        .live
                        .get(key)
                        .is_some_and(|live| live.bytes + size > self.config.max_call_bytes)
                });
                let over_session = inner.session_bytes + size > self.config.max_session_bytes;
                let kept = if over_call || over_session {
                    let which = if over_call {
                        format!(
                            "[undo] max_call_bytes ({})",
                            bytes_text(self.config.max_call_bytes)
                        )
                    } else {
                        format!(
                            "[undo] max_session_bytes ({})",
                            bytes_text(self.config.max_session_bytes)
                        )
                    };
                    note(
                        inner,
                        &by,
                        format!("{path} ({}): past {which}", bytes_text(size)),
                    );
                    false
                } else {
                    match inner.blobs.put(&sha, contents) {
                        Ok(new) => {
                            if new {
                                inner.session_bytes += size;
                                for key in &by {
                                    if let Some(live) = inner.live.get_mut(key) {
                                        live.bytes += size;
                                    }
                                }
                            }
                            true
                        }
                        Err(error) => {
                            note(inner, &by, format!("{path}: its record was lost ({error})"));
                            false
                        }
                    }
                };
                if !kept {
                    if let PathState::File { sha256, .. } = &mut after {
                        *sha256 = None;
                    }
                }
            }
            let owners: BTreeSet<&str> = by
                .iter()
                .filter_map(|key| inner.live.get(key).map(|live| &*live.call.owner))
                .collect();
            let change = Change {
                before,
                after: after.clone(),
                shared: owners.len() > 1,
            };
            set_known(&mut inner.index, &path, after, observed.stamp);
            if by.is_empty() {
                outside.insert(path, change);
                continue;
            }
            for key in &by {
                if let Some(live) = inner.live.get_mut(key) {
                    live.add_change(&path, change.clone());
                }
            }
        }
        outside
    }

    /// Records the changes no call made, as one record of their own.
    fn record_outside(&self, inner: &mut Inner) {
        let changes = self.resolve(inner, |by| by.is_empty());
        if changes.is_empty() {
            return;
        }
        tracing::debug!(
            paths = changes.len(),
            "the workspace changed while no call ran"
        );
        self.write_outside(inner, changes, Vec::new());
    }

    /// Writes `changes` as a record of their own, made by no call.
    fn write_outside(
        &self,
        inner: &mut Inner,
        changes: BTreeMap<String, Change>,
        not_recorded: Vec<String>,
    ) {
        inner.outside_count += 1;
        let segment = Segment {
            id: format!("{}-{}", self.outside_prefix, inner.outside_count),
            owner: None,
            tool: None,
            seq: 0,
            at_ms: now_ms(),
            changes,
            not_recorded,
            undoes: Vec::new(),
        };
        self.write_segment(inner, segment);
    }

    fn write_segment(&self, inner: &mut Inner, mut segment: Segment) -> Option<String> {
        inner.journal.catch_up(&mut inner.records);
        segment.seq = inner.records.next_seq;
        match inner.journal.append(&segment) {
            Ok(()) => {
                inner.journal.catch_up(&mut inner.records);
                None
            }
            Err(error) => {
                tracing::warn!(%error, id = %segment.id, "an undo record cannot be written");
                Some(format!("the record was lost ({error})"))
            }
        }
    }

    /// Ends one hold of `key`: its changes so far are read and written; the record's
    /// line for the call's result when `line` is asked.
    fn release(&self, key: &Arc<str>, line: bool) -> Option<String> {
        let mut inner = self.inner.lock().unwrap();
        self.release_locked(&mut inner, key, line)
    }

    fn release_locked(&self, inner: &mut Inner, key: &Arc<str>, line: bool) -> Option<String> {
        inner.watch.as_ref()?;
        self.take_events(inner);
        self.resolve(inner, |by| by.contains(key));
        let live = inner.live.get_mut(key)?;
        live.holds -= 1;
        let still_held = live.holds > 0;
        let changes = std::mem::take(&mut live.changes);
        let changes: BTreeMap<String, Change> = changes
            .into_iter()
            .filter(|(_, change)| change.before != change.after)
            .collect();
        let mut not_recorded: Vec<String> =
            std::mem::take(&mut live.not_recorded).into_iter().collect();
        let ignored = std::mem::take(&mut live.ignored);
        if !ignored.is_empty() {
            let names: Vec<String> = ignored.into_iter().collect();
            not_recorded.push(format!("{} (ignored)", names.join(", ")));
        }
        let undoes = std::mem::take(&mut live.undoes);
        let call = live.call.clone();
        if !still_held {
            inner.live.remove(key);
        }
        let mut lost = None;
        if !(changes.is_empty() && not_recorded.is_empty() && undoes.is_empty()) {
            let segment = Segment {
                id: call.id.to_string(),
                owner: Some(call.owner.to_string()),
                tool: Some(call.tool.to_string()),
                seq: 0,
                at_ms: now_ms(),
                changes,
                not_recorded,
                undoes,
            };
            lost = self.write_segment(inner, segment);
        }
        if !line {
            return None;
        }
        // The line says the whole record so far: what a job or subagent the call
        // started (and waited for) changed was written when it ended.
        let (summary, not_recorded) = match inner.records.get(&call.id) {
            Some(record) => (Summary::of(&record.changes), record.not_recorded.clone()),
            None => (Summary::of(&BTreeMap::new()), Vec::new()),
        };
        let mut parts = Vec::new();
        if !summary.is_empty() {
            parts.push(format!("changed: {summary}"));
        }
        if !not_recorded.is_empty() {
            parts.push(format!("not recorded: {}", not_recorded.join("; ")));
        }
        if let Some(lost) = lost {
            parts.push(lost);
        } else if !summary.is_empty() {
            parts.push(format!("undo with undo {{call_id: \"{}\"}}", call.id));
        }
        if parts.is_empty() {
            return None;
        }
        if still_held {
            parts.push("a job or terminal it started still runs: what it changes is recorded under this call too".into());
        }
        Some(format!("[{}]", parts.join("; ")))
    }

    // What the owners see.

    /// The records `asker` reaches that changed something, newest first.
    pub fn checkpoints(&self, asker: &Asker, limit: usize) -> Vec<serde_json::Value> {
        let mut inner = self.inner.lock().unwrap();
        let inner = &mut *inner;
        inner.journal.catch_up(&mut inner.records);
        let mut records: Vec<&Record> = inner
            .records
            .list
            .iter()
            .filter(|record| asker.reaches(record))
            .filter(|record| !record.changes.is_empty() || !record.not_recorded.is_empty())
            .collect();
        records.sort_by_key(|record| std::cmp::Reverse(record.seq));
        records
            .into_iter()
            .take(limit)
            .map(checkpoint_json)
            .collect()
    }

    /// The record `id` when `asker` reaches it.
    pub fn checkpoint(&self, asker: &Asker, id: &str) -> Option<serde_json::Value> {
        let mut inner = self.inner.lock().unwrap();
        let inner = &mut *inner;
        inner.journal.catch_up(&mut inner.records);
        inner
            .records
            .get(&asker.full_id(id))
            .filter(|record| asker.reaches(record))
            .map(checkpoint_json)
    }

    /// Puts back what the record `id` changed (and, with `and_later`, what the
    /// asker's later records changed on the same paths, newest first), unless
    /// something it did not make changed one of those paths since. `within` is the
    /// call doing the undo, which its record joins.
    pub fn undo(
        &self,
        asker: &Asker,
        id: &str,
        and_later: bool,
        within: Option<&CallRef>,
    ) -> Result<serde_json::Value, ToolError> {
        if self.readiness.load(Ordering::Acquire) == OFF
            && self.inner.lock().unwrap().records.list.is_empty()
        {
            return Err(ToolError::new(
                ErrorCode::NotFound,
                format!(
                    "nothing is recorded in this workspace: {}",
                    self.off_reason().unwrap_or_default()
                ),
            ));
        }
        let mut guard = self.inner.lock().unwrap();
        let inner = &mut *guard;
        self.take_events(inner);
        // What no call made is recorded first: a conflict names it.
        self.record_outside(inner);
        inner.journal.catch_up(&mut inner.records);
        let id = asker.full_id(id);
        let target = match inner.records.get(&id) {
            Some(record) if asker.reaches(record) => record.clone(),
            _ => {
                return Err(ToolError::new(
                    ErrorCode::NotFound,
                    format!("no recorded call {id:?} of yours changed files (see checkpoints)"),
                ))
            }
        };
        if target.changes.is_empty() {
            return Err(ToolError::new(
                ErrorCode::NotFound,
                format!("call {id} changed no recorded file: there is nothing to undo"),
            ));
        }
        // The records undone together: the target, and with `and_later` every later
        // one of the asker's that changed one of their paths (not undone already).
        let mut set: Vec<Record> = vec![target.clone()];
        if and_later {
            let mut paths: HashSet<String> = target.changes.keys().cloned().collect();
            let mut later: Vec<&Record> = inner
                .records
                .list
                .iter()
                .filter(|record| record.seq > target.seq && record.undone_by.is_none())
                .filter(|record| asker.reaches(record) && record.id != target.id)
                .collect();
            later.sort_by_key(|record| record.seq);
            for record in later {
                if record.changes.keys().any(|path| paths.contains(path)) {
                    paths.extend(record.changes.keys().cloned());
                    set.push(record.clone());
                }
            }
        }
        set.sort_by_key(|record| record.seq);
        let ids: Vec<String> = set.iter().map(|record| record.id.clone()).collect();
        // Each path: as the newest of the set left it now, and put back as the oldest
        // found it.
        let mut plan: BTreeMap<String, (PathState, PathState)> = BTreeMap::new();
        let mut conflicts: Vec<String> = Vec::new();
        let mut not_restored: Vec<String> = Vec::new();
        for record in &set {
            for (path, change) in &record.changes {
                if change.shared && matches!(asker, Asker::Owner { .. }) {
                    not_restored.push(format!(
                        "{path}: changed while another owner's call ran too"
                    ));
                    continue;
                }
                match plan.get_mut(path) {
                    None => {
                        plan.insert(path.clone(), (change.before.clone(), change.after.clone()));
                    }
                    Some((_, expected)) => {
                        if *expected != change.before {
                            conflicts.push(format!(
                                "{path}: changed between the calls being undone by something else"
                            ));
                        }
                        *expected = change.after.clone();
                    }
                }
            }
        }
        let newest_seq = set.last().map_or(0, |record| record.seq);
        let mut steps = Vec::new();
        for (path, (target_state, expected)) in &plan {
            if !target_state.restorable() || !expected_checkable(expected) {
                not_restored.push(format!("{path}: its contents were not recorded"));
                continue;
            }
            let now = match state::read_state(&self.root, path, self.config.max_file_bytes) {
                Ok(observed) => observed.state,
                Err(error) => {
                    conflicts.push(format!("{path}: cannot be read ({error})"));
                    continue;
                }
            };
            // A link (or a file) made since on the way to where something is to be put
            // back: writing there would leave the workspace.
            if *target_state != PathState::Absent {
                if let Some(link) = state::on_the_way(&self.root, path)
                    .filter(|on_the_way| !plan.contains_key(on_the_way))
                {
                    conflicts.push(format!(
                        "{path}: {link} is a link or a file now (changed since), so nothing is written there"
                    ));
                    continue;
                }
            }
            if now != *expected {
                let by = inner
                    .records
                    .list
                    .iter()
                    .filter(|record| record.seq > newest_seq && record.changes.contains_key(path))
                    .filter(|record| !ids.contains(&record.id))
                    .map(|record| describe_maker(record, asker))
                    .collect::<Vec<_>>();
                let by = if by.is_empty() {
                    "by something dsh has not recorded".to_string()
                } else {
                    format!("by {}", by.join(", then "))
                };
                let already = if *target_state == now {
                    " (it is already as before the call: undone already?)"
                } else {
                    ""
                };
                conflicts.push(format!("{path}: changed since, {by}{already}"));
                continue;
            }
            if now != *target_state {
                steps.push((path.clone(), now, target_state.clone()));
            }
        }
        // A directory that goes must hold nothing but what goes with it.
        let leaving: HashSet<&str> = steps
            .iter()
            .filter(|(_, _, to)| !matches!(to, PathState::Dir { .. }))
            .map(|(path, _, _)| path.as_str())
            .collect();
        for (path, now, to) in &steps {
            if now.is_dir() && !to.is_dir() {
                if let Ok(entries) = std::fs::read_dir(self.root.join(path)) {
                    for entry in entries.flatten() {
                        let child = format!("{path}/{}", entry.file_name().to_string_lossy());
                        if !leaving.contains(child.as_str()) {
                            conflicts.push(format!(
                                "{path}/ holds {child}, which the call did not make"
                            ));
                        }
                    }
                }
            }
        }
        if !conflicts.is_empty() {
            let hint = if and_later {
                "nothing was changed"
            } else {
                "nothing was changed; undo the later calls first, or pass and_later to undo your later calls that changed them too"
            };
            return Err(ToolError::new(
                ErrorCode::UndoConflict,
                format!(
                    "cannot undo {}: {} path(s) changed since, and undo never overwrites a change it did not make; {hint}:\n{}",
                    ids.join(", "),
                    conflicts.len(),
                    conflicts.join("\n")
                ),
            ));
        }
        let applied = self.apply(inner, &steps);
        let mut changes = BTreeMap::new();
        let mut restored = Vec::new();
        for (path, before) in &applied.done {
            let now = inner
                .index
                .get(path)
                .map_or(PathState::Absent, |known| known.state.clone());
            changes.insert(
                path.clone(),
                Change {
                    before: before.clone(),
                    after: now,
                    shared: false,
                },
            );
            restored.push(path.clone());
        }
        let undoes = ids.clone();
        let held = within.and_then(|call| inner.live.get_mut(&call.id).map(|live| (call, live)));
        match held {
            Some((_, live)) => {
                for (path, change) in changes {
                    live.add_change(&path, change);
                }
                live.undoes.extend(undoes);
            }
            None => {
                let (record_id, owner, tool) = match within {
                    Some(call) => (
                        call.id.to_string(),
                        Some(call.owner.to_string()),
                        Some(call.tool.to_string()),
                    ),
                    None => (
                        format!("cli-{}-{}/undo", now_ms(), std::process::id()),
                        target.owner.clone(),
                        Some("dsh undo".to_string()),
                    ),
                };
                let segment = Segment {
                    id: record_id,
                    owner,
                    tool,
                    seq: 0,
                    at_ms: now_ms(),
                    changes,
                    not_recorded: Vec::new(),
                    undoes,
                };
                if let Some(lost) = self.write_segment(inner, segment) {
                    not_restored.push(format!("the undo's own record: {lost}"));
                }
            }
        }
        if let Some(error) = applied.failed {
            return Err(ToolError::new(
                ErrorCode::IoError,
                format!(
                    "undo of {} stopped part way: {error}; restored so far (recorded, so this undo can itself be undone): {}",
                    ids.join(", "),
                    if restored.is_empty() { "nothing".to_string() } else { restored.join(", ") }
                ),
            ));
        }
        Ok(serde_json::json!({
            "undone": ids,
            "restored": restored,
            "not_restored": not_restored,
        }))
    }

    /// Puts each path of `steps` from its state now into its target: what goes first
    /// (deepest first), then directories (shallowest first), files and links, and
    /// directories' modes last. Each path done is read again into the index, and the
    /// events the writes cause are taken here (they change nothing the index does not
    /// already say).
    fn apply(&self, inner: &mut Inner, steps: &[(String, PathState, PathState)]) -> Applied {
        let mut done: Vec<(String, PathState)> = Vec::new();
        let mut failed = None;
        let depth = |path: &str| path.matches('/').count();
        let mut removals: Vec<&(String, PathState, PathState)> = steps
            .iter()
            .filter(|(_, now, to)| {
                *now != PathState::Absent
                    && (matches!(to, PathState::Absent)
                        || now.is_dir() != to.is_dir()
                        || matches!(
                            (now, to),
                            (PathState::Symlink { .. }, PathState::File { .. })
                                | (PathState::File { .. }, PathState::Symlink { .. })
                        ))
            })
            .collect();
        removals.sort_by_key(|(path, _, _)| std::cmp::Reverse(depth(path)));
        let mut dirs: Vec<&(String, PathState, PathState)> =
            steps.iter().filter(|(_, _, to)| to.is_dir()).collect();
        dirs.sort_by_key(|(path, _, _)| depth(path));
        let writes: Vec<&(String, PathState, PathState)> = steps
            .iter()
            .filter(|(_, _, to)| matches!(to, PathState::File { .. } | PathState::Symlink { .. }))
            .collect();
        let mut touched: BTreeSet<String> = BTreeSet::new();
        let result = (|| -> std::io::Result<()> {
            for (path, _, _) in &removals {
                state::remove(&self.root, path)?;
                touched.insert(path.clone());
            }
            for (path, _, _) in &dirs {
                state::make_dir(&self.root, path)?;
                touched.insert(path.clone());
            }
            for (path, now, to) in &writes {
                let same_contents = matches!((now, to), (PathState::File { sha256: a, .. }, PathState::File { sha256: b, .. }) if a == b);
                if same_contents {
                    if let PathState::File { mode, .. } = to {
                        state::set_mode(&self.root, path, *mode)?;
                    }
                } else {
                    state::put_back(&self.root, path, to, &inner.blobs)?;
                }
                touched.insert(path.clone());
            }
            for (path, _, to) in dirs.iter().rev() {
                if let PathState::Dir { mode } = to {
                    state::set_mode(&self.root, path, *mode)?;
                }
            }
            Ok(())
        })();
        if let Err(error) = result {
            failed = Some(error.to_string());
        }
        for (path, now, _) in steps {
            if !touched.contains(path) {
                continue;
            }
            let observed = state::read_state(&self.root, path, self.config.max_file_bytes)
                .unwrap_or(state::Observed {
                    state: PathState::Absent,
                    stamp: None,
                    contents: None,
                });
            set_known(&mut inner.index, path, observed.state, observed.stamp);
            done.push((path.clone(), now.clone()));
        }
        // The events of these writes: taken now, so they are read against the index
        // that already says what the paths became.
        self.take_events(inner);
        Applied { done, failed }
    }
}

struct Applied {
    done: Vec<(String, PathState)>,
    failed: Option<String>,
}

fn expected_checkable(state: &PathState) -> bool {
    !matches!(
        state,
        PathState::File { sha256: None, .. } | PathState::Special
    )
}

fn describe_maker(record: &Record, asker: &Asker) -> String {
    match (&record.owner, asker) {
        (None, _) => format!("a change outside dsh ({})", record.id),
        (Some(owner), Asker::Owner { owner: mine, .. }) if **owner != **mine => {
            "another owner's call".to_string()
        }
        (Some(_), _) => format!(
            "call {} ({})",
            record.id,
            record.tool.as_deref().unwrap_or("a tool")
        ),
    }
}

fn mark(dirty: &mut HashMap<String, BTreeSet<Arc<str>>>, path: String, by: &BTreeSet<Arc<str>>) {
    dirty.entry(path).or_default().extend(by.iter().cloned());
}

fn note(inner: &mut Inner, by: &BTreeSet<Arc<str>>, what: String) {
    for key in by {
        if let Some(live) = inner.live.get_mut(key) {
            live.not_recorded.insert(what.clone());
        }
    }
}

fn set_known(
    index: &mut HashMap<String, Known>,
    path: &str,
    state: PathState,
    stamp: Option<state::Stamp>,
) {
    if state == PathState::Absent {
        index.remove(path);
    } else {
        index.insert(path.to_string(), Known { state, stamp });
    }
}

fn watch_limit_hit(error: &WatchError) -> bool {
    matches!(error, WatchError::Watch { source, .. } if source.raw_os_error() == Some(28))
}

/// `node_modules/` for an ignored directory, the path for a file.
fn ignored_name(path: &str, root: &Path) -> String {
    if root.join(path).is_dir() {
        format!("{path}/")
    } else {
        path.to_string()
    }
}

/// `1.2 KiB`.
pub fn bytes_text(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// `2026-12-07T04:10:02Z` for milliseconds since the epoch (UTC).
pub fn rfc3339(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rest) = ((secs / 86_400) as i64, secs % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

/// What one change did, in a word.
pub fn change_kind(change: &Change) -> &'static str {
    use PathState::*;
    match (&change.before, &change.after) {
        (Absent, Dir { .. }) => "directory created",
        (Dir { .. }, Absent) => "directory deleted",
        (Dir { .. }, Dir { .. }) => "mode",
        (Absent, _) => "created",
        (_, Absent) => "deleted",
        (Symlink { .. }, _) | (_, Symlink { .. }) => "symlink",
        (
            File {
                sha256: a,
                size: sa,
                ..
            },
            File {
                sha256: b,
                size: sb,
                ..
            },
        ) if a == b && sa == sb => "mode",
        _ => "modified",
    }
}

/// The counts of a record's changes, said in a few words (`3 files (1 created, 2
/// modified)`).
struct Summary {
    counts: BTreeMap<&'static str, usize>,
    total: usize,
}

impl Summary {
    fn of(changes: &BTreeMap<String, Change>) -> Summary {
        let mut counts = BTreeMap::new();
        for change in changes.values() {
            *counts.entry(change_kind(change)).or_insert(0) += 1;
        }
        Summary {
            total: changes.len(),
            counts,
        }
    }

    fn is_empty(&self) -> bool {
        self.total == 0
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let noun = if self.total == 1 { "path" } else { "paths" };
        let parts: Vec<String> = self
            .counts
            .iter()
            .map(|(kind, count)| format!("{count} {kind}"))
            .collect();
        write!(f, "{} {noun} ({})", self.total, parts.join(", "))
    }
}

fn checkpoint_json(record: &Record) -> serde_json::Value {
    // A path deleted and another created with the same contents: a rename.
    let mut created_by_blob: HashMap<&str, &str> = HashMap::new();
    for (path, change) in &record.changes {
        if change.before == PathState::Absent {
            if let Some(sha) = change.after.blob() {
                created_by_blob.insert(sha, path);
            }
        }
    }
    let mut renamed_to: HashSet<&str> = HashSet::new();
    let mut changes = Vec::new();
    for (path, change) in &record.changes {
        if change.after == PathState::Absent {
            if let Some(to) = change
                .before
                .blob()
                .and_then(|sha| created_by_blob.get(sha))
            {
                renamed_to.insert(to);
                changes.push(serde_json::json!({
                    "path": to, "change": "renamed", "from": path, "size": change.before.size(),
                }));
                continue;
            }
        }
        changes.push(serde_json::json!({
            "path": path,
            "change": change_kind(change),
            "size": if change.after == PathState::Absent { change.before.size() } else { change.after.size() },
        }));
    }
    changes.retain(|change| {
        change["change"] == "renamed"
            || !change["path"]
                .as_str()
                .is_some_and(|path| renamed_to.contains(path))
    });
    serde_json::json!({
        "call_id": record.id,
        "tool": record.tool.as_deref().unwrap_or("(outside dsh)"),
        "at": rfc3339(record.at_ms),
        "changes": changes,
        "not_recorded": record.not_recorded,
        "undone_by": record.undone_by,
    })
}

/// A call (or a job or terminal session one started) held live: what changes while it
/// is held is attributed to it. Its record is written when its last hold ends.
pub struct ActivityHold {
    recorder: Arc<Recorder>,
    key: Option<Arc<str>>,
}

impl std::fmt::Debug for ActivityHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActivityHold")
            .field("key", &self.key)
            .finish()
    }
}

impl ActivityHold {
    /// Ends the hold of a call in the pipeline: its record is written, and the line
    /// its result ends with comes back (none when it changed nothing). Blocking: it
    /// reads what the call changed.
    pub fn finish(mut self) -> Option<String> {
        match self.key.take() {
            Some(key) => self.recorder.release(&key, true),
            None => None,
        }
    }

    /// Ends the hold at once when that reads nothing (no path is marked for it and it
    /// has no change waiting), under one lock: its line, as [`ActivityHold::finish`]
    /// gives it. Otherwise gives the hold back, for [`ActivityHold::finish`] on the
    /// blocking pool.
    pub fn finish_if_idle(mut self) -> Result<Option<String>, ActivityHold> {
        let Some(key) = self.key.take() else {
            return Ok(None);
        };
        let recorder = self.recorder.clone();
        let mut inner = recorder.inner.lock().unwrap();
        recorder.take_events(&mut inner);
        let waiting = inner.live.get(&key).is_some_and(|live| {
            !live.changes.is_empty()
                || !live.not_recorded.is_empty()
                || !live.ignored.is_empty()
                || !live.undoes.is_empty()
        });
        if waiting || inner.dirty.values().any(|by| by.contains(&key)) {
            drop(inner);
            self.key = Some(key);
            return Err(self);
        }
        Ok(recorder.release_locked(&mut inner, &key, true))
    }
}

impl Drop for ActivityHold {
    fn drop(&mut self) {
        let Some(key) = self.key.take() else {
            return;
        };
        let recorder = self.recorder.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn_blocking(move || recorder.release(&key, false));
            }
            Err(_) => {
                recorder.release(&key, false);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(n: u32, owner: &str) -> CallRef {
        CallRef {
            id: format!("s1/call-{n}").into(),
            owner: owner.into(),
            tool: "bash".into(),
        }
    }

    fn started(files: usize) -> (tempfile::TempDir, Arc<Recorder>) {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        for n in 0..files {
            let sub = work.join(format!("d{}", n % 20));
            std::fs::create_dir_all(&sub).unwrap();
            std::fs::write(sub.join(format!("f{n}")), format!("file {n}\n")).unwrap();
        }
        let recorder = Recorder::start(&UndoConfig::default(), &work, &dir.path().join("state"));
        assert!(
            recorder.wait_ready(Duration::from_secs(30)),
            "{:?}",
            recorder.off_reason()
        );
        (dir, recorder)
    }

    /// No walk per call: a call that changes one file of a thousand reads that one path,
    /// and its record holds it alone.
    #[test]
    fn a_call_s_record_reads_only_the_paths_it_changed() {
        let (dir, recorder) = started(1000);
        let work = dir.path().join("work");
        let read_before = recorder.paths_read();
        let hold = recorder.hold(&call(1, "o"));
        std::fs::write(work.join("d7/f7"), "changed\n").unwrap();
        let line = hold.finish().expect("a line");
        assert!(line.contains("changed: 1 path (1 modified)"), "{line}");
        assert_eq!(recorder.paths_read() - read_before, 1);
        let listed = recorder.checkpoints(&Asker::Operator, 10);
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0]["changes"][0]["path"], "d7/f7");
    }

    /// A hold that would read a file first (a change made outside dsh waits to be
    /// recorded) is not taken by `try_hold`, which reads nothing; `hold` then records
    /// that change as made outside, not as the call's.
    #[test]
    fn try_hold_reads_nothing_and_leaves_a_change_made_outside_to_hold() {
        let (dir, recorder) = started(10);
        let work = dir.path().join("work");
        let quiet = recorder
            .try_hold(&call(1, "o"))
            .expect("nothing to read: held");
        assert_eq!(quiet.finish(), None);
        std::fs::write(work.join("d3/f3"), "changed outside\n").unwrap();
        let read_before = recorder.paths_read();
        assert!(recorder.try_hold(&call(2, "o")).is_none());
        assert_eq!(recorder.paths_read(), read_before, "try_hold read a file");
        let hold = recorder.hold(&call(2, "o"));
        assert_eq!(recorder.paths_read() - read_before, 1);
        assert_eq!(hold.finish(), None, "the change is not the call's");
        let listed = recorder.checkpoints(&Asker::Operator, 10);
        assert_eq!(listed.len(), 1, "{listed:?}");
        assert_eq!(listed[0]["tool"], "(outside dsh)");
    }

    /// A change while no call is live is recorded as made outside dsh, under no owner;
    /// a later undo that would overwrite it is refused and changes nothing.
    #[test]
    fn a_change_outside_any_call_is_recorded_as_such_and_never_overwritten() {
        let (dir, recorder) = started(10);
        let work = dir.path().join("work");
        let hold = recorder.hold(&call(1, "o"));
        std::fs::write(work.join("d1/f1"), "by the call\n").unwrap();
        hold.finish();
        std::fs::write(work.join("d1/f1"), "by an editor\n").unwrap();
        let asker = Asker::Owner {
            owner: "o".into(),
            session: "s1".into(),
        };
        let refused = recorder.undo(&asker, "call-1", false, None).unwrap_err();
        assert_eq!(refused.code, ErrorCode::UndoConflict);
        assert!(
            refused.message.contains("outside dsh"),
            "{}",
            refused.message
        );
        assert_eq!(
            std::fs::read_to_string(work.join("d1/f1")).unwrap(),
            "by an editor\n"
        );
        // Another owner does not even see the call.
        let other = Asker::Owner {
            owner: "p".into(),
            session: "s1".into(),
        };
        let missing = recorder.undo(&other, "call-1", false, None).unwrap_err();
        assert_eq!(missing.code, ErrorCode::NotFound);
        assert!(recorder.checkpoints(&other, 10).is_empty());
    }

    /// Two owners' calls live at once share a change: neither may undo it.
    #[test]
    fn a_change_made_while_two_owners_calls_ran_is_undone_by_neither() {
        let (dir, recorder) = started(10);
        let work = dir.path().join("work");
        let first = recorder.hold(&call(1, "o"));
        let second = recorder.hold(&call(2, "p"));
        std::fs::write(work.join("d2/f2"), "whose?\n").unwrap();
        first.finish();
        second.finish();
        let asker = Asker::Owner {
            owner: "o".into(),
            session: "s1".into(),
        };
        let answer = recorder.undo(&asker, "call-1", false, None).unwrap();
        assert_eq!(answer["restored"], serde_json::json!([]), "{answer}");
        assert_eq!(
            std::fs::read_to_string(work.join("d2/f2")).unwrap(),
            "whose?\n"
        );
    }

    /// A command that swaps a recorded directory for a link to a directory outside the
    /// workspace gets nothing of what is there into the records, and an undo that would
    /// write through the link refuses and writes nothing outside.
    #[test]
    fn a_link_swapped_in_for_a_directory_never_leads_a_record_or_an_undo_outside() {
        let (dir, recorder) = started(0);
        let work = dir.path().join("work");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret.txt"), "SECRET outside the workspace\n").unwrap();
        std::fs::create_dir_all(work.join("d")).unwrap();
        std::fs::write(work.join("d/secret.txt"), "inside\n").unwrap();
        std::fs::write(work.join("d/x"), "x\n").unwrap();
        let asker = Asker::Owner {
            owner: "o".into(),
            session: "s1".into(),
        };
        // Recorded as they are now (changes outside any call).
        let first = recorder.hold(&call(1, "o"));
        std::fs::remove_file(work.join("d/x")).unwrap();
        first.finish();
        // The attack: the directory becomes a link to outside.
        let second = recorder.hold(&call(2, "o"));
        std::fs::remove_dir_all(work.join("d")).unwrap();
        std::os::unix::fs::symlink(&outside, work.join("d")).unwrap();
        second.finish();
        let secret = state::digest(b"SECRET outside the workspace\n");
        for record in recorder.checkpoints(&Asker::Operator, 10) {
            assert!(!record.to_string().contains(&secret), "{record}");
        }
        assert!(
            !recorder
                .dir
                .join("blobs")
                .join(&secret[..2])
                .join(&secret[2..])
                .exists(),
            "the outside file's contents were kept"
        );
        // Undoing the first call would put d/x back through the link.
        let refused = recorder.undo(&asker, "call-1", false, None).unwrap_err();
        assert_eq!(refused.code, ErrorCode::UndoConflict, "{}", refused.message);
        assert!(
            !outside.join("x").exists(),
            "an undo wrote outside the workspace"
        );
    }

    #[test]
    fn times_are_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_796_617_280_916), "2026-12-07T04:21:20Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00Z");
    }
}
