//! What a path is at one moment ([`PathState`]: absent, a file by the SHA-256 of its
//! contents and its mode, a symbolic link by its target, a directory by its mode), how it
//! is read from the disk, the content-addressed store of file contents ([`Blobs`]), and
//! how a path is put back into a state it had.

use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

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
    pub fn of_stat(stat: &rustix::fs::Stat) -> Stamp {
        Stamp {
            ino: stat.st_ino,
            size: stat.st_size as u64,
            mtime_ns: stat.st_mtime * 1_000_000_000 + stat.st_mtime_nsec as i64,
            ctime_ns: stat.st_ctime * 1_000_000_000 + stat.st_ctime_nsec as i64,
        }
    }

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

/// The directory a workspace path is in, opened beneath the workspace one component at a
/// time, never through a link (`O_NOFOLLOW` on each): a link a command made on the way
/// (`dir -> /etc`) makes the path unreachable, so nothing outside the workspace is ever
/// read into a record or written by an undo.
pub struct Beneath {
    pub parent: OwnedFd,
    pub name: String,
}

/// `rel`'s parent opened beneath `root` (see [`Beneath`]). `NotFound` when a component is
/// missing, a link or not a directory.
pub fn beneath(root: &Path, rel: &str) -> std::io::Result<Beneath> {
    let directory = OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW;
    let mut parts: Vec<&str> = rel.split('/').collect();
    let name = parts.pop().unwrap_or_default();
    if [name]
        .iter()
        .chain(parts.iter())
        .any(|part| part.is_empty() || *part == "." || *part == "..")
    {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{rel:?} is not a path beneath the workspace"),
        ));
    }
    let mut dir = rustix::fs::open(root, directory, Mode::empty())?;
    for part in parts {
        dir = match rustix::fs::openat(&dir, part, directory, Mode::empty()) {
            Ok(next) => next,
            // A link, or something other than a directory, where a directory was: the
            // path does not lead anywhere beneath the workspace.
            Err(error) if error == Errno::LOOP || error == Errno::NOTDIR => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("{rel}: a link or a file is on its way"),
                ))
            }
            Err(error) => return Err(error.into()),
        };
    }
    Ok(Beneath {
        parent: dir,
        name: name.to_string(),
    })
}

/// The first directory on the way to the workspace path `rel` that is a link or not a
/// directory now (`a/b` of `a/b/c/d`), if one is; a missing one is not (an undo may make
/// it).
pub fn on_the_way(root: &Path, rel: &str) -> Option<String> {
    let directory = OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW;
    let mut parts: Vec<&str> = rel.split('/').collect();
    parts.pop();
    let mut dir = rustix::fs::open(root, directory, Mode::empty()).ok()?;
    let mut walked = String::new();
    for part in parts {
        if !walked.is_empty() {
            walked.push('/');
        }
        walked.push_str(part);
        dir = match rustix::fs::openat(&dir, part, directory, Mode::empty()) {
            Ok(next) => next,
            Err(Errno::NOENT) => return None,
            Err(_) => return Some(walked),
        };
    }
    None
}

fn absent() -> Observed {
    Observed {
        state: PathState::Absent,
        stamp: None,
        contents: None,
    }
}

