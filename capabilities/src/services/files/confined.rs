//! A root the file tools reach (the workspace or an extra root) as an opened directory,
//! and every filesystem step the files service takes beneath it.
//!
//! A path argument is first made relative to its root by its words alone ([`relative`]
//! for a relative one: `.` is dropped, `..` steps back within the path and may not step
//! past its start; [`normalize`] for an absolute one, before `super::roots` finds the
//! root holding it); nothing is decided by that about where it leads. Then it is
//! resolved by the kernel beneath the opened root directory
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

/// A path argument made relative to its root by its words: normal components only,
/// none of them `.` or `..`. Empty: the root itself.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RelPath {
    pub parts: Vec<String>,
}

impl RelPath {
    /// How messages and results name it in the workspace: `src/main.rs`, `.` for the
    /// workspace itself.
    pub fn shown(&self) -> String {
        match self.parts.is_empty() {
            true => ".".into(),
            false => self.parts.join("/"),
        }
    }

    /// As a relative path to resolve beneath its root (`.` for the root itself).
    pub fn path(&self) -> PathBuf {
        match self.parts.is_empty() {
            true => PathBuf::from("."),
            false => self.parts.iter().collect(),
        }
    }

    /// The directories on its way and its last name (`None`: the root itself).
    pub fn split_last(&self) -> Option<(&[String], &str)> {
        self.parts
            .split_last()
            .map(|(name, dirs)| (dirs, name.as_str()))
    }
}

fn invalid(message: impl Into<String>) -> ToolError {
    ToolError::new(ErrorCode::InvalidArguments, message)
}

/// Refuses a path argument no file can have: NUL bytes, over [`MAX_PATH_BYTES`], empty.
pub fn check_arg(arg: &str) -> Result<(), ToolError> {
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
    Ok(())
}

/// The relative path `path` (the argument `arg`) as parts beneath its root (`within`
/// names it: `the workspace`): `.` is dropped, `..` steps back and may not step past the
/// root.
pub fn relative(path: &Path, arg: &str, within: &str) -> Result<RelPath, ToolError> {
    let mut parts: Vec<String> = Vec::new();
    for component in path.components() {
        match component {
            Component::Normal(name) => parts.push(name.to_string_lossy().into_owned()),
            Component::CurDir => {}
            Component::ParentDir => {
                if parts.pop().is_none() {
                    return Err(invalid(format!(
                        "{arg} leads outside {within} (its `..` steps past its root)"
                    )));
                }
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(invalid(format!("{arg} is not a path inside {within}")))
            }
        }
    }
    Ok(RelPath { parts })
}

/// The absolute `path` by its words: `.` dropped, each `..` taking back the name before
/// it (`/..` is `/`). Where it leads is then the kernel's to say, beneath the root that
/// holds it.
pub fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// A directory the file tools reach (the session workspace or an extra root), opened:
/// every path is resolved beneath `dir`.
#[derive(Debug)]
pub struct Root {
    pub dir: File,
    /// Its canonical path.
    pub path: PathBuf,
}

impl Root {
    /// Opens the directory `path` names (its links resolved).
    pub fn open(path: &Path) -> io::Result<Root> {
        let path = std::fs::canonicalize(path)?;
        let dir = cap_primitives::fs::open_ambient_dir(&path, cap_primitives::ambient_authority())?;
        Ok(Root { dir, path })
    }

    /// Opens `rel` for reading without blocking (a FIFO or a device opens at once and is
    /// then refused by its type), following symbolic links that stay beneath the root.
    pub fn open_for_reading(&self, rel: &RelPath) -> io::Result<File> {
        let mut options = OpenOptions::new();
        options
            .read(true)
            .custom_flags(dsh_launch::os::O_NONBLOCK | dsh_launch::os::O_NOCTTY);
        cap_primitives::fs::open(&self.dir, &rel.path(), &options)
    }

    /// Opens the directory `parts` names (the root itself when empty), following
    /// symbolic links that stay beneath the root.
    pub fn open_dir(&self, parts: &[String]) -> io::Result<File> {
        let path: PathBuf = match parts.is_empty() {
            true => PathBuf::from("."),
            false => parts.iter().collect(),
        };
        cap_primitives::fs::open_dir(&self.dir, &path)
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

/// Opens the file `name` of `dir` for reading without blocking, a symbolic link at the
/// name not followed (`ELOOP`); `None` when it is not a regular file (a FIFO or a device
/// opens at once and is closed unread).
pub fn open_regular_at(dir: &impl AsFd, name: &str) -> io::Result<Option<File>> {
    let fd: OwnedFd = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let file = File::from(fd);
    match is_regular(&fstat(&file)?) {
        true => Ok(Some(file)),
        false => Ok(None),
    }
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
        check_arg(arg)?;
        relative(Path::new(arg), arg, "the workspace").map(|r| r.parts)
    }

    #[test]
    fn relative_paths_are_made_parts_by_their_words() {
        assert_eq!(rel("src/main.rs").unwrap(), ["src", "main.rs"]);
        assert_eq!(rel("./src/../README.md").unwrap(), ["README.md"]);
        assert_eq!(rel("a//b/").unwrap(), ["a", "b"]);
        assert_eq!(rel(".").unwrap(), Vec::<String>::new());
        let error = rel("a/../../b").unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidArguments);
        assert!(
            error.message.contains("leads outside the workspace"),
            "{error}"
        );
        assert!(rel("/etc/passwd").is_err());
        assert!(rel("a\0b").unwrap_err().message.contains("NUL"));
        assert!(rel(&"a/".repeat(2049))
            .unwrap_err()
            .message
            .contains("4096"));
        assert!(rel(&"a".repeat(4096)).is_ok());
        assert!(rel("").is_err());
    }

    #[test]
    fn absolute_paths_are_normalized_by_their_words() {
        let n = |p: &str| normalize(Path::new(p));
        assert_eq!(n("/srv/docs/./a//b/"), Path::new("/srv/docs/a/b"));
        assert_eq!(n("/srv/docs/../etc/passwd"), Path::new("/srv/etc/passwd"));
        assert_eq!(n("/srv/docs/a/../../../../x"), Path::new("/x"));
        assert_eq!(n("/.."), Path::new("/"));
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
