//! Loading plugins: a plugin directory extends and overrides the embedded set; a broken
//! `.wasm` is reported with its reason and never takes the others down.

use crate::support::{built_plugin, Env};
use std::process::Command;

#[test]
fn broken_wasm_files_are_refused_with_a_reason_and_bash_still_works() {
    let env = Env::new();
    let dir = env.dir.path().join("plugins");
    std::fs::create_dir_all(&dir).unwrap();
    let echo = std::fs::read(built_plugin("echo")).unwrap();
    std::fs::write(dir.join("truncated.wasm"), &echo[..echo.len() / 2]).unwrap();
    std::fs::write(dir.join("not-a-component.wasm"), b"\0asm\x01\0\0\0").unwrap();
    std::fs::write(dir.join("text.wasm"), b"hello").unwrap();
    std::fs::write(dir.join("echo.wasm"), &echo).unwrap();

    let plugins = env.plugins_configured("");
    let by_name = |name: &str| {
        plugins
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("{name} listed"))
    };
    for broken in ["truncated", "not-a-component", "text"] {
        let status = by_name(broken);
        assert_eq!(status["status"], "refused", "{status}");
        assert!(!status["reason"].as_str().unwrap().is_empty());
        assert!(status["source"]
            .as_str()
            .unwrap()
            .ends_with(&format!("{broken}.wasm")));
        assert_eq!(status["digest"].as_str().unwrap().len(), 64);
    }
    assert!(
        by_name("not-a-component")["reason"]
            .as_str()
            .unwrap()
            .contains("component"),
        "{plugins:?}"
    );
    assert_eq!(by_name("bash")["status"], "serving");
    assert_eq!(by_name("bash")["source"], "embedded");
    assert_eq!(by_name("echo")["status"], "serving");

    let out = env
        .dsh()
        .arg("--plugins")
        .arg(&dir)
        .args([
            "call",
            "bash",
            r#"{"command":"echo still","description":"d"}"#,
        ])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "still\n[exit code: 0]\n"
    );
    let out = env
        .dsh()
        .arg("--plugins")
        .arg(&dir)
        .args(["call", "echo", r#"{"text":"from the dir"}"#])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "from the dir\n");
}

#[test]
fn a_file_in_the_plugin_dir_overrides_the_embedded_plugin_of_its_name() {
    let env = Env::new();
    let dir = env.dir.path().join("plugins");
    std::fs::create_dir_all(&dir).unwrap();
    // `bash.wasm` that is really echo: it replaces the embedded bash.
    std::fs::copy(built_plugin("echo"), dir.join("bash.wasm")).unwrap();
    let plugins = env.plugins_configured("");
    let bash = plugins.iter().find(|p| p["name"] == "bash").unwrap();
    assert!(bash["source"].as_str().unwrap().ends_with("bash.wasm"));
    assert_eq!(bash["tools"], serde_json::json!(["echo"]));
}

#[test]
fn a_missing_plugin_dir_is_a_clear_error() {
    let env = Env::new();
    let output = env
        .dsh()
        .args(["--plugins", "/no/such/dir", "tools"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("/no/such/dir"));
}

fn tools_log(env: &Env) -> String {
    let output = env
        .dsh()
        .env("RUST_LOG", "dsh=info")
        .args(["tools", "--json"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A first start on an empty state directory compiles nothing: each embedded tool's
/// code, precompiled when dsh was built, is stored in the cache; the second start maps
/// every one from there.
#[test]
fn a_first_start_stores_precompiled_code_and_a_second_maps_it_from_the_cache() {
    let env = Env::new();
    let first = tools_log(&env);
    for plugin in ["bash", "files", "jobs", "lsp", "subagent", "terminal"] {
        let stored = format!("compile cache miss: precompiled code stored plugin=\"{plugin}\"");
        assert!(first.contains(&stored), "{plugin}: {first}");
    }
    assert!(!first.contains("miss: compiled"), "{first}");
    let second = tools_log(&env);
    assert!(second.contains("compile cache hit"), "{second}");
    assert!(!second.contains("miss"), "{second}");
}

#[test]
fn a_corrupted_cache_entry_is_recompiled_not_loaded() {
    let env = Env::new();
    tools_log(&env);
    let cache = env.state_dir().join("cache");
    let entry = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "cwasm"))
        .expect("a cache entry");
    let mut bytes = std::fs::read(&entry).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&entry, &bytes).unwrap();

    let log = tools_log(&env);
    assert!(
        log.contains("compile cache entry corrupt: replaced"),
        "{log}"
    );
    // The rewritten entry is good again, and bash still works.
    assert!(tools_log(&env).contains("compile cache hit"));
    let out = env.call("bash", r#"{"command":"echo fine","description":"d"}"#);
    assert_eq!(out.content, "fine\n[exit code: 0]");
}

/// A state directory on a `noexec` mount (as `/tmp` often is, where the state directory
/// goes without `HOME`): its cache entries cannot be mapped executable, so each is
/// loaded from a checked copy, and a second start is still all hits, never a recompile.
/// Runs in a mount namespace of its own (`unshare`); skipped where none can be made.
#[test]
fn a_compile_cache_on_a_noexec_mount_is_loaded_not_recompiled() {
    let env = Env::new();
    let mount = env.workdir().join("noexec");
    std::fs::create_dir_all(&mount).unwrap();
    let output = Command::new("unshare")
        .args(["-rm", "--", "sh", "-c"])
        .arg(
            "mount -t tmpfs -o noexec,mode=0700 tmpfs \"$1\" || exit 97; \
             \"$2\" tools --json >/dev/null || exit 1; echo SECOND-START >&2; \
             \"$2\" tools --json >/dev/null",
        )
        .args([
            "sh".as_ref(),
            mount.as_os_str(),
            env!("CARGO_BIN_EXE_dsh").as_ref(),
        ])
        .env("DSH_STATE_DIR", mount.join("state"))
        .env("DSH_WORKDIR", env.workdir())
        .env("RUST_LOG", "dsh=info")
        .env_remove("DSH_CONFIG")
        .env_remove("DSH_PLUGINS")
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&output.stderr);
    if output.status.code() == Some(97) || log.starts_with("unshare:") {
        crate::support::skipped(&format!(
            "no mount namespace with a noexec tmpfs here: {log}"
        ));
        return;
    }
    assert!(output.status.success(), "{log}");
    let (first, second) = log.split_once("SECOND-START").unwrap();
    assert!(first.contains("compile cache miss"), "{first}");
    assert!(second.contains("compile cache hit"), "{second}");
    for word in ["miss", "corrupt", "recompil", "does not load"] {
        assert!(!second.contains(word), "{word}: {second}");
    }
}

/// A refused plugin is listed with the contract version and imports read from its
/// component, and calling its tool says that it was refused and why (still
/// `UNKNOWN_TOOL`): by the tool's name (`worker` from `worker.wasm`) or by its prefix
/// (`terminal_list` of the embedded `terminal`, refused when its grant is taken away).
#[test]
fn a_refused_plugin_is_listed_with_its_imports_and_its_tools_say_why_they_are_unknown() {
    let env = Env::new();
    // The jobs test plugin as `worker`: it imports `dsh:plugin/jobs`, not granted.
    env.add_plugins(&[("worker", "jobs")]);
    let config = "[plugins.terminal]\ninterfaces = []\n";
    let plugins = env.plugins_configured(config);
    for name in ["worker", "terminal"] {
        let refused = plugins
            .iter()
            .find(|p| p["name"] == name && p["status"] == "refused")
            .unwrap_or_else(|| panic!("{name} refused: {plugins:?}"));
        assert_eq!(refused["contract"], "0.2.0", "{refused}");
        let imports: Vec<&str> = refused["imports"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|i| i.as_str())
            .collect();
        let lacked = if name == "worker" { "jobs" } else { "terminal" };
        assert!(
            imports.contains(&format!("dsh:plugin/{lacked}@0.2.0").as_str()),
            "{refused}"
        );
        assert!(
            refused["reason"]
                .as_str()
                .unwrap()
                .contains(&format!("dsh:plugin/{lacked}")),
            "{refused}"
        );
    }

    for (tool, plugin) in [("worker", "worker"), ("terminal_list", "terminal")] {
        let called = env.call_configured(config, tool, &serde_json::json!({}), &[]);
        assert_eq!(called.code.as_deref(), Some("UNKNOWN_TOOL"), "{called:?}");
        assert!(
            called.message.contains(&format!("plugin {plugin} (")),
            "{called:?}"
        );
        assert!(called.message.contains("was refused"), "{called:?}");
        assert!(called.message.contains("without a grant"), "{called:?}");
    }
    // A name no refused plugin explains stays the plain answer.
    let called = env.call_configured(config, "no_such_tool", &serde_json::json!({}), &[]);
    assert_eq!(called.code.as_deref(), Some("UNKNOWN_TOOL"), "{called:?}");
    assert_eq!(
        called.message, "no tool named \"no_such_tool\"",
        "{called:?}"
    );
}
