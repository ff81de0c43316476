//! The workspace and the extra roots as `glob` and `grep` see them, in as few host calls
//! as can be: directories opened once and listed with each entry's type (never a `stat`
//! per entry), files read by name from their directory in large positional reads,
//! modification times asked only for the files reported. In the component this is WASI
//! 0.2 `wasi:filesystem` on the read-only preopens (the workspace's and each extra
//! root's, at their own paths), directly (the libc layer beneath `std::fs` costs a
//! metadata call per directory entry and several calls per read): a path is opened
//! beneath the deepest preopen that holds it, matched by whole components (`/srv/docs2`
//! is not in `/srv/docs`). Natively (the unit tests) it is `std::fs`. Symlinks are
//! reported as such and never followed; only regular files are ever opened for reading.
//!
//! A FIFO, a socket or a device is never opened: an entry's type says so first, and the
//! host's opens (dsh's `wasmtime-wasi`, `vendor/wasmtime-wasi`) never block and refuse
//! anything but a regular file or a directory whatever the path was when it was looked
//! at (a file swapped for a FIFO between the look and the open). Where the tools were
//! asked to read one by name (a path argument, an ignore file of the walk), it is a
//! [`Special`]: an error naming it and what it is.

use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// What a directory entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    Symlink,
    /// A FIFO, a device, a socket, or unknown: never opened.
    Other,
}

/// A path the tools had to read that is not a regular file: a FIFO, a socket, a device
/// (or a file that was swapped for one while it was opened). Carried in an
/// [`io::Error`] (see [`Special::of`]) so that the walk's callers can tell it apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Special {
    /// Its absolute path.
    pub path: PathBuf,
    /// What it is, as a message names it: `a FIFO (named pipe)`, `a socket`, ...
    pub kind: &'static str,
}

impl std::fmt::Display for Special {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} is {}", self.path.display(), self.kind)
    }
}

impl std::error::Error for Special {}

impl Special {
    /// `error` as a special file, when it is one.
    pub fn of(error: &io::Error) -> Option<&Special> {
        error.get_ref()?.downcast_ref::<Special>()
    }

    fn error(path: PathBuf, kind: &'static str) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidInput, Special { path, kind })
    }
}

/// What a file that is neither a regular file, a directory nor a symlink is, when the
/// open of it found it one: the host refused it after the open (the path was swapped
/// between a look at it and the open).
const NOT_REGULAR: &str = "not a regular file (a FIFO, a socket or a device)";

/// One entry of a directory.
#[derive(Clone, Debug)]
pub struct Entry {
    pub name: String,
    pub kind: Kind,
}

/// A file's contents as read: whole (its length in the buffer), or the buffer holding
/// its head and a reader for the rest.
pub enum Loaded {
    Whole(usize),
    Head(usize, Rest),
}

/// The most bytes one read asks for (the host gives at most 64 KiB per read).
const READ_CHUNK: usize = 64 << 10;
/// What the first read of a file asks for: most source files are smaller, and the host
/// zeroes a buffer of the size asked for before it reads.
#[cfg(target_os = "wasi")]
const FIRST_READ: usize = 16 << 10;
/// The most bytes of an ignore file read.
const MAX_SMALL: usize = 1 << 20;

pub use imp::{top_of, Dir, Rest};

impl Dir {
    /// The entries of the directory, sorted by name.
    pub fn sorted_entries(&self) -> io::Result<Vec<Entry>> {
        let mut entries = self.entries()?;
        entries.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }

    /// The file at `relative` (e.g. `.gitignore`, `.git/info/exclude`; `path` is its
    /// absolute path) when it is a small regular file; `None` when there is none (or it
    /// is a link, too large or unreadable); a [`Special`] error when it is a FIFO, a
    /// socket or a device, which is never opened.
    pub fn read_small(&self, relative: &str, path: &Path) -> io::Result<Option<Vec<u8>>> {
        if let Some(kind) = self.special(relative) {
            return Err(Special::error(path.to_path_buf(), kind));
        }
        let mut buffer = Vec::new();
        match self.read_file(relative, &mut buffer, MAX_SMALL) {
            Ok(Loaded::Whole(len)) => {
                buffer.truncate(len);
                Ok(Some(buffer))
            }
            Err(error) if error.kind() == io::ErrorKind::Unsupported => {
                Err(Special::error(path.to_path_buf(), NOT_REGULAR))
            }
            _ => Ok(None),
        }
    }

