//! The files service: reads of the session workspace and the operator's extra roots
//! that the host remembers per owner, and commits of changes that are atomic (all or
//! none, across roots too) and never blind.
//!
//! **Roots.** The file tools reach the workspace and the extra roots of `[files]
//! extra_roots` ([`roots`]): a relative path is the workspace's, an absolute one the
//! workspace's or the deepest extra root's that holds it (by whole components). An extra
//! root is read-only unless it says `write = true`: a commit with a change landing in a
//! read-only one is `DENIED` before anything is written.
//!
//! **Confinement.** Every path is resolved beneath its root's opened directory by the
//! kernel, never by comparing strings ([`confined`]): `..` past the root, an absolute
//! path outside every root and a symbolic link leading out fail with
//! `INVALID_ARGUMENTS`. (A link whose target is an absolute path counts as leading out,
//! wherever it points.) Reads open without blocking and read only regular files: a FIFO,
//! a device, a socket or a directory is refused by its type.
//!
//! **Symbolic links.** A read follows links that stay in the root. The last component of
//! a path a commit changes is never followed: writing a path that is a symbolic link is
//! refused (`INVALID_ARGUMENTS` naming where it points: write that file instead), and
//! removing one removes the link, not what it points to (a link holds no content, so
//! removing one needs no read). Directories on the way may be links inside the root;
//! each is opened once, and everything after happens in the opened directory, so a
//! directory swapped for a link to elsewhere between the check and the write cannot move
//! a byte out of the root.
//!
//! **dsh's own files** ([`OwnFiles`]) are recognized by what the kernel says an opened
//! object is (`/proc/self/fd/N` of the file read, or of the directory a change lands
//! in): nothing in the state directory is read, and nothing in it, the configuration
//! file and the plugin directory is written or removed (nor a link on the way to one of
//! them as dsh named it), in whatever root, writable or not, they lie. Reading the
//! configuration file is allowed (sandboxed commands may read it too).
//!
//! **Stamps.** A read records, for its owner, the file's stamp taken from the same open
//! descriptor: device, inode, size, modification and change times (ns). The table is
//! keyed by the file itself (device, inode), not by the path used, so a file read
//! through a link or a second name counts as read under every name. A commit checks every
//! existing file it writes or removes: the owner's stamp of it must equal the file's
//! status now (`STALE_FILE` otherwise: never read, or changed since by a command,
//! another owner or an editor; the change time catches a rewrite of the same size within
//! the same second). A file that does not exist yet needs no read. After a commit the
//! owner holds the stamps of what it wrote; a removed file's stamp is dropped. At most
//! `[files] max_tracked_files_per_owner` stamps are kept per owner (the oldest go), and
//! all of an owner's go with it.
//!
//! **What a change was computed from.** The owner's stamp says the model saw the file
//! as it is; it does not say what a call's change was computed from: two `edit`s of one
//! file sent at once both read the same text, and the first commit refreshes the owner's
//! stamp, so the second, computed from the old text, would pass and undo the first. So
//! every read also records, for its call ([`CallReads`], one per call, kept in the call's
//! store), the bytes it returned, under the file's kernel path: a copy, or past
//! [`CALL_BYTES_KEPT`] a call's reads keep their SHA-256 digest instead. A commit
//! (serialized with every other: see below) changing or removing a file its call read
//! compares the file's bytes now with those: other bytes, or no file, is `STALE_FILE`
//! (the bytes decide, not the stat: a rewrite in place within one timestamp tick keeps
//! size and times). After a commit the call's record holds what it wrote (moved, not
//! copied). A copy rather than a digest of every read: with SHA-256 of each read, a 1 MB
//! `read` took 1.30 to 1.43 ms in `cargo bench --bench files` against 0.79 to 0.91 ms
//! before; with the copy, 0.76 to 0.82 ms against 0.79 to 0.82 ms (the two builds run
//! in turns).
//!
//! **Pages** ([`FileService::read_lines`]). A tool showing some lines of a file (the
//! `read` tool) gets the lines it asked for and what it must say about the whole file
//! (its size, first bytes, line counts, where it stops being UTF-8), counted here with
//! vectorized native code, not the file: a 1 MB file is read whole by the host either
//! way (the counts and the call's record need it) but only the page crosses into the
//! plugin. The read counts for freshness and for the call's record exactly as a whole
//! read does.
//!
//! **Commits** ([`FileService::commit`]) resolve and check every change first; then each
//! write goes to a new file beside its target (`.NAME.dsh-XXXXXX`, created exclusively,
//! mode 0600), is written and synced, and gets its permission bits (the replaced file's,
//! `mode-from`'s, or 0644 less the umask); missing parent directories are made. Only when
//! every one is written are they renamed over their targets, then the removes done, then
//! the directories synced. Any failure before the renames deletes every temporary file
//! and every directory the commit made, and nothing was changed (a full disk:
//! `IO_ERROR` saying so). Commits are serialized, so two owners' commits of one file do
//! not interleave between check and rename. A rename over a file replaces that name
//! only: another hard link of it keeps the old contents.
//!
//! Native only: nothing here knows wasmtime. The WIT binding is in [`wit`].

pub mod capability;
pub mod config;
mod confined;
mod roots;
pub mod wit;

#[cfg(test)]
mod roots_tests;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rustix::fs::Stat;
use sha2::{Digest as _, Sha256};

use crate::error::{ErrorCode, ToolError};
use crate::own_files::{OwnFiles, Reach};
pub use config::{ExtraRoot, FilesConfig};
use confined::Root;
use roots::{Located, Places};

