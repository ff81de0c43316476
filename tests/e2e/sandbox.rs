//! The plugin sandbox: a plugin reaches nothing it was not granted in `dsh.toml` (files,
//! environment, network, host interfaces), and its CPU and memory are bounded. The
//! `hostile` and `prober` test plugins (built from `plugins/`) try, and are stopped.

use std::io::{Read, Write};
use std::path::Path;

use serde_json::Value;

use crate::mcp_stdio::McpServer;
use crate::support::{built_plugin, output_and_peak_rss, CallOutput, Env};

/// A test environment with the `hostile` and `prober` plugins in its plugin directory.
struct Sandbox {
    env: Env,
}

impl Sandbox {
    fn new() -> Sandbox {
        let env = Env::new();
        env.add_plugins(&[("hostile", "hostile"), ("prober", "prober")]);
        Sandbox { env }
    }

    fn dsh(&self, config: &str) -> std::process::Command {
        self.env.dsh_configured(config)
    }

    fn call(&self, config: &str, tool: &str, args: Value) -> CallOutput {
        self.env.call_configured(config, tool, &args, &[])
    }

    fn plugins(&self, config: &str) -> Vec<Value> {
        self.env.plugins_configured(config)
    }
}

fn toml_path(path: &Path) -> String {
    format!("{:?}", path.display().to_string())
}

#[test]
fn hostile_plugins_get_their_structured_errors() {
    let sandbox = Sandbox::new();
    let config = "[plugins.hostile]\ncpu_ms = 300\nmemory_mb = 32\n";
    for (tool, args, code, says) in [
        (
            "spin",
            serde_json::json!({}),
            "PLUGIN_CPU_LIMIT",
            "CPU budget of 300 ms",
        ),
        (
            "grow_memory",
            serde_json::json!({}),
            "PLUGIN_OUT_OF_MEMORY",
            "cap of 32 MiB",
        ),
        // The guest's shadow stack lives in its linear memory: running off it traps.
        ("recurse", serde_json::json!({}), "PLUGIN_TRAP", "trapped"),
        (
            "panic",
            serde_json::json!({"message": "boom"}),
            "PLUGIN_TRAP",
            "trapped",
        ),
        (
            "huge_output",
            serde_json::json!({"mb": 100}),
            "PLUGIN_OUT_OF_MEMORY",
            "cap of 32 MiB",
        ),
    ] {
        let result = sandbox.call(config, tool, args);
        assert_eq!(result.code.as_deref(), Some(code), "{tool}: {result:?}");
        assert!(result.message.contains(says), "{tool}: {result:?}");
        assert!(
            result.message.contains("hostile"),
            "{tool} names the plugin: {result:?}"
        );
    }
    let fine = sandbox.call(config, "burn", serde_json::json!({"iterations": 1000}));
    assert_eq!(fine.code, None, "{fine:?}");
    assert!(fine.content.trim().parse::<u64>().is_ok(), "{fine:?}");
}

#[test]
fn a_huge_result_keeps_the_host_memory_bounded() {
    let sandbox = Sandbox::new();
    let measure = |config: &str, tool: &str, args: Value| {
        let (output, peak_kib) = output_and_peak_rss(sandbox.dsh(config).args([
            "call",
            tool,
            &args.to_string(),
            "--json",
        ]));
        (CallOutput::parse(output), peak_kib)
    };
    // The first start compiles the plugins into the cache; measure a warm start.
    measure("", "burn", serde_json::json!({"iterations": 1}));
    let (_, baseline_kib) = measure("", "burn", serde_json::json!({"iterations": 1}));
    // Within the default 64 MiB cap the plugin cannot even build 100 MiB.
    let (capped, capped_kib) = measure("", "huge_output", serde_json::json!({"mb": 100}));
    assert_eq!(
        capped.code.as_deref(),
        Some("PLUGIN_OUT_OF_MEMORY"),
        "{capped:?}"
    );
    // With room for it, the result is cut to the budget; the host holds one copy.
    let roomy = "[plugins.hostile]\nmemory_mb = 256\n";
    let (cut, cut_kib) = measure(roomy, "huge_output", serde_json::json!({"mb": 100}));
    assert_eq!(cut.code, None, "{cut:?}");
    assert!(
        cut.content.len() < 64 << 10,
        "cut to the budget: {} bytes",
        cut.content.len()
    );
    assert!(cut.content.contains("omitted"), "the cut says so");
    eprintln!("peak RSS: baseline {baseline_kib} KiB, capped {capped_kib} KiB, 100 MiB result {cut_kib} KiB");
    assert!(capped_kib < baseline_kib + (96 << 10), "{capped_kib} KiB");
    assert!(cut_kib < baseline_kib + (384 << 10), "{cut_kib} KiB");
}