    /// What `relative` is when it is a FIFO, a socket, a device or of unknown type (a
    /// symbolic link not followed); `None` for anything else, or nothing.
    pub fn special(&self, relative: &str) -> Option<&'static str> {
        imp::special_kind(self, relative)
    }

    /// Reads the file `name` as [`Dir::read_file`] does, where the tools were asked to
    /// read it by name (`path`, absolute): a FIFO, a socket or a device is a [`Special`]
    /// error (looked at first, and refused by the open if it was swapped in since).
    pub fn read_named(
        &self,
        name: &str,
        path: &Path,
        buffer: &mut Vec<u8>,
        whole_max: usize,
    ) -> io::Result<Loaded> {
        if let Some(kind) = self.special(name) {
            return Err(Special::error(path.to_path_buf(), kind));
        }
        self.read_file(name, buffer, whole_max).map_err(|error| {
            match error.kind() == io::ErrorKind::Unsupported {
                true => Special::error(path.to_path_buf(), NOT_REGULAR),
                false => error,
            }
        })
    }
}

/// What the file at the absolute `path` is when it is a FIFO, a socket, a device or of
/// unknown type (the last component not followed); `None` otherwise.
pub fn special_at(path: &Path) -> Option<&'static str> {
    let (parent, name) = (path.parent()?, path.file_name()?);
    Dir::open(parent).ok()?.special(&name.to_string_lossy())
}

#[cfg(not(target_os = "wasi"))]
mod imp {
    //! `std::fs`, for the native tests.

    use super::*;
    use std::fs::File;
    use std::io::Read;

    /// An open directory.
    pub struct Dir {
        path: PathBuf,
    }

    /// The preopen holding `path`: natively there are none.
    pub fn top_of(_path: &Path) -> Option<PathBuf> {
        None
    }

    /// The rest of a large file.
    pub struct Rest(File);

    pub(super) fn special_kind(dir: &Dir, relative: &str) -> Option<&'static str> {
        use std::os::unix::fs::FileTypeExt;
        let t = std::fs::symlink_metadata(dir.path.join(relative))
            .ok()?
            .file_type();
        if t.is_fifo() {
            Some("a FIFO (named pipe)")
        } else if t.is_socket() {
            Some("a socket")
        } else if t.is_char_device() {
            Some("a character device")
        } else if t.is_block_device() {
            Some("a block device")
        } else if t.is_file() || t.is_dir() || t.is_symlink() {
            None
        } else {
            Some("a file of unknown type")
        }
    }

    impl io::Read for Rest {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.0.read(buf)
        }
    }

    /// `O_NONBLOCK` on the Linux targets the native tests run on.
    fn libc_nonblock() -> i32 {
        0o4000
    }

    impl Dir {
        /// Opens the directory at the absolute `path`.
        pub fn open(path: &Path) -> io::Result<Dir> {
            if !std::fs::metadata(path)?.is_dir() {
                return Err(io::Error::other(format!(
                    "{} is not a directory",
                    path.display()
                )));
            }
            Ok(Dir {
                path: path.to_path_buf(),
            })
        }

        /// Opens the subdirectory `name`.
        pub fn open_dir(&self, name: &str) -> io::Result<Dir> {
            Ok(Dir {
                path: self.path.join(name),
            })
        }

        pub fn entries(&self) -> io::Result<Vec<Entry>> {
            let mut entries = Vec::new();
            for entry in std::fs::read_dir(&self.path)? {
                let entry = entry?;
                let kind = match entry.file_type() {
                    Ok(t) if t.is_symlink() => Kind::Symlink,
                    Ok(t) if t.is_dir() => Kind::Dir,
                    Ok(t) if t.is_file() => Kind::File,
                    _ => Kind::Other,
                };
                entries.push(Entry {
                    name: entry.file_name().to_string_lossy().into_owned(),
                    kind,
                });
            }
            Ok(entries)
        }

        /// The kind of `name` (not following a symlink).
        pub fn kind_of(&self, name: &str) -> io::Result<Kind> {
            let t = std::fs::symlink_metadata(self.path.join(name))?.file_type();
            Ok(if t.is_symlink() {
                Kind::Symlink
            } else if t.is_dir() {
                Kind::Dir
            } else if t.is_file() {
                Kind::File
            } else {
                Kind::Other
            })
        }

        /// Reads the regular file `name` into `buffer` (grown as needed), whole when it
        /// is at most `whole_max` bytes.
        pub fn read_file(
            &self,
            name: &str,
            buffer: &mut Vec<u8>,
            whole_max: usize,
        ) -> io::Result<Loaded> {
            use std::os::unix::fs::OpenOptionsExt;
            // As dsh's WASI opens do: without blocking, then only a regular file.
            let mut file = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc_nonblock())
                .open(self.path.join(name))?;
            if !file.metadata()?.is_file() {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    "not a regular file",
                ));
            }
            let mut filled = 0;
            loop {
                if filled >= whole_max {
                    return Ok(Loaded::Head(filled, Rest(file)));
                }
                if buffer.len() < filled + READ_CHUNK {
                    buffer.resize(filled + READ_CHUNK.max(filled), 0);
                }
                match file.read(&mut buffer[filled..]) {
                    Ok(0) => return Ok(Loaded::Whole(filled)),
                    Ok(n) => filled += n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
        }

        /// The modification time of `name` (not following a symlink).
        pub fn modified(&self, name: &str) -> Option<SystemTime> {
            std::fs::symlink_metadata(self.path.join(name))
                .ok()?
                .modified()
                .ok()
        }
    }
}

