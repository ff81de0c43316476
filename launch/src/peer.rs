//! Who is at the other end of a Unix socket: its user, its pid, and the process itself
//! as a pidfd (`SO_PEERPIDFD`, Linux 6.5), so that a check made by pid (its ancestry, its
//! cgroup) can be confirmed to have been about that process and not about another that
//! took its pid after it exited.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// `SO_PEERPIDFD` (the same number on every architecture dsh builds for).
const SO_PEERPIDFD: libc::c_int = 77;

/// The process that connected to a socket, as the kernel recorded it at `connect`.
#[derive(Debug)]
pub struct Peer {
    pub uid: u32,
    pub pid: Option<i32>,
    /// The process itself, where the kernel gives it.
    pidfd: Option<OwnedFd>,
}

impl Peer {
    /// The peer of the connected Unix socket `socket`.
    pub fn of(socket: RawFd) -> std::io::Result<Peer> {
        let mut cred = libc::ucred {
            pid: 0,
            uid: 0,
            gid: 0,
        };
        let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes into `cred`.
        let got = unsafe {
            libc::getsockopt(
                socket,
                libc::SOL_SOCKET,
                libc::SO_PEERCRED,
                (&mut cred as *mut libc::ucred).cast(),
                &mut len,
            )
        };
        if got != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut pidfd: libc::c_int = -1;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes into `pidfd`; on success it is a
        // new descriptor this function owns.
        let got = unsafe {
            libc::getsockopt(
                socket,
                libc::SOL_SOCKET,
                SO_PEERPIDFD,
                (&mut pidfd as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        let pidfd = (got == 0 && pidfd >= 0).then(|| {
            // SAFETY: a fresh descriptor from the kernel, owned from here on.
            unsafe { OwnedFd::from_raw_fd(pidfd) }
        });
        Ok(Peer {
            uid: cred.uid,
            pid: (cred.pid > 0).then_some(cred.pid),
            pidfd,
        })
    }

    /// Whether the peer process still runs: checks made on its pid since it connected
    /// were about it (a pid is not reused while its process runs). Without a pidfd (a
    /// kernel before 6.5) this cannot be known, and is taken as true.
    pub fn still_running(&self) -> bool {
        let Some(pidfd) = &self.pidfd else {
            return true;
        };
        // SAFETY: pidfd_send_signal with signal 0 only checks the process exists.
        let sent = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                pidfd.as_raw_fd(),
                0,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        sent == 0
    }
}
