//! The seccomp filter of sandboxed runs: the system calls and arguments that Landlock
//! cannot see, refused before a confined command runs.
//!
//! Built once per host (a BPF program, [`program`]) and loaded by the child of every
//! sandboxed run last thing before `exec` ([`super::spawn`]). It returns `EACCES` for
//! `socket()` of UDP, raw and packet sockets (so DNS too), of any address family but
//! IPv4, IPv6 and netlink (and Unix with `unix_sockets = true`), and of stream sockets
//! with a protocol other than TCP; for io_uring (which creates sockets past the filter);
//! and for privileged calls a root host could otherwise make (modules, kexec, reboot,
//! swap, BPF, perf events, clocks, keyrings), and on x86-64 for every x32-ABI call
//! (their numbers would miss the rules).

use std::collections::BTreeMap;

use seccompiler::{
    SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
};

use super::executor::SandboxError;

/// The seccomp program of sandboxed runs (x86-64 and aarch64; see the module doc);
/// `unix_sockets`: whether `socket(AF_UNIX)` is allowed.
pub fn program(unix_sockets: bool) -> Result<Vec<libc::sock_filter>, SandboxError> {
    let cond = |arg, op, value| SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value);
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
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    rules.insert(libc::SYS_socket, socket_rules);
    for denied in [
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
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
    let arch = if cfg!(target_arch = "aarch64") {
        seccompiler::TargetArch::aarch64
    } else {
        seccompiler::TargetArch::x86_64
    };
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EACCES as u32),
        arch,
    )?;
    let program: seccompiler::BpfProgram = filter.try_into()?;
    // First, on x86-64: the x32 ABI's numbers (bit 30 set) would miss every rule
    // above, so they are refused whole (where the kernel has x32 at all).
    let x32: &[libc::sock_filter] = if cfg!(target_arch = "x86_64") {
        const X32_BIT: u32 = 0x4000_0000;
        &[
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
        &[]
    };
    Ok(x32
        .iter()
        .copied()
        .chain(program.into_iter().map(|i| libc::sock_filter {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        }))
        .collect())
}