/// The most changes one commit takes (each holds a directory open while it runs).
pub const MAX_CHANGES: usize = 256;

/// A file as a read found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRead {
    /// Relative to the workspace, `/` separated; absolute in an extra root.
    pub path: String,
    pub contents: Vec<u8>,
    /// Its permission bits.
    pub mode: u32,
}

/// How many of a file's first bytes [`FileService::read_lines`] returns whole: what
/// tells an image or a binary file (grep and ripgrep look this far for a NUL byte).
pub const HEAD_BYTES: usize = 8192;

/// A page of a file's lines and what a reader needs to know of the whole file, as
/// [`FileService::read_lines`] found them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileLines {
    /// As [`FileRead::path`].
    pub path: String,
    pub mode: u32,
    /// The file's size in bytes.
    pub size: u64,
    /// Its first [`HEAD_BYTES`] (all of it when smaller).
    pub head: Vec<u8>,
    /// `None` when the whole file is UTF-8; else the offset of its first byte that is not.
    pub invalid_utf8_at: Option<u64>,
    /// Its lines: a last line without a line break counts, an empty file has none.
    pub total_lines: u64,
    /// How many of its lines end in `\r\n`.
    pub crlf_lines: u64,
    /// Whether its last byte is a line break.
    pub final_newline: bool,
    /// The lines asked for, whole, with their line breaks.
    pub lines: Vec<u8>,
}

/// A read of a whole file, before the call records it.
struct WholeRead {
    read: FileRead,
    /// The file's kernel path and identity, which the call's record is keyed by.
    real: PathBuf,
    id: FileId,
}

/// Lines `first..first + count` of `bytes` (1-based), whole, with their line breaks:
/// empty when `first` is past the last line or `count` is 0.
fn line_window(bytes: &[u8], first: u64, count: u32) -> &[u8] {
    let mut breaks = memchr::memchr_iter(b'\n', bytes);
    let start = match first.max(1) - 1 {
        0 => 0,
        skip => match breaks.nth((skip - 1) as usize) {
            Some(at) => at + 1,
            None => return &[],
        },
    };
    let end = match count {
        0 => start,
        count => breaks
            .nth(count as usize - 1)
            .map_or(bytes.len(), |at| at + 1),
    };
    &bytes[start..end]
}

/// One change of a commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Create or replace `path`; a new file takes `mode_from`'s permission bits.
    Write {
        path: String,
        contents: Vec<u8>,
        mode_from: Option<String>,
    },
    Remove(String),
}

/// What one change did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changed {
    pub path: String,
    pub created: bool,
    pub bytes: u64,
}

/// A file as a read or a commit saw it. Two stamps of one file are equal only if
/// nothing changed it in between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime: (i64, u32),
    pub ctime: (i64, u32),
}

impl Stamp {
    #[allow(clippy::unnecessary_cast)] // the field types differ between targets
    fn of(stat: &Stat) -> Stamp {
        Stamp {
            dev: stat.st_dev as u64,
            ino: stat.st_ino as u64,
            size: stat.st_size as u64,
            mtime: (stat.st_mtime as i64, stat.st_mtime_nsec as u32),
            ctime: (stat.st_ctime as i64, stat.st_ctime_nsec as u32),
        }
    }

    fn id(&self) -> FileId {
        (self.dev, self.ino)
    }
}

/// A file's identity: (device, inode).
type FileId = (u64, u64);

/// The most bytes of the files one call read that it keeps as they were; past it each
/// further read keeps their SHA-256 digest.
pub const CALL_BYTES_KEPT: usize = 64 << 20;

/// What a call saw of a file: its bytes, or their SHA-256 digest.
#[derive(Debug, Clone)]
enum Seen {
    Bytes(Arc<Vec<u8>>),
    Digest([u8; 32]),
}

impl Seen {
    /// Whether `now` are the bytes seen.
    #[cfg(test)]
    fn holds(&self, now: &[u8]) -> bool {
        self.held_by(&mut &now[..]).unwrap_or(false)
    }

    /// Whether what `reader` reads to its end is the bytes seen: compared (or hashed) a
    /// piece at a time, so a commit's check of a large file allocates no copy of it.
    fn held_by(&self, reader: &mut impl Read) -> std::io::Result<bool> {
        let mut piece = vec![0u8; 64 << 10];
        let mut hasher = Sha256::new();
        let mut at = 0;
        loop {
            let got = match reader.read(&mut piece) {
                Ok(0) => break,
                Ok(got) => got,
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(error) => return Err(error),
            };
            match self {
                Seen::Bytes(seen) => {
                    if seen.get(at..at + got) != Some(&piece[..got]) {
                        return Ok(false);
                    }
                }
                Seen::Digest(_) => hasher.update(&piece[..got]),
            }
            at += got;
        }
        Ok(match self {
            Seen::Bytes(seen) => at == seen.len(),
            Seen::Digest(seen) => <[u8; 32]>::from(hasher.finalize()) == *seen,
        })
    }
}

/// What one call read of each file (and what its commits wrote): the bytes, by the
/// file's kernel path (and its identity, for a file reached by another name). A fresh
/// one per call, in its store; shared with the call's blocking file work.
#[derive(Debug, Default)]
pub struct CallReads(Mutex<CallSeen>);

#[derive(Debug, Default)]
struct CallSeen {
    files: HashMap<PathBuf, (FileId, Seen)>,
    /// Bytes kept in `files` (each kept once, however often the call reads it).
    kept: usize,
}

