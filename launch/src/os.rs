//! The numbers of the system the rest of dsh names: signals (a job's `job_kill`, a
//! run's end), `errno` values (an I/O error told apart, a full disk) and the open flags
//! of a file that must never block. Re-exported from `libc`, so no other crate of dsh
//! needs it.

/// Signal numbers.
pub use libc::{SIGCONT, SIGHUP, SIGINT, SIGKILL, SIGQUIT, SIGTERM, SIGTSTP};

/// `errno` values (`std::io::Error::raw_os_error`).
pub use libc::{
    EACCES, EDQUOT, EISDIR, ELOOP, EMFILE, ENAMETOOLONG, ENFILE, ENOENT, ENOSPC, ENOTDIR, ENXIO,
    EPERM, EROFS,
};

/// Open flags (`OpenOptionsExt::custom_flags`).
pub use libc::{O_NOCTTY, O_NONBLOCK};
