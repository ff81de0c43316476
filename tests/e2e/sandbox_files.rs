//! Attacks on what a sandboxed run can reach outside its writable set: workdirs outside
//! the workspace, dsh's own state directory, configuration file and plugin directory,
//! the control socket, file metadata, inherited descriptors and terminals, other
//! terminals, SysV IPC, raw devices, `/proc` links into other processes, language
//! servers, and the links, mounts, renames and reopens a hostile command tries.
//!
//! Each test runs the attack first under the `local` executor, where it works (that is
//! what makes the sandbox half mean something), then under the `sandbox` executor, where
//! it must fail with nothing changed outside, as the test itself sees it (contents,
//! modes, owners, times, xattrs, inode flags, links, terminal bytes and sizes, IPC
//! objects). A hostile command is a bash script of probes, each printing
//! `probe:NAME=ok` or `probe:NAME=failed`, asserted one by one.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::mcp_stdio::{McpServer, ToolReply};
use crate::support::{open_pty, unique_marker, wait_for, CallOutput, Env, Pty};

const SANDBOX: &str = "[process.executor]\ndefault = \"sandbox\"\n";
const LOCAL: &str = "";

// ---------------------------------------------------------------------------------
// Probes: a hostile script and what it printed.

/// A bash script running each `(name, shell)` in turn and printing `probe:NAME=ok` when
/// its shell succeeded, `probe:NAME=failed` when not (its errors printed before).
/// `pipefail` is on, so a probe must not pipe into a reader that stops early (`grep -q`,
/// `head`): its writer's SIGPIPE would fail the probe at random.
pub(crate) fn probes(list: &[(&str, String)]) -> String {
    let mut script = String::from("set -o pipefail\n");
    for (name, shell) in list {
        script.push_str(&format!(
            "if {{ {shell}\n}} 2>&1; then echo probe:{name}=ok; else echo probe:{name}=failed; fi\n"
        ));
    }
    script
}

/// What probe `name` printed: `Some(true)` it worked, `Some(false)` it failed, `None`
/// it did not run (the call was refused, or the script died before it).
pub(crate) fn probe(text: &str, name: &str) -> Option<bool> {
    let prefix = format!("probe:{name}=");
    text.lines()
        .find_map(|line| match line.strip_prefix(&prefix) {
            Some("ok") => Some(true),
            Some("failed") => Some(false),
            _ => None,
        })
}

/// Every probe of `names` worked (`worked`) or failed (`!worked`); the message names
/// each one that did not, with the whole output.
pub(crate) fn assert_probes(half: &str, text: &str, names: &[&str], worked: bool) {
    eprintln!("--- {half} ---\n{text}");
    let wrong: Vec<String> = names
        .iter()
        .filter(|name| probe(text, name) != Some(worked))
        .map(|name| match probe(text, name) {
            Some(true) => format!("{name}: WORKED"),
            Some(false) => format!("{name}: failed"),
            None => format!("{name}: did not run"),
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "{half}: every probe should have {}; these did not: {wrong:#?}\n--- output ---\n{text}",
        if worked { "worked" } else { "failed" }
    );
}

/// The values of the lines `KEY=VALUE` the command printed.
fn said<'a>(text: &'a str, key: &str) -> Vec<&'a str> {
    let prefix = format!("{key}=");
    text.lines()
        .filter_map(|line| line.strip_prefix(&prefix))
        .collect()
}

fn bash_args(command: &str) -> Value {
    json!({"command": command, "description": "hostile probes"})
}

/// `dsh call bash COMMAND` under `config`.
fn bash(env: &Env, config: &str, command: &str) -> CallOutput {
    env.call_configured(config, "bash", &bash_args(command), &[])
}