impl CallReads {
    /// Records that the call saw `bytes` at `path` (the file `id`): kept while the call
    /// keeps at most [`CALL_BYTES_KEPT`], else their digest.
    fn record(&self, path: PathBuf, id: FileId, bytes: std::borrow::Cow<'_, [u8]>) {
        let mut seen = self.0.lock().unwrap();
        if let Some((_, Seen::Bytes(old))) = seen.files.remove(&path) {
            seen.kept -= old.len();
        }
        let kept = match seen.kept + bytes.len() <= CALL_BYTES_KEPT {
            true => {
                seen.kept += bytes.len();
                Seen::Bytes(Arc::new(bytes.into_owned()))
            }
            false => Seen::Digest(Sha256::digest(&bytes).into()),
        };
        seen.files.insert(path, (id, kept));
    }

    fn forget(&self, path: &Path) {
        let mut seen = self.0.lock().unwrap();
        if let Some((_, Seen::Bytes(old))) = seen.files.remove(path) {
            seen.kept -= old.len();
        }
    }

    /// What the call saw at `path`, or of the file `id` under another name.
    fn get(&self, path: &Path, id: Option<FileId>) -> Option<Seen> {
        let seen = self.0.lock().unwrap();
        if let Some((_, bytes)) = seen.files.get(path) {
            return Some(bytes.clone());
        }
        let id = id?;
        seen.files
            .values()
            .find(|(read, _)| *read == id)
            .map(|(_, bytes)| bytes.clone())
    }

    /// How many files the call has read.
    pub fn len(&self) -> usize {
        self.0.lock().unwrap().files.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes the call keeps as they were (at most [`CALL_BYTES_KEPT`]).
    pub fn kept(&self) -> usize {
        self.0.lock().unwrap().kept
    }
}

/// One owner's remembered reads, oldest first in `order`.
#[derive(Debug, Default)]
struct OwnerReads {
    stamps: HashMap<FileId, (Stamp, u64)>,
    order: BTreeMap<u64, FileId>,
    next: u64,
}

impl OwnerReads {
    fn get(&self, id: FileId) -> Option<Stamp> {
        self.stamps.get(&id).map(|(stamp, _)| *stamp)
    }

    fn record(&mut self, stamp: Stamp, max: usize) {
        self.forget(stamp.id());
        let seq = self.next;
        self.next += 1;
        self.stamps.insert(stamp.id(), (stamp, seq));
        self.order.insert(seq, stamp.id());
        while self.stamps.len() > max.max(1) {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            self.stamps.remove(&oldest);
        }
    }

    fn forget(&mut self, id: FileId) {
        if let Some((_, seq)) = self.stamps.remove(&id) {
            self.order.remove(&seq);
        }
    }
}

/// The files capability's native part.
#[derive(Debug)]
pub struct FileService {
    config: FilesConfig,
    /// The host's session workspace (`None` for hosts without one), which a plugin
    /// granted `files` sees read-only.
    workspace: Option<PathBuf>,
    own: OwnFiles,
    umask: u32,
    reads: Mutex<HashMap<Arc<str>, OwnerReads>>,
    /// Held by a commit from its check to its last rename.
    commits: Mutex<()>,
    /// Tests: staging the write at this index fails with this errno, once its temporary
    /// file is written.
    #[cfg(test)]
    stage_fault: Mutex<Option<(usize, i32)>>,
}

fn invalid(message: impl Into<String>) -> ToolError {
    ToolError::new(ErrorCode::InvalidArguments, message)
}

fn internal(message: impl Into<String>) -> ToolError {
    ToolError::new(ErrorCode::Internal, message)
}

/// What was being done when an OS error came, for its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Doing {
    Reading,
    /// Before any rename of a commit: nothing was changed.
    Writing,
}

/// An OS error of a step on `shown` (in the root `within` names) as the model sees it.
fn fs_error(error: std::io::Error, shown: &str, within: &str, doing: Doing) -> ToolError {
    let unchanged = match doing {
        Doing::Reading => "",
        Doing::Writing => "; nothing was changed",
    };
    if confined::is_escape(&error) {
        return invalid(format!(
            "{shown} leads outside {within} (through `..` or a symbolic link; a link to an \
             absolute path counts as leading out){unchanged}"
        ));
    }
    let io = |message: String| ToolError::new(ErrorCode::IoError, message);
    match error.raw_os_error() {
        Some(dsh_launch::os::ENOENT) => ToolError::new(
            ErrorCode::NotFound,
            format!("no such file: {shown}{unchanged}"),
        ),
        Some(dsh_launch::os::ENOTDIR) => invalid(format!(
            "{shown}: a name on its way is a file, not a directory{unchanged}"
        )),
        Some(dsh_launch::os::ELOOP) => invalid(format!(
            "{shown}: a symbolic link where a directory or file must be (or too many \
             links on the way){unchanged}"
        )),
        Some(dsh_launch::os::ENAMETOOLONG) => {
            invalid(format!("{shown}: a name on its way is too long{unchanged}"))
        }
        Some(dsh_launch::os::EISDIR) => invalid(format!("{shown} is a directory{unchanged}")),
        Some(dsh_launch::os::ENXIO) => invalid(format!(
            "{shown} is a socket or a device with nothing behind it: the file tools read \
             only regular files"
        )),
        Some(dsh_launch::os::ENOSPC) => io(format!(
            "the disk is full (writing {shown}): free some space, then commit again; \
             nothing was changed"
        )),
        Some(dsh_launch::os::EDQUOT) => io(format!(
            "the disk quota is used up (writing {shown}): free some space, then commit \
             again; nothing was changed"
        )),
        Some(dsh_launch::os::EROFS) => io(format!(
            "{shown} is on a read-only filesystem{}",
            match doing {
                Doing::Reading => "",
                Doing::Writing => ": it cannot be changed; nothing was changed",
            }
        )),
        Some(dsh_launch::os::EACCES | dsh_launch::os::EPERM) => io(format!(
            "permission denied {} {shown}{unchanged}",
            match doing {
                Doing::Reading => "reading",
                Doing::Writing => "writing",
            }
        )),
        _ => io(format!(
            "{} {shown} failed: {error}{unchanged}",
            match doing {
                Doing::Reading => "reading",
                Doing::Writing => "writing",
            }
        )),
    }
}

