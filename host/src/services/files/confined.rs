//! The workspace as an opened directory, and every filesystem step the files service
//! takes beneath it.
//!
//! A path argument is first made workspace-relative by its words alone ([`parse`]:
//! absolute paths must lie under the workspace, `.` is dropped, `..` steps back within
//! the path and may not step past its start); nothing is decided by that about where it
//! leads. Then it is resolved by the kernel beneath the opened workspace directory
//! (cap-primitives: `openat2` with `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`, or its safe
//! walk on kernels without it), so `..` inside a symbolic link, a link to an absolute
//! path or to anything outside fails as an escape. Every step after that works on
//! opened directories with one-component names (`*at` calls), so a directory swapped for
//! a link between a check and a write cannot move where the write lands.
//!
//! What an opened object is, is asked of the kernel ([`kernel_path`]:
//! `/proc/self/fd/N`), never inferred from the path given.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use cap_primitives::fs::{OpenOptions, OpenOptionsExt};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat};

use crate::error::{ErrorCode, ToolError};

/// The longest path argument taken, in bytes (Linux's `PATH_MAX`).
pub const MAX_PATH_BYTES: usize = 4096;

/// A path argument made relative to the workspace root by its words: normal
/// components only, none of them `.` or `..`. Empty: the workspace itself.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RelPath {
    pub parts: Vec<String>,
}

impl RelPath {
    /// How messages and results name it: `src/main.rs`, `.` for the workspace.
    pub fn shown(&self) -> String {
        match self.parts.is_empty() {
            true => ".".into(),
            false => self.parts.join("/"),
        }
    }

    /// As a relative path to resolve beneath the workspace (`.` for the workspace).
    pub fn path(&self) -> PathBuf {
        match self.parts.is_empty() {
            true => PathBuf::from("."),
            false => self.parts.iter().collect(),
        }
    }

    /// The directories on its way and its last name (`None`: the workspace itself).
    pub fn split_last(&self) -> Option<(&[String], &str)> {
        self.parts
            .split_last()
            .map(|(name, dirs)| (dirs, name.as_str()))
    }
}

fn invalid(message: impl Into<String>) -> ToolError {
    ToolError::new(ErrorCode::InvalidArguments, message)
}

/// `arg` as a workspace-relative path. Relative paths are taken from the workspace
/// root; absolute ones must start with the workspace (`workdir` as the call names it, or
/// its canonical form `canonical`). NUL bytes, paths over [`MAX_PATH_BYTES`] and `..`
/// past the root are refused.
pub fn parse(arg: &str, workdir: &Path, canonical: &Path) -> Result<RelPath, ToolError> {
    if arg.contains('\0') {
        return Err(invalid("the path contains a NUL byte"));
    }
    if arg.len() > MAX_PATH_BYTES {
        return Err(invalid(format!(
            "the path is {} bytes long; at most {MAX_PATH_BYTES} are taken",
            arg.len()
        )));
    }
    if arg.is_empty() {
        return Err(invalid("the path is empty"));
    }
    let path = Path::new(arg);
    let relative = if path.is_absolute() {
        path.strip_prefix(workdir)
            .or_else(|_| path.strip_prefix(canonical))
            .map_err(|_| {
                invalid(format!(
                    "{arg} is outside the workspace {}: the file tools reach only the \
                     workspace (give a path inside it, or one relative to it)",
                    workdir.display()
                ))
            })?
    } else {
        path
    };
    let mut parts: Vec<String> = Vec::new();
    for component in relative.components() {
        match component {
            Component::Normal(name) => parts.push(name.to_string_lossy().into_owned()),
            Component::CurDir => {}
            Component::ParentDir => {
                if parts.pop().is_none() {
                    return Err(invalid(format!(
                        "{arg} leads outside the workspace (its `..` steps past the \
                         workspace root)"
                    )));
                }
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(invalid(format!("{arg} is not a path inside the workspace")))
            }
        }
    }
    Ok(RelPath { parts })
}

/// The session workspace, opened: every path is resolved beneath `root`.
#[derive(Debug)]
pub struct Workspace {
    pub root: File,
    /// Its canonical path.
    pub path: PathBuf,
}

