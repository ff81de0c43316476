//! The `container` executor: commands run in namespaces of their own (PID, network, IPC,
//! UTS, mount, and a user namespace whose root is an unprivileged host id) on top of the
//! sandbox's confinement — through bash, background jobs and terminal sessions alike,
//! and still contained (escapees and timeouts end with the run). These tests drive the
//! real binary, run as root here (as in CI): the container must not be the host's root.

use std::net::TcpListener;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::mcp_stdio::McpServer;
use crate::support::{unique_marker, Env};

const CONTAINER: &str = "[process.executor]\ndefault = \"container\"\n";
const MARKER: &str = "[sandbox: container fs=workspace net=off]";

fn bash(env: &Env, config: &str, command: &str) -> crate::support::CallOutput {
    env.call_configured(
        config,
        "bash",
        &json!({"command": command, "description": "container check"}),
        &[],
    )
}

/// Whether the container executor can run here (dsh must be root); elsewhere a test says
/// it is skipped and passes, but never under `CI=true`, where it must run.
pub fn can_run() -> bool {
    if rustix::process::geteuid().is_root() {
        return true;
    }
    crate::support::skipped("the container executor needs dsh to run as root");
    false
}

/// Returns from the test when [`can_run`] says the container cannot run here.
macro_rules! root_only {
    () => {
        if !can_run() {
            return;
        }
    };
}

#[test]
fn ps_in_a_container_lists_only_the_runs_own_processes() {
    root_only!();
    let env = Env::new();
    let marker = unique_marker();
    // A process of the host's the container must not see.
    let mut bystander = std::process::Command::new("sleep")
        .arg(format!("301.{}", marker.len()))
        .spawn()
        .unwrap();
    let out = bash(
        &env,
        CONTAINER,
        "ps -eo pid=,args= | sed 's/^ */ps:/'; echo procs=$(ls -d /proc/[0-9]* 2>/dev/null | wc -l)",
    );
    let _ = bystander.kill();
    let _ = bystander.wait();
    assert!(out.content.contains(MARKER), "{out:?}");
    let listed: Vec<&str> = out
        .content
        .lines()
        .filter_map(|l| l.strip_prefix("ps:"))
        .collect();
    // The shell (pid 1 of its namespace), `ps` and the `sed` of its pipe; nothing else.
    assert!(
        listed.iter().any(|l| l.starts_with("1 bash -c")),
        "{listed:?}"
    );
    assert!(listed.len() <= 4, "{listed:?}");
    assert!(!out.content.contains("sleep 301"), "{out:?}");
    // Local sees the host's.
    let local = bash(&env, "", "ls -d /proc/[0-9]* 2>/dev/null | wc -l");
    let host: usize = local
        .content
        .lines()
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(host > 10, "{local:?}");
}

#[test]
fn the_hosts_pid_1_and_its_environment_are_out_of_reach() {
    root_only!();
    let env = Env::new();
    // A host process with a secret in its environment: this test's own child.
    let secret = format!("HOST_SECRET_{}", unique_marker());
    let mut host = std::process::Command::new("sleep")
        .arg("300")
        .env("CONTAINER_PROBE", &secret)
        .spawn()
        .unwrap();
    let host_pid = host.id();
    let command = format!(
        "tr '\\0' ' ' < /proc/1/cmdline; echo; echo self=$$; \
         cat /proc/1/environ | tr '\\0' '\\n' | grep -c {secret}; \
         cat /proc/{host_pid}/environ >/dev/null 2>&1 && echo host=reached || echo host=unreachable"
    );
    let out = bash(&env, CONTAINER, &command);
    // Local reaches the host process's environment (dsh runs as root).
    let local = bash(&env, "", &command);
    let _ = host.kill();
    let _ = host.wait();
    // /proc/1 is the run's own shell, not the host's init; the host's processes are not
    // there at all.
    assert!(out.content.contains("bash -c tr"), "{out:?}");
    assert!(out.content.contains("self=1\n"), "{out:?}");
    // (The command's own text, /proc/1/cmdline, names both answers: look at lines.)
    let said = |text: &str, what: &str| text.lines().any(|l| l == what);
    assert!(said(&out.content, "host=unreachable"), "{out:?}");
    assert!(!said(&out.content, "host=reached"), "{out:?}");
    assert!(said(&local.content, "host=reached"), "{local:?}");
}