/// `COMMAND call TOOL ARGS --json` (a `dsh` command the caller set up), stdin closed.
fn call_command(mut command: Command, tool: &str, args: &Value) -> CallOutput {
    let output = command
        .args(["call", tool, &args.to_string(), "--json"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    CallOutput::parse(output)
}

/// The bash result's text, asserting the call itself was not refused.
fn ran(half: &str, out: &CallOutput) -> String {
    assert!(out.code.is_none(), "{half}: the call was refused: {out:?}");
    out.content.clone()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A shell line printing `KEY=HEX` of `file`'s bytes (failing when it cannot be read).
fn hex_of(key: &str, file: &str) -> String {
    format!("k=$(od -An -tx1 -v {file}) && echo \"{key}=$(echo $k | tr -d ' ')\"")
}

/// Paths removed when dropped (what a local half wrote where it should not stay).
struct Cleanup(Vec<PathBuf>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for path in &self.0 {
            let _ = std::fs::remove_file(path).or_else(|_| std::fs::remove_dir_all(path));
        }
    }
}

// ---------------------------------------------------------------------------------
// What a file is, as the test sees it: compared before and after an attack.

/// Everything an attack could change about one file or directory (not its atime).
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileState {
    kind: &'static str,
    mode: u32,
    uid: u32,
    gid: u32,
    ino: u64,
    nlink: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
    /// A hash of a regular file's bytes.
    digest: Option<u64>,
    target: Option<PathBuf>,
    xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    /// The inode flags (`lsattr`) of a regular file or directory.
    flags: Option<i64>,
}

/// `_IOR('f', 1, long)`, the same on x86-64 and aarch64.
const FS_IOC_GETFLAGS: libc::c_ulong = 0x8008_6601;
/// `lsattr`'s `d`.
const FS_NODUMP_FL: i64 = 0x40;

fn xattrs(path: &Path) -> Vec<(Vec<u8>, Vec<u8>)> {
    let c_path = CString::new(path.as_os_str().as_bytes()).unwrap();
    let mut names = vec![0u8; 65536];
    // SAFETY: a valid C string and a buffer of the length given.
    let n = unsafe { libc::llistxattr(c_path.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    if n <= 0 {
        return Vec::new();
    }
    names.truncate(n as usize);
    names
        .split(|b| *b == 0)
        .filter(|name| !name.is_empty())
        .map(|name| {
            let c_name = CString::new(name).unwrap();
            let mut value = vec![0u8; 65536];
            // SAFETY: valid C strings and a buffer of the length given.
            let m = unsafe {
                libc::lgetxattr(
                    c_path.as_ptr(),
                    c_name.as_ptr(),
                    value.as_mut_ptr().cast(),
                    value.len(),
                )
            };
            value.truncate(m.max(0) as usize);
            (name.to_vec(), value)
        })
        .collect()
}

fn inode_flags(path: &Path) -> Option<i64> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    let mut flags: libc::c_long = 0;
    // SAFETY: FS_IOC_GETFLAGS writes an int into the pointed-to (larger, zeroed) value.
    let done = unsafe { libc::ioctl(file.as_raw_fd(), FS_IOC_GETFLAGS as _, &mut flags) };
    (done == 0).then_some(flags as i64)
}

/// The state of `path` (not following a symbolic link), `None` when it does not exist.
fn state_of(path: &Path) -> Option<FileState> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    let kind = meta.file_type();
    let kind_name = if kind.is_file() {
        "file"
    } else if kind.is_dir() {
        "dir"
    } else if kind.is_symlink() {
        "symlink"
    } else if kind.is_fifo() {
        "fifo"
    } else if kind.is_socket() {
        "socket"
    } else {
        "device"
    };
    let digest = kind.is_file().then(|| {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::hash::DefaultHasher::new();
        std::fs::read(path).unwrap_or_default().hash(&mut hasher);
        hasher.finish()
    });
    Some(FileState {
        kind: kind_name,
        mode: meta.mode(),
        uid: meta.uid(),
        gid: meta.gid(),
        ino: meta.ino(),
        nlink: meta.nlink(),
        size: if kind.is_dir() { 0 } else { meta.size() },
        mtime: (meta.mtime(), meta.mtime_nsec()),
        ctime: (meta.ctime(), meta.ctime_nsec()),
        digest,
        target: std::fs::read_link(path).ok(),
        xattrs: xattrs(path),
        flags: (kind.is_file() || kind.is_dir())
            .then(|| inode_flags(path))
            .flatten(),
    })
}

/// The state of `root` and of everything below it, by path relative to `root` (`""`
/// for `root`), leaving out the relative paths `skip` and what is below them.
fn tree(root: &Path, skip: &[&str]) -> BTreeMap<PathBuf, FileState> {
    fn walk(root: &Path, here: &Path, skip: &[&str], into: &mut BTreeMap<PathBuf, FileState>) {
        let rel = here.strip_prefix(root).unwrap().to_path_buf();
        if skip.iter().any(|s| rel == Path::new(s)) {
            return;
        }
        let Some(state) = state_of(here) else { return };
        let is_dir = state.kind == "dir";
        into.insert(rel, state);
        if is_dir {
            let mut entries: Vec<PathBuf> = std::fs::read_dir(here)
                .map(|d| d.flatten().map(|e| e.path()).collect())
                .unwrap_or_default();
            entries.sort();
            for entry in entries {
                walk(root, &entry, skip, into);
            }
        }
    }
    let mut into = BTreeMap::new();
    walk(root, root, skip, &mut into);
    into
}

/// Asserts `before` and `after` are the same, naming every path that differs.
fn assert_unchanged(
    what: &str,
    before: &BTreeMap<PathBuf, FileState>,
    after: &BTreeMap<PathBuf, FileState>,
    text: &str,
) {
    let mut changes = Vec::new();
    for (path, state) in before {
        match after.get(path) {
            None => changes.push(format!("{}: GONE", path.display())),
            Some(now) if now != state => {
                changes.push(format!("{}: {state:?}\n   now {now:?}", path.display()))
            }
            Some(_) => {}
        }
    }
    for path in after.keys().filter(|p| !before.contains_key(*p)) {
        changes.push(format!("{}: NEW {:?}", path.display(), after[path]));
    }
    assert!(
        changes.is_empty(),
        "{what} changed under the sandbox:\n{}\n--- output ---\n{text}",
        changes.join("\n")
    );
}

// ---------------------------------------------------------------------------------
// MCP helpers.

pub(crate) fn terminal_id(opened: &str) -> String {
    opened
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .find(|word| word.starts_with("term-"))
        .unwrap_or_else(|| panic!("no session id in {opened:?}"))
        .to_string()
}

fn job_id(started: &str) -> String {
    started
        .split_whitespace()
        .find(|w| w.starts_with("bash-"))
        .unwrap_or_else(|| panic!("no job id in {started:?}"))
        .trim_matches(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .to_string()
}

/// The output of job `job` once it has ended.
fn job_finished(server: &McpServer, job: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = server.call_ok("job_output", json!({"id": job, "wait_ms": 5000}));
        if !text.contains(": running;") || Instant::now() > deadline {
            return text;
        }
    }
}

/// `dsh serve` whose configuration is the file `config` (wherever it lies).
fn serve_with_config_file(env: &Env, config: &Path) -> McpServer {
    let mut command = env.dsh();
    command.arg("--config").arg(config);
    McpServer::start_command(env, command)
}

fn echo_forbidden(server: &McpServer, marker: &str) -> ToolReply {
    server.call(
        "bash",
        json!({"command": format!("echo forbidden-{marker}"), "description": "gated"}),
    )
}

// =================================================================================
// 1. A workdir or cwd outside the workspace.

#[test]
fn a_workdir_or_cwd_outside_the_workspace_is_refused_in_the_sandbox_and_nothing_lands_there() {
    let env = Env::new();
    let outside = tempfile::tempdir().unwrap();
    let outside_dir = outside.path().canonicalize().unwrap();
    std::fs::create_dir_all(env.workdir().join("sub")).unwrap();
    std::os::unix::fs::symlink(&outside_dir, env.workdir().join("escape")).unwrap();
    std::os::unix::fs::symlink(env.state_dir(), env.workdir().join("to-state")).unwrap();
    let marker = unique_marker();
    let state = env.state_dir();
    let above = env.dir.path().parent().unwrap().canonicalize().unwrap();
    // (the workdir argument, the directory it names)
    let workdirs: Vec<(String, PathBuf)> = vec![
        ("/".into(), "/".into()),
        ("../..".into(), above.clone()),
        (outside_dir.display().to_string(), outside_dir.clone()),
        ("escape".into(), outside_dir.clone()),
        (
            "escape/..".into(),
            outside_dir.parent().unwrap().to_path_buf(),
        ),
        (state.display().to_string(), state.canonicalize().unwrap()),
        ("to-state".into(), state.canonicalize().unwrap()),
        (
            state.join("cache").display().to_string(),
            state.canonicalize().unwrap().join("cache"),
        ),
    ];
    let fg = format!("planted-{marker}");
    let bg = format!("planted-bg-{marker}");
    let mut cleanup = Cleanup(Vec::new());
    for (_, dir) in &workdirs {
        cleanup.0.push(dir.join(&fg));
        cleanup.0.push(dir.join(&bg));
    }
    let command = |name: &str| format!("pwd -P; touch {name} && echo landed=$(pwd -P)");

    // Local: every workdir is honoured, and a file lands in it.
    {
        let server = McpServer::start(&env, LOCAL);
        assert!(state.join("cache").is_dir());
        for (arg, dir) in &workdirs {
            let text = server.call_ok(
                "bash",
                json!({"command": command(&fg), "description": "plant", "workdir": arg}),
            );
            assert!(
                said(&text, "landed").contains(&dir.display().to_string().as_str()),
                "local, workdir {arg:?}: {text}"
            );
            assert!(dir.join(&fg).exists(), "local, workdir {arg:?}: {text}");
            std::fs::remove_file(dir.join(&fg)).unwrap();
        }
        let started = server.call_ok(
            "bash",
            json!({"command": command(&bg), "description": "plant", "workdir": outside_dir, "run_in_background": true}),
        );
        let text = job_finished(&server, &job_id(&started));
        assert!(outside_dir.join(&bg).exists(), "local background: {text}");
        std::fs::remove_file(outside_dir.join(&bg)).unwrap();
        let opened = server.call_ok("terminal_open", json!({"cwd": outside_dir}));
        assert!(
            opened.contains(&outside_dir.display().to_string()),
            "local terminal: {opened}"
        );
        server.call_ok("terminal_close", json!({"id": terminal_id(&opened)}));
    }

    // Sandbox: each is INVALID_ARGUMENTS, foreground, background and terminal alike.
    let server = McpServer::start(&env, SANDBOX);
    let mut wrong = Vec::new();
    for (arg, _) in &workdirs {
        for (name, background) in [(&fg, false), (&bg, true)] {
            let reply = server.call(
                "bash",
                json!({"command": command(name), "description": "plant", "workdir": arg, "run_in_background": background}),
            );
            if !(reply.is_error && reply.code.as_deref() == Some("INVALID_ARGUMENTS")) {
                wrong.push(format!(
                    "bash workdir {arg:?} background={background}: {reply:?}"
                ));
            }
        }
        let reply = server.call("terminal_open", json!({"cwd": arg}));
        if !(reply.is_error && reply.code.as_deref() == Some("INVALID_ARGUMENTS")) {
            wrong.push(format!("terminal_open cwd {arg:?}: {reply:?}"));
            if !reply.is_error {
                server.call("terminal_close", json!({"id": terminal_id(&reply.text)}));
            }
        }
    }
    // Give any background job that did start the time to plant.
    std::thread::sleep(Duration::from_millis(500));
    for (arg, dir) in &workdirs {
        for name in [&fg, &bg] {
            if dir.join(name).exists() {
                wrong.push(format!(
                    "workdir {arg:?}: {} was written",
                    dir.join(name).display()
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}\n{}", server.stderr());

    // A workdir inside the workspace still works, for bash and terminals.
    let text = server.call_ok(
        "bash",
        json!({"command": "touch in-sub && pwd -P", "description": "inside", "workdir": "sub"}),
    );
    assert!(env.workdir().join("sub/in-sub").exists(), "{text}");
    let opened = server.call_ok("terminal_open", json!({"cwd": "sub"}));
    server.call_ok("terminal_close", json!({"id": terminal_id(&opened)}));
}

// =================================================================================
// 2. The writable set.

#[test]
fn from_a_workdir_deep_in_the_workspace_the_sandbox_writes_the_whole_workspace_tmp_and_write_paths_only(
) {
    let env = Env::new();
    let outside = tempfile::tempdir().unwrap();
    let granted = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(env.workdir().join("sub/deeper")).unwrap();
    let marker = unique_marker();
    let script = |who: &str| {
        probes(&[
            ("workspace_root", format!("touch ../../root-{who}")),
            ("workdir", format!("touch here-{who}")),
            (
                "tmpdir",
                format!("touch \"${{TMPDIR:-/tmp}}/t-{marker}-{who}\""),
            ),
            (
                "write_path",
                format!("touch {}/w-{who}", granted.path().display()),
            ),
            (
                "outside",
                format!("touch {}/o-{who}", outside.path().display()),
            ),
        ])
    };
    let call = |config: &str, who: &str| {
        env.call_configured(
            config,
            "bash",
            &json!({"command": script(who), "description": "write set", "workdir": "sub/deeper"}),
            &[],
        )
    };
    let _cleanup = Cleanup(vec![PathBuf::from(format!("/tmp/t-{marker}-l"))]);
    let local = ran("local", &call(LOCAL, "l"));
    assert_probes(
        "local",
        &local,
        &[
            "workspace_root",
            "workdir",
            "tmpdir",
            "write_path",
            "outside",
        ],
        true,
    );
    assert!(outside.path().join("o-l").exists());

    let config = format!(
        "{SANDBOX}[process.sandbox]\nwrite = [\"{}\"]\n",
        granted.path().display()
    );
    let out = call(&config, "s");
    let text = ran("sandbox", &out);
    assert_probes(
        "sandbox",
        &text,
        &["workspace_root", "workdir", "tmpdir", "write_path"],
        true,
    );
    assert_probes("sandbox", &text, &["outside"], false);
    assert!(env.workdir().join("root-s").exists(), "{text}");
    assert!(env.workdir().join("sub/deeper/here-s").exists(), "{text}");
    assert!(granted.path().join("w-s").exists(), "{text}");
    assert!(!outside.path().join("o-s").exists(), "{text}");
    assert!(
        text.contains("[sandbox: fs=workspace net=off]"),
        "the marker: {text}"
    );
}

/// Job A keeps a secret in its TMPDIR (under local, a `mktemp -d`) and says where in the
/// workspace; job B, running at the same time, tries to read, list, write and remove it.
/// Returns B's output and A's directory, with A still running.
fn tmpdir_of_another_job(
    server: &McpServer,
    env: &Env,
    who: &str,
    marker: &str,
) -> (String, PathBuf) {
    let a = format!(
        "d=\"${{TMPDIR:-$(mktemp -d)}}\"; echo secret-{marker} > \"$d/secret\"; echo \"$d\" > .a-{who}; mv .a-{who} a-tmp-{who}; sleep 60"
    );
    server.call_ok(
        "bash",
        json!({"command": a, "description": "job a", "run_in_background": true}),
    );
    let path_file = env.workdir().join(format!("a-tmp-{who}"));
    assert!(
        wait_for(Duration::from_secs(60), || path_file.exists()),
        "job A never said where its TMPDIR is"
    );
    let dir = PathBuf::from(std::fs::read_to_string(&path_file).unwrap().trim());
    let p = dir.display();
    let b = probes(&[
        ("read", format!("cat {p}/secret")),
        ("list", format!("ls -A {p} | sed 's/^/entry=/'")),
        ("write", format!("touch {p}/planted-by-b")),
        ("remove", format!("rm {p}/secret")),
    ]);
    let started = server.call_ok(
        "bash",
        json!({"command": b, "description": "job b", "run_in_background": true}),
    );
    (job_finished(server, &job_id(&started)), dir)
}

#[test]
fn a_concurrent_runs_tmpdir_is_neither_readable_nor_writable_from_the_sandbox() {
    let env = Env::new();
    let marker = unique_marker();
    {
        let server = McpServer::start(&env, LOCAL);
        let (text, dir) = tmpdir_of_another_job(&server, &env, "l", &marker);
        let _cleanup = Cleanup(vec![dir.clone()]);
        assert_probes("local", &text, &["read", "list", "write", "remove"], true);
        assert!(text.contains(&format!("secret-{marker}")), "{text}");
        assert!(dir.join("planted-by-b").exists());
    }
    let server = McpServer::start(&env, SANDBOX);
    let (text, dir) = tmpdir_of_another_job(&server, &env, "s", &marker);
    assert_probes(
        "sandbox",
        &text,
        &["read", "list", "write", "remove"],
        false,
    );
    assert!(!text.contains(&format!("secret-{marker}")), "{text}");
    assert!(said(&text, "entry").is_empty(), "{text}");
    assert!(!dir.join("planted-by-b").exists(), "{text}");
    assert_eq!(
        std::fs::read_to_string(dir.join("secret")).ok(),
        Some(format!("secret-{marker}\n")),
        "job A's secret is untouched: {text}"
    );
}

// =================================================================================
// 3. dsh's own files: the state directory, the configuration, the plugin directory.

/// The attacks on a state directory at `state` (a path as the command names it), from
/// the workspace. `cwasm` names an existing compiled component in its cache.
fn state_dir_attacks(state: &str, cwasm: &str, who: &str) -> String {
    let reads = probes(&[
        ("read_key", hex_of("key", &format!("{state}/cache/key"))),
        ("list", format!("ls -A {state} | sed 's/^/entry=/'")),
        ("find", format!("find {state} | sed 's/^/found=/'")),
        (
            "symlink_read",
            format!(
                "ln -s {state}/cache/key leak-{who} && {}",
                hex_of("symkey", &format!("leak-{who}"))
            ),
        ),
        (
            "hardlink_read",
            format!(
                "ln {state}/cache/key hard-{who} && {}",
                hex_of("hardkey", &format!("hard-{who}"))
            ),
        ),
        (
            "proc_self_root",
            hex_of("prockey", &format!("/proc/self/root/{state}/cache/key")),
        ),
    ]);
    let writes = probes(&[
        ("write", format!("echo x > {state}/planted-{who}")),
        ("mkdir", format!("mkdir {state}/dir-{who}")),
        ("mkfifo", format!("mkfifo {state}/fifo-{who}")),
        (
            "new_cwasm",
            format!("cp /bin/true {state}/cache/evil-{who}.cwasm"),
        ),
        ("append_cwasm", format!("echo x >> {state}/cache/{cwasm}")),
        (
            "replace_key",
            format!("printf 'A%.0s' $(seq 32) > {state}/cache/key"),
        ),
        (
            "symlink_write",
            format!("ln -s {state} st-{who} && echo x > st-{who}/via-link-{who}"),
        ),
        ("chmod", format!("chmod 0777 {state} && chmod 0700 {state}")),
        ("touch_d", format!("touch -d 2001-02-03 {state}")),
        (
            "rename",
            format!("mv {state} {state}-moved-{who} && mv {state}-moved-{who} {state}"),
        ),
    ]);
    format!("echo \"tmpdir=$TMPDIR\"\n{reads}{writes}")
}

/// The state-directory probes that must fail in the sandbox (listing and walking it may
/// "work" on what covers it: they are checked by what they show).
const STATE_PROBES: &[&str] = &[
    "read_key",
    "symlink_read",
    "hardlink_read",
    "proc_self_root",
    "write",
    "mkdir",
    "mkfifo",
    "new_cwasm",
    "append_cwasm",
    "replace_key",
    "symlink_write",
    "chmod",
    "touch_d",
    "rename",
];

/// A compiled component in `state`'s cache (there after a first call).
fn some_cwasm(state: &Path) -> String {
    std::fs::read_dir(state.join("cache"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|name| name.ends_with(".cwasm"))
        .unwrap_or_else(|| panic!("no .cwasm in {}", state.join("cache").display()))
}

/// What the sandbox half of a state-directory attack at `state` must not have shown:
/// the key, or any entry of the state directory but the way to the run's own TMPDIR
/// and its slot's `/dev/shm`.
fn assert_state_hidden(text: &str, key: &str, state: &Path) {
    assert!(!text.contains(key), "the key leaked:\n{text}");
    let tmp = said(text, "tmpdir");
    let tmp = Path::new(tmp.first().copied().unwrap_or("/nonexistent"));
    let shm = tmp.with_file_name("shm");
    // A path is the run's own: on the way to its TMPDIR, or inside it or its `/dev/shm`.
    let own =
        |path: &Path| tmp.starts_with(path) || path.starts_with(tmp) || path.starts_with(&shm);
    let listed: Vec<&str> = said(text, "entry")
        .into_iter()
        .filter(|entry| !own(&state.join(entry)))
        .collect();
    assert!(
        listed.is_empty(),
        "listing the state dir showed {listed:?}:\n{text}"
    );
    let found: Vec<&str> = said(text, "found")
        .into_iter()
        .filter(|found| !own(Path::new(found)))
        .collect();
    assert!(
        found.is_empty(),
        "find walked the state dir: {found:?}\n{text}"
    );
}

/// Where dsh itself writes in a state directory between calls (left out of the
/// before-and-after comparison).
const DSH_WRITES: &[&str] = &["sessions", "sandbox-tmp", "run", "undo"];

#[test]
fn the_state_directory_beside_the_workspace_is_unreadable_unlistable_and_unwritable() {
    // Local first: each attack works (in an environment of its own, since they break it).
    let local_env = Env::new();
    bash(&local_env, LOCAL, "true");
    let state = local_env.state_dir();
    let key = hex(&std::fs::read(state.join("cache/key")).unwrap());
    let out = bash(
        &local_env,
        LOCAL,
        &state_dir_attacks(&state.display().to_string(), &some_cwasm(&state), "l"),
    );
    let text = ran("local", &out);
    assert_probes("local", &text, STATE_PROBES, true);
    for what in ["key", "symkey", "hardkey", "prockey"] {
        assert_eq!(said(&text, what), [key.as_str()], "local {what}: {text}");
    }
    assert!(said(&text, "entry").contains(&"cache"), "{text}");
    assert_probes("local", &text, &["list", "find"], true);

    let env = Env::new();
    // A first sandboxed call makes what dsh makes for the sandbox (its slot directory).
    bash(&env, SANDBOX, "true");
    let state = env.state_dir();
    let key = hex(&std::fs::read(state.join("cache/key")).unwrap());
    let before = tree(&state, DSH_WRITES);
    let workspace_before = tree(&env.workdir(), &[]);
    let out = bash(
        &env,
        SANDBOX,
        &state_dir_attacks(&state.display().to_string(), &some_cwasm(&state), "s"),
    );
    let text = ran("sandbox", &out);
    assert_probes("sandbox", &text, STATE_PROBES, false);
    assert_state_hidden(&text, &key, &state);
    assert_unchanged(
        "the state directory",
        &before,
        &tree(&state, DSH_WRITES),
        &text,
    );
    assert!(!env.workdir().join("hard-s").exists(), "{text}");
    assert!(!env.dir.path().join("state-moved-s").exists(), "{text}");
    // Only the two symbolic links (which lead nowhere readable) are new in the workspace.
    let mut workspace_after = tree(&env.workdir(), &["leak-s", "st-s"]);
    workspace_after.remove(Path::new(""));
    let mut workspace_before = workspace_before;
    workspace_before.remove(Path::new(""));
    assert_unchanged("the workspace", &workspace_before, &workspace_after, &text);
}

/// `dsh` of `env` whose state directory is `work/.dsh-state`.
fn dsh_state_in_workspace(env: &Env, config: &str) -> Command {
    let mut command = env.dsh_configured(config);
    command.env("DSH_STATE_DIR", env.workdir().join(".dsh-state"));
    command
}

#[test]
fn a_state_directory_inside_the_workspace_stays_hidden_and_cannot_be_replaced() {
    let extra = |who: &str| {
        probes(&[(
            "replace",
            format!(
                "mv .dsh-state .dsh-moved-{who} && mkdir .dsh-state && echo planted > .dsh-state/planted-{who}"
            ),
        )])
    };
    let attack = |env: &Env, who: &str| {
        let state = env.workdir().join(".dsh-state");
        format!(
            "{}\nfind . | sed 's/^/wfound=/'\n{}",
            state_dir_attacks(&state.display().to_string(), &some_cwasm(&state), who),
            extra(who)
        )
    };
    let local_env = Env::new();
    let state = local_env.workdir().join(".dsh-state");
    call_command(
        dsh_state_in_workspace(&local_env, LOCAL),
        "bash",
        &bash_args("true"),
    );
    let key = hex(&std::fs::read(state.join("cache/key")).unwrap());
    let out = call_command(
        dsh_state_in_workspace(&local_env, LOCAL),
        "bash",
        &bash_args(&attack(&local_env, "l")),
    );
    let text = ran("local", &out);
    assert_probes("local", &text, STATE_PROBES, true);
    assert_probes("local", &text, &["replace", "list", "find"], true);
    assert_eq!(said(&text, "key"), [key.as_str()], "{text}");

    let env = Env::new();
    let state = env.workdir().join(".dsh-state");
    // A first sandboxed call makes what dsh makes for the sandbox (its slot directory).
    call_command(
        dsh_state_in_workspace(&env, SANDBOX),
        "bash",
        &bash_args("true"),
    );
    let key = hex(&std::fs::read(state.join("cache/key")).unwrap());
    let before = tree(&state, DSH_WRITES);
    let out = call_command(
        dsh_state_in_workspace(&env, SANDBOX),
        "bash",
        &bash_args(&attack(&env, "s")),
    );
    let text = ran("sandbox", &out);
    assert_probes("sandbox", &text, STATE_PROBES, false);
    assert_probes("sandbox", &text, &["replace"], false);
    assert_state_hidden(&text, &key, &state);
    let tmp = said(&text, "tmpdir");
    let tmp = Path::new(tmp.first().copied().unwrap_or("/nonexistent"));
    let shm = tmp.with_file_name("shm");
    let walked: Vec<&str> = said(&text, "wfound")
        .into_iter()
        .filter(|found| {
            let path = env.workdir().join(found);
            path.starts_with(&state)
                && !tmp.starts_with(&path)
                && !path.starts_with(tmp)
                && !path.starts_with(&shm)
        })
        .collect();
    assert!(
        walked.is_empty(),
        "find from the workspace walked into the state dir: {walked:?}\n{text}"
    );
    assert_unchanged(
        "the state directory",
        &before,
        &tree(&state, DSH_WRITES),
        &text,
    );
    assert!(!env.workdir().join(".dsh-moved-s").exists(), "{text}");
    assert!(!env.workdir().join("hard-s").exists(), "{text}");
}

/// A configuration under `executor` whose gate denies `forbidden-MARKER` to bash.
fn gated_config(executor: &str, marker: &str) -> String {
    format!(
        "{executor}\n[[gate.rules]]\naction = \"deny\"\ntool = \"bash\"\narg = \"command\"\npattern = \"forbidden-{marker}\"\nreason = \"held by the gate\"\n"
    )
}

/// The attacks on the configuration file `config` (relative to the workspace), with
/// `.keep` (a copy) and `.norule` (the same without the gate rule) beside the workspace
/// root; `last` is the final attack, which leaves the rule-less file in place.
fn config_attacks(config: &str, who: &str, last: (&'static str, String)) -> String {
    let restore = format!("cat .keep > {config}; chmod 0644 {config}");
    let mut list: Vec<(&str, String)> = vec![
        ("truncate", format!(": > {config}")),
        ("restore1", restore.clone()),
        ("append", format!("echo '# appended' >> {config}")),
        ("restore2", restore.clone()),
        ("chmod", format!("chmod 0666 {config}")),
        ("restore3", restore.clone()),
        ("touch_d", format!("touch -d 2001-02-03 {config}")),
        (
            "xattr",
            format!(
                "python3 -c 'import os,sys; os.setxattr(sys.argv[1], \"user.x\", b\"1\")' {config}"
            ),
        ),
        ("rm", format!("rm -f {config}")),
        ("restore4", format!("cp .keep {config}")),
        ("ln_f", format!("ln -f .norule {config}")),
        ("restore5", format!("rm -f {config} && cp .keep {config}")),
        (
            "hardlink",
            format!("ln {config} .hl-{who} && echo '# via a link' >> .hl-{who}"),
        ),
        ("restore6", format!("rm -f .hl-{who} && {restore}")),
    ];
    list.push(last);
    probes(&list)
}

const CONFIG_PROBES: &[&str] = &[
    "truncate", "append", "chmod", "touch_d", "xattr", "rm", "ln_f", "hardlink",
];

/// Writes `config` at `path` (0644) with `.keep` and `.norule` in the workspace.
fn place_config(env: &Env, path: &Path, config: &str, norule: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, config).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(env.workdir().join(".keep"), config).unwrap();
    std::fs::write(env.workdir().join(".norule"), norule).unwrap();
}

#[test]
fn a_config_file_in_the_workspace_survives_every_attack_and_its_gate_rule_still_denies() {
    let marker = unique_marker();
    let replace = || {
        (
            "replace",
            "cp .norule .new && mv -f .new dsh.toml".to_string(),
        )
    };
    // Local: the attacks work, and the live configuration loses its rule.
    let env = Env::new();
    let path = env.workdir().join("dsh.toml");
    place_config(&env, &path, &gated_config(LOCAL, &marker), LOCAL);
    let server = serve_with_config_file(&env, &path);
    let denied = echo_forbidden(&server, &marker);
    assert!(
        denied.is_error && denied.code.as_deref() == Some("DENIED"),
        "{denied:?}"
    );
    let text = server.call_ok(
        "bash",
        bash_args(&config_attacks("dsh.toml", "l", replace())),
    );
    assert_probes("local", &text, CONFIG_PROBES, true);
    assert_probes("local", &text, &["replace"], true);
    assert!(
        wait_for(Duration::from_secs(15), || !echo_forbidden(
            &server, &marker
        )
        .is_error),
        "local: the replaced configuration never applied\n{text}\n{}",
        server.stderr()
    );
    drop(server);

    // Sandbox: the file is as it was, and the rule still denies.
    let env = Env::new();
    let path = env.workdir().join("dsh.toml");
    let config = gated_config(SANDBOX, &marker);
    place_config(&env, &path, &config, SANDBOX);
    let server = serve_with_config_file(&env, &path);
    assert!(echo_forbidden(&server, &marker).is_error);
    let before = state_of(&path).unwrap();
    let text = server.call_ok(
        "bash",
        bash_args(&config_attacks("dsh.toml", "s", replace())),
    );
    assert_probes("sandbox", &text, CONFIG_PROBES, false);
    assert_probes("sandbox", &text, &["replace"], false);
    // What the watcher would have seen has had the time to apply.
    std::thread::sleep(Duration::from_millis(1000));
    let after = state_of(&path);
    assert_eq!(
        after.as_ref(),
        Some(&before),
        "the configuration file changed:\n{text}"
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), config);
    assert!(
        !env.workdir().join(".hl-s").exists(),
        "a hard link was made:\n{text}"
    );
    let denied = echo_forbidden(&server, &marker);
    assert!(
        denied.is_error && denied.code.as_deref() == Some("DENIED"),
        "the gate rule no longer denies: {denied:?}\n{text}"
    );
}

#[test]
fn a_config_file_deeper_in_the_workspace_cannot_be_moved_away_with_its_directory() {
    let marker = unique_marker();
    let rename = || {
        (
            "rename_dir",
            "mv sub sub2 && mkdir sub && cp .norule sub/dsh.toml".to_string(),
        )
    };
    let env = Env::new();
    let path = env.workdir().join("sub/dsh.toml");
    place_config(&env, &path, &gated_config(LOCAL, &marker), LOCAL);
    {
        let server = serve_with_config_file(&env, &path);
        assert!(echo_forbidden(&server, &marker).is_error);
        let text = server.call_ok(
            "bash",
            bash_args(&config_attacks("sub/dsh.toml", "l", rename())),
        );
        assert_probes("local", &text, CONFIG_PROBES, true);
        assert_probes("local", &text, &["rename_dir"], true);
    }
    // The next dsh reads the file the attack put in place.
    let mut command = env.dsh();
    command.arg("--config").arg(&path);
    let out = call_command(
        command,
        "bash",
        &bash_args(&format!("echo forbidden-{marker}")),
    );
    assert!(
        out.code.is_none(),
        "local: the rule-less file applies: {out:?}"
    );

    let env = Env::new();
    let path = env.workdir().join("sub/dsh.toml");
    let config = gated_config(SANDBOX, &marker);
    place_config(&env, &path, &config, SANDBOX);
    let server = serve_with_config_file(&env, &path);
    assert!(echo_forbidden(&server, &marker).is_error);
    let before = (
        state_of(&path).unwrap(),
        state_of(&env.workdir().join("sub")).unwrap(),
    );
    let text = server.call_ok(
        "bash",
        bash_args(&config_attacks("sub/dsh.toml", "s", rename())),
    );
    assert_probes("sandbox", &text, CONFIG_PROBES, false);
    assert_probes("sandbox", &text, &["rename_dir"], false);
    std::thread::sleep(Duration::from_millis(1000));
    assert!(
        !env.workdir().join("sub2").exists(),
        "sub was renamed:\n{text}"
    );
    assert_eq!(
        (state_of(&path), state_of(&env.workdir().join("sub"))),
        (Some(before.0), Some(before.1)),
        "the configuration or its directory changed:\n{text}"
    );
    let denied = echo_forbidden(&server, &marker);
    assert!(
        denied.is_error && denied.code.as_deref() == Some("DENIED"),
        "the gate rule no longer denies: {denied:?}\n{text}"
    );
    drop(server);
    let mut command = env.dsh();
    command.arg("--config").arg(&path);
    let out = call_command(
        command,
        "bash",
        &bash_args(&format!("echo forbidden-{marker}")),
    );
    assert_eq!(out.code.as_deref(), Some("DENIED"), "a fresh dsh: {out:?}");
}

#[test]
fn a_plugin_directory_in_the_workspace_gets_no_component_written_into_it() {
    let attack = |who: &str| {
        probes(&[
            ("new_wasm", format!("cp /bin/true plugins/evil-{who}.wasm")),
            ("symlink_wasm", format!("ln -s /bin/true plugins/link-{who}.wasm")),
            ("overwrite", "echo x > plugins/keep.txt".to_string()),
            ("touch_d", "touch -d 2001-02-03 plugins".to_string()),
            (
                "replace_dir",
                format!("mv plugins plugins-{who} && mkdir plugins && cp /bin/true plugins/evil2-{who}.wasm"),
            ),
        ])
    };
    let names = [
        "new_wasm",
        "symlink_wasm",
        "overwrite",
        "touch_d",
        "replace_dir",
    ];
    let call = |env: &Env, config: &str, who: &str| {
        let plugins = env.workdir().join("plugins");
        std::fs::create_dir_all(&plugins).unwrap();
        std::fs::write(plugins.join("keep.txt"), "kept\n").unwrap();
        let config_file = env.dir.path().join("dsh.toml");
        std::fs::write(&config_file, config).unwrap();
        let mut command = env.dsh();
        command
            .arg("--config")
            .arg(&config_file)
            .arg("--plugins")
            .arg(&plugins);
        let before = tree(&plugins, &[]);
        (
            call_command(command, "bash", &bash_args(&attack(who))),
            before,
        )
    };
    let env = Env::new();
    let (out, _) = call(&env, LOCAL, "l");
    let text = ran("local", &out);
    assert_probes("local", &text, &names, true);
    assert!(env.workdir().join("plugins/evil2-l.wasm").exists());

    let env = Env::new();
    let (out, before) = call(&env, SANDBOX, "s");
    let text = ran("sandbox", &out);
    assert_probes("sandbox", &text, &names, false);
    assert_unchanged(
        "the plugin directory",
        &before,
        &tree(&env.workdir().join("plugins"), &[]),
        &text,
    );
    assert!(!env.workdir().join("plugins-s").exists(), "{text}");
}

// =================================================================================
// 4. The control socket.

#[test]
fn with_unix_sockets_allowed_the_control_socket_is_unreachable_and_a_workspace_socket_is() {
    let env = Env::new();
    let marker = unique_marker();
    let socket = env.workdir().join(format!("agent-{marker}.sock"));
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            use std::io::Write;
            let mut stream = stream;
            let _ = stream.write_all(b"unix-hello\n");
        }
    });
    let connect = |path: &Path| {
        format!(
            "python3 -c 'import socket,sys\ns=socket.socket(socket.AF_UNIX)\ns.connect(sys.argv[1])\nprint(\"said=\" + s.recv(64).decode().strip())' {}",
            path.display()
        )
    };
    let attack = |server: &McpServer| {
        let control = env.state_dir().join(format!("run/{}.sock", server.pid()));
        assert!(
            wait_for(Duration::from_secs(10), || control.exists()),
            "no control socket at {}",
            control.display()
        );
        let script = probes(&[
            (
                "control",
                format!(
                    "python3 -c 'import socket,sys\ns=socket.socket(socket.AF_UNIX)\ns.connect(sys.argv[1])' {}",
                    control.display()
                ),
            ),
            ("workspace", connect(&socket)),
        ]);
        server.call_ok("bash", bash_args(&script))
    };
    {
        let server = McpServer::start(&env, LOCAL);
        let text = attack(&server);
        assert_probes("local", &text, &["control", "workspace"], true);
    }
    let config = format!("{SANDBOX}[process.sandbox]\nunix_sockets = true\n");
    let server = McpServer::start(&env, &config);
    let text = attack(&server);
    assert_probes("sandbox", &text, &["control"], false);
    assert_probes("sandbox", &text, &["workspace"], true);
    assert_eq!(said(&text, "said"), ["unix-hello"], "{text}");
    assert!(
        text.contains("[sandbox: fs=workspace net=unix]"),
        "the marker says unix sockets are allowed: {text}"
    );
}

// =================================================================================
// 5. Metadata outside the writable set.

#[test]
fn metadata_and_sizes_of_files_outside_the_writable_set_are_unchanged() {
    let env = Env::new();
    let outside = tempfile::tempdir().unwrap();
    let attack = |who: &str| {
        let f = outside.path().join(format!("f-{who}"));
        let d = outside.path().join(format!("d-{who}"));
        std::fs::write(&f, "original\n").unwrap();
        std::fs::create_dir(&d).unwrap();
        let (f, d) = (f.display().to_string(), d.display().to_string());
        probes(&[
            // chown first: it clears the set-user-ID bit chmod sets.
            ("chown", format!("chown 1234:1234 {f}")),
            ("chmod", format!("chmod 4777 {f}")),
            ("touch_d", format!("touch -d 2001-02-03 {f}")),
            (
                "xattr",
                format!(
                    "if command -v setfattr >/dev/null; then setfattr -n user.x -v 1 {f}; \
                     else python3 -c 'import os,sys; os.setxattr(sys.argv[1], \"user.x\", b\"1\")' {f}; fi"
                ),
            ),
            ("chattr", format!("chattr +d {f}")),
            ("truncate", format!("truncate -s 1 {f}")),
            (
                "ro_fd_truncate",
                format!("python3 -c 'import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.truncate(\"/proc/self/fd/%d\" % fd, 0)' {f}"),
            ),
            ("fallocate", format!("fallocate -l 1M {f}")),
            ("dir_chmod", format!("chmod 0777 {d}")),
            ("dir_chown", format!("chown 1234 {d}")),
            ("dir_touch_d", format!("touch -d 2001-02-03 {d}")),
        ])
    };
    let names = [
        "chmod",
        "chown",
        "touch_d",
        "xattr",
        "chattr",
        "truncate",
        "ro_fd_truncate",
        "fallocate",
        "dir_chmod",
        "dir_chown",
        "dir_touch_d",
    ];
    let text = ran("local", &bash(&env, LOCAL, &attack("l")));
    assert_probes("local", &text, &names, true);
    let changed = state_of(&outside.path().join("f-l")).unwrap();
    assert_eq!(changed.mode & 0o7777, 0o4777, "{text}");
    assert_eq!(changed.uid, 1234, "{text}");
    assert_eq!(changed.size, 1 << 20, "{text}");
    assert!(changed.xattrs.iter().any(|(n, _)| n == b"user.x"), "{text}");
    assert!(
        changed.flags.is_some_and(|f| f & FS_NODUMP_FL != 0),
        "{text}"
    );

    let script = attack("s");
    let before = tree(outside.path(), &["f-l", "d-l"]);
    let text = ran("sandbox", &bash(&env, SANDBOX, &script));
    assert_probes("sandbox", &text, &names, false);
    let mut after = tree(outside.path(), &["f-l", "d-l"]);
    // The directory holding them is the test's; what is compared is f-s and d-s.
    after.remove(Path::new(""));
    let mut before = before;
    before.remove(Path::new(""));
    assert_unchanged("the outside file and directory", &before, &after, &text);
    assert!(
        text.contains("[sandbox: fs=workspace net=off]"),
        "the marker says net=off without unix sockets: {text}"
    );
}

// =================================================================================
// 6. Inherited descriptors, the host's terminal, the run's session.

impl Pty {
    /// Raw mode (no echo, no line editing), `cols`x24, master non-blocking.
    fn raw(self, cols: u16) -> Pty {
        // SAFETY: ioctls and termios calls on descriptors this value owns.
        unsafe {
            let mut termios: libc::termios = std::mem::zeroed();
            assert_eq!(libc::tcgetattr(self.slave.as_raw_fd(), &mut termios), 0);
            libc::cfmakeraw(&mut termios);
            assert_eq!(
                libc::tcsetattr(self.slave.as_raw_fd(), libc::TCSANOW, &termios),
                0
            );
            let size = libc::winsize {
                ws_row: 24,
                ws_col: cols,
                ws_xpixel: 0,
                ws_ypixel: 0,
            };
            assert_eq!(
                libc::ioctl(self.master.as_raw_fd(), libc::TIOCSWINSZ, &size),
                0
            );
            let flags = libc::fcntl(self.master.as_raw_fd(), libc::F_GETFL);
            libc::fcntl(
                self.master.as_raw_fd(),
                libc::F_SETFL,
                flags | libc::O_NONBLOCK,
            );
        }
        self
    }

    fn cols(&self) -> u16 {
        // SAFETY: TIOCGWINSZ fills a winsize.
        unsafe {
            let mut size: libc::winsize = std::mem::zeroed();
            assert_eq!(
                libc::ioctl(self.master.as_raw_fd(), libc::TIOCGWINSZ, &mut size),
                0
            );
            size.ws_col
        }
    }

    /// What the terminal's side wrote, so far.
    fn received(&self) -> Vec<u8> {
        let mut all = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            // SAFETY: reading into a buffer of the length given.
            let n =
                unsafe { libc::read(self.master.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                return all;
            }
            all.extend_from_slice(&buf[..n as usize]);
        }
    }

    /// Types `bytes` into the terminal.
    fn type_in(&self, bytes: &[u8]) {
        // SAFETY: writing a buffer of the length given.
        let n = unsafe { libc::write(self.master.as_raw_fd(), bytes.as_ptr().cast(), bytes.len()) };
        assert_eq!(n, bytes.len() as isize);
    }

    /// Bytes typed in and not read yet.
    fn unread(&self) -> i32 {
        let mut n: libc::c_int = 0;
        // SAFETY: FIONREAD fills an int.
        unsafe { libc::ioctl(self.slave.as_raw_fd(), libc::FIONREAD, &mut n) };
        n
    }
}

/// `dsh call bash COMMAND` under `config`, started the way a user's shell would start
/// it: in its own session with a terminal (a fresh pty) as its controlling terminal,
/// and with descriptor 7 open for appending on `sink`. `COMMAND` must create
/// `waiting-WHO` and then wait for `go-WHO`: in between, the test looks at what dsh
/// holds (descriptor 7's target, its controlling terminal).
fn call_holding_fd7_and_a_terminal(
    env: &Env,
    config: &str,
    sink: &Path,
    who: &str,
    command: &str,
) -> (CallOutput, Option<PathBuf>, i64) {
    use std::os::unix::process::CommandExt;
    let pty = open_pty();
    let sink_file = std::fs::OpenOptions::new().append(true).open(sink).unwrap();
    let sink_fd = sink_file.as_raw_fd();
    let slave_fd = pty.slave.as_raw_fd();
    let mut dsh = env.dsh_configured(config);
    dsh.args(["call", "bash", &bash_args(command).to_string(), "--json"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: only async-signal-safe system calls between fork and exec.
    unsafe {
        dsh.pre_exec(move || {
            if libc::setsid() < 0 || libc::ioctl(slave_fd, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let done = if sink_fd == 7 {
                libc::fcntl(7, libc::F_SETFD, 0)
            } else {
                libc::dup2(sink_fd, 7)
            };
            if done < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = dsh.spawn().unwrap();
    let pid = child.id();
    let waiting = env.workdir().join(format!("waiting-{who}"));
    let arrived = wait_for(Duration::from_secs(120), || waiting.exists());
    let fd7 = std::fs::read_link(format!("/proc/{pid}/fd/7")).ok();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Field 7 (tty_nr): the fifth after the command name's closing parenthesis.
    let tty_nr = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(4)?.parse().ok())
        .unwrap_or(0);
    std::fs::write(env.workdir().join(format!("go-{who}")), "").unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(arrived, "the command never started: {output:?}");
    drop(pty);
    (CallOutput::parse(output), fd7, tty_nr)
}

#[test]
fn a_run_inherits_no_descriptor_and_no_terminal_from_dsh_and_leads_its_own_session() {
    let env = Env::new();
    let outside = tempfile::tempdir().unwrap();
    let script = |who: &str| {
        format!(
            ": > waiting-{who}\nfor i in $(seq 3000); do [ -e go-{who} ] && break; sleep 0.02; done\n{}\necho \"session=$(ps -o sid= -p $$ | tr -d ' ') pid=$$\"\n",
            probes(&[
                ("fd7", "echo leaked >&7".to_string()),
                ("tty", "( exec 3</dev/tty )".to_string()),
            ])
        )
    };
    for (half, config, who) in [("local", LOCAL, "l"), ("sandbox", SANDBOX, "s")] {
        let sink = outside.path().join(format!("sink-{who}"));
        std::fs::write(&sink, "").unwrap();
        let (out, fd7, tty_nr) =
            call_holding_fd7_and_a_terminal(&env, config, &sink, who, &script(who));
        let text = ran(half, &out);
        // The descriptor and the terminal did reach dsh.
        assert_eq!(fd7.as_deref(), Some(sink.as_path()), "{half}: dsh's fd 7");
        assert_ne!(tty_nr, 0, "{half}: dsh has a controlling terminal");
        // And neither reached the run.
        assert_probes(half, &text, &["fd7", "tty"], false);
        assert_eq!(
            std::fs::read_to_string(&sink).unwrap(),
            "",
            "{half}: {text}"
        );
        assert!(text.contains("Bad file descriptor"), "{half}: {text}");
        assert!(text.contains("No such device or address"), "{half}: {text}");
        let session = said(&text, "session");
        let (sid, pid) = session
            .first()
            .and_then(|s| s.split_once(" pid="))
            .unwrap_or_else(|| panic!("{half}: no session line in {text}"));
        assert_eq!(sid, pid, "{half}: the run leads its own session: {text}");
    }
}

// =================================================================================
// 7. Other terminals.

#[test]
fn another_terminal_can_be_neither_written_nor_resized_nor_read_from_the_sandbox() {
    let env = Env::new();
    let marker = unique_marker();
    let attack = |pty: &Pty| {
        let n = pty.name.display();
        probes(&[
            (
                "read",
                format!("r=$(timeout 3 head -c 5 {n}) && [ \"$r\" = ready ] && echo \"read=$r\""),
            ),
            ("write", format!("echo pwned-{marker} > {n}")),
            ("resize", format!("stty -F {n} cols 33")),
        ])
    };
    let names = ["read", "write", "resize"];
    let pty = open_pty().raw(80);
    pty.type_in(b"ready");
    let text = ran("local", &bash(&env, LOCAL, &attack(&pty)));
    assert_probes("local", &text, &names, true);
    assert!(
        String::from_utf8_lossy(&pty.received()).contains(&format!("pwned-{marker}")),
        "{text}"
    );
    assert_eq!(pty.cols(), 33, "{text}");
    assert_eq!(pty.unread(), 0, "{text}");

    let pty = open_pty().raw(80);
    pty.type_in(b"ready");
    let text = ran("sandbox", &bash(&env, SANDBOX, &attack(&pty)));
    assert_probes("sandbox", &text, &names, false);
    assert_eq!(
        String::from_utf8_lossy(&pty.received()),
        "",
        "the terminal received bytes: {text}"
    );
    assert_eq!(pty.cols(), 80, "the terminal was resized: {text}");
    assert_eq!(pty.unread(), 5, "what was typed was read: {text}");
}

// =================================================================================
// 8. SysV IPC.

/// A SysV object the test made with `ipcmk`, removed when dropped.
struct Ipc {
    kind: &'static str,
    id: i32,
}

impl Ipc {
    fn make(args: &[&str], kind: &'static str) -> Ipc {
        let output = Command::new("ipcmk").args(args).output().unwrap();
        let text = String::from_utf8_lossy(&output.stdout);
        let id = text
            .rsplit(':')
            .next()
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("ipcmk {args:?}: {text}"));
        Ipc { kind, id }
    }

    fn shm() -> Ipc {
        Ipc::make(&["-M", "4096"], "m")
    }

    fn queue() -> Ipc {
        Ipc::make(&["-Q"], "q")
    }

    /// For a segment: whether it exists and is not marked for removal.
    fn shm_intact(&self) -> bool {
        // SAFETY: IPC_STAT fills a shmid_ds.
        let mut ds: libc::shmid_ds = unsafe { std::mem::zeroed() };
        let found = unsafe { libc::shmctl(self.id, libc::IPC_STAT, &mut ds) };
        const SHM_DEST: u16 = 0o1000;
        found == 0 && (ds.shm_perm.mode as u16 & SHM_DEST) == 0
    }

    fn queue_exists(&self) -> bool {
        // SAFETY: IPC_STAT fills a msqid_ds.
        let mut ds: libc::msqid_ds = unsafe { std::mem::zeroed() };
        unsafe { libc::msgctl(self.id, libc::IPC_STAT, &mut ds) == 0 }
    }
}

impl Drop for Ipc {
    fn drop(&mut self) {
        let _ = Command::new("ipcrm")
            .args([format!("-{}", self.kind), self.id.to_string()])
            .stderr(Stdio::null())
            .status();
    }
}

/// A segment attached read-only in the test (so its bytes can be read even after it is
/// removed), detached when dropped.
struct Attached(*const u8);

impl Attached {
    fn to(shm: &Ipc) -> Attached {
        // SAFETY: attaching an existing segment read-only.
        let at = unsafe { libc::shmat(shm.id, std::ptr::null(), libc::SHM_RDONLY) };
        assert_ne!(
            at as isize,
            -1,
            "shmat: {}",
            std::io::Error::last_os_error()
        );
        Attached(at as *const u8)
    }

    fn head(&self) -> Vec<u8> {
        // SAFETY: the segment is 4096 bytes and stays attached while self lives.
        unsafe { std::slice::from_raw_parts(self.0, 5).to_vec() }
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        // SAFETY: detaching what `to` attached.
        unsafe { libc::shmdt(self.0.cast()) };
    }
}

#[test]
fn sysv_ipc_objects_of_others_can_be_neither_written_nor_removed_nor_listed_from_the_sandbox() {
    let env = Env::new();
    let attack = |shm: &Ipc, queue: &Ipc| {
        format!(
            "{}ipcs -m | awk '$2 ~ /^[0-9]+$/ {{print \"shm=\" $2}}'\nawk 'NR>1 {{print \"procshm=\" $2}}' /proc/sysvipc/shm\nipcs -q | awk '$2 ~ /^[0-9]+$/ {{print \"msq=\" $2}}'\n{}",
            probes(&[(
                "attach_write",
                format!(
                    "python3 -c 'import ctypes,sys\nl=ctypes.CDLL(None,use_errno=True)\nl.shmat.restype=ctypes.c_void_p\nl.shmat.argtypes=[ctypes.c_int,ctypes.c_void_p,ctypes.c_int]\np=l.shmat(int(sys.argv[1]),None,0)\nif p is None or p==ctypes.c_void_p(-1).value: sys.exit(\"shmat: errno %d\" % ctypes.get_errno())\nctypes.memmove(p,b\"pwned\",5)' {}",
                    shm.id
                ),
            )]),
            probes(&[
                ("remove_shm", format!("ipcrm -m {}", shm.id)),
                ("remove_queue", format!("ipcrm -q {}", queue.id)),
            ])
            .trim_start_matches("set -o pipefail\n")
        )
    };
    let names = ["attach_write", "remove_shm", "remove_queue"];
    let (shm, queue) = (Ipc::shm(), Ipc::queue());
    let attached = Attached::to(&shm);
    let text = ran("local", &bash(&env, LOCAL, &attack(&shm, &queue)));
    assert_probes("local", &text, &names, true);
    assert!(
        said(&text, "shm").contains(&shm.id.to_string().as_str()),
        "{text}"
    );
    assert!(
        said(&text, "msq").contains(&queue.id.to_string().as_str()),
        "{text}"
    );
    assert_eq!(attached.head(), b"pwned", "{text}");
    assert!(!shm.shm_intact() && !queue.queue_exists(), "{text}");
    drop(attached);

    let (shm, queue) = (Ipc::shm(), Ipc::queue());
    let attached = Attached::to(&shm);
    let text = ran("sandbox", &bash(&env, SANDBOX, &attack(&shm, &queue)));
    assert_probes("sandbox", &text, &names, false);
    let id = shm.id.to_string();
    assert!(
        !said(&text, "shm").contains(&id.as_str())
            && !said(&text, "procshm").contains(&id.as_str()),
        "the segment was listed: {text}"
    );
    assert!(
        !said(&text, "msq").contains(&queue.id.to_string().as_str()),
        "the queue was listed: {text}"
    );
    assert_eq!(attached.head(), [0u8; 5], "the segment was written: {text}");
    assert!(shm.shm_intact(), "the segment was removed: {text}");
    assert!(queue.queue_exists(), "the queue was removed: {text}");
}

// =================================================================================
// 9. Raw devices.

/// The block device `/` is mounted from, with its major and minor numbers.
fn root_block_device() -> Option<(PathBuf, u32, u32)> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let line = info
        .lines()
        .rev()
        .find(|l| l.split(' ').nth(4) == Some("/"))?;
    let (major, minor) = line.split(' ').nth(2)?.split_once(':')?;
    let uevent = std::fs::read_to_string(format!("/sys/dev/block/{major}:{minor}/uevent")).ok()?;
    let name = uevent.lines().find_map(|l| l.strip_prefix("DEVNAME="))?;
    let dev = Path::new("/dev").join(name);
    if !std::fs::metadata(&dev).ok()?.file_type().is_block_device() {
        return None;
    }
    Some((dev, major.parse().ok()?, minor.parse().ok()?))
}

#[test]
fn the_root_disk_a_device_node_made_for_it_and_dev_shm_and_mqueue_are_closed_to_the_sandbox() {
    let env = Env::new();
    let marker = unique_marker();
    let disk = root_block_device();
    if disk.is_none() {
        eprintln!("no block device behind /: the raw-disk probes are skipped");
    }
    let mqueue = Path::new("/dev/mqueue").is_dir();
    if !mqueue {
        eprintln!("no /dev/mqueue here: its probe is skipped");
    }
    // Whether this test itself (root, unconfined) can read the disk: not everywhere (a
    // device cgroup may forbid it), and then only the sandbox half of reading it is
    // asserted.
    let readable = disk.as_ref().is_some_and(|(dev, _, _)| {
        let mut buf = vec![0u8; 4096];
        std::fs::File::open(dev)
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut buf))
            .is_ok()
    });
    if disk.is_some() && !readable {
        eprintln!(
            "the root disk is unreadable to this test itself: only its sandbox half is asserted"
        );
    }
    // `/dev/shm` is the run's own (its slot's): the probe writes there, never the host's.
    let mut names = vec![];
    let mut local_names = vec!["shm"];
    if disk.is_some() {
        names.extend(["raw_read", "mknod", "mknod_read"]);
        local_names.push("mknod");
        if readable {
            local_names.extend(["raw_read", "mknod_read"]);
        }
    }
    if mqueue {
        names.push("mqueue");
        local_names.push("mqueue");
    }
    let attack = |who: &str| {
        let mut list = vec![("shm", format!("touch /dev/shm/dsh-{marker}-{who}"))];
        if let Some((dev, major, minor)) = &disk {
            list.push((
                "raw_read",
                format!("[ \"$(head -c 4096 {} | wc -c)\" = 4096 ]", dev.display()),
            ));
            list.push(("mknod", format!("mknod blk-{who} b {major} {minor}")));
            list.push((
                "mknod_read",
                format!("[ \"$(head -c 4096 blk-{who} | wc -c)\" = 4096 ]"),
            ));
        }
        if mqueue {
            list.push(("mqueue", format!("touch /dev/mqueue/dsh-{marker}-{who}")));
        }
        probes(&list)
    };
    let _cleanup = Cleanup(
        ["l", "s"]
            .iter()
            .flat_map(|who| {
                [
                    PathBuf::from(format!("/dev/shm/dsh-{marker}-{who}")),
                    PathBuf::from(format!("/dev/mqueue/dsh-{marker}-{who}")),
                ]
            })
            .collect(),
    );
    let text = ran("local", &bash(&env, LOCAL, &attack("l")));
    assert_probes("local", &text, &local_names, true);
    let text = ran("sandbox", &bash(&env, SANDBOX, &attack("s")));
    assert_probes("sandbox", &text, &names, false);
    assert_eq!(probe(&text, "shm"), Some(true), "its own /dev/shm: {text}");
    assert!(
        !Path::new(&format!("/dev/shm/dsh-{marker}-s")).exists(),
        "{text}"
    );
    assert!(
        !Path::new(&format!("/dev/mqueue/dsh-{marker}-s")).exists(),
        "{text}"
    );
    assert!(
        !env.workdir().join("blk-s").exists(),
        "a device node was made: {text}"
    );
}

// =================================================================================
// 10. /proc links into other processes.

#[test]
fn proc_links_into_dsh_init_and_a_bystander_lead_nowhere_from_the_sandbox() {
    let env = Env::new();
    let marker = unique_marker();
    let mut bystander = Command::new("sleep").arg("300").spawn().unwrap();
    let bpid = bystander.id();
    // Whether this test itself may go through pid 1's root (not in every container).
    let init_root = std::fs::read_dir("/proc/1/root/").is_ok();
    let attack = |who: &str| {
        let state = env.state_dir().display().to_string();
        let mut list = vec![
            ("ppid_root", "ls /proc/$PPID/root/ >/dev/null".to_string()),
            (
                "bystander_root",
                hex_of("bkey", &format!("/proc/{bpid}/root{state}/cache/key")),
            ),
            ("ppid_cwd", format!("touch /proc/$PPID/cwd/planted-{marker}-{who}")),
            (
                "event_log",
                format!(
                    "f=$(find /proc/$PPID/fd -lname '*events.jsonl' -print -quit) && [ -n \"$f\" ] && echo \"pwned-$((6*7))-{marker}-{who}\" >> \"$f\""
                ),
            ),
        ];
        list.push((
            "init_root",
            hex_of("ikey", &format!("/proc/1/root{state}/cache/key")),
        ));
        probes(&list)
    };
    let _cleanup = Cleanup(
        ["l", "s"]
            .iter()
            .map(|who| env.dir.path().join(format!("planted-{marker}-{who}")))
            .collect(),
    );
    let text = ran("local", &bash(&env, LOCAL, &attack("l")));
    let key = hex(&std::fs::read(env.state_dir().join("cache/key")).unwrap());
    let mut local_names = vec!["ppid_root", "bystander_root", "ppid_cwd", "event_log"];
    if init_root {
        local_names.push("init_root");
    } else {
        eprintln!("/proc/1/root is closed to this test itself: its local half is not asserted");
    }
    assert_probes("local", &text, &local_names, true);
    assert_eq!(said(&text, "bkey"), [key.as_str()], "{text}");
    assert!(env.dir.path().join(format!("planted-{marker}-l")).exists());
    let logged = |who: &str| {
        std::fs::read_dir(env.state_dir().join("sessions"))
            .unwrap()
            .flatten()
            .any(|dir| {
                std::fs::read_to_string(dir.path().join("events.jsonl"))
                    .unwrap_or_default()
                    .contains(&format!("pwned-42-{marker}-{who}"))
            })
    };
    assert!(logged("l"), "local: the event log was not written: {text}");

    let text = ran("sandbox", &bash(&env, SANDBOX, &attack("s")));
    assert_probes(
        "sandbox",
        &text,
        &[
            "ppid_root",
            "bystander_root",
            "ppid_cwd",
            "event_log",
            "init_root",
        ],
        false,
    );
    assert!(!text.contains(&key), "the key leaked: {text}");
    assert!(
        !env.dir.path().join(format!("planted-{marker}-s")).exists(),
        "{text}"
    );
    assert!(
        !logged("s"),
        "dsh's event log was written through /proc: {text}"
    );
    let _ = bystander.kill();
    let _ = bystander.wait();
}

// =================================================================================
// 11. Language servers.

#[test]
fn a_language_server_started_for_a_sandboxed_session_is_sandboxed_too() {
    let env = Env::new();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(env.workdir().join("x.zz"), "nothing\n").unwrap();
    let config = |executor: &str, who: &str| {
        format!(
            "{executor}\n[lsp]\ndefaults = false\nrequest_timeout_ms = 2000\n\n[lsp.servers.evil]\ncommand = [\"bash\", \"-c\", \"touch {}/lsp-was-here-{who}; exec sleep 30\"]\nextensions = [\"zz\"]\nroot_markers = []\n",
            outside.path().display()
        )
    };
    let args = json!({"op": "symbols", "path": "x.zz", "line": 1});
    let local = env.call_configured(&config(LOCAL, "l"), "lsp", &args, &[]);
    let planted = outside.path().join("lsp-was-here-l");
    assert!(
        wait_for(Duration::from_secs(5), || planted.exists()),
        "local: the server did not run: {local:?}"
    );
    let sandboxed = env.call_configured(&config(SANDBOX, "s"), "lsp", &args, &[]);
    eprintln!("--- local ---\n{local:?}\n--- sandbox ---\n{sandboxed:?}");
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !outside.path().join("lsp-was-here-s").exists(),
        "the language server wrote outside the workspace: {sandboxed:?}"
    );
}

// =================================================================================
// 12. The README's per-tool example.

#[test]
fn the_readme_tools_example_sandboxes_terminal_sessions_and_bash() {
    let env = Env::new();
    let outside = tempfile::tempdir().unwrap();
    let attack = |server: &McpServer, who: &str| {
        let opened = server.call_ok("terminal_open", json!({}));
        let term = terminal_id(&opened);
        let text = server.call_ok(
            "terminal_send",
            json!({"id": term, "input": format!("touch {}/t-{who} && echo wrote=$((40+2)) || echo refused=$((40+2))", outside.path().display()), "wait": {"pattern": "(wrote|refused)=42", "timeout_ms": 20000}}),
        );
        server.call_ok("terminal_close", json!({"id": term}));
        let bash = server.call_ok(
            "bash",
            bash_args(&probes(&[(
                "bash_outside",
                format!("touch {}/b-{who}", outside.path().display()),
            )])),
        );
        (text, bash)
    };
    {
        let server = McpServer::start(&env, LOCAL);
        let (text, bash) = attack(&server, "l");
        assert!(text.contains("wrote=42"), "local terminal: {text}");
        assert!(outside.path().join("t-l").exists());
        assert_probes("local", &bash, &["bash_outside"], true);
    }
    let server = McpServer::start(
        &env,
        "[process.executor]\ntools = { bash = \"sandbox\", terminal_open = \"sandbox\" }\n",
    );
    let (text, bash) = attack(&server, "s");
    assert!(text.contains("refused=42"), "sandboxed terminal: {text}");
    assert!(!outside.path().join("t-s").exists(), "{text}");
    assert_probes("sandbox", &bash, &["bash_outside"], false);
    assert!(!outside.path().join("b-s").exists(), "{bash}");
}

// =================================================================================
// Further attacks.

/// Whether something is mounted at `path`.
fn is_mountpoint(path: &Path) -> bool {
    let path = path.display().to_string();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(path.as_str()))
}

/// Unmounts what the local half bind-mounted (before the directories go).
struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        while is_mountpoint(&self.0) {
            let status = Command::new("umount").arg("-l").arg(&self.0).status();
            if !status.is_ok_and(|s| s.success()) {
                break;
            }
        }
    }
}

