//! Shared helpers: a `dsh` command with its own state dir and workspace, result parsing,
//! and process-table checks.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// A scratch environment for one test: state dir, workspace, plugin dir.
pub struct Env {
    pub dir: tempfile::TempDir,
}

impl Env {
    /// A fresh environment with an empty state directory, as a user's first start
    /// finds it (the embedded plugins' code is precompiled: nothing compiles).
    pub fn new() -> Env {
        let env = Env {
            dir: tempfile::tempdir().unwrap(),
        };
        std::fs::create_dir_all(env.workdir()).unwrap();
        std::fs::create_dir_all(env.state_dir()).unwrap();
        env
    }

    pub fn workdir(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    pub fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    /// `dsh` with this environment's state dir and workspace.
    pub fn dsh(&self) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_dsh"));
        command
            .env("DSH_STATE_DIR", self.state_dir())
            .env("DSH_WORKDIR", self.workdir())
            .env_remove("DSH_CONFIG")
            .env_remove("DSH_PLUGINS")
            .current_dir(self.dir.path());
        // `.ci/run` runs the containment tests a second time this way: clone3 answers
        // ENOSYS, as on a kernel or architecture without it, so every process dsh starts
        // takes the fallback (a plain clone, then the child joins its cgroup itself).
        if std::env::var_os("DSH_TEST_WITHOUT_CLONE3").is_some() {
            without_syscalls(&mut command, &[libc::SYS_clone3]);
        }
        command
    }

    /// Where `add_plugins` puts components: `DIR/plugins`.
    pub fn plugins_dir(&self) -> PathBuf {
        self.dir.path().join("plugins")
    }

    /// Copies built components into the plugin directory: (file stem, built component).
    pub fn add_plugins(&self, plugins: &[(&str, &str)]) {
        std::fs::create_dir_all(self.plugins_dir()).unwrap();
        for (file, built) in plugins {
            std::fs::copy(
                built_plugin(built),
                self.plugins_dir().join(format!("{file}.wasm")),
            )
            .unwrap();
        }
    }

    /// `dsh` with `config` as its dsh.toml (a fresh file) and the plugin directory.
    pub fn dsh_configured(&self, config: &str) -> Command {
        let path = self
            .dir
            .path()
            .join(format!("dsh-{}.toml", unique_marker()));
        std::fs::write(&path, config).unwrap();
        std::fs::create_dir_all(self.plugins_dir()).unwrap();
        let mut command = self.dsh();
        command
            .arg("--config")
            .arg(path)
            .arg("--plugins")
            .arg(self.plugins_dir());
        command
    }

    /// `dsh call TOOL ARGS --json EXTRA...` under `config`, stdin closed, parsed.
    pub fn call_configured(
        &self,
        config: &str,
        tool: &str,
        args: &Value,
        extra: &[&str],
    ) -> CallOutput {
        let output = self
            .dsh_configured(config)
            .args(["call", tool, &args.to_string(), "--json"])
            .args(extra)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        CallOutput::parse(output)
    }

    /// `dsh plugins --json` under `config`, parsed.
    pub fn plugins_configured(&self, config: &str) -> Vec<Value> {
        plugins_listed(self.dsh_configured(config))
    }

    /// `dsh call TOOL ARGS --json`, parsed.
    pub fn call(&self, tool: &str, args: &str) -> CallOutput {
        let output = self
            .dsh()
            .args(["call", tool, args, "--json"])
            .output()
            .unwrap();
        CallOutput::parse(output)
    }

    /// The single session's event log, one JSON value per line.
    pub fn events(&self) -> Vec<Value> {
        let sessions = self.state_dir().join("sessions");
        let mut events = Vec::new();
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(&sessions)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        dirs.sort();
        for dir in dirs {
            let text = std::fs::read_to_string(dir.join("events.jsonl")).unwrap();
            events.extend(
                text.lines()
                    .map(|line| serde_json::from_str::<Value>(line).unwrap()),
            );
        }
        events
    }
}

/// A `dsh call --json` result.
#[derive(Debug)]
pub struct CallOutput {
    pub exit_code: Option<i32>,
    pub content: String,
    pub code: Option<String>,
    pub message: String,
}

