//! Plugins in other languages: the same `todos` tool written in Rust, Python
//! (componentize-py) and JavaScript (componentize-js), in `examples/plugins/LANG/todos`,
//! built here and driven through `dsh serve` with the same calls and the same expected
//! answers. The toolchains come from PyPI and npm into the target directory
//! (`target/tmp/langs-py`, `target/tmp/langs-js`), so `cargo test` needs nothing
//! installed first but python3 (with venv), node and npm.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Instant;

use serde_json::{json, Value};

use crate::mcp_stdio::McpServer;
use crate::support::Env;

/// The componentize-py and componentize-js the examples are built with.
const COMPONENTIZE_PY: &str = "componentize-py==0.25.1";
const COMPONENTIZE_JS: &str = "@bytecodealliance/componentize-js@0.23.0";
/// componentize-js imports it without depending on it (jco used to bring it).
const PREVIEW2_SHIM: &str = "@bytecodealliance/preview2-shim@0.25.0";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lang {
    Rust,
    Python,
    Js,
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

fn tmp() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn run(command: &mut Command, what: &str) {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    assert!(
        output.status.success(),
        "{what} failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Holds an exclusive lock on `target/tmp/NAME.lock` (several test processes may build
/// at once) while `f` runs.
fn locked<T>(name: &str, f: impl FnOnce() -> T) -> T {
    static IN_PROCESS: Mutex<()> = Mutex::new(());
    let _guard = IN_PROCESS.lock().unwrap_or_else(|e| e.into_inner());
    let lock = std::fs::File::create(tmp().join(format!("{name}.lock"))).unwrap();
    // SAFETY: flock on a descriptor we own; released when `lock` closes.
    unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) };
    f()
}

/// `componentize-py` in a virtual environment of its own, installed from PyPI once.
pub fn componentize_py() -> PathBuf {
    let venv = tmp().join("langs-py");
    let bin = venv.join("bin/componentize-py");
    let stamp = venv.join("dsh-installed");
    if std::fs::read_to_string(&stamp).ok().as_deref() == Some(COMPONENTIZE_PY) {
        return bin;
    }
    if !venv.join("bin/python").exists() {
        run(
            Command::new("python3").args(["-m", "venv"]).arg(&venv),
            "python3 -m venv",
        );
    }
    run(
        Command::new(venv.join("bin/python")).args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            COMPONENTIZE_PY,
        ]),
        "pip install componentize-py",
    );
    std::fs::write(&stamp, COMPONENTIZE_PY).unwrap();
    bin
}

/// `componentize-js`, installed from npm once.
fn componentize_js() -> PathBuf {
    let prefix = tmp().join("langs-js");
    let bin = prefix.join("node_modules/.bin/componentize-js");
    let stamp = prefix.join("dsh-installed");
    if std::fs::read_to_string(&stamp).ok().as_deref() == Some(COMPONENTIZE_JS) {
        return bin;
    }
    run(
        Command::new("npm")
            .args(["install", "--silent", "--no-audit", "--no-fund", "--prefix"])
            .arg(&prefix)
            .args([COMPONENTIZE_JS, PREVIEW2_SHIM]),
        "npm install componentize-js",
    );
    std::fs::write(&stamp, COMPONENTIZE_JS).unwrap();
    bin
}

/// `componentize-py` on `dir/app.py` against the `world` of the current contract.
fn componentize_python(dir: &Path, world: &str, out: &Path) {
    run(
        Command::new(componentize_py())
            .arg("-d")
            .arg(root().join("wit/v0.2.0"))
            .args(["-w", world, "componentize", "app", "-o"])
            .arg(out)
            .current_dir(dir),
        &format!("componentize-py {}", dir.display()),
    );
}