#[test]
fn a_listener_on_the_hosts_loopback_is_unreachable_from_a_container() {
    root_only!();
    let env = Env::new();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    let probe = format!(
        "if exec 3<>/dev/tcp/127.0.0.1/{port}; then echo tcp=connected; else echo tcp=failed; fi; \
         if curl -s -m 3 http://127.0.0.1:{port}/ >/dev/null; then echo curl=connected; else echo curl=failed; fi; \
         cat /proc/net/tcp | wc -l"
    );
    // The port allowed to the sandbox does not help: there is no network at all.
    let config = format!("{CONTAINER}[process.sandbox]\ntcp_ports = [{port}]\n");
    let out = bash(&env, &config, &probe);
    assert!(out.content.contains("tcp=failed"), "{out:?}");
    assert!(out.content.contains("curl=failed"), "{out:?}");
    assert!(out.content.contains(MARKER), "{out:?}");
    assert!(
        listener.accept().is_err(),
        "a container reached the host's listener"
    );
    // Local reaches it.
    let local = bash(&env, "", &probe);
    assert!(local.content.contains("tcp=connected"), "{local:?}");
}

#[test]
fn a_container_cannot_write_outside_but_writes_its_workspace_and_tmp_as_the_workspace_owner() {
    root_only!();
    let env = Env::new();
    let marker = unique_marker();
    let command = format!(
        "for p in /etc/x-{marker} /root/x-{marker} /usr/x-{marker}; do touch $p 2>/dev/null && echo wrote=$p; done; \
         touch in-workspace && echo workspace=written; mkdir -p sub/dir && echo sub > sub/dir/f; \
         touch $TMPDIR/scratch && echo tmp=written:$TMPDIR; id -u; \
         echo reopened-$((6*7)) > /dev/stderr"
    );
    let out = bash(&env, CONTAINER, &command);
    assert!(out.content.contains(MARKER), "{out:?}");
    assert!(!out.content.contains("wrote="), "{out:?}");
    for p in ["/etc", "/root", "/usr"] {
        assert!(!Path::new(&format!("{p}/x-{marker}")).exists());
    }
    assert!(out.content.contains("workspace=written"), "{out:?}");
    assert!(out.content.contains("tmp=written:"), "{out:?}");
    // Its output pipe is its own: `> /dev/stderr` (a reopen) works as elsewhere.
    assert!(out.content.contains("reopened-42"), "{out:?}");
    // Root inside...
    assert!(out.content.lines().any(|l| l == "0"), "{out:?}");
    // ...and what it wrote in the workspace is the workspace owner's on disk.
    let owner = std::fs::metadata(env.workdir()).unwrap();
    for file in ["in-workspace", "sub/dir/f", "sub/dir"] {
        let meta = std::fs::metadata(env.workdir().join(file)).unwrap();
        assert_eq!(
            (meta.uid(), meta.gid()),
            (owner.uid(), owner.gid()),
            "{file}"
        );
    }
}

#[test]
fn a_container_holds_no_effective_capabilities() {
    root_only!();
    let env = Env::new();
    let out = bash(&env, CONTAINER, "grep Cap /proc/self/status");
    for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert!(
            out.content.contains(&format!("{set}:\t0000000000000000")),
            "{set}: {out:?}"
        );
    }
}

#[test]
fn the_containers_user_namespace_maps_its_root_to_the_configured_ids_and_nothing_else() {
    root_only!();
    let env = Env::new();
    let config = format!("{CONTAINER}[process.container]\nuid = 65533\ngid = 65532\n");
    let out = bash(
        &env,
        &config,
        "echo \"uid=$(id -u) gid=$(id -g)\"; sed 's/^/uid_map /' /proc/self/uid_map; \
         sed 's/^/gid_map /' /proc/self/gid_map",
    );
    assert!(out.content.contains("uid=0 gid=0"), "{out:?}");
    let maps: Vec<String> = out
        .content
        .lines()
        .filter(|l| l.starts_with("uid_map ") || l.starts_with("gid_map "))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    assert_eq!(
        maps,
        ["uid_map 0 65533 1", "gid_map 0 65532 1"],
        "one id each, 0 inside, the configured ids outside: {out:?}"
    );
}

#[test]
fn etc_shadow_is_unreadable_in_a_container_though_dsh_is_root() {
    root_only!();
    let env = Env::new();
    let probe = "cat /etc/shadow >/dev/null && echo shadow=read || echo shadow=denied";
    let out = bash(&env, CONTAINER, probe);
    assert!(out.content.contains("shadow=denied"), "{out:?}");
    assert!(out.content.contains("Permission denied"), "{out:?}");
    // The sandbox alone (root's uid, no capabilities) still reads it by owner permission.
    let local = bash(&env, "", probe);
    assert!(local.content.contains("shadow=read"), "{local:?}");
}