#[test]
fn a_read_only_directory_grant_reads_there_and_nowhere_else() {
    let sandbox = Sandbox::new();
    let root = sandbox.env.dir.path().join("fs");
    let granted = root.join("granted");
    std::fs::create_dir_all(&granted).unwrap();
    std::fs::write(granted.join("note.txt"), "inside").unwrap();
    std::fs::write(root.join("outside.txt"), "outside").unwrap();
    std::os::unix::fs::symlink("/etc/passwd", granted.join("passwd-link")).unwrap();
    std::os::unix::fs::symlink(root.join("outside.txt"), granted.join("outside-link")).unwrap();
    let granted_text = granted.display().to_string();
    let config = format!(
        "[plugins.prober]\nfs = [{{ path = {}, mode = \"ro\" }}]\n",
        toml_path(&granted)
    );

    let read = sandbox.call(
        &config,
        "read_file",
        serde_json::json!({"path": format!("{granted_text}/note.txt")}),
    );
    assert_eq!(
        (read.code.as_deref(), read.content.as_str()),
        (None, "inside"),
        "{read:?}"
    );
    let listed = sandbox.call(
        &config,
        "list_dir",
        serde_json::json!({"path": granted_text}),
    );
    assert!(listed.content.contains("note.txt"), "{listed:?}");

    let write = sandbox.call(
        &config,
        "write_file",
        serde_json::json!({"path": format!("{granted_text}/note.txt"), "text": "changed"}),
    );
    assert_eq!(write.code.as_deref(), Some("DENIED"), "{write:?}");
    assert_eq!(
        std::fs::read_to_string(granted.join("note.txt")).unwrap(),
        "inside"
    );

    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    for escape in [
        "/etc/passwd".to_string(),
        format!("{granted_text}/../outside.txt"),
        format!("{granted_text}/passwd-link"),
        format!("{granted_text}/outside-link"),
        format!("{home}/.bashrc"),
        root.join("outside.txt").display().to_string(),
    ] {
        let denied = sandbox.call(&config, "read_file", serde_json::json!({"path": escape}));
        assert_eq!(
            denied.code.as_deref(),
            Some("DENIED"),
            "{escape}: {denied:?}"
        );
        assert!(
            !denied.content.contains("root:") && !denied.content.contains("outside"),
            "{escape}: {denied:?}"
        );
    }

    // The same plugin with no grant reads nothing, not even the granted file.
    let ungranted = sandbox.call(
        "",
        "read_file",
        serde_json::json!({"path": format!("{granted_text}/note.txt")}),
    );
    assert_eq!(ungranted.code.as_deref(), Some("DENIED"), "{ungranted:?}");
}

#[test]
fn a_read_write_grant_can_be_mapped_to_another_guest_path() {
    let sandbox = Sandbox::new();
    let out = sandbox.env.dir.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let config = format!(
        "[plugins.prober]\nfs = [{{ path = {}, guest = \"/out\", mode = \"rw\" }}]\n",
        toml_path(&out)
    );
    let write = sandbox.call(
        &config,
        "write_file",
        serde_json::json!({"path": "/out/made.txt", "text": "made"}),
    );
    assert_eq!(write.code, None, "{write:?}");
    assert_eq!(
        std::fs::read_to_string(out.join("made.txt")).unwrap(),
        "made"
    );
}

#[test]
fn only_granted_environment_variables_are_visible() {
    let sandbox = Sandbox::new();
    let config = "[plugins.prober]\nenv = [\"DSH_TEST_GRANTED\"]\n";
    let call = |key: &str| {
        let output = sandbox
            .dsh(config)
            .env("DSH_TEST_GRANTED", "granted-value")
            .env("DSH_TEST_SECRET", "secret-value")
            .args([
                "call",
                "env",
                &serde_json::json!({"key": key}).to_string(),
                "--json",
            ])
            .output()
            .unwrap();
        CallOutput::parse(output)
    };
    let granted = call("DSH_TEST_GRANTED");
    assert_eq!(
        (granted.code.as_deref(), granted.content.as_str()),
        (None, "granted-value")
    );
    for hidden in ["DSH_TEST_SECRET", "HOME", "PATH"] {
        let denied = call(hidden);
        assert_eq!(
            denied.code.as_deref(),
            Some("DENIED"),
            "{hidden}: {denied:?}"
        );
    }
}

