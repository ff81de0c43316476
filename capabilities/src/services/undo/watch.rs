//! The kernel's change notifications over the workspace: one inotify watch per directory
//! that is recorded (what the ignore rules leave), what each event means for a path
//! ([`Seen`]), and the walk that watches a directory and lists what is in it (the
//! baseline at start, and a directory that appears while dsh runs).
//!
//! inotify reports a change when it happens, in the order it happened, whoever made it:
//! a command of dsh's under any executor (the sandbox and the container see the
//! workspace through a bind mount of the same files), the file tools, or anything
//! outside dsh. It cannot see a change made while nothing watched (dsh not running,
//! which a start notices by comparing what it kept), and it drops events when its
//! queue overflows ([`Seen::Overflow`]: then everything is compared again).
//!
//! The walk stays on the workspace's filesystem: a directory where another one is
//! mounted is neither watched nor listed ([`Found::OtherFilesystem`]), so a disk mounted
//! in the workspace is not read into the records. Looking into a new directory at all
//! (the open, the watch, its `.gitignore`) holds a mount made on it for a few
//! microseconds: a command that mounts on a directory it has just made and unmounts at
//! once can get EBUSY in that instant, as with any watcher (docs/src/tools/undo.md).

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};

use ignore::gitignore::{Gitignore, GitignoreBuilder};
use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};

/// What an event says happened to a path (relative to the workspace, `/`-separated).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// A file, link or directory's own state may have changed.
    Path(String),
    /// A directory appeared (made, or moved in): it and everything in it.
    NewDir(String),
    /// A directory went away (removed, or moved out): it and everything under it.
    GoneDir(String),
    /// Something the ignore rules leave out appeared (said in the call's result).
    Ignored(String),
    /// The kernel's queue overflowed: events were lost.
    Overflow,
}

/// What a walk found at a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// A file, link or directory of the workspace's filesystem: watched and recorded.
    Path,
    /// A directory where another filesystem is mounted: not entered.
    OtherFilesystem,
}

/// Why a directory could not be watched.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("cannot watch {path}: {source}")]
    Watch {
        path: String,
        source: std::io::Error,
    },
    #[error("the workspace holds more than {0} files and directories ([undo] max_files)")]
    TooMany(usize),
}

/// The ignore rules: `.git/` always, the workspace's `.gitignore` files and
/// `.git/info/exclude` when `[undo] gitignore` is on, and `[undo] ignore`.
#[derive(Debug)]
pub struct Ignores {
    root: PathBuf,
    gitignore: bool,
    configured: Gitignore,
    exclude: Option<Gitignore>,
    /// Each directory's `.gitignore` (by the directory's relative path).
    per_dir: HashMap<String, Gitignore>,
    /// dsh's own directories inside the workspace (a state directory there): never
    /// recorded, or the records would record their own writing.
    own: Vec<String>,
}

impl Ignores {
    pub fn new(root: &Path, gitignore: bool, patterns: &[String], own: &[PathBuf]) -> Ignores {
        let mut builder = GitignoreBuilder::new(root);
        for pattern in patterns {
            let _ = builder.add_line(None, pattern);
        }
        let configured = builder.build().unwrap_or_else(|_| Gitignore::empty());
        let exclude = gitignore.then(|| {
            let (matcher, _) = Gitignore::new(root.join(".git/info/exclude"));
            matcher
        });
        let own = own
            .iter()
            .filter_map(|path| path.strip_prefix(root).ok())
            .map(|rel| rel.to_string_lossy().into_owned())
            .collect();
        Ignores {
            root: root.to_path_buf(),
            gitignore,
            configured,
            exclude,
            per_dir: HashMap::new(),
            own,
        }
    }

    /// Reads (again) the `.gitignore` of the directory `dir`.
    pub fn load_dir(&mut self, dir: &str) {
        if !self.gitignore {
            return;
        }
        let path = self.root.join(dir).join(".gitignore");
        if path.is_file() {
            let (matcher, _) = Gitignore::new(&path);
            self.per_dir.insert(dir.to_string(), matcher);
        } else {
            self.per_dir.remove(dir);
        }
    }