impl CallOutput {
    pub fn parse(output: Output) -> CallOutput {
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        let value: Value = serde_json::from_str(&stdout)
            .unwrap_or_else(|e| panic!("dsh printed no JSON ({e}): {stdout}\nstderr: {stderr}"));
        CallOutput {
            exit_code: output.status.code(),
            content: value["content"].as_str().unwrap_or_default().to_string(),
            code: value["error"]["code"].as_str().map(str::to_owned),
            message: value["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        }
    }
}

/// A string no other process on the machine has in its command line.
/// `text` without the line dsh ends a result with when the call changed the workspace's
/// files (`[changed: …; undo with undo {call_id: …}]`): what the tool itself said.
pub fn without_undo_line(text: &str) -> &str {
    match text.rfind("[changed: ") {
        Some(at) => text[..at].strip_suffix('\n').unwrap_or(&text[..at]),
        None => text,
    }
}

pub fn unique_marker() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{}{:09}", std::process::id(), nanos)
}

/// Processes whose command line contains `marker`.
pub fn processes_with(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let cmdline = entry.path().join("cmdline");
        if let Ok(bytes) = std::fs::read(&cmdline) {
            let text = String::from_utf8_lossy(&bytes).replace('\0', " ");
            if text.contains(marker) {
                found.push(format!("{}: {text}", entry.file_name().to_string_lossy()));
            }
        }
    }
    found
}

/// Waits up to `within` for no process to have `marker` (a killed process may take a
/// moment to be reaped), then returns what is left.
pub fn survivors(marker: &str, within: std::time::Duration) -> Vec<String> {
    let deadline = std::time::Instant::now() + within;
    loop {
        let left = processes_with(marker);
        if left.is_empty() || std::time::Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[path = "../../engine/guest_build.rs"]
mod guest_build;

/// The directory of every component built from `plugins/`, test-only ones included
/// (`DSH_PLUGIN_WASM_DIR`): the host's build builds only the embedded ones, so the first
/// call in this process builds the whole plugins workspace there.
pub fn plugin_wasm_dir() -> &'static Path {
    let plugins = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/Cargo.toml");
    guest_build::build_all_once(&plugins, Path::new(env!("DSH_WASM_TARGET_DIR")))
}

/// The component built from the `plugins/` crate `name`, test-only ones included.
pub fn built_plugin(name: &str) -> PathBuf {
    plugin_wasm_dir().join(format!("{name}.wasm"))
}

/// Runs `command` to completion and returns its output and peak RSS in KiB.
pub fn output_and_peak_rss(command: &mut Command) -> (Output, i64) {
    use std::os::unix::process::ExitStatusExt;
    let child = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    // Read the pipes on threads so the child never blocks on a full pipe.
    let mut child = child;
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out_thread = std::thread::spawn(move || {
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut stdout, &mut buf).unwrap();
        buf
    });
    let err_thread = std::thread::spawn(move || {
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut stderr, &mut buf).unwrap();
        buf
    });
    let mut status = 0;
    // SAFETY: wait4 on our own child's pid with valid out-pointers.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(waited, pid, "wait4 failed");
    let output = Output {
        status: std::process::ExitStatus::from_raw(status),
        stdout: out_thread.join().unwrap(),
        stderr: err_thread.join().unwrap(),
    };
    (output, usage.ru_maxrss)
}

/// `bytes` with every `from` replaced by `to`, which has the same length, so a component
/// stays well formed (a plugin "built against" another contract version). Panics when
/// `from` is not in `bytes`.
pub fn with_bytes_replaced(bytes: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    assert_eq!(from.len(), to.len(), "a replacement of the same length");
    let mut patched = Vec::with_capacity(bytes.len());
    let mut rest = bytes;
    let mut replaced = 0;
    while !rest.is_empty() {
        if rest.starts_with(from) {
            patched.extend_from_slice(to);
            rest = &rest[from.len()..];
            replaced += 1;
        } else {
            patched.push(rest[0]);
            rest = &rest[1..];
        }
    }
    assert!(
        replaced > 0,
        "{} is not in the bytes",
        String::from_utf8_lossy(from)
    );
    patched
}