#[test]
fn a_connect_needs_a_grant_for_exactly_that_address() {
    let sandbox = Sandbox::new();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut stream = stream;
            let mut ping = [0u8; 5];
            let _ = stream.read_exact(&mut ping);
            let _ = stream.write_all(b"pong\n");
        }
    });
    let connect = |config: &str| {
        sandbox.call(
            config,
            "connect",
            serde_json::json!({"addr": addr.to_string()}),
        )
    };

    let denied = connect("");
    assert_eq!(denied.code.as_deref(), Some("DENIED"), "{denied:?}");
    let other_port = format!(
        "[plugins.prober]\nnetwork = [\"127.0.0.1:{}\"]\n",
        addr.port().wrapping_add(1)
    );
    let other = connect(&other_port);
    assert_eq!(other.code.as_deref(), Some("DENIED"), "{other:?}");
    // The prober tells a sandbox denial from the OS's answer (see network_grants.rs).
    assert!(other.message.starts_with("[denied]"), "{other:?}");

    let granted = format!(
        "[plugins.prober]\nnetwork = [\"127.0.0.1:{}\"]\n",
        addr.port()
    );
    let connected = connect(&granted);
    assert_eq!(connected.code, None, "{connected:?}");
    assert!(connected.content.contains("pong"), "{connected:?}");
}

#[test]
fn an_import_without_its_grant_refuses_the_load_and_says_how_to_grant_it() {
    let sandbox = Sandbox::new();
    let plugins = sandbox.plugins("[plugins.bash]\ninterfaces = [\"log\"]\n");
    let bash = plugins.iter().find(|p| p["name"] == "bash").unwrap();
    assert_eq!(bash["status"], "refused", "{bash}");
    let reason = bash["reason"].as_str().unwrap();
    assert!(reason.contains("`dsh:plugin/process`"), "{reason}");
    assert!(
        reason.contains("[plugins.bash]\n  interfaces = [\"log\", \"process\"]"),
        "{reason}"
    );
    let refused = sandbox.call(
        "[plugins.bash]\ninterfaces = [\"log\"]\n",
        "bash",
        serde_json::json!({"command": "true", "description": "t"}),
    );
    assert_eq!(refused.code.as_deref(), Some("UNKNOWN_TOOL"), "{refused:?}");

    let plugins = sandbox.plugins("[plugins.bash]\ninterfaces = [\"process\"]\n");
    let bash = plugins.iter().find(|p| p["name"] == "bash").unwrap();
    assert_eq!(bash["status"], "serving", "{bash}");
    assert_eq!(bash["grants"]["interfaces"], serde_json::json!(["process"]));
    assert!(bash["imports"]
        .as_array()
        .unwrap()
        .iter()
        .any(|i| i == "dsh:plugin/process@0.2.0"));
}

