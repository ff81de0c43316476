//! Attacks through system calls and arguments Landlock cannot see, which the sandbox's
//! seccomp filter refuses: leaving the run's cgroup (`clone3` with `CLONE_INTO_CGROUP`),
//! namespaces, `listen` and TCP fast open past the port rules, netlink families beyond
//! routing, other processes' limits, priorities, CPUs and scheduling (dsh's own
//! included), typing into a terminal, mounts, file handles, the kernel log, fanotify and
//! personalities; and what must keep working (threads, spawning, pipelines, a command
//! tuning itself).
//!
//! Each attack runs first under the `local` executor, where it works (so the sandbox
//! half means something), then under `sandbox`, where it must fail with the errno the
//! filter gives, and with nothing changed outside as the test itself sees it (another
//! process's limits, nice value, I/O priority, CPUs and policy; bytes at a TCP listener
//! the test owns; a listening port; a process left alive; the terminal's input; the
//! mount table and host name). A hostile command is a Python script of probes, each
//! printing `probe:NAME=ok[:VALUE]` or `probe:NAME=errno:N`, asserted one by one.
//!
//! The bystanders hold no capabilities, as every process of a user other than root does:
//! the kernel already keeps a capability-less process from renicing or rescheduling a
//! process with more capabilities than itself, so against capability-less bystanders
//! the filter is all that stands.

use std::os::fd::AsRawFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::json;

use crate::mcp_stdio::McpServer;
use crate::support::{survivors, unique_marker, wait_for, CallOutput, Env, Pty};

const SANDBOX: &str = "[process.executor]\ndefault = \"sandbox\"\n";
const LOCAL: &str = "";

const EPERM: i32 = libc::EPERM;
const EACCES: i32 = libc::EACCES;
const ENOSYS: i32 = libc::ENOSYS;

// ---------------------------------------------------------------------------------
// Probes: Python scripts, and what they printed.

/// Shared by every probe script: raw system calls by name (x86-64 and aarch64), and
/// `probe(name, fn)`, which prints `probe:NAME=ok[:VALUE]` or `probe:NAME=errno:N`.
const PRELUDE: &str = r#"
import ctypes, fcntl, os, platform, socket, struct, subprocess, sys, termios, threading, time
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
X86 = platform.machine() == "x86_64"
NR = dict(clone=56 if X86 else 220, clone3=435, setns=308 if X86 else 268,
          syslog=103 if X86 else 116, open_tree=428, fsopen=430,
          name_to_handle_at=303 if X86 else 264, open_by_handle_at=304 if X86 else 265,
          fanotify_init=300 if X86 else 262, sched_setattr=314 if X86 else 274,
          migrate_pages=256 if X86 else 238, move_pages=279 if X86 else 239,
          process_madvise=440, process_mrelease=448, pidfd_open=434,
          quotactl=179 if X86 else 60, vhangup=153 if X86 else 58,
          personality=135 if X86 else 92, pivot_root=155 if X86 else 41)
def check(r):
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return r
def sys_(name, *args):
    return check(libc.syscall(NR[name], *args))
def probe(name, fn):
    try:
        r = fn()
    except OSError as e:
        print(f"probe:{name}=errno:{e.errno}", flush=True)
        return
    except Exception as e:
        print(f"probe:{name}=broken:{e!r}", flush=True)
        return
    print(f"probe:{name}=ok" + ("" if r is None else f":{r}"), flush=True)
def in_child(fn):
    """fn in a forked child; its errno (0: it worked) comes back as the exit code."""
    pid = os.fork()
    if pid == 0:
        try:
            fn()
            os._exit(0)
        except OSError as e:
            os._exit(e.errno or 255)
        except BaseException:
            os._exit(255)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if code:
        raise OSError(code, os.strerror(code))
def tool(name, *argv):
    """A command-line tool as a probe: ok, or failed: and what it said."""
    r = subprocess.run(argv, capture_output=True, text=True)
    said = " ".join(r.stderr.split())
    print(f"probe:{name}=" + ("ok" if r.returncode == 0 else f"failed:{said}"), flush=True)
"#;

/// Writes `script` (after the prelude) into the workspace as `NAME.py` and returns the
/// shell line running it with `args`.
fn python(env: &Env, name: &str, script: &str, args: &[String]) -> String {
    let path = env.workdir().join(format!("{name}.py"));
    std::fs::write(&path, format!("{PRELUDE}\n{script}")).unwrap();
    format!("python3 {} {}", path.display(), args.join(" "))
}

/// What probe `name` printed after `probe:NAME=`.
fn probe<'a>(half: &str, text: &'a str, name: &str) -> &'a str {
    let prefix = format!("probe:{name}=");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("{half}: probe {name} printed nothing\n--- output ---\n{text}"))
}

/// Probe `name` worked (the attack is real here); returns what it printed after `ok`.
fn assert_worked<'a>(half: &str, text: &'a str, name: &str) -> &'a str {
    let value = probe(half, text, name);
    assert!(
        value == "ok" || value.starts_with("ok:"),
        "{half}: {name} should work here (else the sandbox half proves nothing), got {value}\n--- output ---\n{text}"
    );
    value.strip_prefix("ok").unwrap().trim_start_matches(':')
}

/// Probe `name` failed with `errno`.
fn assert_errno(half: &str, text: &str, name: &str, errno: i32) {
    let value = probe(half, text, name);
    assert_eq!(
        value,
        format!("errno:{errno}"),
        "{half}: {name} must be refused with errno {errno} ({}), got {value}\n--- output ---\n{text}",
        std::io::Error::from_raw_os_error(errno)
    );
}

/// Probe `name` (a command-line tool) failed with "Operation not permitted".
fn assert_tool_refused(half: &str, text: &str, name: &str) {
    let value = probe(half, text, name);
    assert!(
        value.starts_with("failed:") && value.contains("Operation not permitted"),
        "{half}: {name} must be refused (Operation not permitted), got {value}\n--- output ---\n{text}"
    );
}

/// Probe `name` reached the kernel's own checks locally: it failed, but not with the
/// filter's `errno` (the call has no harmless form that works here).
fn assert_reached_kernel(half: &str, text: &str, name: &str, errno: i32) {
    let value = probe(half, text, name);
    assert!(
        value.starts_with("ok") || (value.starts_with("errno:") && value != format!("errno:{errno}")),
        "{half}: {name} should reach the kernel's own checks here, got {value}\n--- output ---\n{text}"
    );
}

fn bash(env: &Env, config: &str, command: &str) -> CallOutput {
    env.call_configured(
        config,
        "bash",
        &json!({"command": command, "description": "hostile probes"}),
        &[],
    )
}

/// The bash result's text, asserting the call itself ran.
fn ran(half: &str, out: &CallOutput) -> String {
    assert!(out.code.is_none(), "{half}: the call was refused: {out:?}");
    out.content.clone()
}