/// `dsh plugins --json` run from `dsh` (with whatever configuration it was given), parsed.
pub fn plugins_listed(mut dsh: Command) -> Vec<Value> {
    let output = dsh.args(["plugins", "--json"]).output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice::<Value>(&output.stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

/// A pseudo-terminal the test holds (both ends close-on-exec, so no dsh inherits them).
pub struct Pty {
    pub master: OwnedFd,
    pub slave: OwnedFd,
    /// The slave's path (`/dev/pts/N`).
    pub name: PathBuf,
}

pub fn open_pty() -> Pty {
    // SAFETY: plain system calls on descriptors this function owns.
    unsafe {
        let master = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        assert!(
            master >= 0,
            "posix_openpt: {}",
            std::io::Error::last_os_error()
        );
        let master = OwnedFd::from_raw_fd(master);
        assert_eq!(libc::grantpt(master.as_raw_fd()), 0);
        assert_eq!(libc::unlockpt(master.as_raw_fd()), 0);
        let mut buf = [0 as libc::c_char; 128];
        assert_eq!(
            libc::ptsname_r(master.as_raw_fd(), buf.as_mut_ptr(), buf.len()),
            0
        );
        let name = std::ffi::CStr::from_ptr(buf.as_ptr()).to_owned();
        let slave = libc::open(
            name.as_ptr(),
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        );
        assert!(
            slave >= 0,
            "open slave: {}",
            std::io::Error::last_os_error()
        );
        Pty {
            master,
            slave: OwnedFd::from_raw_fd(slave),
            name: PathBuf::from(std::ffi::OsStr::from_bytes(name.to_bytes())),
        }
    }
}

/// Waits up to `within` for `condition` (checked every 20 ms); whether it came true.
pub fn wait_for(within: std::time::Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + within;
    loop {
        if condition() {
            return true;
        }
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Starts `command` under a seccomp filter (built with seccompiler, as dsh's own is)
/// that answers `ENOSYS` to `syscalls` and allows everything else: a kernel without
/// them, as a process under it (and everything it starts) sees it.
pub fn without_syscalls(command: &mut Command, syscalls: &[i64]) {
    use std::os::unix::process::CommandExt;
    let arch = if cfg!(target_arch = "aarch64") {
        seccompiler::TargetArch::aarch64
    } else {
        seccompiler::TargetArch::x86_64
    };
    let rules = syscalls.iter().map(|nr| (*nr, Vec::new())).collect();
    let filter = seccompiler::SeccompFilter::new(
        rules,
        seccompiler::SeccompAction::Allow,
        seccompiler::SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .unwrap();
    let program: seccompiler::BpfProgram = filter.try_into().unwrap();
    let program: Vec<libc::sock_filter> = program
        .into_iter()
        .map(|i| libc::sock_filter {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        })
        .collect();
    // Built before the fork and kept for the test process's life (a command may be
    // spawned more than once): the child only makes two system calls on it.
    let program: &'static [libc::sock_filter] = Box::leak(program.into_boxed_slice());
    let fprog: &'static libc::sock_fprog = Box::leak(Box::new(libc::sock_fprog {
        len: program.len() as u16,
        filter: program.as_ptr() as *mut libc::sock_filter,
    }));
    let fprog = fprog as *const libc::sock_fprog as usize;
    // SAFETY: prctl and seccomp on memory that lives as long as the process; no
    // allocation in the child.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::syscall(
                    libc::SYS_seccomp,
                    libc::SECCOMP_SET_MODE_FILTER,
                    0,
                    fprog as *const libc::sock_fprog,
                ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Says a test is skipped here, and why; under `CI=true` (where everything must run)
/// it fails instead, so a skip never passes unseen there.
pub fn skipped(why: &str) {
    assert!(
        std::env::var_os("CI").is_none_or(|ci| ci != "true"),
        "{why}, and CI=true: this test must run"
    );
    eprintln!("skipped: {why}");
}