/// A commit's change, resolved and checked.
struct Planned {
    /// Where it lands: the kernel's path of its directory, the names to make, its name.
    target: PathBuf,
    shown: String,
    /// The root it lies in, as messages name it.
    within: String,
    /// The deepest existing directory on the target's way, opened; once staged, the
    /// target's own directory.
    dir: Arc<File>,
    /// The directories to make under `dir` (a write whose parents are missing).
    missing: Vec<String>,
    name: String,
    /// The target as checked; `None`: it does not exist.
    before: Option<Stat>,
    action: Action,
}

enum Action {
    Write { contents: Vec<u8>, mode: u32 },
    Remove,
}

/// A write staged: its temporary file, written and synced, beside its target.
struct Staged {
    index: usize,
    dir: Arc<File>,
    temp: String,
    /// The temporary file's stamp when it was closed (before the rename).
    written: Stamp,
}

/// What a failed commit takes back: its temporary files and the directories it made
/// (in reverse order).
#[derive(Default)]
struct Undo {
    temps: Vec<(Arc<File>, String)>,
    dirs: Vec<(Arc<File>, String)>,
}

impl Undo {
    fn run(&mut self) {
        for (dir, name) in self.temps.drain(..).rev() {
            if let Err(error) = confined::unlink_at(&*dir, &name) {
                tracing::warn!(temp = name, %error, "cannot remove a temporary file of a failed commit");
            }
        }
        for (dir, name) in self.dirs.drain(..).rev() {
            let _ = confined::rmdir_at(&*dir, &name);
        }
    }
}

impl FileService {
    /// The service for a host whose session workspace is `workspace` and whose own
    /// files are `own`.
    pub fn new(config: FilesConfig, workspace: Option<PathBuf>, own: OwnFiles) -> Self {
        FileService {
            config,
            workspace,
            own,
            umask: confined::umask(),
            reads: Mutex::new(HashMap::new()),
            commits: Mutex::new(()),
            #[cfg(test)]
            stage_fault: Mutex::new(None),
        }
    }

    /// The host's session workspace, which a plugin granted `files` sees read-only at
    /// its own path.
    pub fn workspace(&self) -> Option<&Path> {
        self.workspace.as_deref()
    }

    /// The extra roots (`[files] extra_roots`), which a plugin granted `files` also sees
    /// read-only at their own paths.
    pub fn extra_roots(&self) -> &[ExtraRoot] {
        &self.config.extra_roots
    }

    /// Forgets `owner`'s reads; returns how many.
    pub fn forget_owner(&self, owner: &str) -> usize {
        self.reads
            .lock()
            .unwrap()
            .remove(owner)
            .map_or(0, |reads| reads.stamps.len())
    }

    /// How many reads `owner` has remembered.
    pub fn tracked(&self, owner: &str) -> usize {
        self.reads
            .lock()
            .unwrap()
            .get(owner)
            .map_or(0, |reads| reads.stamps.len())
    }

    /// The stamp `owner` recorded of the file `id`.
    fn stamp_read(&self, owner: &str, id: FileId) -> Option<Stamp> {
        self.reads.lock().unwrap().get(owner)?.get(id)
    }

    fn with_reads<T>(&self, owner: &str, f: impl FnOnce(&mut OwnerReads) -> T) -> T {
        let mut reads = self.reads.lock().unwrap();
        if !reads.contains_key(owner) {
            reads.insert(Arc::from(owner), OwnerReads::default());
        }
        f(reads.get_mut(owner).expect("just inserted"))
    }

    /// Reads `path` (relative to the workspace `workdir`, or absolute inside it or an
    /// extra root) whole, if it is a regular file of at most `max_bytes` (and `[files]
    /// max_read_bytes`), and with `remember` remembers for `owner` that it has read the
    /// file as it is now (a tool reading what it is about to change does not: only what
    /// the model saw counts). Either way `call` records what it returned: a commit of the
    /// same call checks the file still holds it. Blocking.
    pub fn read(
        &self,
        owner: &str,
        workdir: &Path,
        path: &str,
        max_bytes: u64,
        remember: bool,
        call: &CallReads,
    ) -> Result<FileRead, ToolError> {
        let whole = self.read_whole(owner, workdir, path, max_bytes, remember)?;
        call.record(whole.real, whole.id, whole.read.contents.as_slice().into());
        Ok(whole.read)
    }

