//! What a `local` command cannot take from dsh although it runs as dsh's own user.
//!
//! The kernel lets a process read the environment (`/proc/PID/environ`), maps, open
//! files and memory of any dumpable process of its user, and ptrace it (Yama aside). dsh
//! makes itself non-dumpable first thing, so `DSH_HTTP_TOKEN` and every other variable
//! `[process.env]` keeps from commands stay out of their reach through `/proc/$PPID` too.
//!
//! Root reads every process's `/proc` files (`CAP_SYS_PTRACE`), so these tests run dsh
//! and its commands as an unprivileged user: `nobody` (65534) when the tests run as
//! root, else the tests' own user. Each attack is first made against an ordinary process
//! of that user holding the same secrets (a `sleep` the test starts): it must work there,
//! so the refusal seen from dsh is dsh's doing, not the machine's.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::{survivors, unique_marker, CallOutput};

/// The unprivileged user and group the tests become when they run as root.
const NOBODY: u32 = 65534;

/// A private dsh for an unprivileged user: its own copy of the binary in a directory that
/// user can enter, and a state directory, workspace and home that user owns.
struct Unprivileged {
    dir: tempfile::TempDir,
    /// `Some((uid, gid))` to switch to (the tests run as root), `None` to stay.
    ids: Option<(u32, u32)>,
    /// In the secrets' values and in the escapees' `sleep` arguments.
    marker: String,
}

impl Unprivileged {
    fn new() -> Unprivileged {
        // SAFETY: geteuid has no preconditions.
        let ids = (unsafe { libc::geteuid() } == 0).then_some((NOBODY, NOBODY));
        let dir = tempfile::tempdir().unwrap();
        let open = std::fs::Permissions::from_mode(0o755);
        std::fs::set_permissions(dir.path(), open.clone()).unwrap();
        let env = Unprivileged {
            dir,
            ids,
            marker: unique_marker(),
        };
        std::fs::create_dir(env.path("bin")).unwrap();
        std::fs::set_permissions(env.path("bin"), open.clone()).unwrap();
        std::fs::copy(env!("CARGO_BIN_EXE_dsh"), env.dsh_path()).unwrap();
        std::fs::set_permissions(env.dsh_path(), open).unwrap();
        for (name, mode) in [("state", 0o700), ("work", 0o755), ("home", 0o700)] {
            let path = env.path(name);
            std::fs::create_dir(&path).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            if let Some((uid, gid)) = ids {
                std::os::unix::fs::chown(&path, Some(uid), Some(gid)).unwrap();
            }
        }
        env
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn dsh_path(&self) -> PathBuf {
        self.path("bin/dsh")
    }

    /// The secrets dsh and the ordinary process hold: `(name, value)`. The third has a
    /// name that does not look secret: only [`MODEL_KEY_CONFIG`] keeps it from commands.
    fn secrets(&self) -> [(String, String); 3] {
        [
            ("DSH_HTTP_TOKEN".into(), format!("secret-{}", self.marker)),
            ("GITHUB_TOKEN".into(), format!("ghp-{}", self.marker)),
            ("PLAIN_MODEL_AUTH".into(), format!("mk-{}", self.marker)),
        ]
    }

    /// `program` as the unprivileged user, with a plain environment and the secrets.
    fn command(&self, program: &Path) -> Command {
        let mut command = Command::new(program);
        command
            .env_clear()
            .env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            )
            .env("HOME", self.path("home"))
            .envs(self.secrets())
            .current_dir(self.path("work"))
            .stdin(Stdio::null());
        if let Some((uid, gid)) = self.ids {
            // std drops the supplementary groups too when it switches from root.
            use std::os::unix::process::CommandExt;
            command.uid(uid).gid(gid);
        }
        command
    }

    /// `dsh call bash` of `script` as the unprivileged user, parsed; an error result
    /// fails the test.
    fn call_bash(&self, script: &str) -> CallOutput {
        self.call_bash_configured("", script)
    }

    /// `call_bash` with `config` as dsh.toml.
    fn call_bash_configured(&self, config: &str, script: &str) -> CallOutput {
        let result = self.try_bash_configured(config, script);
        assert_eq!(result.code, None, "the call failed: {result:?}");
        result
    }

