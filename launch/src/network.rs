//! A confined run's network by policy: the network namespace such a run joins (its own,
//! with only `lo` up) and the proxy listener dsh opens inside it, and the seam through
//! which the host's egress proxy serves that listener ([`Egress`], installed once with
//! [`crate::Launch::install_egress`]).
//!
//! A run under `sandbox` or `container` whose call's scope and tool have a network
//! policy starts in a network namespace made for it alone: no interface but its
//! loopback, so no route leaves it and no name resolves (there is no resolver to reach).
//! Before the run starts, dsh makes a TCP listener on `127.0.0.1:`[`PROXY_PORT`] *inside*
//! that namespace (a thread of dsh's enters the namespace, binds and listens, and comes
//! back); the socket belongs to the run's namespace but its descriptor is dsh's, so dsh
//! serves it from its own namespace and no helper process runs in the run. The proxy is
//! the run's one way out: whatever the run connects to, only that listener answers. The
//! namespace goes when its last process and the listener are gone.
//!
//! `local` runs are not confined and get the host's network as they are; a policy does
//! not apply to them.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;

/// The port the proxy listens on in each run's namespace (its own loopback, so every run
/// has the same).
pub const PROXY_PORT: u16 = 3128;

/// Who a run with a network is, for the proxy's events and limits.
#[derive(Debug, Clone)]
pub struct RunLabel {
    /// The call's owner (its connection or agent).
    pub owner: Arc<str>,
    /// The call that started the run (`call-N`).
    pub call: Arc<str>,
    /// The tool it was started by, in this scope.
    pub tool: Arc<str>,
    pub scope: Arc<str>,
}

/// The host's egress proxy as the launcher sees it: which runs get a network, and the
/// proxy that serves each one's listener.
pub trait Egress: Send + Sync + std::fmt::Debug {
    /// The network runs of `tool` called in `scope` get; none: no network (as today).
    fn policy_for(&self, scope: &str, tool: &str) -> Option<Arc<dyn RunPolicy>>;
}

/// One network policy: serves runs' listeners and says what their environment gets.
pub trait RunPolicy: Send + Sync + std::fmt::Debug {
    /// Serves the proxy of the run `label` on `listener` (made in the run's namespace).
    /// What it returns lives as long as the run: dropping it ends the run's connections.
    fn serve(
        &self,
        listener: std::net::TcpListener,
        label: &RunLabel,
    ) -> Result<Box<dyn RunEgress>, String>;

    /// The variables the run gets (the proxy's address under every name tools read,
    /// and a CA bundle where the proxy terminates TLS); `tmp` is the run's `TMPDIR`,
    /// where a file of the run's own may be written.
    fn environment(&self, tmp: &Path) -> Result<Vec<(String, String)>, String>;
}

/// One run's proxy while the run lives.
pub trait RunEgress: Send + Sync + std::fmt::Debug {
    /// What it refused so far, one entry each (`example.com:443 (not allowed)`), in order,
    /// without repeats.
    fn refused(&self) -> Vec<String>;

    /// The run started: `leader` is its first process (whose end, after an upgrade,
    /// ends the proxy the next binary serves for it).
    fn started(&self, leader: i32);
}

/// A run's network as the caller asks for it: the policy and who the run is.
#[derive(Debug, Clone)]
pub struct Network {
    pub policy: Arc<dyn RunPolicy>,
    pub label: RunLabel,
}

/// A run's namespace and the proxy listener in it, made before the run.
#[derive(Debug)]
pub struct RunNetwork {
    /// The namespace, which the run's child joins (`setns`).
    pub namespace: OwnedFd,
    /// Listening on `127.0.0.1:PROXY_PORT` in that namespace.
    pub listener: std::net::TcpListener,
}

impl RunNetwork {
    /// A new namespace with its loopback up and the proxy's listener in it, made on a
    /// thread of its own (the calling thread's namespace is left alone).
    pub fn open() -> std::io::Result<RunNetwork> {
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    let home = std::fs::File::open("/proc/thread-self/ns/net")?;
                    let mut listener = None;
                    let namespace = in_new_namespace(&home, true, || {
                        listener = Some(std::net::TcpListener::bind((
                            std::net::Ipv4Addr::LOCALHOST,
                            PROXY_PORT,
                        ))?);
                        Ok(())
                    })?;
                    let listener = listener.expect("made when the namespace was");
                    listener.set_nonblocking(true)?;
                    Ok(RunNetwork {
                        namespace,
                        listener,
                    })
                })
                .join()
                .unwrap_or_else(|_| Err(std::io::Error::other("the thread making it panicked")))
        })
    }
}