    /// Reads `path` as [`FileService::read`] does (the same checks, errors and
    /// remembering; `call` keeps the whole file, moved, not copied) and returns lines
    /// `first..first + count` of it (1-based, whole, with their line breaks; none when
    /// `first` is past the last line) and what a reader needs to know of the rest: its
    /// size, its first [`HEAD_BYTES`], where it stops being UTF-8, its line counts. A
    /// tool showing a page of a large file is sent the page, not the file; the counts
    /// are made here, natively. Blocking.
    #[allow(clippy::too_many_arguments)]
    pub fn read_lines(
        &self,
        owner: &str,
        workdir: &Path,
        path: &str,
        max_bytes: u64,
        remember: bool,
        (first, count): (u64, u32),
        call: &CallReads,
    ) -> Result<FileLines, ToolError> {
        let whole = self.read_whole(owner, workdir, path, max_bytes, remember)?;
        let bytes = &whole.read.contents;
        let newlines = bytecount::count(bytes, b'\n') as u64;
        let final_newline = bytes.last() == Some(&b'\n');
        let total_lines = newlines + u64::from(!bytes.is_empty() && !final_newline);
        let crlf_lines = memchr::memchr_iter(b'\r', bytes)
            .filter(|&at| bytes.get(at + 1) == Some(&b'\n'))
            .count() as u64;
        let invalid_utf8_at = simdutf8::compat::from_utf8(bytes)
            .err()
            .map(|error| error.valid_up_to() as u64);
        let lines = line_window(bytes, first, count).to_vec();
        let head = bytes[..bytes.len().min(HEAD_BYTES)].to_vec();
        let size = bytes.len() as u64;
        let FileRead {
            path,
            contents,
            mode,
        } = whole.read;
        call.record(whole.real, whole.id, contents.into());
        Ok(FileLines {
            path,
            mode,
            size,
            head,
            invalid_utf8_at,
            total_lines,
            crlf_lines,
            final_newline,
            lines,
        })
    }

    /// The read both [`FileService::read`] and [`FileService::read_lines`] make.
    fn read_whole(
        &self,
        owner: &str,
        workdir: &Path,
        path: &str,
        max_bytes: u64,
        remember: bool,
    ) -> Result<WholeRead, ToolError> {
        let places = Places::open(workdir, &self.config.extra_roots)?;
        let at = places.locate(path)?;
        let within = places.within(at.place);
        if at.rel.parts.is_empty() {
            return Err(invalid(format!(
                "{path} is {within} itself, a directory: the file tools read files"
            )));
        }
        let (mut file, stat, real) = self.open_regular(&places, &at)?;
        let shown = at.shown;
        let limit = max_bytes.min(self.config.max_read_bytes);
        let stamp = Stamp::of(&stat);
        let too_large = |size: String| {
            ToolError::new(
                ErrorCode::LimitExceeded,
                format!(
                    "{shown} is {size}, more than the {limit} bytes this read may return \
                     (max-bytes {max_bytes}, [files] max_read_bytes {}); nothing was read",
                    self.config.max_read_bytes
                ),
            )
        };
        if stamp.size > limit {
            return Err(too_large(format!("{} bytes", stamp.size)));
        }
        let mut contents = Vec::with_capacity(stamp.size as usize);
        (&mut file)
            .take(limit.saturating_add(1))
            .read_to_end(&mut contents)
            .map_err(|error| fs_error(error, &shown, &within, Doing::Reading))?;
        if contents.len() as u64 > limit {
            return Err(too_large("growing (it grew as it was read)".into()));
        }
        if remember {
            let max = self.config.max_tracked_files_per_owner;
            self.with_reads(owner, |reads| reads.record(stamp, max));
        }
        Ok(WholeRead {
            read: FileRead {
                path: shown,
                contents,
                mode: stat.st_mode & 0o777,
            },
            real,
            id: stamp.id(),
        })
    }

    /// Opens the file `at` names for reading: a regular file, not in the state directory;
    /// with its status and its kernel path.
    fn open_regular(
        &self,
        places: &Places,
        at: &Located,
    ) -> Result<(File, Stat, PathBuf), ToolError> {
        let (shown, within) = (&at.shown, places.within(at.place));
        let file = places
            .root(at.place)?
            .open_for_reading(&at.rel)
            .map_err(|error| fs_error(error, shown, &within, Doing::Reading))?;
        let real = confined::kernel_path(&file).map_err(|error| {
            internal(format!(
                "cannot tell what {shown} is (/proc/self/fd: {error}), so it is not read"
            ))
        })?;
        if self.own.reach(&real) == Reach::Hidden {
            return Err(invalid(format!(
                "{shown} is one of dsh's own files (in its state directory): the file \
                 tools never read it"
            )));
        }
        let stat = confined::fstat(&file)
            .map_err(|error| fs_error(error, shown, &within, Doing::Reading))?;
        if !confined::is_regular(&stat) {
            return Err(invalid(format!(
                "{shown} is {}: the file tools read only regular files",
                confined::kind_of(&stat)
            )));
        }
        Ok((file, stat, real))
    }

