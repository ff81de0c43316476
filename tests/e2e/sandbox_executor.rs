//! The executor seam: commands run `local` or `sandbox` per `[process.executor]`; in the
//! sandbox (Landlock and seccomp) they write only the workspace and a private TMPDIR,
//! reach no network but allowlisted TCP ports, and cannot signal processes outside
//! their run — through bash, background jobs and terminal sessions alike.

use std::net::{TcpListener, UdpSocket};
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::mcp_stdio::McpServer;
use crate::support::{unique_marker, Env};

const SANDBOX: &str = "[process.executor]\ndefault = \"sandbox\"\n";

/// A TCP server on 127.0.0.1 that answers every connection with `hello`.
fn tcp_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            use std::io::Write;
            let mut stream = stream;
            let _ = stream.write_all(b"hello\n");
        }
    });
    port
}

/// A bash line that connects to `port` and prints `tcp=connected:hello` or
/// `tcp=refused`.
fn tcp_probe(port: u16) -> String {
    format!(
        "if exec 3<>/dev/tcp/127.0.0.1/{port}; then read -r line <&3; echo tcp=connected:$line; else echo tcp=refused; fi"
    )
}

/// A file in a directory the test made outside the workspace, and one in `$HOME`.
struct Outside {
    dir: tempfile::TempDir,
    home_file: std::path::PathBuf,
}

impl Outside {
    fn new() -> Outside {
        let home = std::env::var("HOME").unwrap();
        Outside {
            dir: tempfile::tempdir().unwrap(),
            home_file: Path::new(&home).join(format!(".dsh-sandbox-{}", unique_marker())),
        }
    }

    /// A bash line trying both (printing `outside=written` for each that worked).
    fn probe(&self) -> String {
        format!(
            "touch {}/x && echo outside=written; touch {} && echo outside=written",
            self.dir.path().display(),
            self.home_file.display()
        )
    }

    /// Neither file exists.
    fn untouched(&self) -> bool {
        let untouched = !self.dir.path().join("x").exists() && !self.home_file.exists();
        let _ = std::fs::remove_file(&self.home_file);
        untouched
    }
}

/// A process the test starts outside dsh, killed when dropped.
struct Bystander(std::process::Child);

impl Bystander {
    fn start() -> Bystander {
        Bystander(
            std::process::Command::new("sleep")
                .arg("300")
                .spawn()
                .unwrap(),
        )
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }

    fn alive(&mut self) -> bool {
        self.0.try_wait().unwrap().is_none()
    }

    /// A bash line that sends it TERM and prints `kill=0` or `kill=1`.
    fn probe(&self) -> String {
        format!("kill -TERM {}; echo kill=$?", self.pid())
    }
}

