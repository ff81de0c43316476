//! Private files and directories: everything dsh writes under its state directory is
//! readable by its own user only. Directories are created 0700 and files 0600 with
//! explicit modes (and set again after creation), so the umask never widens them.

use std::fs::{DirBuilder, File, OpenOptions, Permissions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// The mode of every directory dsh creates under the state directory.
pub const DIR_MODE: u32 = 0o700;
/// The mode of every file dsh creates under the state directory.
pub const FILE_MODE: u32 = 0o600;

/// Creates `path` and its missing parents as private directories (0700 whatever the
/// umask). Directories that already exist are left as they are.
pub fn create_dir_all(path: &Path) -> std::io::Result<()> {
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => return Ok(()),
        Ok(_) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("{} exists and is not a directory", path.display()),
            ))
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(error),
    }
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        create_dir_all(parent)?;
    }
    match DirBuilder::new().mode(DIR_MODE).create(path) {
        // The umask may have taken bits away; set the mode itself.
        Ok(()) => std::fs::set_permissions(path, Permissions::from_mode(DIR_MODE)),
        // Another process created it in the meantime.
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists && path.is_dir() => Ok(()),
        Err(error) => Err(error),
    }
}

/// Opens `path` with `options`, creating it 0600 when it does not exist; an existing
/// file is set to 0600 too.
pub fn open_file(path: &Path, options: &mut OpenOptions) -> std::io::Result<File> {
    let file = options.mode(FILE_MODE).open(path)?;
    file.set_permissions(Permissions::from_mode(FILE_MODE))?;
    Ok(file)
}

/// Creates (or truncates) `path` for writing, 0600.
pub fn create_file(path: &Path) -> std::io::Result<File> {
    open_file(
        path,
        OpenOptions::new().write(true).create(true).truncate(true),
    )
}

/// A temporary name beside `path` that no other process or thread uses.
fn temp_path(path: &Path) -> std::path::PathBuf {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".tmp.{}.{n}", std::process::id()));
    path.with_file_name(name)
}

/// Writes a new 0600 file with `bytes` beside `path` and returns its path: the caller
/// renames or links it into place, so no reader sees half of it.
pub fn write_temp_file(path: &Path, bytes: &[u8]) -> std::io::Result<std::path::PathBuf> {
    let temp = temp_path(path);
    let written = open_file(&temp, OpenOptions::new().write(true).create_new(true))
        .and_then(|mut file| file.write_all(bytes));
    match written {
        Ok(()) => Ok(temp),
        Err(error) => {
            let _ = std::fs::remove_file(&temp);
            Err(error)
        }
    }
}

/// Replaces `path` with a 0600 file holding `bytes`, atomically (a temp file, then a
/// rename): a reader sees the old file or the new one, never half of one.
pub fn write_file_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let temp = write_temp_file(path, bytes)?;
    std::fs::rename(&temp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&temp);
    })
}

/// Creates `path` with `bytes` only if it does not exist yet, atomically: the file
/// appears whole or not at all. False when it already existed (another process won).
pub fn create_file_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<bool> {
    let temp = write_temp_file(path, bytes)?;
    let linked = std::fs::hard_link(&temp, path);
    let _ = std::fs::remove_file(&temp);
    match linked {
        Ok(()) => Ok(true),
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(error) => Err(error),
    }
}

/// Bytes of a [`secret_key`].
pub const SECRET_KEY_BYTES: usize = 32;

/// The secret key in `path` (its directory must exist), read when it is a private
/// regular file of this user (no bits for group or others) of 32 bytes, else made anew
/// from the kernel's random source: created atomically when missing (concurrent
/// processes agree on one key), and replacing anything else found there (`true`: it was
/// replaced, so whatever the old key sealed is no longer trusted).
pub fn secret_key(path: &Path) -> std::io::Result<([u8; SECRET_KEY_BYTES], bool)> {
    use std::os::unix::fs::MetadataExt;
    let random = || {
        let mut key = [0u8; SECRET_KEY_BYTES];
        getrandom::fill(&mut key).map_err(std::io::Error::other)?;
        Ok::<_, std::io::Error>(key)
    };
    for _ in 0..2 {
        match std::fs::symlink_metadata(path) {
            Ok(meta) => {
                let private_file = meta.is_file()
                    && meta.uid() == euid()
                    && meta.mode() & 0o077 == 0
                    && meta.len() == SECRET_KEY_BYTES as u64;
                if private_file {
                    let bytes = std::fs::read(path)?;
                    if let Ok(key) = <[u8; SECRET_KEY_BYTES]>::try_from(bytes.as_slice()) {
                        return Ok((key, false));
                    }
                }
                let key = random()?;
                write_file_atomic(path, &key)?;
                return Ok((key, true));
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                let key = random()?;
                if create_file_atomic(path, &key)? {
                    return Ok((key, false));
                }
                // Another process created it first: read theirs.
            }
            Err(error) => return Err(error),
        }
    }
    Err(std::io::Error::other("it keeps appearing and disappearing"))
}

/// The permission bits of `path` (symlinks followed).
pub fn mode_of(path: &Path) -> std::io::Result<u32> {
    Ok(std::fs::metadata(path)?.permissions().mode() & 0o7777)
}

/// This process's effective uid.
pub fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `f` with the umask set to `mask` (restored after). Tests in this module
    /// only create files under their own temp dirs, so a brief umask change is safe.
    fn with_umask<T>(mask: rustix::fs::RawMode, f: impl FnOnce() -> T) -> T {
        use rustix::fs::Mode;
        let old = rustix::process::umask(Mode::from_raw_mode(mask));
        let result = f();
        rustix::process::umask(old);
        result
    }

    #[test]
    fn dirs_and_files_are_private_whatever_the_umask() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("a/b/c");
        let file = dir.join("f");
        let atomic = dir.join("g");
        with_umask(0o000, || {
            create_dir_all(&dir).unwrap();
            create_file(&file).unwrap();
            write_file_atomic(&atomic, b"x").unwrap();
        });
        for d in ["a", "a/b", "a/b/c"] {
            assert_eq!(mode_of(&root.path().join(d)).unwrap(), DIR_MODE, "{d}");
        }
        assert_eq!(mode_of(&file).unwrap(), FILE_MODE);
        assert_eq!(mode_of(&atomic).unwrap(), FILE_MODE);
    }

    #[test]
    fn an_existing_file_opened_again_becomes_private() {
        let root = tempfile::tempdir().unwrap();
        let file = root.path().join("log");
        std::fs::write(&file, b"old").unwrap();
        std::fs::set_permissions(&file, Permissions::from_mode(0o644)).unwrap();
        open_file(&file, OpenOptions::new().append(true)).unwrap();
        assert_eq!(mode_of(&file).unwrap(), FILE_MODE);
    }

    #[test]
    fn create_file_atomic_keeps_the_first_version() {
        let root = tempfile::tempdir().unwrap();
        let key = root.path().join("key");
        assert!(create_file_atomic(&key, b"first").unwrap());
        assert!(!create_file_atomic(&key, b"second").unwrap());
        assert_eq!(std::fs::read(&key).unwrap(), b"first");
        assert_eq!(mode_of(&key).unwrap(), FILE_MODE);
        // No temp files are left behind.
        assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 1);
    }
}