    /// Applies `changes` for `owner` all or none (see the module doc); a file `call` read
    /// must still hold the bytes it read. Blocking.
    pub fn commit(
        &self,
        owner: &str,
        workdir: &Path,
        changes: Vec<Change>,
        call: &CallReads,
    ) -> Result<Vec<Changed>, ToolError> {
        if changes.len() > MAX_CHANGES {
            return Err(ToolError::new(
                ErrorCode::LimitExceeded,
                format!(
                    "{} changes in one commit; at most {MAX_CHANGES} are taken (commit them \
                     in parts); nothing was changed",
                    changes.len()
                ),
            ));
        }
        let places = Places::open(workdir, &self.config.extra_roots)?;
        let _serial = self.commits.lock().unwrap_or_else(|e| e.into_inner());
        let mut plan = self.plan(owner, &places, changes, call)?;
        let mut undo = Undo::default();
        let staged = match self.stage(&mut plan, &mut undo) {
            Ok(staged) => staged,
            Err(error) => {
                undo.run();
                return Err(error);
            }
        };
        // Nothing may have changed a target while the temporaries were written.
        for planned in &plan {
            let now = confined::lstat_at(&*planned.dir, &planned.name)
                .ok()
                .flatten();
            let same = match (&planned.before, &now) {
                (None, None) => true,
                (Some(before), Some(now)) => Stamp::of(before) == Stamp::of(now),
                _ => false,
            };
            if !same {
                undo.run();
                return Err(ToolError::new(
                    ErrorCode::StaleFile,
                    format!(
                        "{} changed while this commit was being written: read it again, \
                         then commit again; nothing was changed",
                        planned.shown
                    ),
                ));
            }
        }
        let ids: Vec<(usize, FileId)> = staged
            .iter()
            .map(|stage| (stage.index, stage.written.id()))
            .collect();
        let changed = self.apply(owner, &plan, staged, &mut undo)?;
        // What the call has seen after this commit: what it wrote (moved, not copied).
        for planned in plan.iter().filter(|p| matches!(p.action, Action::Remove)) {
            call.forget(&planned.target);
        }
        for (index, id) in ids {
            let planned = &mut plan[index];
            if let Action::Write { contents, .. } = &mut planned.action {
                let contents = std::mem::take(contents);
                call.record(std::mem::take(&mut planned.target), id, contents.into());
            }
        }
        Ok(changed)
    }

    /// Resolves and checks every change: nothing is written yet.
    fn plan(
        &self,
        owner: &str,
        places: &Places,
        changes: Vec<Change>,
        call: &CallReads,
    ) -> Result<Vec<Planned>, ToolError> {
        let mut plan: Vec<Planned> = Vec::with_capacity(changes.len());
        let mut dirs: HashMap<PathBuf, Arc<File>> = HashMap::new();
        let links = self.own_links(places);
        for change in changes {
            let (path, write) = match change {
                Change::Write {
                    path,
                    contents,
                    mode_from,
                } => (path, Some((contents, mode_from))),
                Change::Remove(path) => (path, None),
            };
            let at = places.locate(&path)?;
            let within = places.within(at.place);
            let Some((parents, name)) = at.rel.split_last() else {
                return Err(invalid(format!(
                    "{path} is {within} itself: a commit changes files"
                )));
            };
            let name = name.to_string();
            let shown = at.shown.clone();
            let root = places.root(at.place)?;
            let (dir, real, missing) =
                self.resolve_dir(root, parents, &shown, &within, &mut dirs)?;
            if write.is_none() && !missing.is_empty() {
                return Err(ToolError::new(
                    ErrorCode::NotFound,
                    format!("no such file: {shown}; nothing was changed"),
                ));
            }
            let mut target = real;
            target.extend(&missing);
            target.push(&name);
            let before = match missing.is_empty() {
                true => confined::lstat_at(&*dir, &name)
                    .map_err(|error| fs_error(error, &shown, &within, Doing::Writing))?,
                false => None,
            };
            self.check_own_change(&target, before.as_ref(), &links, &shown)?;
            places.check_writable(&target, at.place, &shown)?;
            let action = match write {
                Some((contents, mode_from)) => {
                    let mode = match &before {
                        Some(stat) if confined::is_regular(stat) => stat.st_mode & 0o777,
                        Some(stat) if confined::is_symlink(stat) => {
                            let points_to =
                                rustix::fs::readlinkat(&*dir, name.as_str(), Vec::new())
                                    .map(|target| target.to_string_lossy().into_owned())
                                    .unwrap_or_else(|_| "?".into());
                            return Err(invalid(format!(
                                "{shown} is a symbolic link (to {points_to}): the file tools do \
                                 not write through links; write the file it points to instead \
                                 (or remove the link first); nothing was changed"
                            )));
                        }
                        Some(stat) => {
                            return Err(invalid(format!(
                                "{shown} is {}: a commit writes only regular files; nothing \
                                 was changed",
                                confined::kind_of(stat)
                            )))
                        }
                        None => match mode_from {
                            Some(from) => self.mode_of(places, &from)?,
                            None => 0o644 & !self.umask,
                        },
                    };
                    Action::Write { contents, mode }
                }
                None => match &before {
                    None => {
                        return Err(ToolError::new(
                            ErrorCode::NotFound,
                            format!("no such file: {shown}; nothing was changed"),
                        ))
                    }
                    Some(stat) if confined::is_dir(stat) => {
                        return Err(invalid(format!(
                            "{shown} is a directory: a commit removes files only; nothing was \
                             changed"
                        )))
                    }
                    Some(stat) if !confined::is_regular(stat) && !confined::is_symlink(stat) => {
                        return Err(invalid(format!(
                            "{shown} is {}: a commit removes regular files and links only; \
                             nothing was changed",
                            confined::kind_of(stat)
                        )))
                    }
                    Some(_) => Action::Remove,
                },
            };
            // An existing file must be unchanged since the owner read it (a link holds
            // no content: removing one needs no read).
            if let Some(stat) = before.as_ref().filter(|s| !confined::is_symlink(s)) {
                let now = Stamp::of(stat);
                match self.stamp_read(owner, now.id()) {
                    None => {
                        return Err(ToolError::new(
                            ErrorCode::StaleFile,
                            format!(
                                "{shown} exists and you have not read it yet (or not since \
                                 long ago): read it first, then commit again; nothing was \
                                 changed"
                            ),
                        ))
                    }
                    Some(read) if read != now => {
                        return Err(ToolError::new(
                            ErrorCode::StaleFile,
                            format!(
                                "{shown} changed since you last read it (a command, another \
                                 client or an editor changed it): read it again, then commit \
                                 again; nothing was changed"
                            ),
                        ))
                    }
                    Some(_) => {}
                }
            }
            self.check_call_read(call, &target, &dir, &name, before.as_ref(), &shown)?;
            plan.push(Planned {
                target,
                shown,
                within,
                dir,
                missing,
                name,
                before,
                action,
            });
        }
        // One file once, and never both a file and a directory on another's way (by
        // where each lands, whichever root or name the path took).
        let mut seen = HashSet::new();
        let mut on_the_way: HashMap<&Path, &str> = HashMap::new();
        for planned in &plan {
            if !seen.insert(&planned.target) {
                return Err(invalid(format!(
                    "the commit names {} twice; nothing was changed",
                    planned.shown
                )));
            }
            for dir in planned.target.ancestors().skip(1) {
                on_the_way.entry(dir).or_insert(&planned.shown);
            }
        }
        for planned in &plan {
            if let Some(other) = on_the_way.get(planned.target.as_path()) {
                return Err(invalid(format!(
                    "the commit changes {} and {other}: one path cannot be a file and a \
                     directory on the way to another; nothing was changed",
                    planned.shown
                )));
            }
        }
        Ok(plan)
    }