/// Reads what the workspace path `rel` is now, beneath `root` (see [`Beneath`]), never
/// following a link. A file larger than `max_file_bytes` is not read (its state has no
/// digest). A FIFO is never opened.
pub fn read_state(root: &Path, rel: &str, max_file_bytes: u64) -> std::io::Result<Observed> {
    let at = match beneath(root, rel) {
        Ok(at) => at,
        Err(error) if is_gone(&error) => return Ok(absent()),
        Err(error) => return Err(error),
    };
    let stat = match rustix::fs::statat(&at.parent, at.name.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => stat,
        Err(Errno::NOENT) | Err(Errno::NOTDIR) => return Ok(absent()),
        Err(error) => return Err(error.into()),
    };
    let mode = stat.st_mode & 0o7777;
    let kind = FileType::from_raw_mode(stat.st_mode);
    let stamp = Some(Stamp::of_stat(&stat));
    let state = match kind {
        FileType::Symlink => {
            let target = rustix::fs::readlinkat(&at.parent, at.name.as_str(), Vec::new())?;
            PathState::Symlink {
                target: String::from_utf8_lossy(target.as_bytes()).into_owned(),
            }
        }
        FileType::Directory => PathState::Dir { mode },
        FileType::RegularFile if stat.st_size as u64 > max_file_bytes => PathState::File {
            sha256: None,
            size: stat.st_size as u64,
            mode,
        },
        FileType::RegularFile => {
            // O_NONBLOCK and O_NOFOLLOW: what was a file when it was looked at may be a
            // FIFO or a link by now; neither hangs nor redirects the read.
            let fd = match rustix::fs::openat(
                &at.parent,
                at.name.as_str(),
                OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
                Mode::empty(),
            ) {
                Ok(fd) => fd,
                Err(Errno::NOENT) => return Ok(absent()),
                Err(Errno::LOOP) => return read_state(root, rel, max_file_bytes),
                Err(error) => return Err(error.into()),
            };
            let mut file = std::fs::File::from(fd);
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
            let mode = opened.permissions().mode() & 0o7777;
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
                    mode,
                },
                stamp: Some(Stamp::of(&opened)),
                contents: Some(contents),
            });
        }
        _ => PathState::Special,
    };
    Ok(Observed {
        state,
        stamp,
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

/// A name for a file made beside its target before it is renamed into place.
fn temp_name() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!(".dsh-undo.{}.{n}", std::process::id())
}

/// Removes what the workspace path `rel` is now (a directory must be empty by now).
pub fn remove(root: &Path, rel: &str) -> std::io::Result<()> {
    let at = beneath(root, rel)?;
    let stat = match rustix::fs::statat(&at.parent, at.name.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => stat,
        Err(Errno::NOENT) => return Ok(()),
        Err(error) => return Err(error.into()),
    };
    let flags = if FileType::from_raw_mode(stat.st_mode) == FileType::Directory {
        AtFlags::REMOVEDIR
    } else {
        AtFlags::empty()
    };
    Ok(rustix::fs::unlinkat(&at.parent, at.name.as_str(), flags)?)
}

/// Puts the workspace path `rel` into `state` (a file's kept contents, or a link): made
/// beside it, then renamed over whatever is there (an empty directory is removed first).
pub fn put_back(root: &Path, rel: &str, state: &PathState, blobs: &Blobs) -> std::io::Result<()> {
    let at = beneath(root, rel)?;
    let temp = temp_name();
    let made: std::io::Result<()> = match state {
        PathState::File {
            sha256: Some(sha),
            mode,
            ..
        } => (|| {
            let contents = blobs.get(sha)?;
            let fd = rustix::fs::openat(
                &at.parent,
                temp.as_str(),
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o600),
            )?;
            let mut file = std::fs::File::from(fd);
            std::io::Write::write_all(&mut file, &contents)?;
            rustix::fs::fchmod(&file, Mode::from_raw_mode(*mode))?;
            file.sync_data()
        })(),
        PathState::Symlink { target } => {
            rustix::fs::symlinkat(target.as_str(), &at.parent, temp.as_str()).map_err(Into::into)
        }
        _ => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "this state is not put back by a write",
        )),
    };
    let renamed = made.and_then(|()| {
        if rustix::fs::statat(&at.parent, at.name.as_str(), AtFlags::SYMLINK_NOFOLLOW)
            .is_ok_and(|stat| FileType::from_raw_mode(stat.st_mode) == FileType::Directory)
        {
            rustix::fs::unlinkat(&at.parent, at.name.as_str(), AtFlags::REMOVEDIR)?;
        }
        Ok(rustix::fs::renameat(
            &at.parent,
            temp.as_str(),
            &at.parent,
            at.name.as_str(),
        )?)
    });
    if renamed.is_err() {
        let _ = rustix::fs::unlinkat(&at.parent, temp.as_str(), AtFlags::empty());
    }
    renamed
}

/// Makes the workspace path `rel` a directory (replacing a file or link there); its mode
/// is set later.
pub fn make_dir(root: &Path, rel: &str) -> std::io::Result<()> {
    let at = beneath(root, rel)?;
    match rustix::fs::statat(&at.parent, at.name.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) if FileType::from_raw_mode(stat.st_mode) == FileType::Directory => return Ok(()),
        Ok(_) => rustix::fs::unlinkat(&at.parent, at.name.as_str(), AtFlags::empty())?,
        Err(Errno::NOENT) => {}
        Err(error) => return Err(error.into()),
    }
    Ok(rustix::fs::mkdirat(
        &at.parent,
        at.name.as_str(),
        Mode::from_raw_mode(0o700),
    )?)
}

/// Sets the permission bits of the workspace path `rel` (a file or a directory, opened
/// without following a link).
pub fn set_mode(root: &Path, rel: &str, mode: u32) -> std::io::Result<()> {
    let at = beneath(root, rel)?;
    let fd = rustix::fs::openat(
        &at.parent,
        at.name.as_str(),
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    // fchmod takes no O_PATH descriptor; its /proc name reaches the inode opened, not a
    // path a command could swap.
    let stat = rustix::fs::fstat(&fd)?;
    if FileType::from_raw_mode(stat.st_mode) == FileType::Symlink {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{rel} is a link"),
        ));
    }
    use std::os::fd::AsRawFd;
    std::fs::set_permissions(
        format!("/proc/self/fd/{}", fd.as_raw_fd()),
        std::fs::Permissions::from_mode(mode),
    )
}
