//! The state directory is private and cannot be poisoned: everything dsh writes there is
//! its user's only whatever the umask, a directory of another user is refused, the
//! compile cache loads only entries authenticated under the user's secret key, and no
//! plugin may be granted a directory that overlaps the state directory.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::support::{built_plugin, Env};

/// `command` with the umask most systems give users, set in the child.
fn with_umask_022(command: &mut Command) -> &mut Command {
    // SAFETY: umask is async-signal-safe and only changes the child's creation mask.
    unsafe {
        command.pre_exec(|| {
            libc::umask(0o022);
            Ok(())
        })
    }
}

/// Every path under `dir` (itself included), depth first.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut found = vec![dir.to_path_buf()];
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if entry.file_type().unwrap().is_dir() {
            found.extend(walk(&path));
        } else {
            found.push(path);
        }
    }
    found
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Polls for `path` to exist, for up to 20 s.
fn wait_for(path: &Path) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if path.exists() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn everything_under_the_state_dir_is_private_with_umask_022() {
    let env = Env::new();
    // The test made the state dir with its own umask: dsh tightens what others may read.
    std::fs::set_permissions(env.state_dir(), std::fs::Permissions::from_mode(0o755)).unwrap();

    let spilled = with_umask_022(&mut env.dsh())
        .args([
            "call",
            "bash",
            r#"{"command":"seq 1 20000","description":"long output"}"#,
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&spilled.stdout);
    assert!(stdout.contains("bytes omitted (full output: "), "{stdout}");
    let job = with_umask_022(&mut env.dsh())
        .args([
            "call",
            "bash",
            r#"{"command":"echo in the background","description":"a job","run_in_background":true}"#,
        ])
        .output()
        .unwrap();
    assert!(
        job.status.success(),
        "{}",
        String::from_utf8_lossy(&job.stderr)
    );

    let mut serve = with_umask_022(&mut env.dsh())
        .arg("serve")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let socket = env
        .state_dir()
        .join("run")
        .join(format!("{}.sock", serve.id()));
    let listening = wait_for(&socket);
    let socket_mode = std::fs::metadata(&socket).map(|m| m.mode() & 0o777);
    drop(serve.stdin.take());
    serve.wait().unwrap();
    assert!(listening, "dsh serve never made {}", socket.display());
    assert_eq!(socket_mode.unwrap(), 0o600, "the control socket");

    let paths = walk(&env.state_dir());
    for expected in ["run", "cache/key", "sessions"] {
        assert!(
            paths.contains(&env.state_dir().join(expected)),
            "{expected} in {paths:?}"
        );
    }
    let spill_files = paths
        .iter()
        .filter(|p| p.parent().is_some_and(|d| d.ends_with("spill")))
        .count();
    assert!(
        spill_files >= 2,
        "a spilled output and a job's output: {paths:?}"
    );
    let mut wrong = Vec::new();
    for path in &paths {
        let meta = std::fs::symlink_metadata(path).unwrap();
        let mode = meta.mode() & 0o7777;
        let want = if meta.is_dir() { 0o700 } else { 0o600 };
        if mode != want {
            wrong.push(format!("{} is {mode:o}, not {want:o}", path.display()));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn a_state_dir_owned_by_another_user_is_refused() {
    let env = Env::new();
    let state = env.state_dir();
    std::os::unix::fs::chown(&state, Some(65534), Some(65534)).unwrap();
    for args in [
        &["call", "bash", r#"{"command":"echo no","description":"d"}"#][..],
        &["tools"][..],
        &["plugins"][..],
    ] {
        let output = env.dsh().args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(&format!("state directory {}", state.display()))
                && stderr.contains("belongs to uid 65534"),
            "{args:?}: {stderr}"
        );
    }
    assert_eq!(
        std::fs::read_dir(&state).unwrap().count(),
        0,
        "nothing was written there"
    );
}

#[test]
fn without_home_the_state_dir_is_a_private_per_user_dir_in_tmp_checked_for_its_owner() {
    let env = Env::new();
    let tmp = env.dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777)).unwrap();
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    let fallback = tmp.join(format!("dsh-{uid}"));
    let dsh = || {
        let mut command = env.dsh();
        command
            .env_remove("DSH_STATE_DIR")
            .env_remove("HOME")
            .env_remove("XDG_STATE_HOME")
            .env_remove("XDG_RUNTIME_DIR")
            .env("TMPDIR", &tmp)
            .args([
                "call",
                "bash",
                r#"{"command":"echo fallback","description":"d"}"#,
            ]);
        command
    };

    // Someone else made it first: refused.
    std::fs::create_dir(&fallback).unwrap();
    std::os::unix::fs::chown(&fallback, Some(65534), Some(65534)).unwrap();
    let refused = dsh().output().unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("belongs to uid 65534"), "{stderr}");

    // A symbolic link planted there (even to a directory of this user): refused.
    std::fs::remove_dir(&fallback).unwrap();
    let target = env.dir.path().join("target");
    std::fs::create_dir(&target).unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::symlink(&target, &fallback).unwrap();
    let refused = dsh().output().unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("symbolic link"), "{stderr}");

    // Not there yet: created 0700, and used.
    std::fs::remove_file(&fallback).unwrap();
    let output = dsh().output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "fallback\n[exit code: 0]\n",
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let meta = std::fs::symlink_metadata(&fallback).unwrap();
    assert!(meta.is_dir());
    assert_eq!(meta.mode() & 0o7777, 0o700);
    assert_eq!(meta.uid(), uid);
    assert!(fallback.join("sessions").is_dir());
}