/// Builds the `todos` example in `lang` (again only when its source changed) and
/// returns the component.
fn build(lang: Lang) -> PathBuf {
    locked(&format!("langs-{lang:?}"), || {
        let dir = root().join(match lang {
            Lang::Rust => "examples/plugins/rust/todos",
            Lang::Python => "examples/plugins/python/todos",
            Lang::Js => "examples/plugins/js/todos",
        });
        match lang {
            Lang::Rust => {
                // The same target directory as the test plugins: their dependencies
                // are built already.
                let target = Path::new(env!("DSH_WASM_TARGET_DIR"));
                run(
                    Command::new("cargo")
                        .args(["build", "--release", "--target", "wasm32-wasip2"])
                        .arg("--manifest-path")
                        .arg(dir.join("Cargo.toml"))
                        .env("CARGO_TARGET_DIR", target),
                    "cargo build (the Rust todos example)",
                );
                target.join("wasm32-wasip2/release/todos.wasm")
            }
            Lang::Python | Lang::Js => {
                let (source, out) = match lang {
                    Lang::Python => ("app.py", tmp().join("langs-build/python/todos.wasm")),
                    _ => ("todos.js", tmp().join("langs-build/js/todos.wasm")),
                };
                // The build is kept while its source and the contract it is built
                // against are the same (an unreleased 0.2.0 still grows).
                let text = std::fs::read_to_string(dir.join(source)).unwrap()
                    + &std::fs::read_to_string(root().join("wit/v0.2.0/plugin.wit")).unwrap();
                let stamp = out.with_extension("source");
                if out.exists() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(&text) {
                    return out;
                }
                std::fs::create_dir_all(out.parent().unwrap()).unwrap();
                if lang == Lang::Python {
                    componentize_python(&dir, "tool", &out);
                } else {
                    // The contract goes beside the WASI interfaces as a copy:
                    // componentize-js reads no file outside the project.
                    let deps = dir.join("wit/deps/dsh-plugin");
                    std::fs::create_dir_all(&deps).unwrap();
                    std::fs::copy(
                        root().join("wit/v0.2.0/plugin.wit"),
                        deps.join("plugin.wit"),
                    )
                    .unwrap();
                    run(
                        Command::new(componentize_js())
                            .args(["todos.js", "--wit", "wit", "--world-name", "todos"])
                            .args(["-d", "http", "-d", "fetch-event", "-o"])
                            .arg(&out)
                            .current_dir(&dir),
                        "building the JavaScript todos",
                    );
                }
                std::fs::write(&stamp, text).unwrap();
                out
            }
        }
    })
}

/// A tree with TODO and FIXME lines, and a file outside it (not granted).
fn fixture(env: &Env) -> (PathBuf, PathBuf) {
    let data = env.dir.path().join("data");
    std::fs::create_dir_all(data.join("src/deep")).unwrap();
    std::fs::write(
        data.join("src/a.rs"),
        "fn a() {}\n// TODO one\n/* FIXME two */\nTODO and FIXME\n",
    )
    .unwrap();
    std::fs::write(data.join("src/deep/b.py"), "# TODO: deep\n").unwrap();
    std::fs::write(data.join("notes.txt"), "nothing to do here\n").unwrap();
    std::fs::write(data.join("z.md"), "- [ ] TODO last\n- FIXME\n").unwrap();
    let secret = env.dir.path().join("secret");
    std::fs::create_dir_all(&secret).unwrap();
    std::fs::write(secret.join("s.txt"), "TODO secret\n").unwrap();
    (data, secret.join("s.txt"))
}

/// `dsh plugin check --json` of the component as plugin `todos` under `config`.
fn check(env: &Env, config: &str, wasm: &Path) -> Value {
    let output = env
        .dsh_configured(config)
        .args(["plugin", "check", "--json", "--name", "todos"])
        .arg(wasm)
        .output()
        .unwrap();
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&output.stderr));
    })
}

fn rss_kib(pid: i32) -> u64 {
    status_kib(pid, "VmRSS:")
}

fn peak_rss_kib(pid: i32) -> u64 {
    status_kib(pid, "VmHWM:")
}