    /// Refuses a change of `target` (`name` in `dir`, `before` as it is now) when its
    /// call read it and the file no longer holds the bytes that read returned: the change
    /// was computed from text that is gone (another call changed it meanwhile).
    fn check_call_read(
        &self,
        call: &CallReads,
        target: &Path,
        dir: &File,
        name: &str,
        before: Option<&Stat>,
        shown: &str,
    ) -> Result<(), ToolError> {
        let Some(read) = call.get(target, before.map(|stat| Stamp::of(stat).id())) else {
            return Ok(());
        };
        let stale = |what: &str| {
            ToolError::new(
                ErrorCode::StaleFile,
                format!(
                    "{shown} {what} since this call read it (another call, a command or an \
                     editor changed it while this one ran): this change was computed from \
                     text the file no longer holds. Read it again, then change it again; \
                     nothing was changed"
                ),
            )
        };
        let Some(stat) = before else {
            return Err(stale("was removed"));
        };
        if confined::is_symlink(stat) {
            // A link holds no content (and is never written through).
            return Ok(());
        }
        let unchanged = confined::open_regular_at(dir, name)
            .and_then(|file| match file {
                Some(mut file) => read.held_by(&mut file),
                None => Ok(false),
            })
            .map_err(|error| fs_error(error, shown, "its root", Doing::Writing))?;
        match unchanged {
            true => Ok(()),
            // Other bytes, or no longer a regular file.
            false => Err(stale("changed")),
        }
    }