    /// Whether `rel` (a directory when `is_dir`) is left out. Its parents are not
    /// looked at: nothing below an ignored directory is watched or walked.
    pub fn ignored(&self, rel: &str, is_dir: bool) -> bool {
        if rel == ".git" || rel.starts_with(".git/") {
            return true;
        }
        if self.own.iter().any(|own| {
            own.is_empty()
                || rel == own
                || rel
                    .strip_prefix(own.as_str())
                    .is_some_and(|rest| rest.starts_with('/'))
        }) {
            return true;
        }
        let path = self.root.join(rel);
        if self.configured.matched(&path, is_dir).is_ignore() {
            return true;
        }
        if !self.gitignore {
            return false;
        }
        // The deepest `.gitignore` that has a say wins, as in git.
        let mut dir = parent_of(rel);
        loop {
            if let Some(matcher) = self.per_dir.get(dir) {
                let matched = matcher.matched(&path, is_dir);
                if matched.is_ignore() {
                    return true;
                }
                if matched.is_whitelist() {
                    return false;
                }
            }
            if dir.is_empty() {
                break;
            }
            dir = parent_of(dir);
        }
        self.exclude
            .as_ref()
            .is_some_and(|exclude| exclude.matched(&path, is_dir).is_ignore())
    }
}

/// `a/b` of `a/b/c`; `""` of a top-level name.
pub fn parent_of(rel: &str) -> &str {
    rel.rfind('/').map_or("", |at| &rel[..at])
}

/// `dir/name`, or `name` at the top.
pub fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// The watches over one workspace.
pub struct Watch {
    inotify: Inotify,
    root: PathBuf,
    /// The workspace's filesystem (its device number): the walk stays on it.
    root_device: u64,
    by_wd: HashMap<WatchDescriptor, String>,
    by_dir: HashMap<String, WatchDescriptor>,
    pub ignores: Ignores,
    buffer: Vec<u8>,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch")
            .field("root", &self.root)
            .field("watches", &self.by_wd.len())
            .finish_non_exhaustive()
    }
}

fn mask() -> WatchMask {
    WatchMask::CREATE
        | WatchMask::DELETE
        | WatchMask::MODIFY
        | WatchMask::ATTRIB
        | WatchMask::MOVED_FROM
        | WatchMask::MOVED_TO
        | WatchMask::DONT_FOLLOW
        | WatchMask::EXCL_UNLINK
        | WatchMask::ONLYDIR
}

impl Watch {
    pub fn new(root: &Path, ignores: Ignores) -> std::io::Result<Watch> {
        Ok(Watch {
            inotify: Inotify::init()?,
            root: root.to_path_buf(),
            root_device: std::fs::metadata(root)?.dev(),
            by_wd: HashMap::new(),
            by_dir: HashMap::new(),
            ignores,
            buffer: vec![0; 64 << 10],
        })
    }

