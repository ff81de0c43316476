//! The host's `files` service behind a trait, so the tools that read and change files
//! run against the real host in the component and against an in-memory workspace (and
//! two extra roots) in the native unit tests, which also plays the host's rules: an
//! existing file is only changed after a remembered read, the model's, of its current
//! version, and nothing in a read-only extra root is changed.

use dsh_plugin::tool_files::files::{self, Change, Changed, FileLines, FileRead};
use dsh_plugin::ToolError;

/// What the file tools need of the host.
pub trait Files {
    /// Reads a regular file whole (`files.read`); with `remember` (only when the model
    /// is shown the contents) the host counts it as read by the caller.
    fn read(&self, path: &str, max_bytes: u64, remember: bool) -> Result<FileRead, ToolError>;
    /// Reads a regular file as [`Files::read`] does and returns lines `first..first +
    /// count` of it with the whole file's counts (`files.read-lines`): what a page of a
    /// large file needs, without the file. The host counts natively; this default, which
    /// the tests' workspace uses, counts here ([`lines_of`]).
    fn read_lines(
        &self,
        path: &str,
        max_bytes: u64,
        remember: bool,
        first: u64,
        count: u32,
    ) -> Result<FileLines, ToolError> {
        Ok(lines_of(
            self.read(path, max_bytes, remember)?,
            first,
            count,
        ))
    }
    /// Applies `changes` all or none (`files.commit`).
    fn commit(&self, changes: &[Change]) -> Result<Vec<Changed>, ToolError>;
    /// A look at a file's bytes that does not count as the model's read (`files.read`
    /// without `remember`: the host still knows this call saw these bytes, so a change
    /// computed from them is refused if the file no longer holds them): `None` when it
    /// is not a regular file of at most `max_bytes`.
    fn peek(&self, path: &str, max_bytes: u64) -> Option<Vec<u8>>;
    /// True when `path` is a directory.
    fn is_dir(&self, path: &str) -> bool;
    /// True when something (a file, a directory, a link) is at `path`.
    fn exists(&self, path: &str) -> bool;
}

/// The host itself.
pub struct Host;

impl Files for Host {
    fn read(&self, path: &str, max_bytes: u64, remember: bool) -> Result<FileRead, ToolError> {
        files::read(path, max_bytes, remember)
    }

    fn read_lines(
        &self,
        path: &str,
        max_bytes: u64,
        remember: bool,
        first: u64,
        count: u32,
    ) -> Result<FileLines, ToolError> {
        files::read_lines(path, max_bytes, remember, first, count)
    }

    fn commit(&self, changes: &[Change]) -> Result<Vec<Changed>, ToolError> {
        files::commit(changes)
    }

    fn peek(&self, path: &str, max_bytes: u64) -> Option<Vec<u8>> {
        // Through the host: one open, non-blocking, whose type is checked (a look here
        // was a stat, then an open: a FIFO swapped in between held the call).
        files::read(path, max_bytes, false)
            .ok()
            .map(|read| read.contents)
    }

    fn is_dir(&self, path: &str) -> bool {
        std::fs::metadata(path).is_ok_and(|m| m.is_dir())
    }

    fn exists(&self, path: &str) -> bool {
        std::fs::symlink_metadata(path).is_ok()
    }
}

/// What `files.read-lines` answers for the file `read` found, counted here: the
/// definition the host's native count matches.
pub fn lines_of(read: FileRead, first: u64, count: u32) -> FileLines {
    let bytes = &read.contents;
    let newlines = memchr::memchr_iter(b'\n', bytes).count() as u64;
    let final_newline = bytes.last() == Some(&b'\n');
    let mut breaks = memchr::memchr_iter(b'\n', bytes);
    let start = match first.max(1) - 1 {
        0 => Some(0),
        skip => breaks.nth(skip as usize - 1).map(|at| at + 1),
    };
    let lines = match (start, count) {
        (None, _) | (_, 0) => Vec::new(),
        (Some(start), count) => {
            let end = breaks
                .nth(count as usize - 1)
                .map_or(bytes.len(), |at| at + 1);
            bytes[start..end].to_vec()
        }
    };
    FileLines {
        size: bytes.len() as u64,
        head: bytes[..bytes.len().min(crate::sniff::SNIFF_BYTES)].to_vec(),
        invalid_utf8_at: std::str::from_utf8(bytes)
            .err()
            .map(|e| e.valid_up_to() as u64),
        total_lines: newlines + u64::from(!bytes.is_empty() && !final_newline),
        crlf_lines: memchr::memmem::find_iter(bytes, b"\r\n").count() as u64,
        final_newline,
        lines,
        path: read.path,
        mode: read.mode,
    }
}