fn sandboxed(out: &CallOutput) -> String {
    let text = ran("sandbox", out);
    assert!(text.contains("[sandbox: "), "not sandboxed: {text}");
    text
}

// ---------------------------------------------------------------------------------
// Bystanders: processes the test starts outside dsh and looks at.

/// A `sleep` the test started, killed when dropped.
struct Bystander(std::process::Child);

impl Bystander {
    /// Without capabilities (as any process of a non-root user), in its own process
    /// group; returns once it is `sleep` with its capabilities gone.
    fn capless() -> Bystander {
        let child = Command::new("setpriv")
            .args([
                "--bounding-set=-all",
                "--inh-caps=-all",
                "--",
                "sleep",
                "300",
            ])
            .process_group(0)
            .stdin(Stdio::null())
            .spawn()
            .expect("setpriv (util-linux) starts a capability-less bystander");
        let bystander = Bystander(child);
        let ready = wait_for(Duration::from_secs(10), || {
            bystander.status("CapPrm").as_deref() == Some("0000000000000000")
                && std::fs::read_to_string(bystander.proc("comm"))
                    .ok()
                    .as_deref()
                    == Some("sleep\n")
        });
        assert!(ready, "the bystander did not drop its capabilities");
        bystander
    }

    /// Running as `uid` (which no other process here uses).
    fn of_uid(uid: u32) -> Bystander {
        let child = Command::new("sleep")
            .arg("300")
            .uid(uid)
            .gid(uid)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        Bystander(child)
    }

    fn pid(&self) -> String {
        self.0.id().to_string()
    }

    fn proc(&self, file: &str) -> PathBuf {
        Path::new("/proc").join(self.pid()).join(file)
    }

    fn status(&self, key: &str) -> Option<String> {
        let text = std::fs::read_to_string(self.proc("status")).ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}:")))
            .map(|v| v.trim().to_string())
    }

    /// Its nice value (field 19 of /proc/PID/stat).
    fn nice(&self) -> i64 {
        let stat = std::fs::read_to_string(self.proc("stat")).unwrap();
        let after_name = &stat[stat.rfind(')').unwrap() + 2..];
        after_name.split(' ').nth(16).unwrap().parse().unwrap()
    }

    /// Its soft RLIMIT_FSIZE as /proc/PID/limits says it.
    fn file_size_limit(&self) -> String {
        let limits = std::fs::read_to_string(self.proc("limits")).unwrap();
        let line = limits
            .lines()
            .find(|l| l.starts_with("Max file size"))
            .unwrap();
        line.split_whitespace().nth(3).unwrap().to_string()
    }

    fn cpus(&self) -> String {
        self.status("Cpus_allowed_list").unwrap()
    }

    fn policy(&self) -> i32 {
        // SAFETY: a query on a pid.
        unsafe { libc::sched_getscheduler(self.0.id() as libc::pid_t) }
    }

    /// Its I/O priority class (IOPRIO_CLASS_*: 0 none, 3 idle).
    fn io_class(&self) -> i64 {
        // SAFETY: ioprio_get(IOPRIO_WHO_PROCESS, pid) reads nothing from memory.
        let prio = unsafe { libc::syscall(libc::SYS_ioprio_get, 1, self.0.id()) };
        assert!(prio >= 0, "ioprio_get: {}", std::io::Error::last_os_error());
        prio >> 13
    }
}

impl Drop for Bystander {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn is_root() -> bool {
    // SAFETY: no arguments.
    unsafe { libc::geteuid() == 0 }
}

// ---------------------------------------------------------------------------------
// Leaving the run: clone3 into another cgroup.

const CLONE3_PROBES: &str = r#"
marker = sys.argv[1]
v2 = next(l.split()[4] for l in open("/proc/self/mountinfo") if " - cgroup2 " in l)
print("probe:run_cgroup=ok:" + next(l for l in open("/proc/self/cgroup") if l.startswith("0::")).strip())
def escape():
    fd = os.open(v2, os.O_RDONLY | os.O_DIRECTORY)
    # struct clone_args up to `cgroup`: CLONE_INTO_CGROUP, exit signal SIGCHLD, the root.
    args = ctypes.create_string_buffer(struct.pack("=11Q", 0x200000000, 0, 0, 0, 17, 0, 0, 0, 0, 0, fd), 88)
    pid = sys_("clone3", args, ctypes.c_size_t(88))
    if pid == 0:
        os.setsid()  # out of the run's process group too
        os.execvp("sleep", ["sleep", "97" + marker])
    return pid
probe("clone3", escape)
def threads():
    seen = []
    workers = [threading.Thread(target=lambda: seen.append(1)) for _ in range(8)]
    for w in workers: w.start()
    for w in workers: w.join()
    return len(seen)
probe("threads", threads)
"#;

/// The pid a `probe:clone3=ok:PID` line names.
fn escapee(text: &str) -> i32 {
    assert_worked("local", text, "clone3").parse().unwrap()
}

fn cgroup_v2_mounted() -> bool {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .contains(" - cgroup2 ")
}

#[test]
fn clone3_into_the_root_cgroup_leaves_the_run_under_local_and_gets_enosys_in_the_sandbox() {
    if !cgroup_v2_mounted() {
        crate::support::skipped("no cgroup v2 mounted here: nothing to escape into");
        return;
    }
    let env = Env::new();
    let marker = unique_marker();
    let command = python(&env, "clone3", CLONE3_PROBES, std::slice::from_ref(&marker));

    let server = McpServer::start(&env, LOCAL);
    let text = server.call_ok("bash", json!({"command": command, "description": "clone3"}));
    let pid = escapee(&text);
    // The run has ended (its cgroup and process group killed); the escapee lives on in
    // the root cgroup.
    std::thread::sleep(Duration::from_millis(300));
    let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    let alive = crate::support::processes_with(&marker);
    // SAFETY: a signal to the process this test made escape.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    assert!(
        cgroup.lines().any(|l| l == "0::/"),
        "local: the escapee is not in the root cgroup: {cgroup}\n{text}"
    );
    let run_cgroup = assert_worked("local", &text, "run_cgroup");
    if run_cgroup != "0::/" {
        assert!(
            alive.iter().any(|p| p.starts_with(&format!("{pid}:"))),
            "local: the escapee should outlive its run ({run_cgroup}): {alive:?}\n{text}"
        );
    }
    drop(server);
    assert!(survivors(&marker, Duration::from_secs(5)).is_empty());

