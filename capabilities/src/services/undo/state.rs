//! What a path is at one moment ([`PathState`]: absent, a file by the SHA-256 of its
//! contents and its mode, a symbolic link by its target, a directory by its mode), how it
//! is read from the disk, the content-addressed store of file contents ([`Blobs`]), and
//! how a path is put back into a state it had.

use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// A path's state as a record keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PathState {
    Absent,
    /// A regular file; `sha256` is `None` when its contents were not kept (larger than
    /// `[undo] max_file_bytes`, past a byte cap, or unreadable).
    File {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sha256: Option<String>,
        size: u64,
        mode: u32,
    },
    Symlink {
        target: String,
    },
    Dir {
        mode: u32,
    },
    /// A FIFO, a socket or a device node: never recorded.
    Special,
}

impl PathState {
    /// Whether putting a path back into this state is possible from what was kept.
    pub fn restorable(&self) -> bool {
        match self {
            PathState::File { sha256, .. } => sha256.is_some(),
            PathState::Special => false,
            _ => true,
        }
    }

    /// The bytes it holds (0 for all but a file).
    pub fn size(&self) -> u64 {
        match self {
            PathState::File { size, .. } => *size,
            _ => 0,
        }
    }

    pub fn is_dir(&self) -> bool {
        matches!(self, PathState::Dir { .. })
    }

    /// The kept contents' name, when it is a file whose contents were kept.
    pub fn blob(&self) -> Option<&str> {
        match self {
            PathState::File {
                sha256: Some(sha), ..
            } => Some(sha),
            _ => None,
        }
    }
}

/// What tells a file unchanged without reading it: its inode, size, and change and
/// modification times (a restart trusts the state recorded when these match).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp {
    pub ino: u64,
    pub size: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
}

impl Stamp {
    pub fn of(meta: &std::fs::Metadata) -> Stamp {
        Stamp {
            ino: meta.ino(),
            size: meta.size(),
            mtime_ns: meta.mtime() * 1_000_000_000 + meta.mtime_nsec(),
            ctime_ns: meta.ctime() * 1_000_000_000 + meta.ctime_nsec(),
        }
    }
}

/// A path's state as just read, with the contents to keep.
pub struct Observed {
    pub state: PathState,
    pub stamp: Option<Stamp>,
    /// The file's contents, when they are to be kept.
    pub contents: Option<Vec<u8>>,
}

/// Reads what `path` is now, without following a link at its end. A file larger than
/// `max_file_bytes` is not read (its state has no digest). A FIFO is never opened.
pub fn read_state(path: &Path, max_file_bytes: u64) -> std::io::Result<Observed> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(error) if is_gone(&error) => {
            return Ok(Observed {
                state: PathState::Absent,
                stamp: None,
                contents: None,
            })
        }
        Err(error) => return Err(error),
    };
    let mode = meta.permissions().mode() & 0o7777;
    let kind = meta.file_type();
    let state = if kind.is_symlink() {
        let target = std::fs::read_link(path)?;
        PathState::Symlink {
            target: String::from_utf8_lossy(target.as_os_str().as_bytes()).into_owned(),
        }
    } else if kind.is_dir() {
        PathState::Dir { mode }
    } else if kind.is_file() {
        if meta.len() > max_file_bytes {
            PathState::File {
                sha256: None,
                size: meta.len(),
                mode,
            }
        } else {
            // O_NONBLOCK and O_NOFOLLOW: what was a file when it was looked at may be a
            // FIFO or a link by now; neither hangs nor redirects the read.
            let mut file = match std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(
                    rustix::fs::OFlags::NONBLOCK.bits() as i32
                        | rustix::fs::OFlags::NOFOLLOW.bits() as i32,
                )
                .open(path)
            {
                Ok(file) => file,
                Err(error) if is_gone(&error) => {
                    return Ok(Observed {
                        state: PathState::Absent,
                        stamp: None,
                        contents: None,
                    })
                }
                Err(error) => return Err(error),
            };
            let opened = file.metadata()?;
            if !opened.is_file() {
                return Ok(Observed {
                    state: PathState::Special,
                    stamp: None,
                    contents: None,
                });
            }
            let mut contents = Vec::with_capacity(opened.len() as usize);
            (&mut file)
                .take(max_file_bytes + 1)
                .read_to_end(&mut contents)?;
            if contents.len() as u64 > max_file_bytes {
                return Ok(Observed {
                    state: PathState::File {
                        sha256: None,
                        size: contents.len() as u64,
                        mode,
                    },
                    stamp: Some(Stamp::of(&opened)),
                    contents: None,
                });
            }
            return Ok(Observed {
                state: PathState::File {
                    sha256: Some(digest(&contents)),
                    size: contents.len() as u64,
                    mode: opened.permissions().mode() & 0o7777,
                },
                stamp: Some(Stamp::of(&opened)),
                contents: Some(contents),
            });
        }
    } else {
        PathState::Special
    };
    Ok(Observed {
        state,
        stamp: Some(Stamp::of(&meta)),
        contents: None,
    })
}