    /// `dsh call bash` of `script` as the unprivileged user with `config`, parsed, failed
    /// or not.
    fn try_bash_configured(&self, config: &str, script: &str) -> CallOutput {
        self.try_bash_without(config, script, &[])
    }

    /// `try_bash_configured`, dsh started where `syscalls` answer `ENOSYS` (a kernel
    /// without them, as dsh and everything it starts sees it).
    fn try_bash_without(&self, config: &str, script: &str, syscalls: &[i64]) -> CallOutput {
        let config_path = self.path(&format!("dsh-{}.toml", unique_marker()));
        std::fs::write(&config_path, config).unwrap();
        std::fs::set_permissions(&config_path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let args = serde_json::json!({ "command": script, "description": "x" });
        let mut tries = 0;
        let output = loop {
            let mut dsh = self.command(&self.dsh_path());
            dsh.env("DSH_STATE_DIR", self.path("state"))
                .env("DSH_WORKDIR", self.path("work"))
                .arg("--config")
                .arg(&config_path)
                .args(["call", "bash", &args.to_string(), "--json"]);
            if !syscalls.is_empty() {
                crate::support::without_syscalls(&mut dsh, syscalls);
            }
            let ran = dsh.output();
            match ran {
                // The copy of dsh was written by this test process: a child another test
                // forked meanwhile holds its descriptor until that child's exec (ETXTBSY).
                Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < 100 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                ran => {
                    break ran.unwrap_or_else(|e| panic!("cannot run dsh as {:?}: {e}", self.ids))
                }
            }
        };
        CallOutput::parse(output)
    }

    /// An ordinary (dumpable) process of the same user with the same secrets.
    fn ordinary_process(&self) -> Ordinary {
        let child = self
            .command(Path::new("sleep"))
            .arg(format!("3{}0", self.marker))
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start a process as {:?} (the attacks need an unprivileged \
                     user): {e}",
                    self.ids
                )
            });
        Ordinary(child)
    }
}

/// The ordinary process, killed when the test ends.
struct Ordinary(Child);

impl Ordinary {
    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Ordinary {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The lines of `text` that start with `prefix`, the prefix removed.
fn lines_after<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
    text.lines()
        .filter_map(|line| line.strip_prefix(prefix))
        .collect()
}

/// The value of the line `name=VALUE` of `text`.
fn value_of<'a>(text: &'a str, name: &str) -> &'a str {
    lines_after(text, &format!("{name}="))
        .first()
        .unwrap_or_else(|| panic!("no {name}= line in {text}"))
}

/// Prints, for a script, the command's own user and its parent's command line: the
/// parent must be dsh itself, so that `$PPID` is what the attacks aim at.
const WHO: &str = "echo \"uid=$(id -u)\"; echo \"parent=$(tr '\\0' ' ' </proc/$PPID/cmdline)\"";

/// Checks what `WHO` printed: the command is not root and `$PPID` is this dsh.
fn assert_attacker_is_an_unprivileged_child(env: &Unprivileged, content: &str) {
    let uid = value_of(content, "uid");
    assert_ne!(
        uid, "0",
        "the command runs as root, where every /proc file is readable: these tests need \
         an unprivileged user: {content}"
    );
    if let Some((nobody, _)) = env.ids {
        assert_eq!(uid, nobody.to_string(), "{content}");
    }
    let parent = value_of(content, "parent");
    assert!(
        parent.starts_with(&format!("{} --config ", env.dsh_path().display()))
            && parent.contains(" call bash "),
        "the command's parent ($PPID) is not dsh but {parent:?}: {content}"
    );
}

/// Yama's `ptrace_scope` (0 where Yama is absent: the classic same-user rules).
fn ptrace_scope() -> u32 {
    match std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope") {
        Ok(text) => text.trim().parse().unwrap(),
        Err(_) => 0,
    }
}