    let server = McpServer::start(&env, SANDBOX);
    let text = server.call_ok("bash", json!({"command": command, "description": "clone3"}));
    assert!(text.contains("[sandbox: "), "{text}");
    if let Some(pid) = probe("sandbox", &text, "clone3").strip_prefix("ok:") {
        // An escape after all: end it before failing.
        // SAFETY: a signal to the process the sandboxed command made.
        unsafe { libc::kill(pid.parse().unwrap_or(0), libc::SIGKILL) };
    }
    // ENOSYS, not EACCES: what makes glibc fall back to clone for threads and spawns.
    assert_errno("sandbox", &text, "clone3", ENOSYS);
    assert_eq!(assert_worked("sandbox", &text, "threads"), "8", "{text}");
    let left = survivors(&marker, Duration::from_secs(2));
    assert!(left.is_empty(), "sandbox: a process escaped: {left:?}");
    let root_procs = std::fs::read_to_string(
        std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .find(|l| l.contains(" - cgroup2 "))
            .map(|l| format!("{}/cgroup.procs", l.split(' ').nth(4).unwrap()))
            .unwrap(),
    )
    .unwrap_or_default();
    for pid in root_procs.lines() {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&cmdline).contains(&marker),
            "sandbox: {pid} is in the root cgroup"
        );
    }
}

// ---------------------------------------------------------------------------------
// Namespaces.

const NAMESPACE_PROBES: &str = r#"
NS = dict(newns=(0x20000, "mnt"), newcgroup=(0x02000000, "cgroup"), newuts=(0x04000000, "uts"),
          newipc=(0x08000000, "ipc"), newuser=(0x10000000, "user"), newpid=(0x20000000, "pid"),
          newnet=(0x40000000, "net"), newtime=(0x80, "time_for_children"))
def link(ns):
    return os.readlink(f"/proc/self/ns/{ns}")
def cloned(flag, ns):
    """A raw clone (a fork) with `flag`: the child checks it is in a new namespace."""
    before = link(ns)
    pid = sys_("clone", flag | 17, 0, 0, 0, 0)
    if pid == 0:
        os._exit(0 if link(ns) != before else 99)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if code:
        raise OSError(code, "the child saw no new namespace")
def unshared(flag, ns):
    def go():
        before = link(ns)
        check(libc.unshare(flag))
        if ns == "pid":
            in_child(lambda: None if os.getpid() == 1 else check(-1))
        elif link(ns) == before:
            raise OSError(99, "no new namespace")
    in_child(go)
for name, (flag, ns) in NS.items():
    if name != "newtime":
        probe(f"clone_{name}", lambda: cloned(flag, ns))
    probe(f"unshare_{name}", lambda: unshared(flag, ns))
def setns_own():
    fd = os.open("/proc/self/ns/uts", os.O_RDONLY)
    in_child(lambda: sys_("setns", fd, 0x04000000))
probe("setns", setns_own)
# A user namespace, and the capabilities a process has in it.
r = subprocess.run(["unshare", "--user", "--map-root-user", "grep", "CapEff", "/proc/self/status"], capture_output=True, text=True)
said = " ".join(r.stderr.split())
print("probe:userns_caps=" + (f"ok:{r.stdout.split()[1]}" if r.returncode == 0 else f"failed:{said}"))
"#;

const NAMESPACES: [&str; 8] = [
    "newns",
    "newcgroup",
    "newuts",
    "newipc",
    "newuser",
    "newpid",
    "newnet",
    "newtime",
];

#[test]
fn namespaces_from_clone_unshare_and_setns_are_made_under_local_and_refused_in_the_sandbox() {
    let env = Env::new();
    let command = python(&env, "namespaces", NAMESPACE_PROBES, &[]);
    let text = ran("local", &bash(&env, LOCAL, &command));
    for ns in NAMESPACES {
        if ns != "newtime" {
            assert_worked("local", &text, &format!("clone_{ns}"));
        }
        assert_worked("local", &text, &format!("unshare_{ns}"));
    }
    assert_worked("local", &text, "setns");
    let caps = assert_worked("local", &text, "userns_caps");
    assert!(
        caps.len() == 16 && caps != "0000000000000000",
        "local: a user namespace hands back every capability: {caps}\n{text}"
    );

    let text = sandboxed(&bash(&env, SANDBOX, &command));
    for ns in NAMESPACES {
        // A user namespace needs no privilege: only the filter stops it (and with it
        // every other namespace, made inside one).
        if ns != "newtime" {
            assert_errno("sandbox", &text, &format!("clone_{ns}"), EPERM);
        }
        assert_errno("sandbox", &text, &format!("unshare_{ns}"), EPERM);
    }
    assert_errno("sandbox", &text, "setns", EPERM);
    assert_tool_refused("sandbox", &text, "userns_caps");
}

// ---------------------------------------------------------------------------------
// The network: listen, TCP fast open, netlink.

const NETWORK_PROBES: &str = r#"
port, marker, portfile = int(sys.argv[1]), sys.argv[2], sys.argv[3]
keep = []  # the sockets stay open until the script ends
def fastopen_sendto():
    s = socket.socket(); keep.append(s)
    s.sendto(f"sendto-{marker}".encode(), socket.MSG_FASTOPEN, ("127.0.0.1", port))
def fastopen_sendmsg():
    s = socket.socket(); keep.append(s)
    s.sendmsg([f"sendmsg-{marker}".encode()], [], socket.MSG_FASTOPEN, ("127.0.0.1", port))
def fastopen_sendmmsg():
    s = socket.socket(); keep.append(s)
    name = ctypes.create_string_buffer(struct.pack("=HH4s8x", socket.AF_INET, socket.htons(port), socket.inet_aton("127.0.0.1")), 16)
    data = ctypes.create_string_buffer(f"sendmmsg-{marker}".encode())
    iov = ctypes.create_string_buffer(struct.pack("PN", ctypes.addressof(data), len(data.value)))
    # struct mmsghdr: a msghdr (name, namelen, iov, iovlen, control, controllen, flags) and msg_len
    msg = ctypes.create_string_buffer(struct.pack("PI4xPNPNi4xI4x", ctypes.addressof(name), 16, ctypes.addressof(iov), 1, 0, 0, 0, 0))
    keep.append((name, data, iov, msg))
    sent = check(libc.sendmmsg(s.fileno(), msg, 1, socket.MSG_FASTOPEN))
    if sent != 1:
        raise OSError(99, f"sendmmsg sent {sent}")
probe("fastopen_sendto", fastopen_sendto)
probe("fastopen_sendmsg", fastopen_sendmsg)
probe("fastopen_sendmmsg", fastopen_sendmmsg)
def listen():
    """listen() on an unbound socket, then wait for the test to connect."""
    s = socket.socket()
    try:
        s.listen()
    finally:
        host, bound = s.getsockname()
        with open(portfile + ".part", "w") as f:
            f.write(f"{host}:{bound}\n")
        os.rename(portfile + ".part", portfile)
    s.settimeout(20)
    conn, _ = s.accept()
    conn.settimeout(10)
    return conn.recv(100).decode()