    /// The descriptor to wait on (readable when events are queued).
    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.inotify.as_fd()
    }

    /// How many directories are watched.
    pub fn watched(&self) -> usize {
        self.by_wd.len()
    }

    /// Watches `dir` and everything below it that is not ignored, and calls `visit`
    /// with each path found (directories before what they hold), the directory itself
    /// first; a directory that is another filesystem's mount point is visited again as
    /// [`Found::OtherFilesystem`] and not entered. Stops with [`WatchError::TooMany`]
    /// once `visit` has seen `limit` paths.
    pub fn walk(
        &mut self,
        dir: &str,
        limit: usize,
        visit: &mut dyn FnMut(&str, Found),
    ) -> Result<usize, WatchError> {
        let mut seen = 0;
        let mut pending = vec![dir.to_string()];
        visit(dir, Found::Path);
        while let Some(dir) = pending.pop() {
            let path = self.root.join(&dir);
            // Opened once, its filesystem checked at once, and only then listed: a mount
            // point is held open for the length of one fstat.
            let listing = open_directory(&path);
            if listing
                .as_ref()
                .is_ok_and(|(_, device)| *device != self.root_device)
            {
                drop(listing);
                visit(&dir, Found::OtherFilesystem);
                continue;
            }
            match self.inotify.watches().add(&path, mask()) {
                Ok(wd) => {
                    self.by_wd.insert(wd.clone(), dir.clone());
                    self.by_dir.insert(dir.clone(), wd);
                }
                // Gone (or no longer a directory) before it could be watched: its
                // removal is an event of its parent's.
                Err(error) if super::state::is_gone(&error) => continue,
                Err(source) => return Err(WatchError::Watch { path: dir, source }),
            }
            self.ignores.load_dir(&dir);
            let Ok((fd, _)) = listing else {
                continue;
            };
            let Ok(mut entries) = Dir::new(fd) else {
                continue;
            };
            while let Some(Ok(entry)) = entries.read() {
                let Ok(name) = entry.file_name().to_str() else {
                    continue;
                };
                if name == "." || name == ".." {
                    continue;
                }
                let is_dir = match entry.file_type() {
                    FileType::Directory => true,
                    // A filesystem that does not say the type in its listing.
                    FileType::Unknown => entries.fd().is_ok_and(|fd| {
                        rustix::fs::statat(fd, name, AtFlags::SYMLINK_NOFOLLOW).is_ok_and(|stat| {
                            FileType::from_raw_mode(stat.st_mode) == FileType::Directory
                        })
                    }),
                    _ => false,
                };
                let rel = join(&dir, name);
                if self.ignores.ignored(&rel, is_dir) {
                    continue;
                }
                seen += 1;
                if seen > limit {
                    return Err(WatchError::TooMany(limit));
                }
                visit(&rel, Found::Path);
                if is_dir {
                    pending.push(rel);
                }
            }
        }
        Ok(seen)
    }

    /// Stops watching `dir` and everything below it.
    pub fn forget(&mut self, dir: &str) {
        let prefix = format!("{dir}/");
        let gone: Vec<String> = self
            .by_dir
            .keys()
            .filter(|watched| *watched == dir || watched.starts_with(&prefix) || dir.is_empty())
            .cloned()
            .collect();
        for watched in gone {
            if let Some(wd) = self.by_dir.remove(&watched) {
                self.by_wd.remove(&wd);
                let _ = self.inotify.watches().remove(wd);
            }
        }
    }

    /// What the events queued now say, without waiting.
    pub fn drain(&mut self) -> Vec<Seen> {
        let mut seen = Vec::new();
        loop {
            let events = match self.inotify.read_events(&mut self.buffer) {
                Ok(events) => events,
                Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(error) => {
                    tracing::warn!(%error, "reading the workspace's change notifications failed");
                    seen.push(Seen::Overflow);
                    break;
                }
            };
            let mut any = false;
            let mut reload = Vec::new();
            let mut forgotten = Vec::new();
            for event in events {
                any = true;
                if event.mask.contains(EventMask::Q_OVERFLOW) {
                    seen.push(Seen::Overflow);
                    continue;
                }
                if event.mask.contains(EventMask::IGNORED) {
                    forgotten.push(event.wd.clone());
                    continue;
                }
                let Some(dir) = self.by_wd.get(&event.wd) else {
                    continue;
                };
                let Some(name) = event.name.and_then(|name| name.to_str()) else {
                    continue;
                };
                let rel = join(dir, name);
                let is_dir = event.mask.contains(EventMask::ISDIR);
                let appeared = event
                    .mask
                    .intersects(EventMask::CREATE | EventMask::MOVED_TO);
                let went = event
                    .mask
                    .intersects(EventMask::DELETE | EventMask::MOVED_FROM);
                if name == ".gitignore" {
                    reload.push(dir.clone());
                }
                if self.ignores.ignored(&rel, is_dir) {
                    if appeared {
                        seen.push(Seen::Ignored(rel));
                    }
                    continue;
                }
                seen.push(match (is_dir, appeared, went) {
                    (true, true, _) => Seen::NewDir(rel),
                    (true, _, true) => Seen::GoneDir(rel),
                    _ => Seen::Path(rel),
                });
            }
            for wd in forgotten {
                if let Some(dir) = self.by_wd.remove(&wd) {
                    self.by_dir.remove(&dir);
                }
            }
            for dir in reload {
                self.ignores.load_dir(&dir);
            }
            if !any {
                break;
            }
        }
        seen
    }
}

/// `path` opened as a directory (never through a link) and the device of the filesystem
/// it is on.
fn open_directory(path: &Path) -> rustix::io::Result<(OwnedFd, u64)> {
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let device = rustix::fs::fstat(&fd)?.st_dev;
    Ok((fd, device))
}