impl Drop for Bystander {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn bash(env: &Env, config: &str, command: &str) -> crate::support::CallOutput {
    env.call_configured(
        config,
        "bash",
        &json!({"command": command, "description": "sandbox check"}),
        &[],
    )
}

#[test]
fn in_the_sandbox_bash_writes_its_workspace_and_private_tmp_only_and_the_tmp_goes_after() {
    let env = Env::new();
    let outside = Outside::new();
    let command = format!(
        "touch in-workspace && echo workspace=written; {}; echo tmp=$TMPDIR; touch $TMPDIR/scratch && echo tmp=written",
        outside.probe()
    );
    let out = bash(&env, SANDBOX, &command);
    assert_eq!(out.code, None, "{out:?}");
    assert!(out.content.contains("workspace=written"), "{}", out.content);
    assert!(env.workdir().join("in-workspace").exists());
    assert!(!out.content.contains("outside=written"), "{}", out.content);
    // Outside the writable set every mount is read-only in the run's namespace.
    assert_eq!(
        out.content.matches("Read-only file system").count(),
        2,
        "{}",
        out.content
    );
    assert!(outside.untouched());
    assert!(out.content.contains("tmp=written"), "{}", out.content);
    let tmp = out
        .content
        .lines()
        .find_map(|l| l.strip_prefix("tmp=").filter(|t| t.starts_with('/')))
        .unwrap_or_else(|| panic!("no TMPDIR in {}", out.content));
    assert!(!Path::new(tmp).exists(), "{tmp} is left after the run");
    assert!(
        crate::support::without_undo_line(&out.content)
            .ends_with("[sandbox: fs=workspace net=off]\n[exit code: 0]"),
        "{}",
        out.content
    );
}

#[test]
fn a_local_tcp_server_is_reachable_from_local_not_from_the_sandbox_unless_its_port_is_allowed() {
    let env = Env::new();
    let port = tcp_server();
    let local = bash(&env, "", &tcp_probe(port));
    assert!(local.content.contains("tcp=connected:hello"), "{local:?}");
    assert!(!local.content.contains("[sandbox:"), "{local:?}");

    let sandboxed = bash(&env, SANDBOX, &tcp_probe(port));
    assert!(sandboxed.content.contains("tcp=refused"), "{sandboxed:?}");
    assert!(
        sandboxed.content.contains("Permission denied"),
        "{sandboxed:?}"
    );

    let allowed = format!("{SANDBOX}[process.sandbox]\ntcp_ports = [{port}]\n");
    let out = bash(&env, &allowed, &tcp_probe(port));
    assert!(out.content.contains("tcp=connected:hello"), "{out:?}");
    assert!(
        out.content
            .contains(&format!("[sandbox: fs=workspace net=tcp:{port}]")),
        "{out:?}"
    );
}

/// A UDP server: what arrives within `within` (it answers DNS-like queries by echoing
/// them with the response bit set).
fn udp_server() -> (u16, std::sync::mpsc::Receiver<Vec<u8>>) {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = socket.local_addr().unwrap().port();
    let (sender, received) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 512];
        while let Ok((n, from)) = socket.recv_from(&mut buf) {
            let mut answer = buf[..n].to_vec();
            if answer.len() > 2 {
                answer[2] |= 0x80;
            }
            let _ = socket.send_to(&answer, from);
            if sender.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    (port, received)
}

/// A DNS query for example.com sent to the resolver on `port`, by Python: prints
/// `dns=answered` or the error.
fn dns_probe(port: u16) -> String {
    format!(
        "python3 -c 'import socket,struct\nq=struct.pack(\">HHHHHH\",7,0x100,1,0,0,0)+b\"\\x07example\\x03com\\x00\\x00\\x01\\x00\\x01\"\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\ns.settimeout(5)\ns.sendto(q,(\"127.0.0.1\",{port}))\ns.recv(512)\nprint(\"dns=answered\")'"
    )
}

#[test]
fn udp_and_a_dns_query_work_from_local_and_fail_in_the_sandbox() {
    let env = Env::new();
    let (port, received) = udp_server();
    let command = format!(
        "echo datagram > /dev/udp/127.0.0.1/{port}; {}",
        dns_probe(port)
    );
    let local = bash(&env, "", &command);
    assert!(local.content.contains("dns=answered"), "{local:?}");
    assert_eq!(
        received.recv_timeout(Duration::from_secs(5)).unwrap(),
        b"datagram\n"
    );
    received.recv_timeout(Duration::from_secs(5)).unwrap();

    let sandboxed = bash(&env, SANDBOX, &command);
    assert!(!sandboxed.content.contains("dns=answered"), "{sandboxed:?}");
    assert!(
        sandboxed.content.contains("PermissionError"),
        "{sandboxed:?}"
    );
    // bash's /dev/udp: the socket could not be made.
    assert!(
        sandboxed.content.contains("/dev/udp/127.0.0.1")
            && sandboxed.content.contains("Permission denied"),
        "{sandboxed:?}"
    );
    // Both calls are over: nothing more arrived.
    assert!(received.try_recv().is_err());
}

#[test]
fn the_sandbox_cannot_signal_a_process_started_outside_dsh_and_local_can() {
    let env = Env::new();
    let mut bystander = Bystander::start();
    let out = bash(&env, SANDBOX, &bystander.probe());
    assert!(out.content.contains("kill=1"), "{out:?}");
    assert!(out.content.contains("Operation not permitted"), "{out:?}");
    assert!(bystander.alive());

    let local = bash(&env, "", &bystander.probe());
    assert!(local.content.contains("kill=0"), "{local:?}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while bystander.alive() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(!bystander.alive());
}

/// The three checks (files, network, signals) as one bash line.
fn three_checks(outside: &Outside, port: u16, bystander: &Bystander) -> String {
    format!(
        "touch in-workspace && echo workspace=written; {}; {}; {}; echo checks=$((40+2))",
        outside.probe(),
        tcp_probe(port),
        bystander.probe()
    )
}

fn assert_confined(text: &str) {
    // What the commands printed, not the terminal's echo of them.
    let printed: Vec<&str> = text.lines().filter(|l| !l.contains("echo ")).collect();
    let text = printed.join("\n");
    assert!(text.contains("workspace=written"), "{text}");
    assert!(!text.contains("outside=written"), "{text}");
    assert!(text.contains("Permission denied"), "{text}");
    assert!(text.contains("tcp=refused"), "{text}");
    assert!(text.contains("kill=1"), "{text}");
}

#[test]
fn a_terminal_session_opened_under_the_sandbox_is_confined() {
    let env = Env::new();
    let outside = Outside::new();
    let port = tcp_server();
    let mut bystander = Bystander::start();
    let server = McpServer::start(&env, SANDBOX);
    let opened = server.call_ok("terminal_open", json!({}));
    let term = opened
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .find(|word| word.starts_with("term-"))
        .unwrap_or_else(|| panic!("no session id in {opened:?}"))
        .to_string();
    let text = server.call_ok(
        "terminal_send",
        json!({"id": term, "input": three_checks(&outside, port, &bystander), "wait": {"pattern": "checks=42", "timeout_ms": 20000}}),
    );
    assert_confined(&text);
    assert!(env.workdir().join("in-workspace").exists());
    assert!(outside.untouched());
    assert!(bystander.alive());

    // The session's TMPDIR lives as long as its shell.
    let text = server.call_ok(
        "terminal_send",
        json!({"id": term, "input": "touch $TMPDIR/t && echo tmp=$TMPDIR:$((6*7))", "wait": {"pattern": ":42"}}),
    );
    let tmp = text
        .lines()
        .find_map(|l| l.strip_prefix("tmp=")?.strip_suffix(":42"))
        .unwrap_or_else(|| panic!("no TMPDIR in {text}"))
        .to_string();
    assert!(Path::new(&tmp).join("t").exists(), "{tmp}");
    server.call_ok("terminal_close", json!({"id": term}));
    let deadline = Instant::now() + Duration::from_secs(10);
    while Path::new(&tmp).exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!Path::new(&tmp).exists(), "{tmp} is left after the session");
}

#[test]
fn a_background_job_under_the_sandbox_is_confined_and_says_so() {
    let env = Env::new();
    let outside = Outside::new();
    let port = tcp_server();
    let mut bystander = Bystander::start();
    let server = McpServer::start(&env, SANDBOX);
    let started = server.call_ok(
        "bash",
        json!({"command": three_checks(&outside, port, &bystander), "description": "checks", "run_in_background": true}),
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
    assert_confined(&text);
    assert!(text.contains("[sandbox: fs=workspace net=off]"), "{text}");
    assert!(outside.untouched());
    assert!(bystander.alive());
}

#[test]
fn each_scope_runs_under_its_own_executor_and_the_marker_says_which() {
    let env = Env::new();
    let port = tcp_server();
    let config = "[scopes]\ntrusted = [\"*\"]\nuntrusted = [\"*\"]\n\
                  [process.executor]\nscopes = { untrusted = \"sandbox\", trusted = \"local\" }\n";
    let call = |scope: &str| {
        env.call_configured(
            config,
            "bash",
            &json!({"command": tcp_probe(port), "description": "probe"}),
            &["--scope", scope],
        )
    };
    let trusted = call("trusted");
    assert!(
        trusted.content.contains("tcp=connected:hello"),
        "{trusted:?}"
    );
    assert!(!trusted.content.contains("[sandbox:"), "{trusted:?}");
    let untrusted = call("untrusted");
    assert!(untrusted.content.contains("tcp=refused"), "{untrusted:?}");
    assert!(
        untrusted
            .content
            .contains("[sandbox: fs=workspace net=off]"),
        "{untrusted:?}"
    );
    // A tool entry saying `local` does not lift the scope's sandbox.
    let config = format!("{config}tools = {{ bash = \"local\" }}\n");
    let out = env.call_configured(
        &config,
        "bash",
        &json!({"command": tcp_probe(port), "description": "probe"}),
        &["--scope", "untrusted"],
    );
    assert!(out.content.contains("tcp=refused"), "{out:?}");
}

#[test]
fn a_sandbox_needing_a_feature_the_kernel_lacks_refuses_the_call_unless_configured_weaker() {
    let env = Env::new();
    let marker = unique_marker();
    let config = format!("{SANDBOX}[process.sandbox]\nassume_abi = 3\n");
    let command = format!("touch ran-{marker}");
    let out = bash(&env, &config, &command);
    assert_eq!(out.code.as_deref(), Some("INTERNAL"), "{out:?}");
    assert!(
        out.message.contains("sandbox unavailable")
            && out.message.contains("needs net (Landlock ABI 4)"),
        "{out:?}"
    );
    assert!(!env.workdir().join(format!("ran-{marker}")).exists());

    // Configured weaker: runs, with files confined and the rest said to be open.
    let config = format!("{config}require = [\"fs\"]\n");
    let out = bash(
        &env,
        &config,
        &format!("{command} && echo ran; touch /tmp/../{marker}-x"),
    );
    assert!(out.content.contains("ran"), "{out:?}");
    assert!(
        out.content
            .contains("[sandbox: fs=workspace net=unconfined signals=unscoped]"),
        "{out:?}"
    );
    assert!(!Path::new(&format!("/{marker}-x")).exists());
}

#[test]
fn the_sandbox_cannot_read_the_state_directory_where_local_can() {
    let env = Env::new();
    let marker = unique_marker();
    let spill = env.state_dir().join("sessions/other-owner/spill");
    std::fs::create_dir_all(&spill).unwrap();
    std::fs::write(
        spill.join("call-1-output.txt"),
        format!("secret-{marker}\n"),
    )
    .unwrap();
    let command = format!("cat {}/call-1-output.txt", spill.display());
    let local = bash(&env, "", &command);
    assert!(
        local.content.contains(&format!("secret-{marker}")),
        "{local:?}"
    );
    let sandboxed = bash(&env, SANDBOX, &command);
    assert!(
        !sandboxed.content.contains(&format!("secret-{marker}")),
        "{sandboxed:?}"
    );
    // The state directory is covered by an empty tmpfs in the run's namespace.
    assert!(
        sandboxed.content.contains("No such file or directory"),
        "{sandboxed:?}"
    );
}

#[test]
fn a_sandboxed_run_is_still_contained_and_gets_the_environment_policy() {
    let env = Env::new();
    let marker = unique_marker();
    let config =
        format!("{SANDBOX}[process.env]\nset = {{ SANDBOX_POLICY = \"applied-{marker}\" }}\n");
    // Each escapee writes its pid (into the workspace) before it sleeps, and the command
    // returns only once both have: they are proven to have run before they are proven gone.
    let command = format!(
        "(setsid sh -c 'echo $$ > escapee-1.pid; exec sleep 97{marker}' >/dev/null 2>&1 &); \
         setsid -f sh -c 'echo $$ > escapee-2.pid; exec sleep 98{marker}' >/dev/null 2>&1; \
         while [ ! -s escapee-1.pid ] || [ ! -s escapee-2.pid ]; do sleep 0.01; done; \
         echo policy=$SANDBOX_POLICY"
    );
    let out = bash(&env, &config, &command);
    assert!(
        out.content.contains(&format!("policy=applied-{marker}")),
        "{out:?}"
    );
    assert!(
        out.content.contains("[sandbox: fs=workspace net=off]"),
        "{out:?}"
    );
    for name in ["escapee-1.pid", "escapee-2.pid"] {
        let pid = std::fs::read_to_string(env.workdir().join(name)).unwrap();
        let pid = pid.trim();
        assert!(!pid.is_empty(), "{name}: the escapee never ran");
        let gone = crate::support::wait_for(Duration::from_secs(5), || {
            !std::path::Path::new(&format!("/proc/{pid}")).exists()
        });
        assert!(gone, "{name}: the escapee {pid} is alive");
    }
    let left = crate::support::survivors(&marker, Duration::from_secs(5));
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn a_sandboxed_run_holds_no_capabilities_and_cannot_read_the_hosts_environment() {
    let env = Env::new();
    let marker = unique_marker();
    let command = "grep -E '^Cap(Eff|Prm|Bnd)' /proc/self/status; \
                   tr '\\0' '\\n' < /proc/$PPID/environ | grep -c SANDBOX_HOST_SECRET";
    let run = |config: &str| {
        let output = env
            .dsh_configured(config)
            .env("SANDBOX_HOST_SECRET", &marker)
            .args([
                "call",
                "bash",
                &json!({"command": command, "description": "caps"}).to_string(),
                "--json",
            ])
            .output()
            .unwrap();
        crate::support::CallOutput::parse(output)
    };
    // Local runs as the host does (here root: every capability; the host's environment
    // readable through /proc).
    let local = run("");
    assert!(local.content.contains("\n1\n"), "{local:?}");
    let sandboxed = run(SANDBOX);
    for set in ["CapEff", "CapPrm", "CapBnd"] {
        assert!(
            sandboxed
                .content
                .contains(&format!("{set}:\t0000000000000000")),
            "{set}: {sandboxed:?}"
        );
    }
    assert!(
        sandboxed.content.contains("environ: Permission denied"),
        "{sandboxed:?}"
    );
}

#[test]
fn named_unix_sockets_are_unreachable_in_the_sandbox_unless_allowed() {
    let env = Env::new();
    let path = env.dir.path().join("agent.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            use std::io::Write;
            let mut stream = stream;
            let _ = stream.write_all(b"unix-hello\n");
        }
    });
    let command = format!(
        "python3 -c 'import socket\ns=socket.socket(socket.AF_UNIX)\ns.connect(\"{}\")\nprint(s.recv(64).decode().strip())'; \
         python3 -c 'import socket\na,b=socket.socketpair()\na.send(b\"pair-ok\")\nprint(b.recv(9).decode())'",
        path.display()
    );
    let out = bash(&env, SANDBOX, &command);
    assert!(!out.content.contains("unix-hello"), "{out:?}");
    assert!(out.content.contains("PermissionError"), "{out:?}");
    assert!(out.content.contains("pair-ok"), "{out:?}");
    let allowed = format!("{SANDBOX}[process.sandbox]\nunix_sockets = true\n");
    let out = bash(&env, &allowed, &command);
    assert!(out.content.contains("unix-hello"), "{out:?}");
}

#[test]
fn dsh_says_at_start_which_of_its_own_files_lie_in_the_workspace() {
    let env = Env::new();
    let state = env.workdir().join(".dsh-state");
    let config = env.workdir().join("dsh.toml");
    std::fs::write(&config, SANDBOX).unwrap();
    let output = env
        .dsh()
        .env("DSH_STATE_DIR", &state)
        .arg("--config")
        .arg(&config)
        .args(["call", "bash", r#"{"command":"true","description":"x"}"#])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let log = String::from_utf8_lossy(&output.stderr);
    let line = log
        .lines()
        .find(|l| l.contains("own files lie in the workspace"))
        .unwrap_or_else(|| panic!("no warning naming dsh's files in the workspace: {log}"));
    for path in [&state, &config] {
        let canonical = std::fs::canonicalize(path).unwrap();
        assert!(
            line.contains(&canonical.display().to_string()),
            "{} not named: {line}",
            canonical.display()
        );
    }
    // With both outside the workspace, there is nothing to say.
    let quiet = env
        .dsh_configured(SANDBOX)
        .args(["call", "bash", r#"{"command":"true","description":"x"}"#])
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&quiet.stderr);
    assert!(!log.contains("own files lie in the workspace"), "{log}");
}

#[test]
fn in_the_sandbox_a_command_longer_than_an_argument_may_be_runs_whole() {
    // 300 KiB: over the kernel's 128 KiB limit on one argument. The script reaches the
    // sandboxed shell on a descriptor, past Landlock, the mount namespace and seccomp.
    let env = Env::new();
    let server = McpServer::start(&env, SANDBOX);
    let (command, body) = crate::bash_tool::heredoc_command(300 * 1024);
    let reply = server.call(
        "bash",
        json!({"command": command, "description": "write a file"}),
    );
    assert!(!reply.is_error, "{reply:?}\n{}", server.stderr());
    assert_eq!(
        crate::support::without_undo_line(&reply.text),
        "0=bash #=0 memfds=0\n[sandbox: fs=workspace net=off]\n[exit code: 3]"
    );
    let written = std::fs::read(env.workdir().join("written.txt")).unwrap();
    assert!(
        written == body.as_bytes(),
        "the file differs from the heredoc"
    );
}

/// `dsh call bash COMMAND` under `config`, dsh started where the three Landlock calls
/// answer `ENOSYS`: a kernel without Landlock, as a process under it sees it.
fn bash_without_landlock(
    env: &Env,
    config: &str,
    command: &str,
) -> (crate::support::CallOutput, String) {
    let mut dsh = env.dsh_configured(config);
    dsh.args([
        "call",
        "bash",
        &json!({"command": command, "description": "sandbox check"}).to_string(),
        "--json",
    ])
    .stdin(std::process::Stdio::null());
    crate::support::without_syscalls(
        &mut dsh,
        &[
            libc::SYS_landlock_create_ruleset,
            libc::SYS_landlock_add_rule,
            libc::SYS_landlock_restrict_self,
        ],
    );
    let output = dsh.output().unwrap();
    let log = String::from_utf8_lossy(&output.stderr).into_owned();
    (crate::support::CallOutput::parse(output), log)
}

#[test]
fn on_a_kernel_without_landlock_a_sandboxed_call_fails_closed_naming_fs_and_runs_nothing() {
    let env = Env::new();
    let marker = unique_marker();
    let ran = env.workdir().join(format!("ran-{marker}"));
    // The default `require` (fs, net, signals): refused, naming the first one missing.
    let (out, log) = bash_without_landlock(&env, SANDBOX, &format!("touch ran-{marker}"));
    assert_eq!(out.code.as_deref(), Some("INTERNAL"), "{out:?}\n{log}");
    assert!(
        out.message.starts_with("sandbox unavailable: ")
            && out.message.contains("needs fs (Landlock ABI 1)")
            && out.message.contains("offers Landlock ABI 0"),
        "{out:?}"
    );
    assert!(!ran.exists(), "the refused call ran: {out:?}");
}

#[test]
fn on_a_kernel_without_landlock_a_sandbox_requiring_nothing_runs_and_says_nothing_is_confined() {
    let env = Env::new();
    let marker = unique_marker();
    let config = format!("{SANDBOX}[process.sandbox]\nrequire = []\n");
    let (out, log) =
        bash_without_landlock(&env, &config, &format!("touch ran-{marker} && echo ran"));
    assert!(out.content.contains("ran"), "{out:?}\n{log}");
    assert!(
        out.content
            .contains("[sandbox: fs=unconfined net=unconfined signals=unscoped]"),
        "{out:?}"
    );
    assert!(
        env.workdir().join(format!("ran-{marker}")).exists(),
        "{out:?}"
    );
}

#[test]
fn dsh_says_at_start_what_the_kernel_lacks_for_each_executor_it_names() {
    let env = Env::new();
    let call = |config: &str| {
        let output = env
            .dsh_configured(config)
            .env("RUST_LOG", "info")
            .args(["call", "bash", r#"{"command":"true","description":"x"}"#])
            .output()
            .unwrap();
        String::from_utf8_lossy(&output.stderr).to_string()
    };
    // A kernel with Landlock ABI 3 (no TCP rules, no scoping), and `net` required: every
    // sandboxed call will be refused, and the log says so before any call is made.
    let log =
        call("[process.executor]\ndefault = \"sandbox\"\n[process.sandbox]\nassume_abi = 3\n");
    let refused = log
        .lines()
        .find(|l| l.contains("lacks a required feature"))
        .unwrap_or_else(|| panic!("no warning of the missing feature: {log}"));
    assert!(refused.contains("WARN"), "{refused}");
    assert!(refused.contains("Landlock net (ABI 4"), "{refused}");
    assert!(refused.contains("executor=Sandbox"), "{refused}");
    // Not required: a note that runs go on with less confinement.
    let log = call(
        "[process.executor]\ndefault = \"sandbox\"\n[process.sandbox]\nassume_abi = 3\nrequire = [\"fs\"]\n",
    );
    assert!(!log.contains("lacks a required feature"), "{log}");
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("runs with less confinement"))
        .collect();
    assert!(lines.iter().any(|l| l.contains("Landlock net")), "{log}");
    assert!(
        lines.iter().any(|l| l.contains("Landlock signals")),
        "{log}"
    );
    // The kernel here has everything: nothing to say.
    let log = call("[process.executor]\ndefault = \"sandbox\"\n");
    assert!(!log.contains("less confinement"), "{log}");
    assert!(!log.contains("lacks a required feature"), "{log}");
}