/// Whether `error` means the path is not there (or a component of it is not a
/// directory any more).
pub fn is_gone(error: &std::io::Error) -> bool {
    error.kind() == std::io::ErrorKind::NotFound || error.raw_os_error() == Some(20)
}

/// The SHA-256 of `bytes`, in hex.
pub fn digest(bytes: &[u8]) -> String {
    let hash = Sha256::digest(bytes);
    let mut hex = String::with_capacity(64);
    for byte in hash.iter() {
        hex.push_str(&format!("{byte:02x}"));
    }
    hex
}

/// File contents by their SHA-256, each kept once (`DIR/ab/cdef…`).
#[derive(Debug, Clone)]
pub struct Blobs {
    dir: PathBuf,
}

impl Blobs {
    pub fn new(dir: PathBuf) -> Blobs {
        Blobs { dir }
    }

    fn path(&self, sha: &str) -> PathBuf {
        let (head, tail) = sha.split_at(2.min(sha.len()));
        self.dir.join(head).join(tail)
    }

    /// Keeps `contents` under `sha` (their digest); true when they were not kept yet.
    pub fn put(&self, sha: &str, contents: &[u8]) -> std::io::Result<bool> {
        let path = self.path(sha);
        if path.exists() {
            return Ok(false);
        }
        if let Some(parent) = path.parent() {
            crate::private::create_dir_all(parent)?;
        }
        crate::private::create_file_atomic(&path, contents)
    }

    pub fn get(&self, sha: &str) -> std::io::Result<Vec<u8>> {
        let contents = std::fs::read(self.path(sha))?;
        if digest(&contents) != sha {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("the kept contents {sha} do not match their digest"),
            ));
        }
        Ok(contents)
    }

    /// Removes every kept contents `keep` does not name; how many were removed.
    pub fn retain(&self, keep: &std::collections::HashSet<String>) -> usize {
        let mut removed = 0;
        let Ok(heads) = std::fs::read_dir(&self.dir) else {
            return 0;
        };
        for head in heads.flatten() {
            let Ok(tails) = std::fs::read_dir(head.path()) else {
                continue;
            };
            for tail in tails.flatten() {
                let sha = format!(
                    "{}{}",
                    head.file_name().to_string_lossy(),
                    tail.file_name().to_string_lossy()
                );
                if !keep.contains(&sha) && std::fs::remove_file(tail.path()).is_ok() {
                    removed += 1;
                }
            }
        }
        removed
    }
}

/// A name beside `path` for a file made before it is renamed into place.
fn temp_beside(path: &Path) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    path.with_file_name(format!(".dsh-undo.{}.{n}", std::process::id()))
}

/// Removes what `path` is now (a directory must be empty by now).
pub fn remove(path: &Path) -> std::io::Result<()> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(error) if is_gone(&error) => return Ok(()),
        Err(error) => return Err(error),
    };
    if meta.is_dir() {
        std::fs::remove_dir(path)
    } else {
        std::fs::remove_file(path)
    }
}

/// Puts `path` into `state` (not `Absent`, not a directory: see [`make_dir`]): a file's
/// kept contents or a link is made beside it and renamed over whatever is there.
pub fn put_back(path: &Path, state: &PathState, blobs: &Blobs) -> std::io::Result<()> {
    match state {
        PathState::File {
            sha256: Some(sha),
            mode,
            ..
        } => {
            let contents = blobs.get(sha)?;
            let temp = temp_beside(path);
            let written = (|| {
                let mut file = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&temp)?;
                std::io::Write::write_all(&mut file, &contents)?;
                file.set_permissions(std::fs::Permissions::from_mode(*mode))?;
                file.sync_data()
            })();
            finish_rename(written, &temp, path)
        }
        PathState::Symlink { target } => {
            let temp = temp_beside(path);
            let made = std::os::unix::fs::symlink(target, &temp);
            finish_rename(made, &temp, path)
        }
        _ => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "this state is not put back by a write",
        )),
    }
}

fn finish_rename(made: std::io::Result<()>, temp: &Path, path: &Path) -> std::io::Result<()> {
    let renamed = made.and_then(|()| {
        // A directory where the file goes is empty by now (its contents went first).
        if std::fs::symlink_metadata(path).is_ok_and(|meta| meta.is_dir()) {
            std::fs::remove_dir(path)?;
        }
        std::fs::rename(temp, path)
    });
    if renamed.is_err() {
        let _ = std::fs::remove_file(temp);
    }
    renamed
}

/// Makes `path` a directory (replacing a file or link there); its mode is set later.
pub fn make_dir(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => return Ok(()),
        Ok(_) => std::fs::remove_file(path)?,
        Err(error) if is_gone(&error) => {}
        Err(error) => return Err(error),
    }
    std::fs::create_dir(path)
}

/// Sets `path`'s permission bits (never following a link: only files and directories
/// get here).
pub fn set_mode(path: &Path, mode: u32) -> std::io::Result<()> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}
