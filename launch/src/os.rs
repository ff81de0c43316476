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

/// The addresses of this machine's interfaces in dsh's network namespace (`getifaddrs`):
/// what the egress proxy counts as the host's own, whatever their range. Empty when they
/// cannot be read.
pub fn own_addresses() -> Vec<std::net::IpAddr> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list` with a linked list we free below.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return Vec::new();
    }
    let mut addresses = Vec::new();
    let mut entry = list;
    while !entry.is_null() {
        // SAFETY: `entry` is a node of the list getifaddrs made, not yet freed.
        let node = unsafe { &*entry };
        if !node.ifa_addr.is_null() {
            // SAFETY: ifa_addr points to a sockaddr of the family it names.
            match unsafe { (*node.ifa_addr).sa_family } as libc::c_int {
                libc::AF_INET => {
                    // SAFETY: an AF_INET address is a sockaddr_in.
                    let v4 = unsafe { &*(node.ifa_addr as *const libc::sockaddr_in) };
                    addresses.push(std::net::IpAddr::V4(std::net::Ipv4Addr::from(
                        u32::from_be(v4.sin_addr.s_addr),
                    )));
                }
                libc::AF_INET6 => {
                    // SAFETY: an AF_INET6 address is a sockaddr_in6.
                    let v6 = unsafe { &*(node.ifa_addr as *const libc::sockaddr_in6) };
                    addresses.push(std::net::IpAddr::V6(std::net::Ipv6Addr::from(
                        v6.sin6_addr.s6_addr,
                    )));
                }
                _ => {}
            }
        }
        entry = node.ifa_next;
    }
    // SAFETY: the list getifaddrs made, freed once.
    unsafe { libc::freeifaddrs(list) };
    addresses
}