impl Workspace {
    /// Opens the workspace `workdir` names.
    pub fn open(workdir: &Path) -> Result<Workspace, ToolError> {
        let opened = std::fs::canonicalize(workdir).and_then(|path| {
            cap_primitives::fs::open_ambient_dir(&path, cap_primitives::ambient_authority())
                .map(|root| Workspace { root, path })
        });
        opened.map_err(|error| {
            ToolError::new(
                ErrorCode::IoError,
                format!(
                    "the workspace {} cannot be opened: {error}",
                    workdir.display()
                ),
            )
        })
    }

    /// Opens `rel` for reading without blocking (a FIFO or a device opens at once and is
    /// then refused by its type), following symbolic links that stay beneath the root.
    pub fn open_for_reading(&self, rel: &RelPath) -> io::Result<File> {
        let mut options = OpenOptions::new();
        options
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY);
        cap_primitives::fs::open(&self.root, &rel.path(), &options)
    }

    /// Opens the directory `parts` names (the workspace itself when empty), following
    /// symbolic links that stay beneath the root.
    pub fn open_dir(&self, parts: &[String]) -> io::Result<File> {
        let path: PathBuf = match parts.is_empty() {
            true => PathBuf::from("."),
            false => parts.iter().collect(),
        };
        cap_primitives::fs::open_dir(&self.root, &path)
    }
}

/// Whether `error` is cap-primitives' refusal of a path that leads out of the root (an
/// OS error never is: it has its errno).
pub fn is_escape(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::PermissionDenied && error.raw_os_error().is_none()
}

/// Where the kernel says the opened `fd` is (`/proc/self/fd/N`): the canonical path of
/// what was opened, however it was reached.
pub fn kernel_path(fd: &impl AsRawFd) -> io::Result<PathBuf> {
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// The entry `name` of `dir` as it is, a symbolic link not followed (`None`: there is
/// none).
pub fn lstat_at(dir: &impl AsFd, name: &str) -> io::Result<Option<Stat>> {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => Ok(Some(stat)),
        Err(rustix::io::Errno::NOENT) => Ok(None),
        Err(error) => Err(error.into()),
    }
}

/// The opened file's status.
pub fn fstat(fd: &impl AsFd) -> io::Result<Stat> {
    Ok(rustix::fs::fstat(fd)?)
}

/// What `stat` is, as a message names it: `a directory`, `a FIFO`, ...
pub fn kind_of(stat: &Stat) -> &'static str {
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::RegularFile => "a regular file",
        FileType::Directory => "a directory",
        FileType::Symlink => "a symbolic link",
        FileType::Fifo => "a FIFO (named pipe)",
        FileType::Socket => "a socket",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        FileType::Unknown => "a file of unknown type",
    }
}

pub fn is_regular(stat: &Stat) -> bool {
    FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile
}

pub fn is_symlink(stat: &Stat) -> bool {
    FileType::from_raw_mode(stat.st_mode) == FileType::Symlink
}

pub fn is_dir(stat: &Stat) -> bool {
    FileType::from_raw_mode(stat.st_mode) == FileType::Directory
}

/// Makes the directory `name` in `dir` (mode 0777 less the umask). `Ok(false)`: it
/// existed already.
pub fn make_dir_at(dir: &impl AsFd, name: &str) -> io::Result<bool> {
    match rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(0o777)) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::EXIST) => Ok(false),
        Err(error) => Err(error.into()),
    }
}