#[test]
fn links_bind_mounts_proc_reopens_and_file_handles_do_not_write_a_file_outside() {
    let env = Env::new();
    let outside = tempfile::tempdir().unwrap();
    let attack = |who: &str| {
        let f = outside.path().join(format!("f-{who}"));
        std::fs::write(&f, "original\n").unwrap();
        let (o, f) = (
            outside.path().display().to_string(),
            f.display().to_string(),
        );
        probes(&[
            ("symlink", format!("ln -s {f} sl-{who} && echo pwned >> sl-{who}")),
            ("hardlink", format!("ln {f} hl-{who} && echo pwned >> hl-{who}")),
            (
                "proc_fd_reopen",
                format!("python3 -c 'import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); w=os.open(\"/proc/self/fd/%d\" % fd, os.O_WRONLY|os.O_APPEND); os.write(w, b\"pwned\\n\")' {f}"),
            ),
            (
                "opath_reopen",
                format!("python3 -c 'import os,sys; fd=os.open(sys.argv[1], os.O_PATH); w=os.open(\"/proc/self/fd/%d\" % fd, os.O_WRONLY|os.O_APPEND); os.write(w, b\"pwned\\n\")' {f}"),
            ),
            (
                "open_by_handle",
                format!(
                    "python3 -c 'import ctypes,os,sys\nl=ctypes.CDLL(None,use_errno=True)\nclass H(ctypes.Structure): _fields_=[(\"bytes\",ctypes.c_uint),(\"type\",ctypes.c_int),(\"f\",ctypes.c_ubyte*128)]\nh=H(); h.bytes=128; m=ctypes.c_int()\nif l.name_to_handle_at(-100, sys.argv[1].encode(), ctypes.byref(h), ctypes.byref(m), 0): sys.exit(\"name_to_handle_at: errno %d\" % ctypes.get_errno())\nmfd=os.open(\".\", os.O_RDONLY)\nfd=l.open_by_handle_at(mfd, ctypes.byref(h), os.O_WRONLY|os.O_APPEND)\nif fd < 0: sys.exit(\"open_by_handle_at: errno %d\" % ctypes.get_errno())\nos.write(fd, b\"pwned\\n\")' {f}"
                ),
            ),
            (
                "bind_mount",
                format!("mkdir -p mnt-{who} && mount --bind {o} mnt-{who} && echo pwned >> mnt-{who}/f-{who}"),
            ),
            ("move_in", format!("mv {f} ./moved-{who}")),
        ])
    };
    let names = [
        "symlink",
        "hardlink",
        "proc_fd_reopen",
        "opath_reopen",
        "open_by_handle",
        "bind_mount",
        "move_in",
    ];
    let _unmount = [
        Unmount(env.workdir().join("mnt-l")),
        Unmount(env.workdir().join("mnt-s")),
    ];
    let text = ran("local", &bash(&env, LOCAL, &attack("l")));
    assert_probes("local", &text, &names, true);
    assert_eq!(
        std::fs::read_to_string(env.workdir().join("moved-l")).unwrap(),
        "original\n".to_string() + &"pwned\n".repeat(6),
        "{text}"
    );

    let script = attack("s");
    let before = state_of(&outside.path().join("f-s")).unwrap();
    let text = ran("sandbox", &bash(&env, SANDBOX, &script));
    assert_probes("sandbox", &text, &names, false);
    assert_eq!(
        state_of(&outside.path().join("f-s")).as_ref(),
        Some(&before),
        "the outside file changed: {text}"
    );
    assert!(!is_mountpoint(&env.workdir().join("mnt-s")), "{text}");
    assert!(!env.workdir().join("hl-s").exists(), "{text}");
}