#[test]
fn escapees_of_a_container_are_proven_started_and_then_gone() {
    root_only!();
    let env = Env::new();
    let marker = unique_marker();
    let command = format!(
        "(setsid sh -c 'echo $$ > escapee-1.pid; cat /proc/self/stat | cut -d\" \" -f1 >/dev/null; exec sleep 97{marker}' >/dev/null 2>&1 &); \
         setsid -f sh -c 'echo $$ > escapee-2.pid; exec sleep 98{marker}' >/dev/null 2>&1; \
         (sh -c 'sh -c \"exec sleep 99{marker}\" & echo $! > escapee-3.pid' &); \
         while [ ! -s escapee-1.pid ] || [ ! -s escapee-2.pid ] || [ ! -s escapee-3.pid ]; do sleep 0.01; done; \
         echo started"
    );
    let out = bash(&env, CONTAINER, &command);
    assert!(out.content.contains("started"), "{out:?}");
    assert!(out.content.contains(MARKER), "{out:?}");
    for name in ["escapee-1.pid", "escapee-2.pid", "escapee-3.pid"] {
        let pid = std::fs::read_to_string(env.workdir().join(name)).unwrap();
        assert!(!pid.trim().is_empty(), "{name}: the escapee never ran");
    }
    // The pids are the container's; the host finds its processes by their command line.
    let left = crate::support::survivors(&marker, Duration::from_secs(5));
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn a_timed_out_container_is_killed_whole() {
    root_only!();
    let env = Env::new();
    let marker = unique_marker();
    let command = format!(
        "(setsid sleep 96{marker} &); sleep 95{marker} & echo $! > bg.pid; \
         while [ ! -s bg.pid ]; do sleep 0.01; done; echo waiting; sleep 94{marker}"
    );
    let config = format!("{CONTAINER}[process]\nkill_grace_ms = 300\n");
    let started = Instant::now();
    let out = env.call_configured(
        &config,
        "bash",
        &json!({"command": command, "description": "slow", "timeoutMs": 800}),
        &[],
    );
    assert!(out.content.contains("waiting"), "{out:?}");
    assert!(out.content.contains("timed out after 800 ms"), "{out:?}");
    assert!(started.elapsed() < Duration::from_secs(20), "{out:?}");
    let left = crate::support::survivors(&marker, Duration::from_secs(5));
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn a_terminal_session_in_a_container_runs_a_repl_with_its_own_tty() {
    root_only!();
    let env = Env::new();
    let server = McpServer::start(&env, CONTAINER);
    let opened = server.call_ok("terminal_open", json!({}));
    let term = opened
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .find(|word| word.starts_with("term-"))
        .unwrap_or_else(|| panic!("no session id in {opened:?}"))
        .to_string();
    let text = server.call_ok(
        "terminal_send",
        json!({"id": term, "input": "tty && echo tty=$((40+2)); echo pid=$$ procs=$(ls -d /proc/[0-9]* 2>/dev/null | wc -l)", "wait": {"pattern": "procs=[0-9]+", "timeout_ms": 20000}}),
    );
    assert!(text.contains("/dev/pts/"), "{text}");
    assert!(text.contains("tty=42"), "{text}");
    assert!(text.contains("pid=1 "), "{text}");
    let text = server.call_ok(
        "terminal_send",
        json!({"id": term, "input": "/usr/bin/python3 -q", "wait": {"pattern": ">>> ", "timeout_ms": 20000}}),
    );
    assert!(text.contains(">>>"), "{text}");
    let text = server.call_ok(
        "terminal_send",
        json!({"id": term, "input": "import os; print('repl', 6*7, os.getuid())", "wait": {"pattern": "repl 42 [0-9]+", "timeout_ms": 20000}}),
    );
    assert!(text.contains("repl 42 0"), "{text}");
    server.call_ok(
        "terminal_send",
        json!({"id": term, "input": "exit()", "wait": {"pattern": "\\$ ", "timeout_ms": 20000}}),
    );
    server.call_ok("terminal_close", json!({"id": term}));
}

#[test]
fn a_background_job_in_a_container_runs_contained_and_says_so() {
    root_only!();
    let env = Env::new();
    let server = McpServer::start(&env, CONTAINER);
    let started = server.call_ok(
        "bash",
        json!({"command": "sleep 0.2; touch job-was-here; echo pid=$$ uid=$(id -u); ls -d /proc/[0-9]* 2>/dev/null | wc -l", "description": "job", "run_in_background": true}),
    );
    let job = started
        .split_whitespace()
        .find(|w| w.starts_with("bash-"))
        .unwrap_or_else(|| panic!("no job id in {started:?}"))
        .trim_matches(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    let text = loop {
        let text = server.call_ok("job_output", json!({"id": job, "wait_ms": 5000}));
        if !text.contains(": running;") || Instant::now() > deadline {
            break text;
        }
    };
    assert!(text.contains("pid=1 uid=0"), "{text}");
    assert!(text.contains(MARKER), "{text}");
    assert!(env.workdir().join("job-was-here").exists());
}

#[test]
fn the_strongest_executor_named_for_a_call_wins() {
    root_only!();
    let env = Env::new();
    let config = "[scopes]\nuntrusted = [\"*\"]\n\
                  [process.executor]\ndefault = \"local\"\ntools = { bash = \"sandbox\" }\n\
                  scopes = { untrusted = \"container\" }\n";
    let out = env.call_configured(
        config,
        "bash",
        &json!({"command": "echo pid=$$", "description": "which"}),
        &["--scope", "untrusted"],
    );
    assert!(out.content.contains(MARKER), "{out:?}");
    assert!(out.content.contains("pid=1\n"), "{out:?}");
}

/// The namespace `kind` (`pid`, `net`, …) process `pid` is in.
fn namespace_of(pid: &str, kind: &str) -> std::path::PathBuf {
    std::fs::read_link(format!("/proc/{pid}/ns/{kind}")).unwrap()
}

/// A language server process: its `/proc/PID/status` and the namespaces it is in, by
/// kind (`pid`, `net`, `mnt`, `user`).
struct ServerProcess {
    status: String,
    namespaces: std::collections::HashMap<&'static str, std::path::PathBuf>,
}

/// The clangd processes started for `env`'s workspace, read while they run.
fn clangd_processes(env: &Env) -> Vec<ServerProcess> {
    let work = env.workdir().canonicalize().unwrap();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let pid = entry.file_name().to_string_lossy().to_string();
        if pid.parse::<u32>().is_err() {
            continue;
        }
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let in_this_test =
            std::fs::read_link(entry.path().join("cwd")).is_ok_and(|cwd| cwd == work);
        if !String::from_utf8_lossy(&cmdline).contains("clangd") || !in_this_test {
            continue;
        }
        let status = std::fs::read_to_string(entry.path().join("status")).unwrap_or_default();
        let namespaces = ["pid", "net", "mnt", "user"]
            .into_iter()
            .filter_map(|kind| {
                Some((
                    kind,
                    std::fs::read_link(entry.path().join("ns").join(kind)).ok()?,
                ))
            })
            .collect();
        found.push(ServerProcess { status, namespaces });
    }
    found
}

#[test]
fn a_language_server_runs_in_a_container_like_a_command() {
    root_only!();
    let env = Env::new();
    let lsp = crate::lsp::small_c_project(&env);
    let definition = |config: &str| {
        let server = McpServer::start(&env, config);
        let answer = server.call_ok(
            "lsp",
            json!({"op": "definition", "path": "main.c", "line": 5, "symbol": "point_sum"}),
        );
        (answer, clangd_processes(&env))
    };
    let own = |kind| namespace_of("self", kind);

    // Local first: the probe sees a server in the host's namespaces, as the host's root.
    let (answer, servers) = definition(&lsp);
    assert_eq!(
        crate::support::without_undo_line(&answer),
        "geom.c:3:5: int point_sum(struct point p) {"
    );
    let server = servers.first().expect("no clangd process found");
    assert_eq!(server.namespaces["pid"], own("pid"));
    assert!(server.status.contains("\nUid:\t0\t"), "{}", server.status);

    // Under the container: the same answer from a server in namespaces of its own, as
    // the container's unprivileged root, with no capabilities and no new privileges.
    let (answer, servers) = definition(&format!("{CONTAINER}{lsp}"));
    assert_eq!(answer, "geom.c:3:5: int point_sum(struct point p) {");
    let server = servers
        .iter()
        .find(|server| {
            server
                .namespaces
                .get("pid")
                .is_some_and(|ns| *ns != own("pid"))
        })
        .expect("no clangd process in a PID namespace of its own");
    for kind in ["net", "mnt", "user"] {
        assert_ne!(server.namespaces[kind], own(kind), "{kind}");
    }
    assert!(
        server.status.contains("\nUid:\t65534\t"),
        "{}",
        server.status
    );
    assert!(
        server.status.contains("\nCapEff:\t0000000000000000\n"),
        "{}",
        server.status
    );
    assert!(
        server.status.contains("\nNoNewPrivs:\t1\n"),
        "{}",
        server.status
    );
}

#[test]
fn with_network_loopback_a_container_serves_itself_and_still_reaches_nothing_else() {
    root_only!();
    let env = Env::new();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    // A server and its client in one run (a test suite's local server), then the host's
    // listener by its port, which in the run's namespace is nobody's.
    let script = [
        "import socket",
        "server = socket.socket()",
        "server.bind(('127.0.0.1', 0))",
        "server.listen(1)",
        "client = socket.create_connection(server.getsockname(), timeout=5)",
        "accepted, _ = server.accept()",
        "client.sendall(b'ping')",
        "print('own', accepted.recv(4).decode())",
        "try:",
        "    socket.create_connection(('127.0.0.1', PORT), timeout=3)",
        "    print('host=connected')",
        "except OSError as error:",
        "    print('host=' + type(error).__name__)",
    ]
    .join("\n")
    .replace("PORT", &port.to_string());
    let probe = format!(
        "/usr/bin/python3 - <<'EOF'\n{script}\nEOF\n\
         if curl -s -m 3 http://127.0.0.1:{port}/ >/dev/null; then echo curl=connected; else echo curl=failed; fi"
    );
    let loopback = format!("{CONTAINER}[process.container]\nnetwork = \"loopback\"\n");
    let out = bash(&env, &loopback, &probe);
    assert!(
        out.content
            .contains("[sandbox: container fs=workspace net=loopback]"),
        "{out:?}"
    );
    assert!(out.content.contains("own ping"), "{out:?}");
    assert!(
        out.content.contains("host=ConnectionRefusedError"),
        "{out:?}"
    );
    assert!(out.content.contains("curl=failed"), "{out:?}");
    assert!(
        listener.accept().is_err(),
        "a container reached the host's listener"
    );
    // Without the grant the run cannot even listen on its own loopback.
    let none = bash(&env, CONTAINER, &probe);
    assert!(none.content.contains(MARKER), "{none:?}");
    assert!(!none.content.contains("own ping"), "{none:?}");
    assert!(none.content.contains("PermissionError"), "{none:?}");
}

/// `[process.sandbox] write` paths, writable under the sandbox, are not writable in a
/// container: the same grant that lets a sandboxed command write there lets a contained
/// one write nothing there.
#[test]
fn sandbox_write_paths_are_not_writable_in_a_container() {
    root_only!();
    let env = Env::new();
    let granted = tempfile::tempdir().unwrap();
    let marker = unique_marker();
    let write = format!(
        "[process.sandbox]\nwrite = [\"{}\"]\n",
        granted.path().display()
    );
    let command = format!(
        "touch {dir}/c-{marker} 2>/dev/null && echo wrote=yes || echo wrote=no",
        dir = granted.path().display()
    );
    let contained = bash(&env, &format!("{CONTAINER}{write}"), &command);
    assert!(contained.content.contains(MARKER), "{contained:?}");
    assert!(contained.content.contains("wrote=no"), "{contained:?}");
    assert!(!granted.path().join(format!("c-{marker}")).exists());
    // The same grant under the sandbox: written.
    let sandboxed = bash(
        &env,
        &format!("[process.executor]\ndefault = \"sandbox\"\n{write}"),
        &command,
    );
    assert!(sandboxed.content.contains("wrote=yes"), "{sandboxed:?}");
}

/// A step of a container the kernel will not take (here `unshare`, which makes its user
/// and network namespaces, answers `ENOSYS` to dsh and what it starts) refuses the call
/// as the sandbox does, naming the step, and runs nothing; `local` calls still run.
#[test]
fn a_container_step_the_kernel_will_not_take_refuses_the_call_and_runs_nothing() {
    root_only!();
    let env = Env::new();
    let marker = unique_marker();
    let call = |config: &str, command: &str| {
        let mut dsh = env.dsh_configured(config);
        dsh.args([
            "call",
            "bash",
            &json!({"command": command, "description": "container check"}).to_string(),
            "--json",
        ])
        .stdin(std::process::Stdio::null());
        crate::support::without_syscalls(&mut dsh, &[libc::SYS_unshare]);
        crate::support::CallOutput::parse(dsh.output().unwrap())
    };
    let out = call(CONTAINER, &format!("touch ran-{marker}"));
    assert_eq!(out.code.as_deref(), Some("INTERNAL"), "{out:?}");
    assert!(
        out.message.starts_with("sandbox unavailable: ") && out.message.contains("unshare"),
        "the refusal names the step: {out:?}"
    );
    assert!(
        !env.workdir().join(format!("ran-{marker}")).exists(),
        "{out:?}"
    );
    let local = call("", "echo local-runs");
    assert!(local.content.starts_with("local-runs"), "{local:?}");
}