probe("listen", listen)
def sock_diag():
    """Every TCP socket of the machine, from NETLINK_SOCK_DIAG: is the test's listener there?"""
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 4)
    # inet_diag_req_v2 (family, protocol, ext, pad, states) and an empty inet_diag_sockid
    req = struct.pack("=BBBxI", socket.AF_INET, socket.IPPROTO_TCP, 0, 0xffffffff) + bytes(48)
    # nlmsghdr: SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP
    s.send(struct.pack("=IHHII", 16 + len(req), 20, 0x301, 1, 0) + req)
    ports = set()
    while True:
        data = s.recv(65536)
        at = 0
        while at < len(data):
            length, kind = struct.unpack_from("=IH", data, at)
            if kind == 3:  # NLMSG_DONE
                return "found" if port in ports else f"missing-among-{len(ports)}"
            if kind == 2:  # NLMSG_ERROR
                raise OSError(-struct.unpack_from("=i", data, at + 16)[0], "netlink error")
            ports.add(struct.unpack_from(">H", data, at + 20)[0])
            at += (length + 3) & ~3
probe("sock_diag", sock_diag)
probe("netlink_audit", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 9).close())
probe("netlink_uevent", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 15).bind((0, 1)))
probe("netlink_route", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0).close())
time.sleep(0.3)
"#;

/// A TCP listener on 127.0.0.1 the test owns: what each connection sent.
fn tcp_sink() -> (u16, std::sync::mpsc::Receiver<Vec<u8>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (sender, received) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let sender = sender.clone();
            std::thread::spawn(move || {
                use std::io::Read;
                let mut stream = stream;
                let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                let mut bytes = Vec::new();
                let _ = stream.read_to_end(&mut bytes);
                let _ = sender.send(bytes);
            });
        }
    });
    (port, received)
}

/// Runs the network probes under `config`; while they run, connects to the port their
/// `listen` probe got (when it got one) and sends `hello-MARKER`. Returns the output and
/// the address the listen probe reported.
fn network_half(env: &Env, config: &str, port: u16, marker: &str) -> (String, String) {
    let portfile = env.workdir().join(format!("listen-{marker}"));
    let _ = std::fs::remove_file(&portfile);
    let command = python(
        env,
        "network",
        NETWORK_PROBES,
        &[
            port.to_string(),
            marker.to_string(),
            portfile.display().to_string(),
        ],
    );
    std::thread::scope(|scope| {
        let call = scope.spawn(|| bash(env, config, &command));
        let mut address = String::new();
        let written = wait_for(Duration::from_secs(60), || {
            address = std::fs::read_to_string(&portfile).unwrap_or_default();
            !address.is_empty() || call.is_finished()
        });
        assert!(written, "the listen probe never ran");
        let address = address.trim().to_string();
        let listening: u16 = address
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        if listening != 0 {
            use std::io::Write;
            let mut stream = std::net::TcpStream::connect(("127.0.0.1", listening)).unwrap();
            stream
                .write_all(format!("hello-{marker}").as_bytes())
                .unwrap();
        }
        let out = call.join().unwrap();
        (
            ran(
                if config == SANDBOX {
                    "sandbox"
                } else {
                    "local"
                },
                &out,
            ),
            address,
        )
    })
}

#[test]
fn listen_fast_open_and_netlink_diagnostics_reach_past_landlock_under_local_and_not_from_the_sandbox(
) {
    let env = Env::new();
    let marker = unique_marker();
    let (port, received) = tcp_sink();

    let (text, address) = network_half(&env, LOCAL, port, &marker);
    for call in ["sendto", "sendmsg", "sendmmsg"] {
        assert_worked("local", &text, &format!("fastopen_{call}"));
    }
    let mut arrived: Vec<String> = (0..3)
        .map(|_| {
            let bytes = received.recv_timeout(Duration::from_secs(10)).unwrap();
            String::from_utf8_lossy(&bytes).into_owned()
        })
        .collect();
    arrived.sort();
    assert_eq!(
        arrived,
        [
            format!("sendmmsg-{marker}"),
            format!("sendmsg-{marker}"),
            format!("sendto-{marker}")
        ],
        "local: fast open delivered to the test's listener"
    );
    // listen() with no bind(): a server on every address, reached by the test.
    assert!(address.starts_with("0.0.0.0:"), "{address}");
    assert_ne!(address, "0.0.0.0:0");
    assert_eq!(
        assert_worked("local", &text, "listen"),
        format!("hello-{marker}")
    );
    assert_eq!(
        assert_worked("local", &text, "sock_diag"),
        "found",
        "{text}"
    );
    assert_worked("local", &text, "netlink_audit");
    assert_worked("local", &text, "netlink_uevent");
    assert_worked("local", &text, "netlink_route");

    let (text, address) = network_half(&env, SANDBOX, port, &marker);
    assert!(text.contains("[sandbox: "), "{text}");
    for call in ["sendto", "sendmsg", "sendmmsg"] {
        assert_errno("sandbox", &text, &format!("fastopen_{call}"), EACCES);
    }
    assert_errno("sandbox", &text, "listen", EACCES);
    // Not even bound: no port was taken.
    assert_eq!(address, "0.0.0.0:0", "sandbox: listen bound a port");
    assert_errno("sandbox", &text, "sock_diag", EACCES);
    assert_errno("sandbox", &text, "netlink_audit", EACCES);
    assert_errno("sandbox", &text, "netlink_uevent", EACCES);
    // Routing (ip addr) stays: reading it takes no privilege.
    assert_worked("sandbox", &text, "netlink_route");
    std::thread::sleep(Duration::from_millis(300));
    let late: Vec<Vec<u8>> = received.try_iter().collect();
    assert!(
        late.is_empty(),
        "sandbox: the test's listener received {late:?}"
    );
}

// ---------------------------------------------------------------------------------
// Other processes: limits, priorities, CPUs, scheduling, memory placement.

const PROCESS_PROBES: &str = r#"
T = dict(a.split("=", 1) for a in sys.argv[1:])
tool("prlimit", "prlimit", "--pid", T["prlimit"], "--fsize=0")
tool("renice_pid", "renice", "-n", "9", "-p", T["renice"])
tool("renice_pgrp", "renice", "-n", "9", "-g", T["pgrp"])
if "user" in T:
    tool("renice_user", "renice", "-n", "9", "-u", T["user"])
tool("ionice", "ionice", "-c", "3", "-p", T["ionice"])
tool("taskset", "taskset", "-pc", "0", T["taskset"])
tool("chrt", "chrt", "-i", "-p", "0", T["chrt"])
def setattr_batch():
    # struct sched_attr (SCHED_ATTR_SIZE_VER0): SCHED_BATCH
    attr = ctypes.create_string_buffer(struct.pack("=IIQiIQQQ", 48, 3, 0, 0, 0, 0, 0, 0), 48)
    sys_("sched_setattr", int(T["setattr"]), attr, 0)