/// A `/proc/PID/status` figure in KiB.
fn status_kib(pid: i32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Builds `lang`'s todos, checks its imports, serves it with only its directory and
/// `log` granted (progress needs none), and asks it the same questions as every other
/// language.
fn todos_answers_the_same(lang: Lang) {
    let wasm = build(lang);
    let env = Env::new();
    let (data, secret) = fixture(&env);
    let config = format!(
        "[plugins.todos]\ninterfaces = [\"log\"]\nfs = [{{ path = {:?}, mode = \"ro\" }}]\n",
        data.display().to_string()
    );

    // Its imports are only what it uses: of dsh's interfaces, `log` (and `progress`, in
    // the `tool` world), nothing that runs commands or terminals.
    let started = Instant::now();
    let report = check(&env, &config, &wasm);
    let first_load = started.elapsed();
    assert_eq!(report["loads"], true, "{report:#}");
    assert_eq!(report["kind"], "tool");
    let host_imports: Vec<&str> = report["imports"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i.as_str()?.strip_prefix("dsh:plugin/"))
        .collect();
    for import in &host_imports {
        assert!(
            ["types@0.2.0", "log@0.2.0", "progress@0.2.0"].contains(import),
            "{lang:?} imports {import}: {host_imports:?}"
        );
    }
    assert!(host_imports.contains(&"log@0.2.0"), "{host_imports:?}");

    std::fs::create_dir_all(env.plugins_dir()).unwrap();
    std::fs::copy(&wasm, env.plugins_dir().join("todos.wasm")).unwrap();
    let started = Instant::now();
    let mut serve = env.dsh_configured(&config);
    serve.env("RUST_LOG", "dsh=warn,dsh::plugin=info");
    let server = McpServer::start_command(&env, serve);
    let cached_start = started.elapsed();

    let tree = server.call_ok("todos", json!({"path": data}));
    assert_eq!(
        tree, "src/a.rs: 3\nsrc/deep/b.py: 1\nz.md: 2\ntotal: 6 in 3 files",
        "{lang:?}"
    );
    let one = server.call_ok("todos", json!({"path": data.join("z.md")}));
    assert_eq!(one, "z.md: 2\ntotal: 2 in 1 files", "{lang:?}");
    let none = server.call_ok("todos", json!({"path": data.join("notes.txt")}));
    assert_eq!(none, "total: 0 in 0 files", "{lang:?}");

    // A path that does not exist, and a file outside the grant: the same error.
    for path in [data.join("missing"), secret.clone()] {
        let reply = server.call("todos", json!({"path": path}));
        assert!(reply.is_error, "{lang:?} {path:?}: {reply:?}");
        assert_eq!(
            reply.code.as_deref(),
            Some("INVALID_ARGUMENTS"),
            "{reply:?}"
        );
        assert!(
            reply.text.contains(&format!(
                "cannot read {}: no such file or directory in the granted directories",
                path.display()
            )),
            "{lang:?}: {reply:?}"
        );
    }
    // It logged through `log`.
    let stderr = server.stderr();
    assert!(
        stderr.contains("todos: 4 files scanned, 6 lines found"),
        "{lang:?}: {stderr}"
    );

    // Figures: a fresh instance per call.
    let mut times: Vec<f64> = (0..30)
        .map(|_| {
            let started = Instant::now();
            server.call_ok("todos", json!({"path": data.join("z.md")}));
            started.elapsed().as_secs_f64() * 1000.0
        })
        .collect();
    times.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let rss_loaded = rss_kib(server.pid());
    // Eight calls at once, each in its own instance.
    let pending: Vec<_> = (0..8)
        .map(|_| server.start_call("todos", json!({"path": data})))
        .collect();
    for call in pending {
        let reply = call.reply(&server);
        assert!(!reply.is_error, "{reply:?}");
    }
    eprintln!(
        "languages: {lang:?} todos: {} KiB, first check (compile) {:.0} ms, cached serve start {:.0} ms, \
         call p50 {:.2} ms (MCP round trip), server RSS {} MiB loaded, peak {} MiB after 8 concurrent calls",
        report["size_bytes"].as_u64().unwrap() / 1024,
        first_load.as_secs_f64() * 1000.0,
        cached_start.as_secs_f64() * 1000.0,
        times[times.len() / 2],
        rss_loaded / 1024,
        peak_rss_kib(server.pid()) / 1024
    );
}

#[test]
fn todos_in_rust_answers_like_the_others() {
    todos_answers_the_same(Lang::Rust);
}

#[test]
fn todos_in_python_answers_like_the_others_with_only_log_and_its_directory() {
    todos_answers_the_same(Lang::Python);
}

#[test]
fn todos_in_javascript_answers_like_the_others_with_only_log_and_its_directory() {
    todos_answers_the_same(Lang::Js);
}

/// Builds the Python guard, as it is (`v1`) and with its VERSION set to 2 (`v2`).
fn build_guard() -> (PathBuf, PathBuf) {
    locked("langs-guard", || {
        let dir = root().join("examples/plugins/python/guard_paths");
        let text = std::fs::read_to_string(dir.join("app.py")).unwrap();
        let contract = std::fs::read_to_string(root().join("wit/v0.2.0/plugin.wit")).unwrap();
        let build = tmp().join("langs-build/guard_paths");
        let stamp = build.join("app.py.source");
        let (v1, v2) = (build.join("v1.wasm"), build.join("v2.wasm"));
        if v1.exists()
            && v2.exists()
            && std::fs::read_to_string(&stamp).ok() == Some(text.clone() + &contract)
        {
            return (v1, v2);
        }
        let v2_dir = build.join("v2-source");
        std::fs::create_dir_all(&v2_dir).unwrap();
        assert!(text.contains("VERSION = \"1\""));
        std::fs::write(
            v2_dir.join("app.py"),
            text.replace("VERSION = \"1\"", "VERSION = \"2\""),
        )
        .unwrap();
        componentize_python(&dir, "guard", &v1);
        componentize_python(&v2_dir, "guard", &v2);
        std::fs::write(&stamp, text + &contract).unwrap();
        (v1, v2)
    })
}

#[test]
fn a_python_guard_denies_and_allows_bash_commands_and_is_hot_swapped_in_place() {
    let (v1, v2) = build_guard();
    let env = Env::new();
    let secret = env.dir.path().join("secret");
    std::fs::create_dir_all(&secret).unwrap();
    std::fs::write(secret.join("key"), "hunter2\n").unwrap();
    std::fs::create_dir_all(env.plugins_dir()).unwrap();
    std::fs::copy(&v1, env.plugins_dir().join("guard_paths.wasm")).unwrap();
    let config = format!(
        "[pipeline]\nguards = [\"guard_paths\"]\n[plugins.guard_paths]\ninterfaces = [\"log\"]\n\
         settings = {{ paths = [{:?}] }}\n",
        secret.display().to_string()
    );
    let server = McpServer::start(&env, &config);
    let touching =
        json!({"command": format!("cat {}/key", secret.display()), "description": "read the key"});
    let denied = server.call("bash", touching.clone());
    assert_eq!(denied.code.as_deref(), Some("DENIED"), "{denied:?}");
    assert!(
        denied.text.contains("which guard_paths (v1) protects"),
        "{denied:?}"
    );
    assert!(!denied.text.contains("hunter2"), "{denied:?}");
    let marker = crate::support::unique_marker();
    let allowed = server.call_ok(
        "bash",
        json!({"command": format!("echo {marker}"), "description": "echo"}),
    );
    assert!(allowed.contains(&marker), "{allowed}");

    // Swap in v2 whole (a rename, so the watcher never sees half a file): the server
    // keeps serving and the new build decides once it is loaded.
    let staged = env.dir.path().join("guard_paths.staged");
    std::fs::copy(&v2, &staged).unwrap();
    std::fs::rename(&staged, env.plugins_dir().join("guard_paths.wasm")).unwrap();
    let deadline = Instant::now() + std::time::Duration::from_secs(180);
    let swapped = loop {
        let reply = server.call("bash", touching.clone());
        assert_eq!(
            reply.code.as_deref(),
            Some("DENIED"),
            "denied throughout the swap: {reply:?}"
        );
        if reply.text.contains("(v2)") || Instant::now() > deadline {
            break reply;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert!(
        swapped.text.contains("which guard_paths (v2) protects"),
        "{swapped:?}\n{}",
        server.stderr()
    );
    let allowed = server.call_ok(
        "bash",
        json!({"command": format!("echo {marker}"), "description": "echo"}),
    );
    assert!(allowed.contains(&marker), "{allowed}");
}

/// Builds the Python example `examples/plugins/python/NAME` against `world` of the
/// current contract (again only when its source or the contract changed) and returns
/// the component.
fn build_python_example(name: &str, world: &str) -> PathBuf {
    locked(&format!("langs-{name}"), || {
        let dir = root().join("examples/plugins/python").join(name);
        let text = std::fs::read_to_string(dir.join("app.py")).unwrap()
            + &std::fs::read_to_string(root().join("wit/v0.2.0/plugin.wit")).unwrap();
        let out = tmp().join(format!("langs-build/{name}/{name}.wasm"));
        let stamp = out.with_extension("source");
        if out.exists() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(&text) {
            return out;
        }
        std::fs::create_dir_all(out.parent().unwrap()).unwrap();
        componentize_python(&dir, world, &out);
        std::fs::write(&stamp, text).unwrap();
        out
    })
}

#[test]
fn a_python_middleware_runs_a_failed_call_again_and_returns_the_second_result() {
    let wasm = build_python_example("retry_flaky", "middleware");
    let env = Env::new();
    env.add_plugins(&[("flaky", "flaky")]);
    let scratch = env.dir.path().join("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    let marker = scratch.join("marker");
    let args = json!({ "marker": marker });
    // The host's own retry of idempotent tools is off: only the middleware runs `flaky`
    // again (its first run creates the marker and fails with `internal`).
    let granted = format!(
        "[limits]\nmax_retries = 0\n[plugins.flaky]\nfs = [{{ path = {:?}, mode = \"rw\" }}]\n",
        scratch.display().to_string()
    );
    let alone = env.call_configured(&granted, "flaky", &args, &[]);
    assert_eq!(alone.code.as_deref(), Some("INTERNAL"), "{alone:?}");
    assert!(alone.message.contains("failed on purpose"), "{alone:?}");

    std::fs::remove_file(&marker).unwrap();
    std::fs::copy(&wasm, env.plugins_dir().join("retry_flaky.wasm")).unwrap();
    let config = format!(
        "[pipeline]\nmiddleware = [\"retry_flaky\"]\n{granted}[plugins.retry_flaky]\n\
         interfaces = [\"log\"]\n"
    );
    let retried = env.call_configured(&config, "flaky", &args, &[]);
    assert_eq!(retried.code, None, "{retried:?}");
    assert_eq!(
        retried.content,
        format!("flaky: succeeded (marker {} was there)", marker.display()),
        "{retried:?}"
    );

    // `attempts = 1`: one run, its failure returned as it is.
    std::fs::remove_file(&marker).unwrap();
    let once = format!("{config}[plugins.retry_flaky.settings]\nattempts = 1\n");
    let failed = env.call_configured(&once, "flaky", &args, &[]);
    assert_eq!(failed.code.as_deref(), Some("INTERNAL"), "{failed:?}");
    assert!(failed.message.contains("failed on purpose"), "{failed:?}");
}

#[test]
fn a_python_observer_appends_the_call_and_result_records_of_a_call_to_its_granted_file() {
    let wasm = build_python_example("event_sink", "observer");
    let env = Env::new();
    env.add_plugins(&[("echo", "echo")]);
    std::fs::copy(&wasm, env.plugins_dir().join("event_sink.wasm")).unwrap();
    // The file its settings name, in the directory granted to it read-write.
    let sink = env.dir.path().join("sink");
    std::fs::create_dir_all(&sink).unwrap();
    let file = sink.join("events.jsonl");
    let config = format!(
        "[pipeline]\nobservers = [\"event_sink\"]\n[plugins.event_sink]\ninterfaces = [\"log\"]\n\
         fs = [{{ path = {:?}, mode = \"rw\" }}]\nsettings = {{ path = {:?} }}\n",
        sink.display().to_string(),
        file.display().to_string()
    );
    let server = McpServer::start(&env, &config);
    let marker = crate::support::unique_marker();
    assert_eq!(server.call_ok("echo", json!({ "text": marker })), marker);

    // The records come off the call's path: within a few seconds, the echo's `tool/call`
    // and the `tool/result` of the same call. Whole lines only: the last may be half
    // written yet.
    let records = || -> Vec<Value> {
        std::fs::read_to_string(&file)
            .unwrap_or_default()
            .split_inclusive('\n')
            .filter_map(|line| line.strip_suffix('\n'))
            .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line:?}")))
            .collect()
    };
    let pair = |records: &[Value]| -> Option<(Value, Value)> {
        let call = records.iter().find(|r| {
            r["event"] == "tool/call" && r["tool"] == "echo" && r["args"]["text"] == marker
        })?;
        let result = records
            .iter()
            .find(|r| r["event"] == "tool/result" && r["call_id"] == call["call_id"])?;
        Some((call.clone(), result.clone()))
    };
    let mut found = None;
    crate::support::wait_for(std::time::Duration::from_secs(10), || {
        found = pair(&records());
        found.is_some()
    });
    let Some((call, result)) = found else {
        panic!(
            "no tool/call and tool/result of the echo in {}: {:#?}\n{}",
            file.display(),
            records(),
            server.stderr()
        );
    };
    assert!(
        call["call_id"].as_str().is_some_and(|id| !id.is_empty()),
        "{call}"
    );
    assert_eq!(result["is_error"], false, "{result}");
    // Each line is the record as the session's event log has it.
    let logged = env.events();
    assert!(
        logged.contains(&call),
        "{call} is not in the event log: {logged:#?}"
    );
    assert!(
        logged.contains(&result),
        "{result} is not in the event log: {logged:#?}"
    );
}