    /// Opens the directory `parents` names, or the deepest one of them that exists;
    /// returns it, its canonical path and the names still missing under it. Directories
    /// are shared between changes (by their canonical path).
    fn resolve_dir(
        &self,
        root: &Root,
        parents: &[String],
        shown: &str,
        within: &str,
        dirs: &mut HashMap<PathBuf, Arc<File>>,
    ) -> Result<(Arc<File>, PathBuf, Vec<String>), ToolError> {
        let error = |error| fs_error(error, shown, within, Doing::Writing);
        let (dir, missing) = match root.open_dir(parents) {
            Ok(dir) => (dir, Vec::new()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // The deepest existing one, each resolved from the root again.
                let mut deepest = root.open_dir(&[]).map_err(error)?;
                let mut depth = 0;
                for end in 1..=parents.len() {
                    match root.open_dir(&parents[..end]) {
                        Ok(dir) => {
                            deepest = dir;
                            depth = end;
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                        Err(e) => return Err(error(e)),
                    }
                }
                (deepest, parents[depth..].to_vec())
            }
            Err(e) => return Err(error(e)),
        };
        let real = confined::kernel_path(&dir).map_err(|e| {
            internal(format!(
                "cannot tell where {shown} lies (/proc/self/fd: {e}), so it is not changed"
            ))
        })?;
        let dir = dirs
            .entry(real.clone())
            .or_insert_with(|| Arc::new(dir))
            .clone();
        Ok((dir, real, missing))
    }

    /// The links on the way to dsh's own files as dsh named them that lie in a
    /// writable root (the workspace, an extra root with `write = true`), by (device,
    /// inode): removing or replacing one would redirect the next start.
    fn own_links(&self, places: &Places) -> Vec<FileId> {
        use std::os::unix::fs::MetadataExt;
        self.own
            .links_in(&places.writable())
            .into_iter()
            .filter_map(|(link, _)| std::fs::symlink_metadata(link).ok())
            .map(|meta| (meta.dev(), meta.ino()))
            .collect()
    }

    /// Refuses a change of `target` (its kernel path) that reaches dsh's own files.
    fn check_own_change(
        &self,
        target: &Path,
        before: Option<&Stat>,
        links: &[FileId],
        shown: &str,
    ) -> Result<(), ToolError> {
        let what = match self.own.reach(target) {
            Reach::Hidden => Some("in its state directory"),
            Reach::ReadOnly => Some(
                match self
                    .own
                    .read_only
                    .iter()
                    .any(|own| target.starts_with(own) && own.is_dir())
                {
                    true => "in its plugin directory",
                    false => "its configuration file",
                },
            ),
            Reach::Open => before
                .map(Stamp::of)
                .filter(|stamp| links.contains(&stamp.id()))
                .map(|_| "a link on the way to its configuration, plugins or state"),
        };
        match what {
            Some(what) => Err(invalid(format!(
                "{shown} is one of dsh's own files ({what}): the file tools never change \
                 it; nothing was changed"
            ))),
            None => Ok(()),
        }
    }

    /// The permission bits of the file `from` names (a write's `mode-from`).
    fn mode_of(&self, places: &Places, from: &str) -> Result<u32, ToolError> {
        let at = places.locate(from)?;
        let (_, stat, _) = self.open_regular(places, &at).map_err(|error| ToolError {
            message: format!("mode-from: {}", error.message),
            ..error
        })?;
        Ok(stat.st_mode & 0o777)
    }

    /// Makes the missing directories and writes every temporary file; records in `undo`
    /// what it made.
    fn stage(&self, plan: &mut [Planned], undo: &mut Undo) -> Result<Vec<Staged>, ToolError> {
        let mut staged = Vec::new();
        for (index, planned) in plan.iter_mut().enumerate() {
            let Action::Write { contents, mode } = &planned.action else {
                continue;
            };
            let error = |error| fs_error(error, &planned.shown, &planned.within, Doing::Writing);
            for name in planned.missing.clone() {
                if confined::make_dir_at(&*planned.dir, &name).map_err(error)? {
                    undo.dirs.push((planned.dir.clone(), name.clone()));
                }
                planned.dir =
                    Arc::new(confined::open_child_dir(&*planned.dir, &name).map_err(error)?);
            }
            let (file, temp) = create_temp(&planned.dir, &planned.name).map_err(error)?;
            undo.temps.push((planned.dir.clone(), temp.clone()));
            let mut file = file;
            file.write_all(contents).map_err(error)?;
            #[cfg(test)]
            if let Some((at, errno)) = *self.stage_fault.lock().unwrap() {
                if at == index {
                    return Err(error(std::io::Error::from_raw_os_error(errno)));
                }
            }
            confined::set_mode(&file, *mode).map_err(error)?;
            file.sync_all().map_err(error)?;
            let written = Stamp::of(&confined::fstat(&file).map_err(error)?);
            staged.push(Staged {
                index,
                dir: planned.dir.clone(),
                temp,
                written,
            });
        }
        Ok(staged)
    }

    /// Renames every staged file over its target, does the removes, syncs the
    /// directories, and records the owner's new stamps.
    fn apply(
        &self,
        owner: &str,
        plan: &[Planned],
        staged: Vec<Staged>,
        undo: &mut Undo,
    ) -> Result<Vec<Changed>, ToolError> {
        let mut done: Vec<&str> = Vec::new();
        let mut new_stamps: Vec<Option<Stamp>> = Vec::new();
        let failed = |shown: &str, error: std::io::Error, done: &[&str]| {
            ToolError::new(
                ErrorCode::IoError,
                format!(
                    "{shown} could not be put in place ({error}); {}",
                    match done.is_empty() {
                        true => "nothing was changed".to_string(),
                        false => format!("already changed: {}", done.join(", ")),
                    }
                ),
            )
        };
        for (at, stage) in staged.iter().enumerate() {
            let planned = &plan[stage.index];
            if let Err(error) = confined::rename_at(&*stage.dir, &stage.temp, &planned.name) {
                // Keep the temporaries not renamed yet out of the roots.
                undo.temps = staged[at..]
                    .iter()
                    .map(|s| (s.dir.clone(), s.temp.clone()))
                    .collect();
                undo.dirs.clear();
                undo.run();
                return Err(failed(&planned.shown, error, &done));
            }
            done.push(&planned.shown);
            // The file now, if it is still the one written (a rename changes only its
            // change time).
            let now = confined::lstat_at(&*stage.dir, &planned.name)
                .ok()
                .flatten()
                .map(|stat| Stamp::of(&stat))
                .filter(|now| {
                    (now.id(), now.size, now.mtime)
                        == (stage.written.id(), stage.written.size, stage.written.mtime)
                });
            new_stamps.push(now);
        }
        undo.temps.clear();
        undo.dirs.clear();
        for planned in plan.iter().filter(|p| matches!(p.action, Action::Remove)) {
            if let Err(error) = confined::unlink_at(&*planned.dir, &planned.name) {
                return Err(failed(&planned.shown, error, &done));
            }
            done.push(&planned.shown);
        }
        let mut synced = HashSet::new();
        for planned in plan {
            if synced.insert(Arc::as_ptr(&planned.dir)) {
                if let Err(error) =
                    confined::open_dir_for_sync(&*planned.dir).and_then(|dir| dir.sync_all())
                {
                    tracing::debug!(path = planned.shown, %error, "cannot sync a directory a commit changed");
                }
            }
        }
        let max = self.config.max_tracked_files_per_owner;
        self.with_reads(owner, |reads| {
            for planned in plan {
                if let Some(before) = &planned.before {
                    reads.forget(Stamp::of(before).id());
                }
            }
            for stamp in new_stamps.iter().flatten() {
                reads.record(*stamp, max);
            }
        });
        Ok(plan
            .iter()
            .map(|planned| match &planned.action {
                Action::Write { contents, .. } => Changed {
                    path: planned.shown.clone(),
                    created: planned.before.is_none(),
                    bytes: contents.len() as u64,
                },
                Action::Remove => Changed {
                    path: planned.shown.clone(),
                    created: false,
                    bytes: 0,
                },
            })
            .collect())
    }
}

/// Creates a new temporary file beside `name` in `dir` (another name on a clash).
fn create_temp(dir: &impl AsFd, name: &str) -> std::io::Result<(File, String)> {
    let mut last = None;
    for _ in 0..16 {
        let temp = confined::temp_name(name);
        match confined::create_new_at(dir, &temp) {
            Ok(file) => return Ok((file, temp)),
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => last = Some(error),
            Err(error) => return Err(error),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no free temporary name")))
}