#[test]
fn grants_can_be_pinned_to_a_build_by_digest_and_are_listed() {
    let sandbox = Sandbox::new();
    let digest = {
        use sha2::Digest;
        let bytes = std::fs::read(built_plugin("prober")).unwrap();
        sha2::Sha256::digest(bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    let config = format!(
        "[plugins.prober]\nenv = [\"LANG\"]\n[plugins.\"sha256:{digest}\"]\nenv = [\"DSH_TEST_PINNED\"]\nnetwork = [\"10.0.0.0/8:*\"]\n"
    );
    let plugins = sandbox.plugins(&config);
    let prober = plugins.iter().find(|p| p["name"] == "prober").unwrap();
    assert_eq!(
        prober["grants"]["env"],
        serde_json::json!(["DSH_TEST_PINNED"]),
        "{prober}"
    );
    assert_eq!(
        prober["grants"]["network"],
        serde_json::json!(["10.0.0.0/8:*"]),
        "{prober}"
    );

    let output = sandbox
        .dsh(&config)
        .args(["plugins", "--grants"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("env:        DSH_TEST_PINNED"), "{text}");
    assert!(
        text.contains("interfaces: process"),
        "bash keeps its default grant: {text}"
    );
    // The grantable interfaces, read from the host's capability list.
    for capability in ["process", "jobs", "terminal", "log", "progress"] {
        assert!(
            text.lines()
                .any(|line| line.trim_start().starts_with(capability)
                    && line.len() > capability.len() + 20),
            "{capability} listed with its summary: {text}"
        );
    }
}

#[test]
fn time_in_host_calls_does_not_count_against_the_cpu_budget() {
    let sandbox = Sandbox::new();
    let config = "[plugins.bash]\ncpu_ms = 1000\n[plugins.hostile]\ncpu_ms = 1000\n";
    let slept = sandbox.call(
        config,
        "bash",
        serde_json::json!({"command": "sleep 5; echo rested", "description": "sleep"}),
    );
    assert_eq!(slept.code, None, "{slept:?}");
    assert!(slept.content.contains("rested"), "{slept:?}");
    let spun = sandbox.call(config, "spin", serde_json::json!({}));
    assert_eq!(spun.code.as_deref(), Some("PLUGIN_CPU_LIMIT"), "{spun:?}");
    assert!(spun.message.contains("1000 ms"), "{spun:?}");
}

#[test]
fn bad_grants_are_configuration_errors() {
    let sandbox = Sandbox::new();
    for (config, says) in [
        (
            "[plugins.x]\ninterfaces = [\"lsp2\"]\n",
            "unknown interface",
        ),
        ("[plugins.x]\nnetwork = [\"localhost\"]\n", "HOST:PORT"),
        (
            "[plugins.x]\nfs = [{ path = \"rel\", mode = \"ro\" }]\n",
            "must be absolute",
        ),
        (
            "[plugins.x]\nfs = [{ path = \"/tmp\", mode = \"rwx\" }]\n",
            "unknown variant",
        ),
    ] {
        let output = sandbox.dsh(config).args(["tools"]).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{config}: {stderr}");
        assert!(stderr.contains(says), "{config}: {stderr}");
    }
    let missing =
        sandbox.plugins("[plugins.prober]\nfs = [{ path = \"/no/such/dir\", mode = \"ro\" }]\n");
    let prober = missing.iter().find(|p| p["name"] == "prober").unwrap();
    assert_eq!(prober["status"], "refused");
    assert!(
        prober["reason"].as_str().unwrap().contains("/no/such/dir"),
        "{prober}"
    );
}

/// A FIFO in a directory a plugin may read (any command of the session can make one)
/// holds up nothing: wasmtime-wasi's opens (vendored, patched) never block and give a
/// guest only regular files and directories, so each of more reads at once than the
/// server has runtime workers answers at once with an error, within its timeout, and a
/// read of a file beside them answers too.
#[test]
fn plugin_reads_of_a_fifo_answer_at_once_and_the_server_goes_on() {
    let sandbox = Sandbox::new();
    let granted = sandbox.env.dir.path().join("granted");
    std::fs::create_dir_all(&granted).unwrap();
    std::fs::write(granted.join("note.txt"), "inside").unwrap();
    let pipe = granted.join("pipe");
    let pipe_c = std::ffi::CString::new(pipe.display().to_string()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(pipe_c.as_ptr(), 0o600) }, 0);
    let config = format!(
        "[plugins.prober]\ntimeout_ms = 3000\nfs = [{{ path = {}, mode = \"ro\" }}]\n",
        toml_path(&granted)
    );
    let server = McpServer::start(&sandbox.env, &config);
    let note = serde_json::json!({ "path": granted.join("note.txt").display().to_string() });
    // dsh's runtime has one worker thread per CPU.
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    for _ in 0..2 {
        let on_fifo: Vec<_> = (0..workers * 2 + 1)
            .map(|_| {
                server.start_call(
                    "read_file",
                    serde_json::json!({ "path": pipe.display().to_string() }),
                )
            })
            .collect();
        let read = server.call("read_file", note.clone());
        assert_eq!((read.is_error, read.text.as_str()), (false, "inside"));
        for call in on_fifo {
            let answer = call.reply(&server);
            assert!(answer.is_error, "a FIFO was read: {answer:?}");
            assert_ne!(
                answer.code.as_deref(),
                Some("TIMEOUT"),
                "the open waited for a writer: {answer:?}"
            );
        }
    }
}