/// A model endpoint whose key is `PLAIN_MODEL_AUTH`, and an environment policy that asks
/// to pass it: the key is dsh's own all the same.
const MODEL_KEY_CONFIG: &str = "[process.env]\ninclude = [\"PLAIN_*\"]\n\
    [subagent.models.local]\napi = \"openai-chat\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\
    model = \"m\"\napi_key_env = \"PLAIN_MODEL_AUTH\"\n";

#[test]
fn a_local_command_cannot_read_dshs_environment_through_proc() {
    let env = Unprivileged::new();
    let ordinary = env.ordinary_process();
    let script = format!(
        "{WHO}\n\
         env | sed 's/^/own: /'\n\
         for who in dsh:$PPID ordinary:{pid}; do\n\
           name=${{who%%:*}}; pid=${{who#*:}}\n\
           cat /proc/$pid/environ 2>&1 | tr '\\0' '\\n' | sed \"s/^/$name environ: /\"\n\
           echo \"$name rc=${{PIPESTATUS[0]}}\"\n\
         done",
        pid = ordinary.pid(),
    );
    let content = env.call_bash_configured(MODEL_KEY_CONFIG, &script).content;
    assert_attacker_is_an_unprivileged_child(&env, &content);

    // The command's own environment never had them (`[process.env]`, and the model's key
    // whatever `[process.env]` asks to pass).
    let own = lines_after(&content, "own: ");
    assert!(!own.is_empty(), "{content}");
    assert!(
        own.iter().all(|line| !line.contains(&env.marker)),
        "a secret reached the command's environment: {content}"
    );

    // The attack works: the same user reads an ordinary process's secrets.
    let ordinary_environ = lines_after(&content, "ordinary environ: ");
    for (name, value) in env.secrets() {
        let entry = format!("{name}={value}");
        assert!(
            ordinary_environ.contains(&entry.as_str()),
            "the attack does not work even on an ordinary process of the same user \
             ({entry} not read), so it proves nothing about dsh: {content}"
        );
    }
    assert_eq!(value_of(&content, "ordinary rc"), "0", "{content}");

    // And is refused on dsh, which holds the same secrets.
    let dsh_environ = lines_after(&content, "dsh environ: ");
    assert!(
        dsh_environ.iter().all(|line| !line.contains(&env.marker)),
        "the command read dsh's secrets from /proc/$PPID/environ: {content}"
    );
    assert!(
        dsh_environ
            .iter()
            .any(|line| line.ends_with("/environ: Permission denied")),
        "the read of /proc/$PPID/environ was not refused: {content}"
    );
    assert_ne!(value_of(&content, "dsh rc"), "0", "{content}");
}

/// A Python attacker: for each `NAME=PID` argument, prints `NAME CHECK: ok` or
/// `NAME CHECK: refused (ERROR)` for reading its maps, listing its open files, reading
/// its memory, attaching to it with ptrace and copying one of its descriptors.
const ATTACKER: &str = r#"
import ctypes, os, sys

libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
libc.ptrace.restype = ctypes.c_long
libc.syscall.restype = ctypes.c_long
PTRACE_ATTACH, PTRACE_DETACH, WALL = 16, 17, 0x40000000
SYS_PIDFD_OPEN, SYS_PIDFD_GETFD = 434, 438

def failed():
    raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))

def maps(pid):
    if not open(f"/proc/{pid}/maps").read():
        raise OSError(0, "empty")

def fds(pid):
    os.listdir(f"/proc/{pid}/fd")

def mem(pid):
    with open(f"/proc/{pid}/mem", "rb", buffering=0) as f:
        # The first readable mapping, where maps are readable; opening is the check.
        try:
            for line in open(f"/proc/{pid}/maps"):
                start, perms = line.split()[0].split("-")[0], line.split()[1]
                if perms.startswith("r"):
                    f.seek(int(start, 16))
                    f.read(16)
                    break
        except PermissionError:
            pass

def ptrace(pid):
    if libc.ptrace(PTRACE_ATTACH, pid, None, None) != 0:
        failed()
    os.waitpid(pid, WALL)
    libc.ptrace(PTRACE_DETACH, pid, None, None)