#[test]
fn the_workspace_itself_cannot_be_renamed_and_nothing_moves_out_of_it() {
    let env = Env::new();
    let outside = tempfile::tempdir().unwrap();
    let attack = |who: &str| {
        std::fs::create_dir_all(env.workdir().join(format!("sub-{who}/inner"))).unwrap();
        probes(&[
            (
                "rename_workspace",
                format!("W=$PWD && mv \"$W\" \"$W-moved-{who}\" && mv \"$W-moved-{who}\" \"$W\""),
            ),
            ("move_dir_up", format!("mv sub-{who}/inner ../inner-{who}")),
            (
                "move_dir_out",
                format!("mv sub-{who} {}/", outside.path().display()),
            ),
        ])
    };
    let names = ["rename_workspace", "move_dir_up", "move_dir_out"];
    let text = ran("local", &bash(&env, LOCAL, &attack("l")));
    assert_probes("local", &text, &names, true);
    assert!(outside.path().join("sub-l").is_dir(), "{text}");

    let script = attack("s");
    let workspace = state_of(&env.workdir()).unwrap().ino;
    let before = tree(&env.workdir().join("sub-s"), &[]);
    let text = ran("sandbox", &bash(&env, SANDBOX, &script));
    assert_probes("sandbox", &text, &names, false);
    assert_eq!(
        state_of(&env.workdir()).map(|s| s.ino),
        Some(workspace),
        "{text}"
    );
    assert!(!env.dir.path().join("work-moved-s").exists(), "{text}");
    assert!(!outside.path().join("sub-s").exists(), "{text}");
    assert!(!env.dir.path().join("inner-s").exists(), "{text}");
    assert_unchanged(
        "the directory it tried to move",
        &before,
        &tree(&env.workdir().join("sub-s"), &[]),
        &text,
    );
}