/// `dsh tools --json` with the echo plugin too: (tool names, stderr).
fn tools_with_echo(env: &Env) -> (Vec<String>, String) {
    let output = env
        .dsh()
        .arg("--plugins")
        .arg(env.plugins_dir())
        .env("RUST_LOG", "dsh=info")
        .args(["tools", "--json"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{stderr}");
    let tools: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let names = tools
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["name"].as_str().unwrap().to_string())
        .collect();
    (names, stderr)
}

/// The cache entry (code, sidecar) of the component `wasm`.
fn cache_entry(env: &Env, wasm: &Path) -> (PathBuf, PathBuf) {
    let digest = sha256_hex(&std::fs::read(wasm).unwrap());
    let cache = env.state_dir().join("cache");
    let code = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.extension().is_some_and(|e| e == "cwasm")
                && p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with(&digest)
        })
        .unwrap_or_else(|| {
            panic!(
                "no cache entry for {} in {}",
                wasm.display(),
                cache.display()
            )
        });
    let tag = code.with_extension("hmac");
    assert!(tag.exists(), "{} has its tag", code.display());
    (code, tag)
}

#[test]
fn a_cache_entry_swapped_for_another_plugins_code_is_not_loaded() {
    let env = Env::new();
    env.add_plugins(&[("echo", "echo")]);
    let (first, _) = tools_with_echo(&env);
    for tool in ["echo", "job_list", "job_output", "job_kill"] {
        assert!(first.contains(&tool.to_string()), "{tool} in {first:?}");
    }
    let (echo_code, echo_tag) = cache_entry(&env, &built_plugin("echo"));
    let (jobs_code, jobs_tag) = cache_entry(&env, &built_plugin("jobs"));
    let echo_bytes = std::fs::read(&echo_code).unwrap();

    // Two attacks by someone without the key: echo's code with echo's own (valid) tag,
    // then echo's code with the SHA-256 of its bytes as the sidecar.
    for forged_tag in [
        std::fs::read(&echo_tag).unwrap(),
        sha256_hex(&echo_bytes).into_bytes(),
    ] {
        std::fs::write(&jobs_code, &echo_bytes).unwrap();
        std::fs::write(&jobs_tag, &forged_tag).unwrap();

        let (tools, log) = tools_with_echo(&env);
        for tool in ["job_list", "job_output", "job_kill"] {
            assert!(
                tools.contains(&tool.to_string()),
                "{tool} in {tools:?}\n{log}"
            );
        }
        assert_eq!(
            tools.iter().filter(|t| *t == "echo").count(),
            1,
            "{tools:?}"
        );
        assert!(
            log.contains("fails authentication") && log.contains(&*jobs_code.display().to_string()),
            "{log}"
        );
        assert!(
            log.contains("compile cache entry corrupt: replaced"),
            "{log}"
        );
        assert_ne!(
            std::fs::read(&jobs_code).unwrap(),
            echo_bytes,
            "the entry was rewritten"
        );
        assert_ne!(std::fs::read(&jobs_tag).unwrap(), forged_tag);
    }
    // The rewritten entries are good: the next start loads everything from the cache.
    let (_, log) = tools_with_echo(&env);
    assert!(!log.contains("corrupt") && !log.contains("miss"), "{log}");
    assert!(log.contains("compile cache hit"), "{log}");
}

#[test]
fn a_plugin_granted_a_directory_overlapping_the_state_dir_is_refused() {
    let env = Env::new();
    env.add_plugins(&[("echo", "echo"), ("echo_wide", "echo")]);
    let state = std::fs::canonicalize(env.state_dir()).unwrap();
    // A directory inside the state dir (grants must name existing directories).
    let inside = state.join("granted");
    std::fs::create_dir_all(&inside).unwrap();
    let around = std::fs::canonicalize(env.dir.path()).unwrap();
    let config = format!(
        "[plugins.echo]\nfs = [{{ path = {:?}, mode = \"ro\" }}]\n\
         [plugins.echo_wide]\nfs = [{{ path = {:?}, mode = \"rw\" }}]\n",
        inside.display().to_string(),
        around.display().to_string(),
    );
    let plugins = env.plugins_configured(&config);
    let by_name = |name: &str| {
        plugins
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("{name} in {plugins:?}"))
    };
    for (name, granted, overlap) in [
        ("echo", &inside, "is inside"),
        ("echo_wide", &around, "contains"),
    ] {
        let plugin = by_name(name);
        assert_eq!(plugin["status"], "refused", "{plugin}");
        let reason = plugin["reason"].as_str().unwrap();
        assert!(
            reason.contains(&format!(
                "({}) {overlap} dsh's state directory {}",
                granted.display(),
                state.display()
            )),
            "{reason}"
        );
    }
    assert_eq!(by_name("bash")["status"], "serving");
    let served = env.call_configured(
        &config,
        "bash",
        &serde_json::json!({"command": "echo still serving", "description": "d"}),
        &[],
    );
    assert_eq!(
        served.content, "still serving\n[exit code: 0]",
        "{served:?}"
    );
}
