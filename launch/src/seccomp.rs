//! The seccomp filter of sandboxed runs: the system calls and arguments that Landlock
//! cannot see, refused before a confined command runs.
//!
//! Built once per host (a BPF program, [`program`]) and loaded by the child of every
//! sandboxed run last thing before `exec` ([`super::spawn`]). Seccomp sees a call's
//! number and its register arguments, never paths or the memory they point to, so every
//! rule below is about numbers. It refuses:
//!
//! - **Sockets Landlock cannot govern** (`EACCES`): `socket()` of UDP, raw and packet
//!   sockets (so DNS too), of any address family but IPv4, IPv6 and netlink (and Unix
//!   with `unix_sockets = true`), of stream sockets with a protocol other than TCP, and
//!   of netlink sockets other than `NETLINK_ROUTE` (`NETLINK_SOCK_DIAG` lists every
//!   socket on the machine, others reach audit, uevents, netfilter); `listen()` (the
//!   sandbox grants no bind, and `listen` on an unbound socket binds `0.0.0.0` on an
//!   ephemeral port without the bind check; seccomp cannot tell a socket's family, so
//!   Unix servers are refused too); `sendto`, `sendmsg` and `sendmmsg` with
//!   `MSG_FASTOPEN` (TCP fast open connects inside the send, past Landlock's connect
//!   check); and io_uring (which makes sockets and opens files past the filter).
//! - **Leaving the run** (`ENOSYS`, `EPERM`): `clone3` answers `ENOSYS`, so
//!   `CLONE_INTO_CGROUP` (starting a child in another cgroup, out of the run's
//!   `cgroup.kill` and `pids.max`) and namespace flags in its struct (which seccomp cannot
//!   read) are gone, while glibc, which falls back to `clone` on `ENOSYS` only, keeps
//!   `pthread_create` and `posix_spawn` working. `clone` and `unshare` with any namespace
//!   flag and `setns` get `EPERM` (a user namespace would hand the command every
//!   capability inside it, and each namespace is kernel attack surface).
//! - **Setuid and setgid bits** (`EPERM`): `chmod`, `fchmod`, `fchmodat`, `fchmodat2`,
//!   `open`, `openat`, `creat`, `mkdir`, `mkdirat`, `mknod` and `mknodat` with a mode
//!   holding `S_ISUID` or `S_ISGID` (a run owns what it writes: a root host's run would
//!   leave a setuid-root shell behind); `openat2`, whose mode seccomp cannot read,
//!   answers `ENOSYS` (callers fall back to `openat`).
//! - **Touching processes outside the run** (`EPERM`; same-user processes are fair game
//!   to the kernel and Landlock scopes signals and ptrace only): `prlimit64` setting
//!   another process's limits (a run once set dsh's `RLIMIT_FSIZE` to 0, which killed it
//!   at its next write; reading them stays allowed); `setpriority` and `ioprio_set` but on the caller itself
//!   (`PRIO_PROCESS`/`IOPRIO_WHO_PROCESS` with pid 0: `PRIO_USER` with 0 means every
//!   process of the user); `sched_setaffinity`, `sched_setscheduler`, `sched_setparam`,
//!   `sched_setattr`, `migrate_pages` and `move_pages` with a pid but 0; `ioctl`
//!   `TIOCSTI` (typing into a terminal) and `TIOCLINUX` (pasting into a console).
//! - **Mounts, handles and the like** (`EPERM`): `mount`, `umount2`, `pivot_root`, the new
//!   mount API (`open_tree`, `open_tree_attr`, `move_mount`, `fsopen`, `fsconfig`,
//!   `fsmount`, `fspick`, `mount_setattr`), `chroot`, `name_to_handle_at` and
//!   `open_by_handle_at` (file handles name files by inode, past path rules), `syslog`,
//!   `vhangup`, `quotactl`, `quotactl_fd`, `lookup_dcookie`, `process_madvise`,
//!   `process_mrelease`, `fanotify_init`, `sethostname`, `setdomainname`, on x86-64
//!   `uselib`, `iopl` and `ioperm`; and `personality` but the query (`0xffffffff`) and
//!   the plain personalities Docker allows (`PER_LINUX`, `PER_LINUX32`, `UNAME26`).
//! - **Privileged calls** a root host could otherwise make (`EACCES`): modules, kexec,
//!   reboot, swap, BPF, perf events, process accounting, clocks, keyrings, userfaultfd.
//! - On x86-64, **every x32-ABI call** (`EACCES`): their numbers (bit 30 set) would miss
//!   every rule above.
//!
//! Most of these would fail anyway for lack of capabilities; the filter is the layer
//! that holds where the kernel's own checks let a same-user, capability-less process
//! through (namespaces, `prlimit64`, `setpriority`, affinity, `TIOCSTI` on its own
//! terminal, fast open, `listen`, file handles, unprivileged fanotify, netlink).
//!
//! seccompiler gives one filter a single action for everything it matches, so the
//! program is three seccompiler filters in a row (`ENOSYS`, `EPERM`, `EACCES`), each
//! filter's "allow" rewritten into a jump to the next one; the last one's allow stands.
//! Calls no rule names stay free (the kernel caches "always allowed" per call number);
//! those with argument rules (`socket`, `ioctl`, `sendto`, `clone`, `prlimit64`, …) run
//! the program each time.