def getfd(pid):
    pidfd = libc.syscall(SYS_PIDFD_OPEN, pid, 0)
    if pidfd < 0:
        failed()
    fd = libc.syscall(SYS_PIDFD_GETFD, pidfd, 0, 0)
    if fd < 0:
        failed()
    os.close(fd)
    os.close(pidfd)

for arg in sys.argv[1:]:
    name, pid = arg.split("=")
    for check in (maps, fds, mem, ptrace, getfd):
        try:
            check(int(pid))
            print(f"{name} {check.__name__}: ok", flush=True)
        except OSError as error:
            print(f"{name} {check.__name__}: refused ({error.strerror})", flush=True)
"#;

#[test]
fn a_local_command_cannot_read_dshs_memory_or_ptrace_it() {
    let env = Unprivileged::new();
    std::fs::write(env.path("work/attack.py"), ATTACKER).unwrap();
    std::fs::set_permissions(
        env.path("work/attack.py"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let ordinary = env.ordinary_process();
    let script = format!(
        "{WHO}\npython3 attack.py ordinary={} dsh=$PPID 2>&1",
        ordinary.pid()
    );
    let content = env.call_bash(&script).content;
    assert_attacker_is_an_unprivileged_child(&env, &content);
    let lines = content.replace(": ", "=");
    let result = |name: &str, check: &str| value_of(&lines, &format!("{name} {check}"));
    let refused = |seen: &str| {
        seen == "refused (Permission denied)" || seen == "refused (Operation not permitted)"
    };

    // Reading maps and listing open files asks the kernel for read access, which Yama
    // never restricts: they must work on the ordinary process of the same user.
    for check in ["maps", "fds"] {
        assert_eq!(
            result("ordinary", check),
            "ok",
            "{check} of an ordinary process of the same user is refused, so refusing \
             dsh's proves nothing: {content}"
        );
    }
    // Memory, ptrace and descriptor copies ask for attach access: under Yama's
    // ptrace_scope 1 only an ancestor has it (the command is neither the ordinary
    // process's nor dsh's), under 2 only root, under 3 nobody; without Yama (or under 0)
    // every process of the user.
    let scope = ptrace_scope();
    for check in ["mem", "ptrace", "getfd"] {
        let seen = result("ordinary", check);
        assert!(
            if scope == 0 {
                seen == "ok"
            } else {
                refused(seen)
            },
            "{check} of an ordinary process of the same user under Yama ptrace_scope \
             {scope} (0: no Yama): {seen}, not what the kernel's rules say: {content}"
        );
    }
    if scope != 0 {
        eprintln!(
            "note: Yama ptrace_scope is {scope}: it already refuses a command memory, \
             ptrace and descriptor copies; only the refusal of maps, open files and the \
             environment is shown here to be dsh's own (non-dumpable)"
        );
    }

    // Every one of them is refused on dsh.
    for check in ["maps", "fds", "mem", "ptrace", "getfd"] {
        let seen = result("dsh", check);
        assert!(
            refused(seen),
            "{check} of dsh (its $PPID) from a command: {seen}: {content}"
        );
    }
}

#[test]
fn dshs_keeper_is_non_dumpable_too_and_escapees_still_die_as_a_user() {
    let env = Unprivileged::new();
    let ordinary = env.ordinary_process();
    let escapee = format!("3{}1", env.marker);
    // The keeper is dsh's child named dsh-keeper; its environment is empty, so the
    // check is its open files (the lifeline pipe), readable only while it is dumpable.
    let script = format!(
        "{WHO}\n\
         setsid -f sleep {escapee} >/dev/null 2>&1\n\
         for stat in /proc/[0-9]*/stat; do\n\
           read -r pid comm state ppid rest <\"$stat\" 2>/dev/null || continue\n\
           if [ \"$comm\" = \"(dsh-keeper)\" ] && [ \"$ppid\" = \"$PPID\" ]; then\n\
             echo keeper=$pid\n\
             ls /proc/$pid/fd >/dev/null 2>&1 && echo keeper fds=ok || echo keeper fds=refused\n\
             cat /proc/$pid/environ >/dev/null 2>&1 && echo keeper environ=ok || echo keeper environ=refused\n\
           fi\n\
         done\n\
         ls /proc/{pid}/fd >/dev/null 2>&1 && echo ordinary fds=ok || echo ordinary fds=refused",
        pid = ordinary.pid(),
    );
    let content = env.call_bash(&script).content;
    assert_attacker_is_an_unprivileged_child(&env, &content);
    value_of(&content, "keeper");
    assert_eq!(
        value_of(&content, "ordinary fds"),
        "ok",
        "the open files of an ordinary process of the same user cannot be listed, so \
         the keeper's refusal proves nothing: {content}"
    );
    assert_eq!(value_of(&content, "keeper fds"), "refused", "{content}");
    assert_eq!(value_of(&content, "keeper environ"), "refused", "{content}");

    // dsh, non-dumpable and unprivileged, still finds and kills the run's escapee.
    let left = survivors(&escapee, Duration::from_millis(1500));
    assert!(
        left.is_empty(),
        "an escapee outlived its run under an unprivileged dsh: {left:?}"
    );
}

/// dsh non-dumpable must not cost an unprivileged host its sandbox: a sandboxed child
/// (which shares dsh's memory, and so its dumpable flag, until `execve`) still sets up
/// its namespaces, and cannot read dsh's environment either.
#[test]
fn a_sandboxed_command_still_runs_under_an_unprivileged_dsh() {
    let env = Unprivileged::new();
    let script = format!(
        "{WHO}\n\
         cat /proc/$PPID/environ >/dev/null 2>&1 && echo dsh environ=ok || echo dsh environ=refused"
    );
    let result = env.call_bash_configured("[process.executor]\ndefault = \"sandbox\"\n", &script);
    let content = result.content;
    assert!(
        content.contains("[sandbox: "),
        "the sandboxed command did not run: {content}"
    );
    assert_attacker_is_an_unprivileged_child(&env, &content);
    assert_eq!(value_of(&content, "dsh environ"), "refused", "{content}");
}

/// The container executor needs dsh to run as root: a non-root dsh refuses a contained
/// call with `INTERNAL: sandbox unavailable: …` saying so, and runs nothing.
#[test]
fn a_non_root_dsh_refuses_a_contained_call_and_runs_nothing() {
    let env = Unprivileged::new();
    let marker = env.path("work").join(format!("ran-{}", unique_marker()));
    let script = format!("touch {}", marker.display());
    let result = env.try_bash_configured("[process.executor]\ndefault = \"container\"\n", &script);
    assert_eq!(result.code.as_deref(), Some("INTERNAL"), "{result:?}");
    assert!(
        result.message.starts_with("sandbox unavailable: ")
            && result.message.contains("needs dsh to run as root"),
        "{result:?}"
    );
    assert!(!marker.exists(), "the refused call ran");
}

/// A sandboxed call whose scope and tool have a network by policy: a non-root dsh cannot
/// make the run's network namespace, so it refuses the call, saying why, and runs nothing.
#[test]
fn a_non_root_dsh_refuses_a_sandboxed_call_with_a_network_and_runs_nothing() {
    let env = Unprivileged::new();
    let marker = env.path("work").join(format!("ran-{}", unique_marker()));
    let script = format!("touch {}", marker.display());
    let result = env.try_bash_configured(
        "[process.executor]\ndefault = \"sandbox\"\n[egress]\nallow = [\"pypi.org\"]\n",
        &script,
    );
    assert_eq!(result.code.as_deref(), Some("INTERNAL"), "{result:?}");
    assert!(
        result
            .message
            .contains("a network by policy needs dsh to run as root"),
        "{result:?}"
    );
    assert!(!marker.exists(), "the refused call ran");
}

/// Where no namespace can be made (a non-root dsh on a kernel without unprivileged user
/// namespaces: here `unshare` answers `ENOSYS` to dsh and what it starts), every
/// sandboxed call is refused naming the step that failed, and runs nothing.
#[test]
fn without_user_namespaces_a_non_root_dshs_sandboxed_calls_fail_naming_the_step_and_run_nothing() {
    let env = Unprivileged::new();
    for round in 0..2 {
        let marker = env.path("work").join(format!("ran-{}", unique_marker()));
        let result = env.try_bash_without(
            "[process.executor]\ndefault = \"sandbox\"\n",
            &format!("touch {}", marker.display()),
            &[libc::SYS_unshare],
        );
        assert_eq!(
            result.code.as_deref(),
            Some("INTERNAL"),
            "call {round}: {result:?}"
        );
        assert!(
            result.message.contains("user namespace") && result.message.contains("unshare"),
            "call {round}: the refusal names the step: {result:?}"
        );
        assert!(
            !marker.exists(),
            "call {round}: the refused call ran: {result:?}"
        );
    }
}

/// Runs `command` in `dir` with no limit on core files, kills it with SIGABRT once
/// `ready` says it is up, and says whether the kernel dumped its core (the wait status'
/// flag, whatever `kernel.core_pattern` does with the dump) and what files `dir` holds.
/// SIGABRT, not SIGSEGV: wasmtime handles SIGSEGV (a guest's trap), and one sent by
/// `kill` is no fault of dsh's, so it returns from it.
fn crash(mut command: Command, dir: &Path, ready: impl FnOnce(&mut Child)) -> (bool, Vec<String>) {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    // SAFETY: setrlimit is async-signal-safe; it only lifts this child's core limit.
    unsafe {
        command.pre_exec(|| {
            let unlimited = libc::rlimit {
                rlim_cur: libc::RLIM_INFINITY,
                rlim_max: libc::RLIM_INFINITY,
            };
            if libc::setrlimit(libc::RLIMIT_CORE, &unlimited) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = command.current_dir(dir).spawn().unwrap();
    ready(&mut child);
    // SAFETY: kill on the pid of a child we have not waited for.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGABRT) };
    let status = child.wait().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGABRT), "{status:?}");
    let files = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    (status.core_dumped(), files)
}

/// dsh writes no core dump, which would hold its secrets: killed by SIGABRT with no
/// limit on core files, in a directory it may write, it dies without one, where an
/// ordinary process under the same limits dumps core. (With `fs.suid_dumpable` at 2
/// the kernel writes even a non-dumpable process's core, readable by root alone: the
/// README's sentence holds at 0, the default, and this test needs it.)
#[test]
fn dsh_killed_by_sigabrt_dumps_no_core_where_an_ordinary_process_does() {
    let dumpable = std::fs::read_to_string("/proc/sys/fs/suid_dumpable").unwrap_or_default();
    if dumpable.trim() != "0" {
        crate::support::skipped(&format!(
            "fs.suid_dumpable is {} (not 0): the kernel dumps non-dumpable processes too",
            dumpable.trim()
        ));
        return;
    }
    let env = crate::support::Env::new();
    let ordinary_dir = tempfile::tempdir().unwrap();
    let mut sleep = Command::new("sleep");
    sleep.arg("30");
    let (ordinary_dumped, ordinary_files) = crash(sleep, ordinary_dir.path(), |_| {
        std::thread::sleep(Duration::from_millis(100))
    });
    if !ordinary_dumped {
        crate::support::skipped(&format!(
            "this kernel dumps no core of an ordinary process either (kernel.core_pattern \
             {:?}), so dsh's lack of one proves nothing",
            std::fs::read_to_string("/proc/sys/kernel/core_pattern").unwrap_or_default()
        ));
        return;
    }
    let dsh_dir = tempfile::tempdir().unwrap();
    let mut serve = env.dsh();
    serve
        .arg("serve")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let (dsh_dumped, dsh_files) = crash(serve, dsh_dir.path(), |child| {
        use std::io::{BufRead, Write};
        // Up: it answered its client.
        let initialize = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
        let stdin = child.stdin.as_mut().unwrap();
        writeln!(stdin, "{initialize}").unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.contains("\"id\":1"), "{line}");
    });
    assert!(
        !dsh_dumped,
        "dsh dumped core (the ordinary process left {ordinary_files:?}; dsh {dsh_files:?})"
    );
    assert!(
        !dsh_files.iter().any(|name| name.starts_with("core")),
        "{dsh_files:?}"
    );
}