/// Opens the directory `name` of `dir`, a symbolic link refused (`ELOOP`/`ENOTDIR`).
pub fn open_child_dir(dir: &impl AsFd, name: &str) -> io::Result<File> {
    let fd: OwnedFd = rustix::fs::openat(
        dir,
        name,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    Ok(File::from(fd))
}

/// Opens `dir` itself for reading (what `fsync` of a directory needs; an `O_PATH`
/// descriptor cannot be synced).
pub fn open_dir_for_sync(dir: &impl AsFd) -> io::Result<File> {
    let fd: OwnedFd = rustix::fs::openat(
        dir,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    Ok(File::from(fd))
}

/// Creates `name` in `dir` for writing: it must not exist (`O_EXCL`, a link at the name
/// not followed), mode 0600 from its first instant.
pub fn create_new_at(dir: &impl AsFd, name: &str) -> io::Result<File> {
    let fd: OwnedFd = rustix::fs::openat(
        dir,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )?;
    Ok(File::from(fd))
}

/// Renames `from` over `to`, both in `dir` (a link at `to` is replaced, not followed).
pub fn rename_at(dir: &impl AsFd, from: &str, to: &str) -> io::Result<()> {
    Ok(rustix::fs::renameat(dir, from, dir, to)?)
}

/// Removes the file (or link) `name` of `dir`.
pub fn unlink_at(dir: &impl AsFd, name: &str) -> io::Result<()> {
    Ok(rustix::fs::unlinkat(dir, name, AtFlags::empty())?)
}

/// Removes the empty directory `name` of `dir`.
pub fn rmdir_at(dir: &impl AsFd, name: &str) -> io::Result<()> {
    Ok(rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR)?)
}

/// Sets the opened file's permission bits.
pub fn set_mode(file: &File, mode: u32) -> io::Result<()> {
    Ok(rustix::fs::fchmod(file, Mode::from_raw_mode(mode))?)
}

/// The process's umask, read without changing it (`/proc/self/status`); 022 when it
/// cannot be read.
pub fn umask() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("Umask:"))
                .and_then(|value| u32::from_str_radix(value.trim(), 8).ok())
        })
        .unwrap_or(0o022)
}

/// A temporary name beside `name` for a write: `.NAME.dsh-XXXXXX` (six random
/// characters), shortened to fit the 255-byte name limit.
pub fn temp_name(name: &str) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut random = [0u8; 6];
    if getrandom::fill(&mut random).is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        random = [
            nanos as u8,
            (nanos >> 8) as u8,
            (nanos >> 16) as u8,
            (nanos >> 24) as u8,
            std::process::id() as u8,
            (std::process::id() >> 8) as u8,
        ];
    }
    let suffix: String = random
        .iter()
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect();
    let mut stem = name;
    while stem.len() > 255 - ".".len() - ".dsh-".len() - suffix.len() {
        let mut end = stem.len() - 1;
        while !stem.is_char_boundary(end) {
            end -= 1;
        }
        stem = &stem[..end];
    }
    format!(".{stem}.dsh-{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rel(arg: &str) -> Result<Vec<String>, ToolError> {
        parse(arg, Path::new("/ws/link"), Path::new("/ws/real")).map(|r| r.parts)
    }

    #[test]
    fn paths_are_made_relative_by_their_words() {
        assert_eq!(rel("src/main.rs").unwrap(), ["src", "main.rs"]);
        assert_eq!(rel("./src/../README.md").unwrap(), ["README.md"]);
        assert_eq!(rel("/ws/link/a/b").unwrap(), ["a", "b"]);
        assert_eq!(rel("/ws/real/a").unwrap(), ["a"]);
        assert_eq!(rel("/ws/link").unwrap(), Vec::<String>::new());
        assert_eq!(rel("a//b/").unwrap(), ["a", "b"]);
        for outside in ["/ws/linked/a", "/etc/passwd", "/ws"] {
            let error = rel(outside).unwrap_err();
            assert_eq!(error.code, ErrorCode::InvalidArguments);
            assert!(error.message.contains("outside the workspace"), "{error}");
        }
        let error = rel("a/../../b").unwrap_err();
        assert!(
            error.message.contains("leads outside the workspace"),
            "{error}"
        );
        assert!(rel("a\0b").unwrap_err().message.contains("NUL"));
        assert!(rel(&"a/".repeat(2049))
            .unwrap_err()
            .message
            .contains("4096"));
        assert!(rel(&"a".repeat(4096)).is_ok());
        assert!(rel("").is_err());
    }

    #[test]
    fn temp_names_fit_and_differ() {
        let long = "é".repeat(127);
        let name = temp_name(&long);
        assert!(name.len() <= 255, "{}", name.len());
        assert!(name.starts_with(".é"));
        assert_ne!(temp_name("a"), temp_name("a"));
        assert!(temp_name("main.rs").starts_with(".main.rs.dsh-"));
    }
}
