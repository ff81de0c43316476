//! The PTY's system calls: a pair opened with `openpty` (sized, the master non-blocking,
//! both closed on `exec`), raw reads and writes on the master, the terminal-level
//! questions asked of it (foreground group, echo mode), a master handed over at an
//! upgrade taken back by its number, and a descriptor registered with tokio's event
//! loop. The terminal capability builds its sessions on these; the shell on the slave
//! is started by the launcher ([`crate::launcher::Stdio::Pty`]).

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use tokio::io::unix::AsyncFd;

/// A new PTY pair sized `cols` x `rows`, as (master, slave); the master is
/// non-blocking, both close on exec.
pub fn open(cols: u16, rows: u16) -> std::io::Result<(OwnedFd, OwnedFd)> {
    let (mut master, mut slave) = (-1, -1);
    let size = libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: openpty writes two descriptors; the name and termios pointers may be null.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            &size,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors are fresh and ours.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    // SAFETY: fcntl on our own descriptors.
    unsafe {
        libc::fcntl(master.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC);
        libc::fcntl(slave.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC);
        let flags = libc::fcntl(master.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(master.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK);
    }
    Ok((master, slave))
}

/// `fd` registered with the current tokio runtime's event loop for `interest`, owned by
/// the returned `AsyncFd`.
pub fn watch(fd: OwnedFd, interest: tokio::io::Interest) -> std::io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: an `OwnedFd` is open, and owned by the AsyncFd from here on, so it stays
    // open and the same file while registered.
    unsafe { AsyncFd::register_with_interest(fd, interest) }.map_err(Into::into)
}

/// The terminal's foreground process group, asked of its master.
pub fn foreground_group(master: BorrowedFd<'_>) -> Option<i32> {
    // SAFETY: tcgetpgrp on an open descriptor.
    let pgid = unsafe { libc::tcgetpgrp(master.as_raw_fd()) };
    (pgid > 0).then_some(pgid)
}

/// Sets the terminal's size (`TIOCSWINSZ` on its master): the kernel tells the
/// terminal's foreground process group with `SIGWINCH`.
pub fn resize(master: BorrowedFd<'_>, cols: u16, rows: u16) -> std::io::Result<()> {
    let size = libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads one winsize from a valid pointer; the descriptor is open.
    if unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSWINSZ, &size) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// One `write` of `bytes` to `fd` (how many it took; `WouldBlock` when the terminal's
/// input queue is full).
pub fn write(fd: BorrowedFd<'_>, bytes: &[u8]) -> std::io::Result<usize> {
    // SAFETY: writing from a valid slice to an open descriptor.
    let n = unsafe { libc::write(fd.as_raw_fd(), bytes.as_ptr().cast(), bytes.len()) };
    if n < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// One `read` from `fd` into `buf` (0: end of file).
pub fn read(fd: BorrowedFd<'_>, buf: &mut [u8]) -> std::io::Result<usize> {
    // SAFETY: reading into a valid buffer from an open descriptor.
    let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Whether input typed now is echoed, as far as the terminal's modes (read through its
/// master) tell: not in canonical mode with echo off (a password prompt). True when the
/// modes cannot be read.
pub fn echoes(master: BorrowedFd<'_>) -> bool {
    // SAFETY: termios is plain data; tcgetattr on the master reads the terminal's
    // (the slave's) modes.
    let mut modes: libc::termios = unsafe { std::mem::zeroed() };
    if unsafe { libc::tcgetattr(master.as_raw_fd(), &mut modes) } != 0 {
        return true;
    }
    modes.c_lflag & libc::ICANON == 0 || modes.c_lflag & libc::ECHO != 0
}

/// The PTY master a session handed over at an upgrade kept open across the `exec`, by
/// its number, closed on `exec` again. The caller takes each number once: it was kept
/// open for one session alone, and nothing else here owns it.
pub fn adopt(fd: i32) -> OwnedFd {
    // SAFETY: the descriptor was kept open across the exec for one session alone; its
    // number comes from the binary that held it, and nothing else here owns it.
    let master = unsafe { OwnedFd::from_raw_fd(fd) };
    crate::containment::close_on_exec(&master);
    master
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn a_pair_opens_sized_and_what_the_slave_writes_the_master_reads() {
        let (master, slave) = open(100, 30).unwrap();
        assert_eq!(write(slave.as_fd(), b"hi").unwrap(), 2);
        let mut buf = [0u8; 16];
        let mut got = Vec::new();
        for _ in 0..100 {
            match read(master.as_fd(), &mut buf) {
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("{e}"),
            }
            if got.ends_with(b"hi") {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(got, b"hi");
        assert!(echoes(master.as_fd()));
        assert_eq!(foreground_group(master.as_fd()), None);
    }
}