use std::collections::BTreeMap;

use seccompiler::{
    SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
};

use super::executor::SandboxError;

/// The namespace flags `clone` takes (`CLONE_NEWTIME`, 0x80, shares bits with `clone`'s
/// exit signal and is `unshare`'s and `clone3`'s only).
const CLONE_NAMESPACES: [libc::c_int; 7] = [
    libc::CLONE_NEWNS,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWNET,
    libc::CLONE_NEWCGROUP,
];
/// `CLONE_NEWTIME` of `linux/sched.h`.
const CLONE_NEWTIME: u64 = 0x80;
/// `MSG_FASTOPEN` of `linux/socket.h`.
const MSG_FASTOPEN: u64 = 0x2000_0000;
/// `NETLINK_ROUTE` of `linux/netlink.h`: interfaces, addresses, routes (reading them
/// takes no privilege; changing them takes `CAP_NET_ADMIN`, which a run lacks).
const NETLINK_ROUTE: u64 = 0;
/// `IOPRIO_WHO_PROCESS` of `linux/ioprio.h`.
const IOPRIO_WHO_PROCESS: u64 = 1;
/// `TIOCSTI` and `TIOCLINUX` of `asm-generic/ioctls.h` (x86-64 and aarch64 alike).
const TIOCSTI: u64 = 0x5412;
const TIOCLINUX: u64 = 0x541C;
/// `open_tree_attr` (Linux 6.15; the same number on every architecture since 424).
const SYS_OPEN_TREE_ATTR: i64 = 467;
/// `openat2` and `fchmodat2`, the same number on x86-64 and aarch64.
const SYS_OPENAT2: i64 = 437;
const SYS_FCHMODAT2: i64 = 452;
/// The setuid and setgid bits of a mode.
const SET_ID_BITS: [u64; 2] = [libc::S_ISUID as u64, libc::S_ISGID as u64];
/// The `personality` values allowed: the query, `PER_LINUX`, `PER_LINUX32`, `UNAME26`
/// and `PER_LINUX32 | UNAME26` (Docker's default profile allows the same).
const PERSONALITIES: [u64; 5] = [0xffff_ffff, 0, 0x0008, 0x0002_0000, 0x0002_0008];

type Rules = BTreeMap<i64, Vec<SeccompRule>>;