#[test]
fn a_setuid_or_file_capability_binary_made_in_the_workspace_regains_no_capability() {
    let env = Env::new();
    let show = "sed -n \"s/^CapEff:\\t/caps=/p\" /proc/self/status";
    let attack = |who: &str| {
        probes(&[
            (
                "setuid",
                format!("cp /bin/bash suid-{who} && chmod 4755 suid-{who} && ./suid-{who} -p -c '{show}'"),
            ),
            (
                "file_caps",
                format!(
                    "cp /bin/bash fcap-{who} && python3 -c 'import os,struct,sys; os.setxattr(sys.argv[1], \"security.capability\", struct.pack(\"<IIIII\", 0x02000001, 3, 0, 0, 0))' fcap-{who} && ./fcap-{who} -c '{show}'"
                ),
            ),
        ])
    };
    let text = ran("local", &bash(&env, LOCAL, &attack("l")));
    assert_probes("local", &text, &["setuid", "file_caps"], true);
    let caps = said(&text, "caps");
    assert!(
        caps.len() == 2 && caps.iter().all(|c| *c != "0000000000000000"),
        "local runs keep root's capabilities: {text}"
    );

    let text = ran("sandbox", &bash(&env, SANDBOX, &attack("s")));
    assert_probes("sandbox", &text, &["file_caps"], false);
    assert!(
        said(&text, "caps").iter().all(|c| *c == "0000000000000000"),
        "a capability came back: {text}"
    );
    assert!(
        !xattrs(&env.workdir().join("fcap-s"))
            .iter()
            .any(|(n, _)| n == b"security.capability"),
        "a file capability was set: {text}"
    );
}