probe("sched_setattr", setattr_batch)
probe("sched_setparam", lambda: os.sched_setparam(int(T["setparam"]), os.sched_param(0)))
probe("move_pages", lambda: sys_("move_pages", int(T["pages"]), 0, 0, 0, 0, 0))
node0 = ctypes.c_ulong(1)
probe("migrate_pages", lambda: sys_("migrate_pages", int(T["pages"]), 64, ctypes.byref(node0), ctypes.byref(node0)))
if "sandboxed" in T:
    # Every process of the user (who 0 with PRIO_USER), at the value the nicest of
    # them already has: harmless if it went through (lowering nice needs a capability),
    # and the kernel would answer EACCES or 0, never EPERM.
    probe("prio_user_all", lambda: os.setpriority(os.PRIO_USER, 0, os.getpriority(os.PRIO_USER, 0)))
"#;

/// The bystanders of one half, one per attack.
struct Targets {
    prlimit: Bystander,
    renice: Bystander,
    pgrp: Bystander,
    user: Option<Bystander>,
    ionice: Bystander,
    taskset: Bystander,
    chrt: Bystander,
    setattr: Bystander,
    setparam: Bystander,
}

/// A uid no other process here runs as.
const BYSTANDER_UID: u32 = 48_611;

impl Targets {
    fn start() -> Targets {
        Targets {
            prlimit: Bystander::capless(),
            renice: Bystander::capless(),
            pgrp: Bystander::capless(),
            user: is_root().then(|| Bystander::of_uid(BYSTANDER_UID)),
            ionice: Bystander::capless(),
            taskset: Bystander::capless(),
            chrt: Bystander::capless(),
            setattr: Bystander::capless(),
            setparam: Bystander::capless(),
        }
    }

    fn args(&self, sandboxed: bool) -> Vec<String> {
        let mut args = vec![
            format!("prlimit={}", self.prlimit.pid()),
            format!("renice={}", self.renice.pid()),
            format!("pgrp={}", self.pgrp.pid()),
            format!("ionice={}", self.ionice.pid()),
            format!("taskset={}", self.taskset.pid()),
            format!("chrt={}", self.chrt.pid()),
            format!("setattr={}", self.setattr.pid()),
            format!("setparam={}", self.setparam.pid()),
            format!("pages={}", self.setparam.pid()),
        ];
        if self.user.is_some() {
            args.push(format!("user={BYSTANDER_UID}"));
        }
        if sandboxed {
            args.push("sandboxed=1".into());
        }
        args
    }
}

fn two_cpus() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .is_some_and(|cpus| cpus.trim() != "0")
}

#[test]
fn other_processes_limits_priorities_cpus_and_scheduling_change_under_local_and_not_from_the_sandbox(
) {
    let env = Env::new();

    let local = Targets::start();
    let command = python(&env, "processes", PROCESS_PROBES, &local.args(false));
    let text = ran("local", &bash(&env, LOCAL, &command));
    assert_worked("local", &text, "prlimit");
    assert_eq!(
        local.prlimit.file_size_limit(),
        "0",
        "local: prlimit\n{text}"
    );
    assert_worked("local", &text, "renice_pid");
    assert_eq!(local.renice.nice(), 9, "local: renice -p\n{text}");
    assert_worked("local", &text, "renice_pgrp");
    assert_eq!(local.pgrp.nice(), 9, "local: renice -g\n{text}");
    if let Some(user) = &local.user {
        assert_worked("local", &text, "renice_user");
        assert_eq!(user.nice(), 9, "local: renice -u\n{text}");
    }
    assert_worked("local", &text, "ionice");
    assert_eq!(local.ionice.io_class(), 3, "local: ionice\n{text}");
    assert_worked("local", &text, "taskset");
    if two_cpus() {
        assert_eq!(local.taskset.cpus(), "0", "local: taskset\n{text}");
    }
    assert_worked("local", &text, "chrt");
    assert_eq!(
        local.chrt.policy(),
        libc::SCHED_IDLE,
        "local: chrt -i\n{text}"
    );
    assert_worked("local", &text, "sched_setattr");
    assert_eq!(
        local.setattr.policy(),
        libc::SCHED_BATCH,
        "local: sched_setattr\n{text}"
    );
    assert_worked("local", &text, "sched_setparam");
    // Without NUMA these two answer ENOSYS: still the kernel's own answer.
    assert_reached_kernel("local", &text, "move_pages", EPERM);
    assert_reached_kernel("local", &text, "migrate_pages", EPERM);
    drop(local);

    let targets = Targets::start();
    let before_cpus = targets.taskset.cpus();
    let command = python(&env, "processes", PROCESS_PROBES, &targets.args(true));
    let text = sandboxed(&bash(&env, SANDBOX, &command));
    for name in [
        "prlimit",
        "renice_pid",
        "renice_pgrp",
        "ionice",
        "taskset",
        "chrt",
    ] {
        assert_tool_refused("sandbox", &text, name);
    }
    if targets.user.is_some() {
        assert_tool_refused("sandbox", &text, "renice_user");
    }
    for name in [
        "sched_setattr",
        "sched_setparam",
        "move_pages",
        "migrate_pages",
        "prio_user_all",
    ] {
        assert_errno("sandbox", &text, name, EPERM);
    }
    assert_eq!(
        targets.prlimit.file_size_limit(),
        "unlimited",
        "sandbox: prlimit"
    );
    assert_eq!(targets.renice.nice(), 0, "sandbox: renice -p");
    assert_eq!(targets.pgrp.nice(), 0, "sandbox: renice -g");
    if let Some(user) = &targets.user {
        assert_eq!(user.nice(), 0, "sandbox: renice -u");
    }
    assert_eq!(targets.ionice.io_class(), 0, "sandbox: ionice");
    assert_eq!(targets.taskset.cpus(), before_cpus, "sandbox: taskset");
    assert_eq!(targets.chrt.policy(), libc::SCHED_OTHER, "sandbox: chrt");
    assert_eq!(
        targets.setattr.policy(),
        libc::SCHED_OTHER,
        "sandbox: sched_setattr"
    );
}