/// A proxy listener handed over at an upgrade, kept open across the `exec`, by its
/// number, closed on `exec` again. The caller takes each number once: it was kept open
/// for one run alone, and nothing else here owns it.
pub fn adopt_listener(fd: i32) -> std::io::Result<std::net::TcpListener> {
    use std::os::fd::FromRawFd;
    // SAFETY: the descriptor was kept open across the exec for one run's proxy alone; its
    // number comes from the binary that held it, and nothing else here owns it.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    crate::containment::close_on_exec(&owned);
    let listener = std::net::TcpListener::from(owned);
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// A descriptor of `listener` of its own (closed on `exec`), for handing it over.
pub fn duplicate(listener: &std::net::TcpListener) -> std::io::Result<OwnedFd> {
    use std::os::fd::AsFd;
    listener.as_fd().try_clone_to_owned()
}

/// Resolves when the process `pid` has exited (at once when it is gone already or cannot
/// be watched). From a Tokio context.
pub async fn exited(pid: i32) {
    use std::os::fd::FromRawFd;
    // SAFETY: pidfd_open returns a new descriptor we own, or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return;
    }
    // SAFETY: `fd` is fresh and ours.
    let pidfd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    // SAFETY: the pidfd is ours and stays open while registered (it moves in).
    let registered = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE)
    };
    let Ok(watched) = registered else {
        return;
    };
    let _ = watched.readable().await;
}

/// A new, empty network namespace, made by this thread (`unshare` of the network
/// namespace is per thread), which runs `inside` in it and then goes back `home`;
/// `loopback`: with its `lo` up.
pub(crate) fn in_new_namespace(
    home: &std::fs::File,
    loopback: bool,
    inside: impl FnOnce() -> std::io::Result<()>,
) -> std::io::Result<OwnedFd> {
    // SAFETY: unshare and setns of this thread's network namespace only.
    unsafe {
        if libc::unshare(libc::CLONE_NEWNET) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    let made = match loopback {
        true => loopback_up(),
        false => Ok(()),
    }
    .and_then(|()| inside())
    .and_then(|()| std::fs::File::open("/proc/thread-self/ns/net"));
    // SAFETY: setns of this thread's network namespace back to its own.
    unsafe {
        if libc::setns(home.as_raw_fd(), libc::CLONE_NEWNET) != 0 {
            // A thread left in another namespace must not go on.
            let error = std::io::Error::last_os_error();
            tracing::error!(%error, "cannot return to dsh's network namespace");
            libc::abort();
        }
    }
    made.map(OwnedFd::from)
}

/// Sets `lo` up in this thread's network namespace (`SIOCSIFFLAGS`, as `ip link set lo
/// up` does).
fn loopback_up() -> std::io::Result<()> {
    use std::os::fd::FromRawFd;
    // SAFETY: a new socket, owned here; an ifreq for "lo" read and written by two
    // ioctls on it.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let socket = OwnedFd::from_raw_fd(fd);
        let mut request: libc::ifreq = std::mem::zeroed();
        for (to, from) in request.ifr_name.iter_mut().zip(b"lo") {
            *to = *from as libc::c_char;
        }
        if libc::ioctl(socket.as_raw_fd(), libc::SIOCGIFFLAGS, &mut request) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        request.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        if libc::ioctl(socket.as_raw_fd(), libc::SIOCSIFFLAGS, &request) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listener_lives_in_the_runs_namespace_and_not_in_dshs() {
        if crate::euid() != 0 {
            return;
        }
        let network = RunNetwork::open().unwrap();
        // dsh's own loopback has no listener of the run's: a connect there is refused
        // (unless something of the machine's listens on that port).
        let here = std::net::TcpStream::connect((std::net::Ipv4Addr::LOCALHOST, PROXY_PORT));
        let ours = network.listener.local_addr().unwrap();
        assert_eq!(ours.port(), PROXY_PORT);
        if let Ok(stream) = here {
            // Something else listens here: it must not be our listener.
            drop(stream);
            assert!(network.listener.accept().is_err());
        }
        // From inside the namespace the listener answers.
        let inside = std::thread::spawn({
            let namespace = network.namespace.as_raw_fd();
            move || {
                // SAFETY: this thread joins the namespace and ends.
                assert_eq!(unsafe { libc::setns(namespace, libc::CLONE_NEWNET) }, 0);
                std::net::TcpStream::connect((std::net::Ipv4Addr::LOCALHOST, PROXY_PORT))
                    .map(|_| ())
            }
        })
        .join()
        .unwrap();
        assert!(inside.is_ok(), "{inside:?}");
        network.listener.set_nonblocking(false).unwrap();
        assert!(network.listener.accept().is_ok());
    }
}