/// A second mount of the state directory's filesystem (a bind mount of a directory above
/// it) is covered too: dsh finds every alias in its mount table at start.
#[test]
fn the_state_directory_reached_through_a_second_mount_of_its_filesystem_stays_hidden() {
    let env = Env::new();
    // A first sandboxed call: the key, the cache and the sandbox's slots exist.
    bash(&env, SANDBOX, "true");
    let key = hex(&std::fs::read(env.state_dir().join("cache/key")).unwrap());
    // An alias of the directory holding the state directory, as an operator's bind
    // mount (or a second mount of the same disk) would make one.
    let alias = tempfile::tempdir().unwrap();
    let mounted = Command::new("mount")
        .arg("--bind")
        .arg(env.dir.path())
        .arg(alias.path())
        .status();
    assert!(
        mounted.is_ok_and(|s| s.success()),
        "this test bind-mounts a directory: it needs root"
    );
    let _unmount = Unmount(alias.path().to_path_buf());
    let state = alias.path().join("state");
    let s = state.display();
    let attack = |who: &str| {
        probes(&[
            ("read_key", hex_of("key", &format!("{s}/cache/key"))),
            ("list", format!("ls -A {s} | sed 's/^/entry=/'")),
            (
                "read_log",
                format!("grep -qs session {s}/sessions/*/events.jsonl"),
            ),
            ("write", format!("echo x > {s}/planted-{who}")),
        ])
    };
    let names = ["read_key", "list", "read_log", "write"];
    let _cleanup = Cleanup(vec![env.state_dir().join("planted-l")]);
    let text = ran("local", &bash(&env, LOCAL, &attack("l")));
    assert_probes("local", &text, &names, true);
    assert_eq!(said(&text, "key"), [key.as_str()], "{text}");

    let before = tree(&env.state_dir(), DSH_WRITES);
    let text = ran("sandbox", &bash(&env, SANDBOX, &attack("s")));
    assert_probes("sandbox", &text, &["read_key", "read_log", "write"], false);
    assert!(
        !text.contains(&key),
        "the key leaked through the alias:\n{text}"
    );
    let listed: Vec<&str> = said(&text, "entry")
        .into_iter()
        .filter(|e| *e != "sandbox-tmp")
        .collect();
    assert!(
        listed.is_empty(),
        "the state dir was listed through the alias: {listed:?}\n{text}"
    );
    assert_unchanged(
        "the state directory",
        &before,
        &tree(&env.state_dir(), DSH_WRITES),
        &text,
    );
}