#[test]
fn a_run_setting_dshs_own_file_size_limit_to_zero_kills_dsh_under_local_and_is_refused_in_the_sandbox(
) {
    let env = Env::new();
    // $PPID is the dsh that runs the command.
    let command = "tr '\\0' ' ' < /proc/$PPID/cmdline; echo; \
                   if prlimit --pid $PPID --fsize=0; then echo probe:host_fsize=ok; \
                   else echo probe:host_fsize=failed; fi; \
                   grep 'Max file size' /proc/$PPID/limits; seq 1 20000 | tail -1";
    let args = json!({"command": command, "description": "limit the host"});
    let local = env
        .dsh_configured(LOCAL)
        .args(["call", "bash", &args.to_string(), "--json"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    // dsh's next write to its event log goes past the limit: SIGXFSZ.
    assert_eq!(
        local.status.signal(),
        Some(libc::SIGXFSZ),
        "local: dsh should die of its file size limit: {:?}\n{}",
        local.status,
        String::from_utf8_lossy(&local.stdout)
    );

    let sandbox = env
        .dsh_configured(SANDBOX)
        .args(["call", "bash", &args.to_string(), "--json"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        sandbox.status.signal().is_none(),
        "sandbox: dsh died ({:?}): the run changed dsh's limits",
        sandbox.status
    );
    let text = sandboxed(&CallOutput::parse(sandbox));
    assert!(text.contains(" call bash "), "$PPID is not dsh: {text}");
    assert_eq!(probe("sandbox", &text, "host_fsize"), "failed", "{text}");
    assert!(text.contains("Operation not permitted"), "{text}");
    let limit = text
        .lines()
        .find(|l| l.starts_with("Max file size"))
        .unwrap_or_else(|| panic!("{text}"));
    assert_eq!(
        limit.split_whitespace().nth(3),
        Some("unlimited"),
        "sandbox: dsh's limit changed: {limit}"
    );
    assert!(text.contains("20000\n"), "{text}");
    assert!(text.ends_with("[exit code: 0]"), "{text}");
}

// ---------------------------------------------------------------------------------
// Terminals: TIOCSTI and TIOCLINUX.

const TERMINAL_PROBES: &str = r#"
marker = sys.argv[1]
def type_into_own_terminal():
    """Types a command into the session's own terminal: its shell runs it next."""
    for byte in f"echo typed-{marker}-$((40+2))\n".encode():
        fcntl.ioctl(0, termios.TIOCSTI, bytes([byte]))
probe("tiocsti_own", type_into_own_terminal)
def tioclinux():
    """TIOCL_GETFGCONSOLE (it only reads) on the console, else on this terminal."""
    try:
        fd, where = os.open("/dev/tty0", os.O_RDONLY | os.O_NOCTTY), "console"
    except OSError:
        fd, where = 0, "pty"
    return f"{where}:{fcntl.ioctl(fd, 0x541C, bytearray([12]), True)}"
probe("tioclinux", tioclinux)
"#;

const OUTSIDE_TERMINAL_PROBE: &str = r#"
path, marker = sys.argv[1], sys.argv[2]
def type_into(path):
    """From a new session, opens the terminal (it becomes the controlling one) and types."""
    def go():
        os.setsid()
        fd = os.open(path, os.O_RDWR)
        for byte in f"echo typed-{marker}\n".encode():
            fcntl.ioctl(fd, termios.TIOCSTI, bytes([byte]))
    in_child(go)
probe("tiocsti_outside", lambda: type_into(path))
"#;

fn terminal_id(opened: &str) -> String {
    opened
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .find(|word| word.starts_with("term-"))
        .unwrap_or_else(|| panic!("no session id in {opened:?}"))
        .to_string()
}

/// Runs the terminal probes in a terminal session under `config`, then one more line
/// (typed input is read after the line that typed it); returns the session's whole
/// transcript, by then including whatever the typed input ran.
fn terminal_half(env: &Env, config: &str, marker: &str) -> String {
    let server = McpServer::start(env, config);
    let term = terminal_id(&server.call_ok("terminal_open", json!({})));
    let command = python(env, "terminal", TERMINAL_PROBES, &[marker.to_string()]);
    for (input, pattern) in [
        (format!("{command}; echo done-$((1+1))"), "done-2"),
        ("echo end-$((2+3))".to_string(), "end-5"),
    ] {
        server.call_ok(
            "terminal_send",
            json!({"id": term, "input": input, "wait": {"pattern": pattern, "timeout_ms": 30000}}),
        );
    }
    let text = server.call_ok(
        "terminal_read",
        json!({"id": term, "view": "plain", "since": 0}),
    );
    server.call_ok("terminal_close", json!({"id": term}));
    text
}

/// A pseudo-terminal the test holds (both ends close-on-exec), its slave non-blocking.
fn open_pty() -> Pty {
    let pty = crate::support::open_pty();
    // SAFETY: fcntl on a descriptor the value owns.
    unsafe {
        let flags = libc::fcntl(pty.slave.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(
            pty.slave.as_raw_fd(),
            libc::F_SETFL,
            flags | libc::O_NONBLOCK,
        );
    }
    pty
}

impl Pty {
    /// What is waiting to be read on the terminal (its input, typed or not).
    fn input(&self) -> String {
        let mut buf = [0u8; 256];
        // SAFETY: a non-blocking read into a buffer of ours.
        let n = unsafe { libc::read(self.slave.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        String::from_utf8_lossy(&buf[..n.max(0) as usize]).into_owned()
    }
}

#[test]
fn typing_into_a_terminal_and_console_ioctls_work_under_local_and_are_refused_in_the_sandbox() {
    let env = Env::new();
    let marker = unique_marker();
    let typed_ran = format!("typed-{marker}-42");

    let text = terminal_half(&env, LOCAL, &marker);
    assert_worked("local", &text, "tiocsti_own");
    assert!(
        text.contains(&typed_ran),
        "local: the typed command should have run: {text}"
    );
    // The console answers where there is one; a pseudo-terminal says it is none.
    assert_reached_kernel("local", &text, "tioclinux", EPERM);

    // A terminal the test holds, outside dsh.
    let pty = open_pty();
    let command = python(
        &env,
        "outside-terminal",
        OUTSIDE_TERMINAL_PROBE,
        &[pty.name.display().to_string(), marker.clone()],
    );
    let local = ran("local", &bash(&env, LOCAL, &command));
    assert_worked("local", &local, "tiocsti_outside");
    assert!(
        pty.input().contains(&format!("echo typed-{marker}")),
        "local: nothing was typed into the test's terminal: {local}"
    );

    let text = terminal_half(&env, SANDBOX, &marker);
    // The session's own terminal needs no privilege to type into: only the filter.
    assert_errno("sandbox", &text, "tiocsti_own", EPERM);
    assert!(
        !text.contains(&typed_ran),
        "sandbox: a typed command ran: {text}"
    );
    assert_errno("sandbox", &text, "tioclinux", EPERM);

    let out = sandboxed(&bash(&env, SANDBOX, &command));
    let value = probe("sandbox", &out, "tiocsti_outside");
    assert!(value.starts_with("errno:"), "sandbox: {value}\n{out}");
    let input = pty.input();
    assert!(
        !input.contains(&marker),
        "sandbox: the test's terminal got input: {input:?}"
    );
}

// ---------------------------------------------------------------------------------
// Mounts, handles, the kernel log, fanotify, personality and the rest.

const MOUNT_PROBES: &str = r#"
workdir, handled = sys.argv[1], sys.argv[2]
sandboxed = len(sys.argv) > 3
libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_void_p]
def mount_tmpfs():
    target = os.path.join(workdir, "mnt")
    os.makedirs(target, exist_ok=True)
    check(libc.mount(b"none", target.encode(), b"tmpfs", 0, None))
    check(libc.umount2(target.encode(), 0))
probe("mount", mount_tmpfs)
probe("fsopen", lambda: os.close(sys_("fsopen", b"tmpfs", 0)))
probe("open_tree", lambda: os.close(sys_("open_tree", -100, workdir.encode(), 1)))  # AT_FDCWD, OPEN_TREE_CLONE
probe("chroot", lambda: in_child(lambda: os.chroot(workdir)))
def handle():
    buf = ctypes.create_string_buffer(struct.pack("=Ii", 128, 0) + bytes(128))
    mount_id = ctypes.c_int()
    sys_("name_to_handle_at", -100, handled.encode(), buf, ctypes.byref(mount_id), 0)
    return buf
probe("name_to_handle_at", lambda: handle() and None)
def by_handle():
    try:
        buf = handle()
    except OSError:
        buf = ctypes.create_string_buffer(struct.pack("=Ii", 8, 1) + bytes(8))
    mount_fd = os.open(workdir, os.O_RDONLY | os.O_DIRECTORY)
    fd = sys_("open_by_handle_at", mount_fd, buf, os.O_RDONLY)
    return os.read(fd, 64).decode().strip()
probe("open_by_handle_at", by_handle)
probe("syslog", lambda: sys_("syslog", 10, 0, 0))  # SYSLOG_ACTION_SIZE_BUFFER
probe("fanotify_init", lambda: os.close(sys_("fanotify_init", 0x200, os.O_RDONLY)))  # FAN_REPORT_FID
probe("personality", lambda: in_child(lambda: sys_("personality", 0x0040000)))  # ADDR_NO_RANDOMIZE
probe("personality_query", lambda: hex(sys_("personality", 0xffffffff)))
def madvise():
    pidfd = sys_("pidfd_open", os.getpid(), 0)
    return sys_("process_madvise", pidfd, 0, 0, 20, 0)  # no ranges, MADV_COLD
probe("process_madvise", madvise)
probe("process_mrelease", lambda: sys_("process_mrelease", sys_("pidfd_open", os.getpid(), 0), 0))
probe("quotactl", lambda: sys_("quotactl", 0x800004, b"/dev/null", 0, 0))  # Q_GETFMT
probe("umount_missing", lambda: check(libc.umount2(b"/nonexistent-dsh", 0)))
if sandboxed:
    # What root would do to the whole machine under local: tried in the sandbox only.
    probe("vhangup", lambda: sys_("vhangup"))
    probe("sethostname", lambda: check(libc.sethostname(b"sandboxed", 9)))
    probe("pivot_root", lambda: sys_("pivot_root", b".", b"."))
"#;

fn mount_table_mentions(path: &Path) -> bool {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .contains(&path.display().to_string())
}

#[test]
fn mounts_file_handles_the_kernel_log_fanotify_and_personalities_work_under_local_and_are_refused_in_the_sandbox(
) {
    let env = Env::new();
    let marker = unique_marker();
    let workdir = std::fs::canonicalize(env.workdir()).unwrap();
    let handled = workdir.join("handled");
    std::fs::write(&handled, format!("handled-{marker}\n")).unwrap();
    // The mount point exists before dsh starts. Made by the run, it is a new directory
    // that undo's watch lists while the run mounts over it; holding the new mount open
    // for that moment makes the run's own `umount2` fail with EBUSY (seen once in CI).
    std::fs::create_dir(workdir.join("mnt")).unwrap();
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let args = [workdir.display().to_string(), handled.display().to_string()];
    // Where the kernel itself answers without privilege: only the filter stops these.
    let unprivileged = [
        "name_to_handle_at",
        "fanotify_init",
        "personality",
        "process_madvise",
    ];

    let command = python(&env, "mounts", MOUNT_PROBES, &args);
    let text = ran("local", &bash(&env, LOCAL, &command));
    for name in [
        "mount",
        "fsopen",
        "open_tree",
        "chroot",
        "open_by_handle_at",
        "syslog",
    ]
    .iter()
    .chain(&unprivileged)
    {
        assert_worked("local", &text, name);
    }
    assert_eq!(
        assert_worked("local", &text, "open_by_handle_at"),
        format!("handled-{marker}")
    );
    for name in ["process_mrelease", "quotactl", "umount_missing"] {
        assert_reached_kernel("local", &text, name, EPERM);
    }
    assert!(!mount_table_mentions(&workdir.join("mnt")), "{text}");

    let sandbox_args = [args[0].clone(), args[1].clone(), "sandboxed".into()];
    let command = python(&env, "mounts", MOUNT_PROBES, &sandbox_args);
    let text = sandboxed(&bash(&env, SANDBOX, &command));
    for name in [
        "mount",
        "fsopen",
        "open_tree",
        "chroot",
        "open_by_handle_at",
        "syslog",
        "process_mrelease",
        "quotactl",
        "umount_missing",
        "vhangup",
        "sethostname",
        "pivot_root",
    ]
    .iter()
    .chain(&unprivileged)
    {
        assert_errno("sandbox", &text, name, EPERM);
    }
    // The query stays (programs ask for their personality).
    assert_worked("sandbox", &text, "personality_query");
    assert!(!mount_table_mentions(&workdir.join("mnt")), "{text}");
    assert_eq!(
        std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap(),
        hostname
    );
}

// ---------------------------------------------------------------------------------
// What keeps working.

const ORDINARY_PROBES: &str = r#"
def threads():
    seen = []
    workers = [threading.Thread(target=lambda: seen.append(1)) for _ in range(16)]
    for w in workers: w.start()
    for w in workers: w.join()
    return len(seen)
probe("threads", threads)
probe("subprocess", lambda: subprocess.run(["echo", "spawned"], capture_output=True, text=True, check=True).stdout.strip())
def posix_spawn():
    pid = os.posix_spawn("/bin/sh", ["sh", "-c", "exit 7"], os.environ)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
probe("posix_spawn", posix_spawn)
def fork():
    pid = os.fork()
    if pid == 0:
        os._exit(5)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
probe("fork", fork)
probe("nice_self", lambda: os.nice(3))
probe("affinity_self", lambda: os.sched_setaffinity(0, os.sched_getaffinity(0)))
import resource
def limit_self():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, 512), hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]
probe("limit_self", limit_self)
probe("limits_of_parent", lambda: resource.prlimit(os.getppid(), resource.RLIMIT_NOFILE)[0] > 0)
def fionread():
    r, w = os.pipe()
    os.write(w, b"abc")
    return struct.unpack("i", fcntl.ioctl(r, termios.FIONREAD, b"\0\0\0\0"))[0]
probe("fionread", fionread)
probe("personality_query", lambda: hex(sys_("personality", 0xffffffff)))
probe("unshare_files", lambda: in_child(lambda: check(libc.unshare(0x400))))  # CLONE_FILES
"#;

#[test]
fn threads_spawning_pipelines_and_a_command_tuning_itself_still_work_in_the_sandbox() {
    let env = Env::new();
    let script = python(&env, "ordinary", ORDINARY_PROBES, &[]);
    let command = format!(
        "{script}\n\
         echo probe:pipeline=ok:$(seq 1 1000 | sort -rn | head -1)\n\
         echo probe:nproc=ok:$(nproc)\n\
         echo probe:nice=ok:$(nice -n 5 nice)\n\
         echo probe:ionice=ok:$(ionice -c 3 ionice)\n\
         echo probe:taskset=ok:$(taskset -c 0 nproc)\n\
         echo probe:ulimit=ok:$(ulimit -n 64; ulimit -n)\n\
         echo probe:prlimit=ok:$(prlimit --nofile=100 prlimit --nofile -o SOFT --noheadings | tr -d ' ')\n\
         echo probe:background=ok:$( (sleep 0.1 & wait; echo waited) )\n\
         echo probe:route=ok:$(ip -o link show lo | grep -c lo)\n"
    );
    let text = sandboxed(&bash(&env, SANDBOX, &command));
    let expect = [
        ("threads", "16"),
        ("subprocess", "spawned"),
        ("posix_spawn", "7"),
        ("fork", "5"),
        ("limit_self", ""),
        ("limits_of_parent", "True"),
        ("pipeline", "1000"),
        ("nice", "5"),
        ("ionice", "idle"),
        ("taskset", "1"),
        ("ulimit", "64"),
        ("prlimit", "100"),
        ("background", "waited"),
        ("route", "1"),
        ("fionread", "3"),
    ];
    for (name, value) in expect {
        let got = assert_worked("sandbox", &text, name);
        if !value.is_empty() {
            assert_eq!(got, value, "sandbox: {name}\n{text}");
        }
    }
    for name in [
        "nice_self",
        "affinity_self",
        "personality_query",
        "unshare_files",
        "nproc",
    ] {
        assert_worked("sandbox", &text, name);
    }
}

// ---------------------------------------------------------------------------------
// Reaching out: binding, raw and packet sockets, another process's memory, privileges.

const REACH_PROBES: &str = r#"
T = dict(a.split("=", 1) for a in sys.argv[1:])
def bind_tcp():
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
    finally:
        s.close()
probe("bind_tcp", bind_tcp)
probe("raw_socket", lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP).close())
probe("packet_socket", lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0).close())
def attach():
    pid = int(T["ptrace"])
    check(libc.ptrace(16, pid, None, None))  # PTRACE_ATTACH
    os.waitpid(pid, 0)
    check(libc.ptrace(17, pid, None, None))  # PTRACE_DETACH
probe("ptrace", attach)
def memory():
    fd = os.open(f"/proc/{T['mem']}/mem", os.O_RDONLY)
    os.close(fd)
probe("proc_mem", memory)
probe("kill", lambda: os.kill(int(T["kill"]), 0))
print("probe:no_new_privs=ok:" + next(l.split()[1] for l in open("/proc/self/status") if l.startswith("NoNewPrivs:")), flush=True)
"#;

#[test]
fn binding_raw_and_packet_sockets_and_reaching_other_processes_work_under_local_and_not_from_the_sandbox(
) {
    if !is_root() {
        crate::support::skipped("raw and packet sockets need root");
        return;
    }
    let env = Env::new();
    for (half, config) in [("local", LOCAL), ("sandbox", SANDBOX)] {
        let (traced, read, signalled) = (
            Bystander::capless(),
            Bystander::capless(),
            Bystander::capless(),
        );
        let command = python(
            &env,
            "reach",
            REACH_PROBES,
            &[
                format!("ptrace={}", traced.pid()),
                format!("mem={}", read.pid()),
                format!("kill={}", signalled.pid()),
            ],
        );
        let out = bash(&env, config, &command);
        if half == "local" {
            let text = ran(half, &out);
            for name in [
                "bind_tcp",
                "raw_socket",
                "packet_socket",
                "ptrace",
                "proc_mem",
                "kill",
            ] {
                assert_worked(half, &text, name);
            }
            continue;
        }
        let text = sandboxed(&out);
        // Landlock refuses the bind; the seccomp filter the raw and packet sockets.
        assert_errno(half, &text, "bind_tcp", EACCES);
        assert_errno(half, &text, "raw_socket", EACCES);
        assert_errno(half, &text, "packet_socket", EACCES);
        // Landlock's scoping: nothing outside the run's domain is traced, read or signalled.
        assert_errno(half, &text, "ptrace", EPERM);
        assert_errno(half, &text, "proc_mem", EACCES);
        assert_errno(half, &text, "kill", EPERM);
        assert_eq!(assert_worked(half, &text, "no_new_privs"), "1", "{text}");
        assert_eq!(
            traced.status("TracerPid").as_deref(),
            Some("0"),
            "the bystander is not traced"
        );
    }
}

#[test]
fn one_sandboxed_run_cannot_signal_another() {
    let env = Env::new();
    for (half, config) in [("local", LOCAL), ("sandbox", SANDBOX)] {
        let server = McpServer::start(&env, config);
        let pid_file = env.workdir().join(format!("job-{half}.pid"));
        let started = server.call_ok(
            "bash",
            json!({
                "command": format!("echo $$ > {}; exec sleep 300", pid_file.display()),
                "description": "a job to signal",
                "run_in_background": true,
            }),
        );
        assert!(started.contains("bash-"), "{started}");
        assert!(
            wait_for(Duration::from_secs(10), || std::fs::read_to_string(
                &pid_file
            )
            .is_ok_and(|pid| pid.ends_with('\n'))),
            "{half}: the job never wrote its pid"
        );
        let pid = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .to_string();
        let probe = server.call_ok(
            "bash",
            json!({"command": format!("kill -0 {pid} && echo signalled || echo refused"), "description": "signal the job"}),
        );
        if half == "local" {
            assert!(probe.starts_with("signalled"), "local: {probe}");
        } else {
            assert!(
                probe.contains("Operation not permitted") && probe.contains("refused"),
                "sandbox: {probe}"
            );
        }
        // The job is alive either way: kill -0 sends nothing.
        assert!(
            Path::new(&format!("/proc/{pid}")).exists(),
            "{half}: the job is gone"
        );
    }
}