/// A condition on the low 32 bits of argument `arg` (what the kernel reads of an `int`
/// or `unsigned int`, and of `clone`'s flags).
fn cond(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, SandboxError> {
    Ok(SeccompCondition::new(
        arg,
        SeccompCmpArgLen::Dword,
        op,
        value,
    )?)
}

/// A condition on all 64 bits of argument `arg` (a pointer).
fn cond64(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, SandboxError> {
    Ok(SeccompCondition::new(
        arg,
        SeccompCmpArgLen::Qword,
        op,
        value,
    )?)
}

/// One rule per flag: argument `arg` has `flag` set.
fn any_flag(arg: u8, flags: &[u64]) -> Result<Vec<SeccompRule>, SandboxError> {
    flags
        .iter()
        .map(|&flag| {
            Ok(SeccompRule::new(vec![cond(
                arg,
                SeccompCmpOp::MaskedEq(flag),
                flag,
            )?])?)
        })
        .collect()
}

/// One rule: argument `arg` is not 0.
fn nonzero(arg: u8) -> Result<Vec<SeccompRule>, SandboxError> {
    Ok(vec![SeccompRule::new(vec![cond(
        arg,
        SeccompCmpOp::Ne,
        0,
    )?])?])
}

/// The calls answered `ENOSYS`.
fn enosys() -> Rules {
    // glibc's pthread_create and posix_spawn try clone3 first and fall back to clone on
    // ENOSYS (and on nothing else): the sandbox keeps threads and spawning, and loses
    // CLONE_INTO_CGROUP, by which a child would start in any cgroup it can write (out of
    // its run), and clone3's namespace flags, which sit in memory seccomp cannot read.
    // openat2 carries its mode in a struct seccomp cannot read (the setuid rule below
    // would not see it); its callers fall back to openat on ENOSYS.
    Rules::from([(libc::SYS_clone3, Vec::new()), (SYS_OPENAT2, Vec::new())])
}

/// The calls answered `EPERM`.
fn eperm() -> Result<Rules, SandboxError> {
    let mut rules = Rules::new();
    let namespaces: Vec<u64> = CLONE_NAMESPACES.iter().map(|&f| f as u64).collect();
    // A new namespace of any kind: a user namespace gives back every capability inside
    // it (and with them mounts, and the rest of the namespaces); each is kernel attack
    // surface a command has no need of. Plain fork, vfork and threads carry none of
    // these flags. The flags are clone's first argument on x86-64 and aarch64 alike.
    rules.insert(libc::SYS_clone, any_flag(0, &namespaces)?);
    let mut unshare = namespaces.clone();
    unshare.push(CLONE_NEWTIME);
    rules.insert(libc::SYS_unshare, any_flag(0, &unshare)?);
    // Joining another namespace (of a process in the run, or one a descriptor names).
    rules.insert(libc::SYS_setns, Vec::new());
    // Another process's limits: the kernel lets a same-user caller set them (a run set
    // dsh's RLIMIT_FSIZE to 0 and dsh died at its next write). Reading them (no new
    // limit) stays allowed, as /proc/PID/limits shows them anyway; setrlimit and
    // prlimit on pid 0 (the caller) stay allowed.
    rules.insert(
        libc::SYS_prlimit64,
        vec![SeccompRule::new(vec![
            cond(0, SeccompCmpOp::Ne, 0)?,
            cond64(2, SeccompCmpOp::Ne, 0)?,
        ])?],
    );
    // Niceness and I/O priority of anything but the caller: a same-user caller may
    // lower other processes' priority (and `who` 0 with PRIO_USER means every process
    // of the user), so only (PRIO_PROCESS, 0) and (IOPRIO_WHO_PROCESS, 0) pass.
    rules.insert(
        libc::SYS_setpriority,
        vec![
            SeccompRule::new(vec![cond(0, SeccompCmpOp::Ne, libc::PRIO_PROCESS as u64)?])?,
            SeccompRule::new(vec![cond(1, SeccompCmpOp::Ne, 0)?])?,
        ],
    );
    rules.insert(
        libc::SYS_ioprio_set,
        vec![
            SeccompRule::new(vec![cond(0, SeccompCmpOp::Ne, IOPRIO_WHO_PROCESS)?])?,
            SeccompRule::new(vec![cond(1, SeccompCmpOp::Ne, 0)?])?,
        ],
    );
    // Scheduling and memory placement of another process (pid first, 0 the caller):
    // pinning a same-user process to one CPU or making it SCHED_IDLE starves it.
    for call in [
        libc::SYS_sched_setaffinity,
        libc::SYS_sched_setscheduler,
        libc::SYS_sched_setparam,
        libc::SYS_sched_setattr,
        libc::SYS_migrate_pages,
        libc::SYS_move_pages,
    ] {
        rules.insert(call, nonzero(0)?);
    }
    // Typing into a terminal (TIOCSTI: its own controlling terminal needs no privilege,
    // and whoever reads that terminal next runs the text) and the console's selection
    // and paste (TIOCLINUX). The kernel reads the request as an unsigned int: the low
    // 32 bits are compared.
    rules.insert(
        libc::SYS_ioctl,
        vec![
            SeccompRule::new(vec![cond(1, SeccompCmpOp::Eq, TIOCSTI)?])?,
            SeccompRule::new(vec![cond(1, SeccompCmpOp::Eq, TIOCLINUX)?])?,
        ],
    );
    // A mode with the setuid or setgid bit, given to anything the run creates or
    // changes: a confined run owns what it writes, so a root host's run could otherwise
    // leave a setuid-root copy of a shell in the workspace for any local user (a
    // container's root too, through its idmapped workspace). The mode is each call's
    // argument (open's and creat's only read with O_CREAT or O_TMPFILE, and refused
    // with the bits whatever the flags). File capabilities need CAP_SETFCAP, which no
    // run holds.
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
    let mut mode_args = vec![
        (libc::SYS_fchmod, 1),
        (libc::SYS_fchmodat, 2),
        (SYS_FCHMODAT2, 2),
        (libc::SYS_openat, 3),
        (libc::SYS_mkdirat, 2),
        (libc::SYS_mknodat, 2),
    ];
    #[cfg(target_arch = "x86_64")]
    mode_args.extend([
        (libc::SYS_chmod, 1),
        (libc::SYS_open, 2),
        (libc::SYS_creat, 1),
        (libc::SYS_mkdir, 1),
        (libc::SYS_mknod, 1),
    ]);
    for (call, arg) in mode_args {
        rules.insert(call, any_flag(arg, &SET_ID_BITS)?);
    }
    // Personalities change how the kernel lays out and runs a process (READ_IMPLIES_EXEC,
    // MMAP_PAGE_ZERO, ADDR_NO_RANDOMIZE): only the query and the plain ones pass.
    rules.insert(
        libc::SYS_personality,
        vec![SeccompRule::new(
            PERSONALITIES
                .iter()
                .map(|&p| cond(0, SeccompCmpOp::Ne, p))
                .collect::<Result<_, _>>()?,
        )?],
    );
    // Refused whatever their arguments: mounts and the new mount API (in a namespace of
    // its own a run could remount what Landlock allows), chroot, file handles (a handle
    // opens a file by inode, past path rules; name_to_handle_at needs no privilege), the
    // kernel log, hangups of the terminal, quotas, dcookies, uselib, other processes'
    // memory advice and reaping, fanotify (unprivileged since 5.13: it watches every
    // access to files it can read), host and domain names, and on x86-64 port I/O.
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
    let mut refused = vec![
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_move_mount,
        libc::SYS_open_tree,
        SYS_OPEN_TREE_ATTR,
        libc::SYS_fsopen,
        libc::SYS_fsconfig,
        libc::SYS_fsmount,
        libc::SYS_fspick,
        libc::SYS_mount_setattr,
        libc::SYS_chroot,
        libc::SYS_name_to_handle_at,
        libc::SYS_open_by_handle_at,
        libc::SYS_syslog,
        libc::SYS_vhangup,
        libc::SYS_quotactl,
        libc::SYS_quotactl_fd,
        libc::SYS_lookup_dcookie,
        libc::SYS_process_madvise,
        libc::SYS_process_mrelease,
        libc::SYS_fanotify_init,
        libc::SYS_sethostname,
        libc::SYS_setdomainname,
    ];
    #[cfg(target_arch = "x86_64")]
    refused.extend([libc::SYS_uselib, libc::SYS_iopl, libc::SYS_ioperm]);
    for call in refused {
        rules.insert(call, Vec::new());
    }
    Ok(rules)
}

/// The calls answered `EACCES`.
fn eacces(unix_sockets: bool, own_loopback: bool) -> Result<Rules, SandboxError> {
    let type_mask = SeccompCmpOp::MaskedEq(0xf);
    let mut socket_rules = Vec::new();
    for family in [libc::AF_INET, libc::AF_INET6] {
        for kind in [libc::SOCK_DGRAM, libc::SOCK_RAW, libc::SOCK_SEQPACKET] {
            socket_rules.push(SeccompRule::new(vec![
                cond(0, SeccompCmpOp::Eq, family as u64)?,
                cond(1, type_mask.clone(), kind as u64)?,
            ])?);
        }
        // Stream sockets of another protocol than TCP (SCTP, MPTCP).
        socket_rules.push(SeccompRule::new(vec![
            cond(0, SeccompCmpOp::Eq, family as u64)?,
            cond(2, SeccompCmpOp::Ne, 0)?,
            cond(2, SeccompCmpOp::Ne, libc::IPPROTO_TCP as u64)?,
        ])?);
    }
    // Netlink but NETLINK_ROUTE: NETLINK_SOCK_DIAG lists every socket of the machine
    // (with its addresses and inode), others reach audit, uevents, netfilter, SELinux.
    socket_rules.push(SeccompRule::new(vec![
        cond(0, SeccompCmpOp::Eq, libc::AF_NETLINK as u64)?,
        cond(2, SeccompCmpOp::Ne, NETLINK_ROUTE)?,
    ])?);
    // Every other family but netlink (and Unix where allowed).
    let mut others = vec![
        cond(0, SeccompCmpOp::Ne, libc::AF_INET as u64)?,
        cond(0, SeccompCmpOp::Ne, libc::AF_INET6 as u64)?,
        cond(0, SeccompCmpOp::Ne, libc::AF_NETLINK as u64)?,
    ];
    if unix_sockets {
        others.push(cond(0, SeccompCmpOp::Ne, libc::AF_UNIX as u64)?);
    }
    socket_rules.push(SeccompRule::new(others)?);
    let mut rules = Rules::new();
    rules.insert(libc::SYS_socket, socket_rules);
    // listen(): the sandbox grants no bind, and listen on an unbound TCP socket binds it
    // to 0.0.0.0 on an ephemeral port with no bind check (a server reachable from the
    // network). Seccomp cannot tell the socket's family, so Unix servers are refused too.
    // In a network namespace of its own with only its loopback up, a listener reaches
    // no one outside the run: there it is allowed.
    if !own_loopback {
        rules.insert(libc::SYS_listen, Vec::new());
    }
    // TCP fast open: sendto/sendmsg/sendmmsg with MSG_FASTOPEN (and an address) connect
    // inside the send, without the connect check Landlock's port rules hang on. The
    // flags are sendto's and sendmmsg's fourth argument and sendmsg's third.
    rules.insert(libc::SYS_sendto, any_flag(3, &[MSG_FASTOPEN])?);
    rules.insert(libc::SYS_sendmsg, any_flag(2, &[MSG_FASTOPEN])?);
    rules.insert(libc::SYS_sendmmsg, any_flag(3, &[MSG_FASTOPEN])?);
    for denied in [
        // io_uring makes sockets and opens files without these system calls.
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        // What only privilege would allow: refused even if a capability slipped through.
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_kexec_load,
        libc::SYS_kexec_file_load,
        libc::SYS_reboot,
        libc::SYS_swapon,
        libc::SYS_swapoff,
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_acct,
        libc::SYS_settimeofday,
        libc::SYS_clock_settime,
        libc::SYS_clock_adjtime,
        libc::SYS_adjtimex,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_keyctl,
        libc::SYS_userfaultfd,
    ] {
        rules.insert(denied, Vec::new());
    }
    Ok(rules)
}

/// The seccomp program of sandboxed runs (x86-64 and aarch64; see the module doc);
/// `unix_sockets`: whether `socket(AF_UNIX)` is allowed; `own_loopback`: whether the run
/// is in a network namespace of its own whose only interface is its loopback (a
/// container with `network = "loopback"`), where `listen` is allowed.
pub fn program(
    unix_sockets: bool,
    own_loopback: bool,
) -> Result<Vec<libc::sock_filter>, SandboxError> {
    let arch = if cfg!(target_arch = "aarch64") {
        seccompiler::TargetArch::aarch64
    } else {
        seccompiler::TargetArch::x86_64
    };
    // First, on x86-64: the x32 ABI's numbers (bit 30 set) would miss every rule
    // below, so they are refused whole (where the kernel has x32 at all).
    let mut program: Vec<libc::sock_filter> = if cfg!(target_arch = "x86_64") {
        const X32_BIT: u32 = 0x4000_0000;
        vec![
            // A = seccomp_data.nr
            libc::sock_filter {
                code: (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16,
                jt: 0,
                jf: 0,
                k: 0,
            },
            // nr >= X32_BIT: the next instruction, else skip it
            libc::sock_filter {
                code: (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16,
                jt: 0,
                jf: 1,
                k: X32_BIT,
            },
            libc::sock_filter {
                code: (libc::BPF_RET | libc::BPF_K) as u16,
                jt: 0,
                jf: 0,
                k: libc::SECCOMP_RET_ERRNO | libc::EACCES as u32,
            },
        ]
    } else {
        Vec::new()
    };
    // One filter per errno, in a row: a call one filter lets through goes on to the
    // next (its "allow" becomes a jump past its end), a call one refuses ends there.
    // The three name disjoint calls, so their order decides nothing.
    let filters = [
        (enosys(), libc::ENOSYS),
        (eperm()?, libc::EPERM),
        (eacces(unix_sockets, own_loopback)?, libc::EACCES),
    ];
    let last = filters.len() - 1;
    for (index, (rules, errno)) in filters.into_iter().enumerate() {
        let filter = SeccompFilter::new(
            rules,
            SeccompAction::Allow,
            SeccompAction::Errno(errno as u32),
            arch,
        )?;
        let bpf: seccompiler::BpfProgram = filter.try_into()?;
        let len = bpf.len();
        program.extend(bpf.into_iter().enumerate().map(|(pc, i)| {
            let allow =
                i.code == (libc::BPF_RET | libc::BPF_K) as u16 && i.k == libc::SECCOMP_RET_ALLOW;
            if allow && index != last {
                // Jump to the first instruction of the next filter (pc + 1 + k == len).
                libc::sock_filter {
                    code: (libc::BPF_JMP | libc::BPF_JA) as u16,
                    jt: 0,
                    jf: 0,
                    k: (len - pc - 1) as u32,
                }
            } else {
                libc::sock_filter {
                    code: i.code,
                    jt: i.jt,
                    jf: i.jf,
                    k: i.k,
                }
            }
        }));
    }
    if program.len() > libc::BPF_MAXINSNS as usize {
        return Err(SandboxError::Setup(format!(
            "the seccomp program has {} instructions, more than the kernel's {}",
            program.len(),
            libc::BPF_MAXINSNS
        )));
    }
    Ok(program)
}

#[cfg(test)]
mod tests {
    //! The program run by a small classic-BPF interpreter on made-up calls: each
    //! rule refuses what it names with its errno and lets its neighbours through.

    use super::*;

    const ALLOW: u32 = libc::SECCOMP_RET_ALLOW;

    fn errno(e: libc::c_int) -> u32 {
        libc::SECCOMP_RET_ERRNO | e as u32
    }

    fn audit_arch() -> u32 {
        if cfg!(target_arch = "aarch64") {
            0xC000_00B7 // AUDIT_ARCH_AARCH64
        } else {
            0xC000_003E // AUDIT_ARCH_X86_64
        }
    }

    /// What `program` returns for call `nr` with `args` (struct seccomp_data).
    fn run(program: &[libc::sock_filter], nr: i64, args: [u64; 6]) -> u32 {
        let mut data = Vec::with_capacity(64);
        data.extend_from_slice(&(nr as u32).to_ne_bytes());
        data.extend_from_slice(&audit_arch().to_ne_bytes());
        data.extend_from_slice(&0u64.to_ne_bytes()); // instruction pointer
        for arg in args {
            data.extend_from_slice(&arg.to_ne_bytes());
        }
        let (mut a, mut pc) = (0u32, 0usize);
        loop {
            let i = program[pc];
            let code = i.code as u32;
            pc += 1;
            match code {
                c if c == libc::BPF_LD | libc::BPF_W | libc::BPF_ABS => {
                    let at = i.k as usize;
                    a = u32::from_ne_bytes(data[at..at + 4].try_into().unwrap());
                }
                c if c == libc::BPF_ALU | libc::BPF_AND | libc::BPF_K => a &= i.k,
                c if c == libc::BPF_JMP | libc::BPF_JA => pc += i.k as usize,
                c if c == libc::BPF_RET | libc::BPF_K => return i.k,
                c if c & 0x07 == libc::BPF_JMP => {
                    let taken = match code & 0xf0 {
                        x if x == libc::BPF_JEQ => a == i.k,
                        x if x == libc::BPF_JGE => a >= i.k,
                        x if x == libc::BPF_JGT => a > i.k,
                        x if x == libc::BPF_JSET => a & i.k != 0,
                        _ => panic!("unexpected jump {code:#x}"),
                    };
                    pc += if taken { i.jt } else { i.jf } as usize;
                }
                _ => panic!("unexpected instruction {code:#x}"),
            }
        }
    }

    #[test]
    fn each_rule_refuses_what_it_names_with_its_errno_and_lets_the_rest_through() {
        let p = program(false, false).unwrap();
        assert!(p.len() <= libc::BPF_MAXINSNS as usize, "{}", p.len());
        let ns = |f: libc::c_int| f as u64;
        let cases: &[(&str, i64, [u64; 6], u32)] = &[
            ("getpid", libc::SYS_getpid, [0; 6], ALLOW),
            (
                "fchmod 0755",
                libc::SYS_fchmod,
                [3, 0o755, 0, 0, 0, 0],
                ALLOW,
            ),
            (
                "fchmod 4755",
                libc::SYS_fchmod,
                [3, 0o4755, 0, 0, 0, 0],
                errno(libc::EPERM),
            ),
            (
                "fchmodat g+s",
                libc::SYS_fchmodat,
                [3, 0, 0o2755, 0, 0, 0],
                errno(libc::EPERM),
            ),
            (
                "fchmodat2 u+s",
                SYS_FCHMODAT2,
                [3, 0, 0o4700, 0, 0, 0],
                errno(libc::EPERM),
            ),
            (
                "openat O_CREAT 0644",
                libc::SYS_openat,
                [3, 0, libc::O_CREAT as u64, 0o644, 0, 0],
                ALLOW,
            ),
            (
                "openat O_CREAT 4755",
                libc::SYS_openat,
                [3, 0, libc::O_CREAT as u64, 0o4755, 0, 0],
                errno(libc::EPERM),
            ),
            (
                "mknodat S_IFREG|2755",
                libc::SYS_mknodat,
                [3, 0, libc::S_IFREG as u64 | 0o2755, 0, 0, 0],
                errno(libc::EPERM),
            ),
            (
                "mkdirat 0755",
                libc::SYS_mkdirat,
                [3, 0, 0o755, 0, 0, 0],
                ALLOW,
            ),
            (
                "openat2",
                SYS_OPENAT2,
                [3, 0, 0, 24, 0, 0],
                errno(libc::ENOSYS),
            ),
            ("clone3", libc::SYS_clone3, [0; 6], errno(libc::ENOSYS)),
            (
                "fork",
                libc::SYS_clone,
                [libc::SIGCHLD as u64, 0, 0, 0, 0, 0],
                ALLOW,
            ),
            ("thread", libc::SYS_clone, [0x3d0f00, 1, 0, 0, 0, 0], ALLOW),
            ("vfork", libc::SYS_clone, [0x4111, 0, 0, 0, 0, 0], ALLOW),
            (
                "clone user",
                libc::SYS_clone,
                [ns(libc::CLONE_NEWUSER) | 17, 0, 0, 0, 0, 0],
                errno(libc::EPERM),
            ),
            (
                "clone net",
                libc::SYS_clone,
                [ns(libc::CLONE_NEWNET), 0, 0, 0, 0, 0],
                errno(libc::EPERM),
            ),
            (
                "clone ns high bits",
                libc::SYS_clone,
                [(1 << 40) | ns(libc::CLONE_NEWNS), 0, 0, 0, 0, 0],
                errno(libc::EPERM),
            ),
            (
                "unshare files",
                libc::SYS_unshare,
                [ns(libc::CLONE_FILES), 0, 0, 0, 0, 0],
                ALLOW,
            ),
            (
                "unshare time",
                libc::SYS_unshare,
                [CLONE_NEWTIME, 0, 0, 0, 0, 0],
                errno(libc::EPERM),
            ),
            (
                "unshare cgroup",
                libc::SYS_unshare,
                [ns(libc::CLONE_NEWCGROUP), 0, 0, 0, 0, 0],
                errno(libc::EPERM),
            ),
            (
                "setns",
                libc::SYS_setns,
                [3, 0, 0, 0, 0, 0],
                errno(libc::EPERM),
            ),
            (
                "prlimit self",
                libc::SYS_prlimit64,
                [0, 1, 0x7000, 0, 0, 0],
                ALLOW,
            ),
            (
                "prlimit read other",
                libc::SYS_prlimit64,
                [1, 1, 0, 0x7000, 0, 0],
                ALLOW,
            ),
            (
                "prlimit set other",
                libc::SYS_prlimit64,
                [1, 1, 0x7000, 0, 0, 0],
                errno(libc::EPERM),
            ),
            (
                "prlimit set other, pointer low half 0",
                libc::SYS_prlimit64,
                [1, 1, 0x7f00_0000_0000, 0, 0, 0],
                errno(libc::EPERM),
            ),
            (
                "nice self",
                libc::SYS_setpriority,
                [0, 0, 5, 0, 0, 0],
                ALLOW,
            ),
            (
                "nice other",
                libc::SYS_setpriority,
                [0, 42, 5, 0, 0, 0],
                errno(libc::EPERM),
            ),
            (
                "nice user 0",
                libc::SYS_setpriority,
                [2, 0, 5, 0, 0, 0],
                errno(libc::EPERM),
            ),
            (
                "ionice self",
                libc::SYS_ioprio_set,
                [1, 0, 0x6000, 0, 0, 0],
                ALLOW,
            ),
            (
                "ionice pgrp 0",
                libc::SYS_ioprio_set,
                [2, 0, 0x6000, 0, 0, 0],
                errno(libc::EPERM),
            ),
            (
                "ionice other",
                libc::SYS_ioprio_set,
                [1, 42, 0x6000, 0, 0, 0],
                errno(libc::EPERM),
            ),
            (
                "affinity self",
                libc::SYS_sched_setaffinity,
                [0, 8, 0x7000, 0, 0, 0],
                ALLOW,
            ),
            (
                "affinity other",
                libc::SYS_sched_setaffinity,
                [42, 8, 0x7000, 0, 0, 0],
                errno(libc::EPERM),
            ),
            (
                "setattr other",
                libc::SYS_sched_setattr,
                [42, 0x7000, 0, 0, 0, 0],
                errno(libc::EPERM),
            ),
            (
                "move_pages other",
                libc::SYS_move_pages,
                [42, 0, 0, 0, 0, 0],
                errno(libc::EPERM),
            ),
            (
                "ioctl TCGETS",
                libc::SYS_ioctl,
                [0, 0x5401, 0x7000, 0, 0, 0],
                ALLOW,
            ),
            (
                "ioctl TIOCSTI",
                libc::SYS_ioctl,
                [0, TIOCSTI, 0x7000, 0, 0, 0],
                errno(libc::EPERM),
            ),
            (
                "ioctl TIOCSTI high bits",
                libc::SYS_ioctl,
                [0, (1 << 32) | TIOCSTI, 0x7000, 0, 0, 0],
                errno(libc::EPERM),
            ),
            (
                "ioctl TIOCLINUX",
                libc::SYS_ioctl,
                [0, TIOCLINUX, 0x7000, 0, 0, 0],
                errno(libc::EPERM),
            ),
            (
                "personality query",
                libc::SYS_personality,
                [0xffff_ffff, 0, 0, 0, 0, 0],
                ALLOW,
            ),
            (
                "personality linux",
                libc::SYS_personality,
                [0, 0, 0, 0, 0, 0],
                ALLOW,
            ),
            (
                "personality no aslr",
                libc::SYS_personality,
                [0x0040000, 0, 0, 0, 0, 0],
                errno(libc::EPERM),
            ),
            ("mount", libc::SYS_mount, [0; 6], errno(libc::EPERM)),
            ("fsopen", libc::SYS_fsopen, [0; 6], errno(libc::EPERM)),
            (
                "name_to_handle_at",
                libc::SYS_name_to_handle_at,
                [0; 6],
                errno(libc::EPERM),
            ),
            (
                "fanotify_init",
                libc::SYS_fanotify_init,
                [0; 6],
                errno(libc::EPERM),
            ),
            ("tcp", libc::SYS_socket, [2, 1, 0, 0, 0, 0], ALLOW),
            (
                "udp",
                libc::SYS_socket,
                [2, 2, 0, 0, 0, 0],
                errno(libc::EACCES),
            ),
            (
                "netlink route",
                libc::SYS_socket,
                [16, 3, 0, 0, 0, 0],
                ALLOW,
            ),
            (
                "netlink sock_diag",
                libc::SYS_socket,
                [16, 3, 4, 0, 0, 0],
                errno(libc::EACCES),
            ),
            (
                "unix",
                libc::SYS_socket,
                [1, 1, 0, 0, 0, 0],
                errno(libc::EACCES),
            ),
            (
                "listen",
                libc::SYS_listen,
                [3, 1, 0, 0, 0, 0],
                errno(libc::EACCES),
            ),
            (
                "sendto",
                libc::SYS_sendto,
                [3, 0x7000, 5, 0x4000, 0, 0],
                ALLOW,
            ),
            (
                "sendto fastopen",
                libc::SYS_sendto,
                [3, 0x7000, 5, MSG_FASTOPEN | 0x4000, 0x7000, 16],
                errno(libc::EACCES),
            ),
            (
                "sendmsg fastopen",
                libc::SYS_sendmsg,
                [3, 0x7000, MSG_FASTOPEN, 0, 0, 0],
                errno(libc::EACCES),
            ),
            (
                "sendmmsg fastopen",
                libc::SYS_sendmmsg,
                [3, 0x7000, 1, MSG_FASTOPEN, 0, 0],
                errno(libc::EACCES),
            ),
            (
                "io_uring",
                libc::SYS_io_uring_setup,
                [0; 6],
                errno(libc::EACCES),
            ),
        ];
        for (name, nr, args, verdict) in cases {
            assert_eq!(run(&p, *nr, *args), *verdict, "{name}");
        }
        let with_unix = program(true, false).unwrap();
        assert_eq!(run(&with_unix, libc::SYS_socket, [1, 1, 0, 0, 0, 0]), ALLOW);
        assert_eq!(
            run(&with_unix, libc::SYS_listen, [3, 1, 0, 0, 0, 0]),
            errno(libc::EACCES)
        );
        let own_loopback = program(false, true).unwrap();
        assert_eq!(
            run(&own_loopback, libc::SYS_listen, [3, 1, 0, 0, 0, 0]),
            ALLOW
        );
        assert_eq!(
            run(
                &own_loopback,
                libc::SYS_socket,
                [libc::AF_INET as u64, libc::SOCK_RAW as u64, 0, 0, 0, 0]
            ),
            errno(libc::EACCES)
        );
        #[cfg(target_arch = "x86_64")]
        assert_eq!(
            run(&p, 0x4000_0000 | libc::SYS_getpid, [0; 6]),
            errno(libc::EACCES)
        );
    }
}