#[test]
fn the_config_state_and_plugin_directories_named_through_symlinks_in_the_workspace_cannot_be_redirected(
) {
    let marker = unique_marker();
    // dsh's three places, each named by a symbolic link in the workspace to where it
    // really is (beside the workspace), and what the attack would put in their stead.
    let setup = |executor: &str| {
        let env = Env::new();
        let real_state = env.dir.path().join("state-real");
        std::fs::create_dir_all(&real_state).unwrap();
        std::fs::set_permissions(&real_state, std::fs::Permissions::from_mode(0o700)).unwrap();
        let real_config = env.dir.path().join("etc/dsh.toml");
        std::fs::create_dir_all(real_config.parent().unwrap()).unwrap();
        std::fs::write(&real_config, gated_config(executor, &marker)).unwrap();
        let real_plugins = env.dir.path().join("plugins-real");
        std::fs::create_dir_all(&real_plugins).unwrap();
        std::fs::write(real_plugins.join("keep.txt"), "kept\n").unwrap();
        let work = env.workdir();
        std::os::unix::fs::symlink(&real_state, work.join("st")).unwrap();
        std::os::unix::fs::symlink(&real_config, work.join("dsh.toml")).unwrap();
        std::os::unix::fs::symlink(&real_plugins, work.join("plugins")).unwrap();
        std::fs::write(work.join("evil.toml"), "# no executor, no gate\n").unwrap();
        env
    };
    let dsh = |env: &Env| {
        let work = env.workdir();
        let mut command = env.dsh();
        command
            .env("DSH_STATE_DIR", work.join("st"))
            .arg("--config")
            .arg(work.join("dsh.toml"))
            .arg("--plugins")
            .arg(work.join("plugins"));
        command
    };
    let attack = probes(&[
        ("config", "ln -sfn evil.toml dsh.toml".to_string()),
        ("state", "rm st && mkdir st && mkdir st/cache".to_string()),
        (
            "plugins",
            "rm plugins && mkdir plugins && echo x > plugins/keep.txt".to_string(),
        ),
    ]);
    let names = ["config", "state", "plugins"];
    let forbidden = bash_args(&format!("echo forbidden-{marker}"));

    // Local: the links are swapped, and the next start runs without the gate.
    let env = setup(LOCAL);
    let text = ran(
        "local",
        &call_command(dsh(&env), "bash", &bash_args(&attack)),
    );
    assert_probes("local", &text, &names, true);
    let next = call_command(dsh(&env), "bash", &forbidden);
    assert!(
        next.code.is_none(),
        "local: the next start has no gate: {next:?}"
    );

    // Sandbox: dsh refuses to run sandboxed commands while a link on the way to its own
    // files lies where they may write (a run could re-point it for the next start), and
    // says which link; nothing ran and the links are as they were.
    let env = setup(SANDBOX);
    let links: Vec<PathBuf> = ["dsh.toml", "st", "plugins"]
        .iter()
        .map(|name| env.workdir().join(name))
        .collect();
    let before: Vec<Option<FileState>> = links.iter().map(|l| state_of(l)).collect();
    let refused = call_command(dsh(&env), "bash", &bash_args(&attack));
    assert_eq!(refused.code.as_deref(), Some("INTERNAL"), "{refused:?}");
    assert!(
        refused.message.contains("is a symbolic link")
            && links
                .iter()
                .any(|l| refused.message.contains(&l.display().to_string())),
        "the refusal names the link: {refused:?}"
    );
    assert!(!refused.content.contains("probe:"), "{refused:?}");
    let after: Vec<Option<FileState>> = links.iter().map(|l| state_of(l)).collect();
    assert_eq!(before, after, "a link to dsh's own files was replaced");
    let next = call_command(dsh(&env), "bash", &forbidden);
    assert_eq!(
        next.code.as_deref(),
        Some("DENIED"),
        "the next start lost its gate: {next:?}"
    );
}