#[cfg(target_os = "wasi")]
mod imp {
    //! WASI 0.2 `wasi:filesystem` on the preopens, directly.

    use super::*;
    use wasip2::filesystem::preopens::get_directories;
    use wasip2::filesystem::types::{
        Descriptor, DescriptorFlags, DescriptorType, ErrorCode, OpenFlags, PathFlags,
    };

    /// An open directory.
    pub struct Dir {
        fd: Descriptor,
    }

    /// The rest of a large file, read from `offset` on.
    pub struct Rest {
        file: Descriptor,
        offset: u64,
    }

    fn error(code: ErrorCode) -> io::Error {
        let kind = match code {
            ErrorCode::NoEntry => io::ErrorKind::NotFound,
            ErrorCode::Access | ErrorCode::NotPermitted | ErrorCode::ReadOnly => {
                io::ErrorKind::PermissionDenied
            }
            ErrorCode::NotDirectory => io::ErrorKind::NotADirectory,
            ErrorCode::IsDirectory => io::ErrorKind::IsADirectory,
            ErrorCode::Interrupted => io::ErrorKind::Interrupted,
            // dsh's host refuses to open a FIFO, a socket or a device.
            ErrorCode::Unsupported => io::ErrorKind::Unsupported,
            _ => io::ErrorKind::Other,
        };
        io::Error::new(kind, format!("{code:?}"))
    }

    fn kind(t: DescriptorType) -> Kind {
        match t {
            DescriptorType::RegularFile => Kind::File,
            DescriptorType::Directory => Kind::Dir,
            DescriptorType::SymbolicLink => Kind::Symlink,
            _ => Kind::Other,
        }
    }