#[cfg(test)]
pub mod memory {
    //! An in-memory workspace at `/ws`, and the extra roots `/srv/docs` (read-only) and
    //! `/srv/scratch` (writable), with the host's rules, for the tools' tests.

    use std::cell::RefCell;
    use std::collections::BTreeMap;

    use super::*;
    use dsh_plugin::{error, ErrorCode};

    #[derive(Clone)]
    struct File {
        contents: Vec<u8>,
        mode: u32,
        version: u64,
    }

    #[derive(Default)]
    pub struct Memory {
        files: RefCell<BTreeMap<String, File>>,
        /// The version of each file the caller last read or wrote.
        seen: RefCell<BTreeMap<String, u64>>,
        next_version: RefCell<u64>,
        pub commits: RefCell<usize>,
        /// The next commit fails with this.
        pub fail_commit: RefCell<Option<ToolError>>,
    }

    pub const ROOT: &str = "/ws";
    /// An extra root the tools may read, not change.
    pub const DOCS: &str = "/srv/docs";
    /// An extra root with `write = true`.
    pub const SCRATCH: &str = "/srv/scratch";

    /// A file's key: relative in the workspace, absolute in an extra root (what the host
    /// names it by).
    fn key(path: &str) -> Result<String, ToolError> {
        let path = crate::paths::normalize(&crate::paths::join(ROOT, path));
        if let Some(rest) = path.strip_prefix("/ws/") {
            return Ok(rest.to_string());
        }
        for root in [DOCS, SCRATCH] {
            if path
                .strip_prefix(root)
                .is_some_and(|rest| rest.starts_with('/'))
            {
                return Ok(path);
            }
        }
        Err(error(
            ErrorCode::InvalidArguments,
            format!("{path} is outside the workspace and the extra roots"),
        ))
    }

    /// Refuses a change in the read-only extra root, as the host does.
    fn check_writable(key: &str) -> Result<(), ToolError> {
        match key
            .strip_prefix(DOCS)
            .is_some_and(|rest| rest.starts_with('/'))
        {
            true => Err(error(
                ErrorCode::Denied,
                format!(
                    "{key} is in the extra root {DOCS}, which is read-only: nothing was changed"
                ),
            )),
            false => Ok(()),
        }
    }

    impl Memory {
        pub fn new() -> Memory {
            Memory::default()
        }

        fn version(&self) -> u64 {
            let mut next = self.next_version.borrow_mut();
            *next += 1;
            *next
        }

        /// Puts a file in place as another writer would: the caller has not read it.
        /// (Tests then `read(path, max, true)` it as the `read` tool would.)
        pub fn put(&self, path: &str, contents: impl AsRef<[u8]>) {
            let version = self.version();
            self.files.borrow_mut().insert(
                key(path).unwrap(),
                File {
                    contents: contents.as_ref().to_vec(),
                    mode: 0o644,
                    version,
                },
            );
        }

        /// Puts a file in place and reads it as the `read` tool would.
        pub fn seen(&self, path: &str, contents: impl AsRef<[u8]>) {
            self.put(path, contents);
            self.read(path, u64::MAX, true).unwrap();
        }

        pub fn set_mode(&self, path: &str, mode: u32) {
            self.files
                .borrow_mut()
                .get_mut(&key(path).unwrap())
                .unwrap()
                .mode = mode;
        }

        pub fn get(&self, path: &str) -> Option<String> {
            self.files
                .borrow()
                .get(&key(path).unwrap())
                .map(|f| String::from_utf8(f.contents.clone()).unwrap())
        }

        pub fn mode(&self, path: &str) -> Option<u32> {
            self.files.borrow().get(&key(path).unwrap()).map(|f| f.mode)
        }