#[test]
fn a_write_path_holding_the_state_directory_and_the_configuration_opens_neither() {
    let run = |executor: &str, who: &str| {
        let env = Env::new();
        let config_file = env.dir.path().join("dsh.toml");
        let config = format!(
            "{executor}[process.sandbox]\nwrite = [\"{}\"]\n",
            env.dir.path().display()
        );
        std::fs::write(&config_file, &config).unwrap();
        let dsh = || {
            let mut command = env.dsh();
            command.arg("--config").arg(&config_file);
            command
        };
        call_command(dsh(), "bash", &bash_args("true"));
        let key = hex(&std::fs::read(env.state_dir().join("cache/key")).unwrap());
        let (s, c) = (
            env.state_dir().display().to_string(),
            config_file.display().to_string(),
        );
        let before = (tree(&env.state_dir(), DSH_WRITES), state_of(&config_file));
        let attack = probes(&[
            (
                "granted",
                format!("touch {}/granted-{who}", env.dir.path().display()),
            ),
            ("read_key", hex_of("key", &format!("{s}/cache/key"))),
            ("write_state", format!("echo x > {s}/planted-{who}")),
            (
                "new_cwasm",
                format!("cp /bin/true {s}/cache/evil-{who}.cwasm"),
            ),
            ("append_config", format!("echo '# x' >> {c}")),
            (
                "replace_config",
                format!("cp {c} {c}.new && mv -f {c}.new {c}"),
            ),
            (
                "move_state",
                format!("mv {s} {s}-moved && mv {s}-moved {s}"),
            ),
        ]);
        let text = ran(who, &call_command(dsh(), "bash", &bash_args(&attack)));
        let after = (tree(&env.state_dir(), DSH_WRITES), state_of(&config_file));
        (text, key, before, after, env)
    };
    let names = [
        "read_key",
        "write_state",
        "new_cwasm",
        "append_config",
        "replace_config",
        "move_state",
    ];
    let (text, ..) = run(LOCAL, "local");
    assert_probes("local", &text, &names, true);
    assert_probes("local", &text, &["granted"], true);

    let (text, key, before, after, env) = run(SANDBOX, "sandbox");
    assert_probes("sandbox", &text, &["granted"], true);
    assert!(env.dir.path().join("granted-sandbox").exists(), "{text}");
    assert_probes("sandbox", &text, &names, false);
    assert!(!text.contains(&key), "the key leaked:\n{text}");
    assert_eq!(before.1, after.1, "the configuration changed:\n{text}");
    assert_unchanged("the state directory", &before.0, &after.0, &text);
}

/// The mount point of the cgroup v2 hierarchy, and those of v1 hierarchies with the
/// `pids` or `memory` controller.
fn cgroup_mounts() -> Vec<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    info.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let mut right = right.split(' ');
            let fstype = right.next()?;
            let options = right.nth(1).unwrap_or_default();
            let wanted = fstype == "cgroup2"
                || (fstype == "cgroup" && options.split(',').any(|o| o == "pids" || o == "memory"));
            if !wanted {
                return None;
            }
            Some(PathBuf::from(left.split(' ').nth(4)?))
        })
        .collect()
}

#[test]
fn the_sandbox_can_leave_no_cgroup_nor_turn_kernel_or_process_knobs() {
    let env = Env::new();
    let mut bystander = Command::new("sleep").arg("300").spawn().unwrap();
    let bpid = bystander.id();
    let thp = Path::new("/sys/kernel/mm/transparent_hugepage/defrag").exists();
    let cgroups = cgroup_mounts();
    // Each write puts back the value that is there: the local half changes nothing.
    let mut list = vec![
        (
            "dsh_oom".to_string(),
            "v=$(cat /proc/$PPID/oom_score_adj) && echo \"$v\" > /proc/$PPID/oom_score_adj"
                .to_string(),
        ),
        (
            "bystander_oom".to_string(),
            format!("v=$(cat /proc/{bpid}/oom_score_adj) && echo \"$v\" > /proc/{bpid}/oom_score_adj"),
        ),
        (
            "sysctl".to_string(),
            "v=$(cat /proc/sys/kernel/core_uses_pid) && echo \"$v\" > /proc/sys/kernel/core_uses_pid"
                .to_string(),
        ),
    ];
    if thp {
        list.push((
            "sysfs".to_string(),
            "f=/sys/kernel/mm/transparent_hugepage/defrag; v=$(sed 's/.*\\[\\(.*\\)\\].*/\\1/' $f) && echo \"$v\" > $f"
                .to_string(),
        ));
    }
    for (n, mount) in cgroups.iter().enumerate() {
        // A subshell moves itself to the hierarchy's root, and says where it is then.
        list.push((
            format!("leave_cgroup_{n}"),
            format!(
                "( echo $BASHPID > {}/cgroup.procs && echo \"cg_{n}=$(cat /proc/self/cgroup | tr '\\n' ' ')\" )",
                mount.display()
            ),
        ));
    }
    let script = format!(
        "echo \"cg=$(cat /proc/self/cgroup | tr '\\n' ' ')\"\n{}",
        probes(
            &list
                .iter()
                .map(|(n, s)| (n.as_str(), s.clone()))
                .collect::<Vec<_>>()
        )
    );
    let names: Vec<&str> = list.iter().map(|(n, _)| n.as_str()).collect();
    let text = ran("local", &bash(&env, LOCAL, &script));
    // In cgroup mode a local run can leave its group (README: not a boundary there).
    let contained = said(&text, "cg").iter().any(|cg| cg.contains("dsh-"));
    let local_names: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| contained || !n.starts_with("leave_cgroup"))
        .collect();
    assert_probes("local", &text, &local_names, true);

    let text = ran("sandbox", &bash(&env, SANDBOX, &script));
    assert_probes("sandbox", &text, &names, false);
    assert_eq!(
        std::fs::read_to_string(format!("/proc/{bpid}/oom_score_adj"))
            .unwrap()
            .trim(),
        "0",
        "{text}"
    );
    let _ = bystander.kill();
    let _ = bystander.wait();
}