    impl io::Read for Rest {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let want = buf.len().min(READ_CHUNK) as u64;
            let (data, _) = self.file.read(want, self.offset).map_err(error)?;
            buf[..data.len()].copy_from_slice(&data);
            self.offset += data.len() as u64;
            Ok(data.len())
        }
    }

    /// The deepest preopen holding `path` (by whole components), its guest path, and
    /// the rest of `path` beneath it.
    fn preopen_of(path: &Path) -> Option<(Descriptor, PathBuf, PathBuf)> {
        let mut best: Option<(Descriptor, PathBuf, PathBuf)> = None;
        for (fd, guest) in get_directories() {
            let guest = PathBuf::from(guest);
            if let Ok(rest) = path.strip_prefix(&guest) {
                let deeper = best
                    .as_ref()
                    .is_none_or(|(_, b, _)| guest.components().count() > b.components().count());
                if deeper {
                    best = Some((fd, guest.clone(), rest.to_path_buf()));
                }
            }
        }
        best
    }

    pub(super) fn special_kind(dir: &Dir, relative: &str) -> Option<&'static str> {
        match dir.fd.stat_at(PathFlags::empty(), relative).ok()?.type_ {
            DescriptorType::Fifo => Some("a FIFO (named pipe)"),
            DescriptorType::Socket => Some("a socket"),
            DescriptorType::CharacterDevice => Some("a character device"),
            DescriptorType::BlockDevice => Some("a block device"),
            // wasmtime-wasi 48 calls both of these `unknown` (on Linux nothing else is).
            DescriptorType::Unknown => Some("a FIFO or a socket"),
            DescriptorType::RegularFile
            | DescriptorType::Directory
            | DescriptorType::SymbolicLink => None,
        }
    }

    /// The guest path of the preopen (the workspace or an extra root) holding `path`.
    pub fn top_of(path: &Path) -> Option<PathBuf> {
        preopen_of(path).map(|(_, guest, _)| guest)
    }

    impl Dir {
        /// Opens the directory at the absolute `path`, beneath the preopen it lies in.
        pub fn open(path: &Path) -> io::Result<Dir> {
            let Some((preopen, _, rest)) = preopen_of(path) else {
                return Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    format!(
                        "{} is not inside a directory this plugin may read",
                        path.display()
                    ),
                ));
            };
            let rest = rest.to_string_lossy();
            let relative = if rest.is_empty() { "." } else { rest.as_ref() };
            let fd = preopen
                .open_at(
                    PathFlags::SYMLINK_FOLLOW,
                    relative,
                    OpenFlags::DIRECTORY,
                    DescriptorFlags::READ,
                )
                .map_err(error)?;
            Ok(Dir { fd })
        }

        /// Opens the subdirectory `name` (not following a symlink).
        pub fn open_dir(&self, name: &str) -> io::Result<Dir> {
            let fd = self
                .fd
                .open_at(
                    PathFlags::empty(),
                    name,
                    OpenFlags::DIRECTORY,
                    DescriptorFlags::READ,
                )
                .map_err(error)?;
            Ok(Dir { fd })
        }

        pub fn entries(&self) -> io::Result<Vec<Entry>> {
            let stream = self.fd.read_directory().map_err(error)?;
            let mut entries = Vec::new();
            while let Some(entry) = stream.read_directory_entry().map_err(error)? {
                entries.push(Entry {
                    name: entry.name,
                    kind: kind(entry.type_),
                });
            }
            Ok(entries)
        }

        /// The kind of `name` (not following a symlink).
        pub fn kind_of(&self, name: &str) -> io::Result<Kind> {
            Ok(kind(
                self.fd
                    .stat_at(PathFlags::empty(), name)
                    .map_err(error)?
                    .type_,
            ))
        }

        /// Reads the regular file `name` into `buffer` (grown as needed), whole when it
        /// is at most `whole_max` bytes. A read that returns less than asked is taken
        /// as the end of the file (positional reads of a regular file only fall short
        /// there), which saves a call per file.
        pub fn read_file(
            &self,
            name: &str,
            buffer: &mut Vec<u8>,
            whole_max: usize,
        ) -> io::Result<Loaded> {
            let file = self
                .fd
                .open_at(
                    PathFlags::empty(),
                    name,
                    OpenFlags::empty(),
                    DescriptorFlags::READ,
                )
                .map_err(error)?;
            let (first, end) = file.read(FIRST_READ as u64, 0).map_err(error)?;
            if end || first.len() < FIRST_READ {
                // The whole file in one read: its bytes become the buffer, no copy.
                let len = first.len();
                *buffer = first;
                return Ok(Loaded::Whole(len));
            }
            buffer.clear();
            buffer.extend_from_slice(&first);
            loop {
                if buffer.len() >= whole_max {
                    let offset = buffer.len() as u64;
                    return Ok(Loaded::Head(buffer.len(), Rest { file, offset }));
                }
                let (data, end) = file
                    .read(READ_CHUNK as u64, buffer.len() as u64)
                    .map_err(error)?;
                buffer.extend_from_slice(&data);
                if end || data.len() < READ_CHUNK {
                    return Ok(Loaded::Whole(buffer.len()));
                }
            }
        }

        /// The modification time of `name` (not following a symlink).
        pub fn modified(&self, name: &str) -> Option<SystemTime> {
            let stat = self.fd.stat_at(PathFlags::empty(), name).ok()?;
            let time = stat.data_modification_timestamp?;
            Some(SystemTime::UNIX_EPOCH + std::time::Duration::new(time.seconds, time.nanoseconds))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::walk::testdir::TestDir;

    #[test]
    fn entries_kinds_reads_and_times() {
        let dir = TestDir::new("fsys");
        dir.write("b.txt", "hello\n");
        dir.write("a/inner.txt", "x");
        let big = vec![b'z'; 3 * READ_CHUNK + 17];
        dir.write("big.bin", &big);
        dir.touch("b.txt", 1234);
        let root = Dir::open(dir.path()).unwrap();
        let entries = root.sorted_entries().unwrap();
        let names: Vec<(&str, Kind)> = entries.iter().map(|e| (e.name.as_str(), e.kind)).collect();
        assert_eq!(
            names,
            [
                ("a", Kind::Dir),
                ("b.txt", Kind::File),
                ("big.bin", Kind::File)
            ]
        );
        let small = |relative: &str| root.read_small(relative, &dir.path().join(relative));
        assert_eq!(small("b.txt").unwrap().unwrap(), b"hello\n");
        assert_eq!(small("a/inner.txt").unwrap().unwrap(), b"x");
        assert!(small("missing").unwrap().is_none());
        let mut buffer = Vec::new();
        match root.read_file("big.bin", &mut buffer, usize::MAX).unwrap() {
            Loaded::Whole(len) => assert_eq!(&buffer[..len], &big[..]),
            Loaded::Head(..) => panic!("read whole"),
        }
        match root.read_file("big.bin", &mut buffer, READ_CHUNK).unwrap() {
            Loaded::Head(len, mut rest) => {
                let mut tail = Vec::new();
                io::Read::read_to_end(&mut rest, &mut tail).unwrap();
                assert_eq!(len + tail.len(), big.len());
            }
            Loaded::Whole(_) => panic!("streamed"),
        }
        assert_eq!(
            root.modified("b.txt"),
            Some(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1234))
        );
        assert_eq!(root.kind_of("a").unwrap(), Kind::Dir);
        assert_eq!(
            root.open_dir("a").unwrap().sorted_entries().unwrap()[0].name,
            "inner.txt"
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_is_never_opened_and_is_named_when_asked_for() {
        let dir = TestDir::new("fsys-fifo");
        dir.write("a.txt", "x");
        crate::walk::tests::mkfifo(&dir, "p");
        let root = Dir::open(dir.path()).unwrap();
        assert_eq!(root.special("p"), Some("a FIFO (named pipe)"));
        assert_eq!(root.special("a.txt"), None);
        assert_eq!(
            special_at(&dir.path().join("p")),
            Some("a FIFO (named pipe)")
        );
        let error = root.read_small("p", &dir.path().join("p")).unwrap_err();
        assert_eq!(Special::of(&error).unwrap().path, dir.path().join("p"));
        let mut buffer = Vec::new();
        let error = root
            .read_named("p", &dir.path().join("p"), &mut buffer, 100)
            .err()
            .unwrap();
        assert_eq!(Special::of(&error).unwrap().kind, "a FIFO (named pipe)");
        // The walk's own read (it never names a FIFO: its listing says what it is) is
        // refused by the open, without waiting for a writer.
        let error = root.read_file("p", &mut buffer, 100).err().unwrap();
        assert_eq!(error.kind(), io::ErrorKind::Unsupported);
    }
}