        pub fn paths(&self) -> Vec<String> {
            self.files.borrow().keys().cloned().collect()
        }

        fn check_fresh(&self, key: &str) -> Result<(), ToolError> {
            if let Some(file) = self.files.borrow().get(key) {
                if self.seen.borrow().get(key) != Some(&file.version) {
                    return Err(error(
                        ErrorCode::StaleFile,
                        format!("{key} changed since you last read it (or was never read): read it again, then retry"),
                    ));
                }
            }
            Ok(())
        }
    }

    impl Files for Memory {
        fn read(&self, path: &str, max_bytes: u64, remember: bool) -> Result<FileRead, ToolError> {
            let key = key(path)?;
            let files = self.files.borrow();
            let Some(file) = files.get(&key) else {
                if files.keys().any(|k| k.starts_with(&format!("{key}/"))) {
                    return Err(error(
                        ErrorCode::InvalidArguments,
                        format!("{key} is a directory"),
                    ));
                }
                return Err(error(ErrorCode::NotFound, format!("no file {key}")));
            };
            if file.contents.len() as u64 > max_bytes {
                return Err(error(
                    ErrorCode::LimitExceeded,
                    format!(
                        "{key} is {} bytes, more than {max_bytes}",
                        file.contents.len()
                    ),
                ));
            }
            if remember {
                self.seen.borrow_mut().insert(key.clone(), file.version);
            }
            Ok(FileRead {
                path: key,
                contents: file.contents.clone(),
                mode: file.mode,
            })
        }

        fn commit(&self, changes: &[Change]) -> Result<Vec<Changed>, ToolError> {
            *self.commits.borrow_mut() += 1;
            if let Some(error) = self.fail_commit.borrow_mut().take() {
                return Err(error);
            }
            let mut keys = Vec::new();
            for change in changes {
                let key = match change {
                    Change::Write(write) => key(&write.path)?,
                    Change::Remove(path) => {
                        let key = key(path)?;
                        if !self.files.borrow().contains_key(&key) {
                            return Err(error(ErrorCode::NotFound, format!("no file {key}")));
                        }
                        key
                    }
                };
                check_writable(&key)?;
                self.check_fresh(&key)?;
                keys.push(key);
            }
            let mut done = Vec::new();
            for (change, key) in changes.iter().zip(keys) {
                match change {
                    Change::Write(write) => {
                        let mode_from = match &write.mode_from {
                            Some(from) => self.files.borrow().get(&key_of(from)).map(|f| f.mode),
                            None => None,
                        };
                        let version = self.version();
                        let mut files = self.files.borrow_mut();
                        let created = !files.contains_key(&key);
                        let mode = files
                            .get(&key)
                            .map(|f| f.mode)
                            .or(mode_from)
                            .unwrap_or(0o644);
                        files.insert(
                            key.clone(),
                            File {
                                contents: write.contents.clone(),
                                mode,
                                version,
                            },
                        );
                        self.seen.borrow_mut().insert(key.clone(), version);
                        done.push(Changed {
                            path: key,
                            created,
                            bytes: write.contents.len() as u64,
                        });
                    }
                    Change::Remove(_) => {
                        self.files.borrow_mut().remove(&key);
                        done.push(Changed {
                            path: key,
                            created: false,
                            bytes: 0,
                        });
                    }
                }
            }
            Ok(done)
        }

        fn peek(&self, path: &str, max_bytes: u64) -> Option<Vec<u8>> {
            let key = key(path).ok()?;
            let files = self.files.borrow();
            let file = files.get(&key)?;
            (file.contents.len() as u64 <= max_bytes).then(|| file.contents.clone())
        }

        fn is_dir(&self, path: &str) -> bool {
            key(path).is_ok_and(|key| self.is_dir_key(&key))
        }

        fn exists(&self, path: &str) -> bool {
            key(path)
                .is_ok_and(|key| self.files.borrow().contains_key(&key) || self.is_dir_key(&key))
        }
    }

    impl Memory {
        fn is_dir_key(&self, key: &str) -> bool {
            self.files
                .borrow()
                .keys()
                .any(|k| k.starts_with(&format!("{key}/")))
        }
    }

    fn key_of(path: &str) -> String {
        key(path).unwrap_or_default()
    }
}
